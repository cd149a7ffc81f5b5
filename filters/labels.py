"""Label truth: the `ops` a task claims must match the ATen ops that actually ran, on the device they ran on.

Only label errors reject: a labelled operator that never ran, or an operator that ran and no label explains (glue
and arithmetic between operators excluded). An operator opsynth holds no pins for is not judged.
"""

from __future__ import annotations

from typing import Any


def labels_match(m: dict[str, Any], f: Any) -> str | None:
    if not f.require_label_match or not m.get("ops") or not m.get("aten_ops"):
        return None
    from operators.labels import label_findings

    # a GPU runs other kernels than the CPU for the same operator (cuDNN batch norm, fused RMSNorm)
    found = label_findings(list(m["ops"]), list(m["aten_ops"]), device=m.get("device") or "cpu")
    return f"{found.kind} ({found.reason()[:160]})" if found.wrong or found.missing else None
