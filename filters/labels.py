"""Label truth: the `ops` a task claims must match the ATen ops that actually ran, on the device they ran on.

The sampler's own tasks are held to the strict check (every label pinned, every kernel explained). Audited (foreign)
rows are judged by kind: only a labelled operator that never ran or an operator that ran without a label rejects
(glue and arithmetic between operators excluded); an operator opsynth holds no pins for is not judged.
"""

from __future__ import annotations

from typing import Any


def labels_match(m: dict[str, Any], f: Any) -> str | None:
    if not f.require_label_match or not m.get("ops") or not m.get("aten_ops"):
        return None
    # a GPU runs other kernels than the CPU for the same operator (cuDNN batch norm, fused RMSNorm)
    device = m.get("device") or "cpu"
    if m.get("foreign_labels"):
        from operators.labels import label_findings

        found = label_findings(list(m["ops"]), list(m["aten_ops"]), device=device)
        return f"{found.kind} ({found.reason()[:160]})" if found.wrong or found.missing else None
    from operators.labels import check_labels

    bad = check_labels(list(m["ops"]), list(m["aten_ops"]), device=device)
    return f"label mismatch ({'; '.join(bad)[:160]})" if bad else None
