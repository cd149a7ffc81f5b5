"""The compute guard: a TorchDispatchMode that sees every ATen call a candidate's forward makes (torch.*, F.*, Tensor
methods, torch.ops.aten, names bound before the guard, and C++ extensions calling at::* through the dispatcher), and
judges each by the policy tier (verify/policy.py): strict allows allocation, views and metadata, same-dtype copies,
GEMMs and convolutions; library adds the operators the trainer named, each call recorded for `library_calls`;
torch allows anything. Refused calls are recorded, not only raised, so a candidate that catches the error and falls
back to something else is still seen. C++ that reaches ATen's kernels without the Python dispatch key is the other
layers' to catch (verify/layers.py)."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from verify.policy import ALLOC, GEMM_CONV, MOVES, VIEWS, Policy

__all__ = ["ALLOC", "GEMM_CONV", "MOVES", "VIEWS", "ComputeGuard", "compute_calls", "library_calls", "torch"]


class ComputeGuard(TorchDispatchMode):
    """Records (and refuses) every ATen op the policy does not allow while active; records the library tier's
    allowed calls in `library`."""

    def __init__(self, policy: Policy | None = None, allow_torch: bool = False) -> None:
        super().__init__()
        self.policy = policy or Policy("torch" if allow_torch else "strict")
        self.calls: list[str] = []
        self.library: list[str] = []

    def allows(self, name: str) -> bool:
        """Whether an ATen op of this name (`aten::NAME` or NAME, in-place or not) is allowed whatever its arguments;
        the MOVES are allowed by their arguments (`_moves_only`)."""
        return bool(self.policy.allows(name))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        op = func._schema.name
        name = op.split("::")[-1]
        how = self.policy.allows(op)
        if not how and not _moves_only(name, args, kwargs or {}) and not _triton_bookkeeping(args, kwargs or {}):
            self.calls.append(f"aten::{name}")
            raise RuntimeError(f"verify: PyTorch compute aten::{name} in the candidate's forward is not allowed "
                               f"under the {self.policy.tier} policy")
        if how == "library":
            self.library.append(op)
        return func(*args, **(kwargs or {}))


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


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.abspath(__file__)
_getframe = sys._getframe  # bound before any candidate code exists
TRITON_TIMERS = (os.sep + os.path.join("triton", "testing.py"), os.sep + os.path.join("triton", "runtime", "autotuner.py"))


def _triton_bookkeeping(args: tuple, kwargs: dict) -> bool:
    """Triton's autotuner summarising its timings on the CPU (torch.quantile and torch.mean over a list of
    milliseconds in older Triton releases): CPU tensors only, and the nearest caller outside torch is Triton's own
    timing code (a candidate's autotune hook is its own frame, and is judged as the candidate)."""
    ts = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not ts or any(t.device.type != "cpu" for t in ts):
        return False
    f = _getframe(2)
    while f is not None:
        name = os.path.abspath(f.f_code.co_filename)
        if not (name.startswith(_TORCH_DIR) or name == _HERE):
            return name.endswith(TRITON_TIMERS)
        f = f.f_back
    return False


def compute_calls(guard: ComputeGuard) -> list[str]:
    """The distinct refused calls, in first-seen order."""
    return list(dict.fromkeys(guard.calls))


def library_calls(guards: list[ComputeGuard]) -> list[str]:
    """The distinct operators the library tier allowed, over `guards`, in first-seen order."""
    return list(dict.fromkeys(c for g in guards for c in g.library))
