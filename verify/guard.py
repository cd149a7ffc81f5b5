"""The compute guard: a TorchDispatchMode that sees every ATen call a candidate's forward makes (torch.*, F.*, Tensor
methods, torch.ops.aten, names bound before the guard, and C++ extensions calling at::*), and records each one that
computes. Allowed under the strict policy: allocation, views and metadata, GEMMs and convolutions (cuBLAS/cuDNN),
and inductor's own ATen fallbacks (the extern calls its generated code makes). The calls are recorded, not only
refused, so a candidate that catches the error and falls back to something else is still seen."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ALLOC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
         "new_zeros", "ones", "ones_like", "full", "full_like", "new_full", "scalar_tensor", "lift_fresh",
         "resize_", "set_", "record_stream", "_local_scalar_dense", "is_nonzero", "detach", "alias", "sym_size",
         "sym_stride", "sym_numel", "sym_storage_offset", "dim", "size", "stride", "numel", "is_same_size",
         "zero_", "fill_"}  # filling a buffer it allocated (inductor zeroes the outputs of its atomic reductions)
VIEWS = {"view", "_unsafe_view", "reshape", "as_strided", "permute", "transpose", "t", "expand", "squeeze",
         "unsqueeze", "flatten", "unflatten", "select", "slice", "narrow", "split", "split_with_sizes", "chunk",
         "unbind", "contiguous", "view_as", "expand_as", "movedim", "diagonal", "unfold", "_reshape_alias",
         "reinterpret_tensor"}
GEMM_CONV = {"mm", "bmm", "addmm", "addmv", "mv", "baddbmm", "addbmm", "matmul", "linear", "_scaled_mm", "dot",
             "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
             "cudnn_convolution_transpose", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
             "mkldnn_convolution", "_mm_plus_mm", "_int_mm", "_weight_int4pack_mm"}


def _inductor_fallbacks() -> set[str]:
    try:
        from torch._inductor import lowering

        return {str(op).split(".")[1] if str(op).startswith("aten.") else str(op) for op in lowering.fallbacks}
    except Exception:  # noqa: BLE001 - an older torch without the registry: the fixed lists stand
        return set()


class ComputeGuard(TorchDispatchMode):
    """Records (and refuses) every ATen op outside the allowed sets while active."""

    def __init__(self, allow_torch: bool = False) -> None:
        super().__init__()
        self.allow_torch = allow_torch
        self.allowed = ALLOC | VIEWS | GEMM_CONV | _inductor_fallbacks()
        self.calls: list[str] = []

    def allows(self, name: str) -> bool:
        """Whether an ATen op of this name (in-place or not) is allowed whatever its arguments; the MOVES are
        allowed by their arguments (`_moves_only`)."""
        return self.allow_torch or name in self.allowed or name.rstrip("_") in self.allowed

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func._schema.name.split("::")[-1]
        if not self.allows(name) and not _moves_only(name, args, kwargs or {}):
            self.calls.append(f"aten::{name}")
            raise RuntimeError(f"verify: PyTorch compute aten::{name} in the candidate's forward is not allowed")
        return func(*args, **(kwargs or {}))


MOVES = frozenset({"_to_copy", "copy_", "clone"})  # copies: allowed when they keep the dtype


def _moves_only(name: str, args: tuple, kwargs: dict) -> bool:
    """A copy that keeps the dtype (`.cpu()`, `.tolist()` on a GPU tensor, `out.copy_(src)` into another layout, as
    inductor's code writes mutated buffers back) moves values and computes nothing; a dtype change is arithmetic on
    every element and stays refused. `clone` never changes the dtype (Triton's autotuner clones the buffers a kernel
    mutates before it benchmarks its configs on a first call); a cached result returned as a clone is the timed
    runs' to catch."""
    if not args or not isinstance(args[0], torch.Tensor):
        return False
    if name == "clone":
        return True
    if name == "_to_copy":
        return kwargs.get("dtype") in (None, args[0].dtype)
    if name == "copy_":
        return len(args) > 1 and isinstance(args[1], torch.Tensor) and args[1].dtype == args[0].dtype
    return False


def compute_calls(guard: ComputeGuard) -> list[str]:
    """The distinct refused calls, in first-seen order."""
    return list(dict.fromkeys(guard.calls))


__all__ = ["MOVES", "ComputeGuard", "compute_calls", "torch"]
