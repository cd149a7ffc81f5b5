"""Label truth: the `ops` a task claims must match the ATen ops that actually ran, on the device they ran on."""

from __future__ import annotations

from typing import Any


def labels_match(m: dict[str, Any], f: Any) -> str | None:
    if not f.require_label_match or m.get("ops") is None or not m.get("aten_ops"):
        return None
    from operators.labels import check_labels

    # a GPU runs other kernels than the CPU for the same operator (cuDNN batch norm, fused RMSNorm)
    bad = check_labels(list(m["ops"]), list(m["aten_ops"]), device=m.get("device") or "cpu")
    return f"label mismatch ({'; '.join(bad)[:160]})" if bad else None
