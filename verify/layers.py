"""Defence in depth: two layers that see PyTorch compute the dispatch mode (verify/guard.py) does not. C++ in an
extension can reach ATen's kernels past the Python dispatch key: a backend function (`at::cpu::cumsum`), a
redispatch below the Python key, or the dispatch-key state itself (`ExcludeDispatchKeyGuard`,
`tls_set_dispatch_key_excluded`) around an ordinary call. Each layer judges by the same policy as the guard.

- `extension_symbols`: what each shared object the candidate loaded imports from libtorch (`nm -D --undefined-only`,
  demangled with `c++filt`). Allocation, tensor metadata, data pointers and error reporting are fine; operator entry
  points are judged by name: `at::_ops::NAME::call` (through the dispatcher, so the guard sees it too) passes as an
  allocation, a view, a copy, a GEMM or convolution, or an operator the library tier allows; a backend function
  called past the dispatcher (`at::native::NAME`, `at::cpu::NAME`, `at::cuda::NAME`) passes only as one of the
  strict tier's own, since no guard would list it in library_calls; and the dispatch machinery
  (redispatch, dispatch-key guards and TLS, the Dispatcher, torch::jit, autograd kernels, global precision setters)
  is an escape whatever the policy.
- `kernel_names` (CUDA): the kernels one forward launches, from torch.profiler. A kernel from libtorch's own code
  (`at::native::`, elementwise_kernel, reduce_kernel, cub scans inside ATen, its attention kernels) is PyTorch
  compute unless an ATen operator the policy allows launched it (a copy, a fill, a convolution's bias). cuBLAS,
  cuDNN and CUTLASS kernels are GEMM and convolution; every other kernel is the candidate's own."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verify.policy import MOVES, Policy

# bound when the worker imports this module, before any candidate code exists
_run = subprocess.run
_exists = os.path.exists

# ------------------------------------------------------------------------------------------------ extension symbols

# c10::impl::ExcludeDispatchKeyGuard is not among them: libtorch's own torch:: factory functions (torch::empty_like)
# construct one for the autograd keys in every extension that calls them; a call made under it is judged by its
# operator entry point like any other
ESCAPES = (
    ("IncludeDispatchKeyGuard", "dispatch-key state"),
    ("ForceDispatchKeyGuard", "dispatch-key state"), ("tls_set_dispatch_key", "dispatch-key state"),
    ("_force_tls_local_dispatch_key_set", "dispatch-key state"), ("tls_local_dispatch_key_set", "dispatch-key state"),
    ("AutoDispatchBelow", "dispatch-key state"), ("AutoNonVariableTypeMode", "dispatch-key state"),
    ("TorchDispatchModeTLS", "dispatch-mode state"), ("PythonTorchFunctionTLS", "dispatch-mode state"),
    ("PythonDispatcherTLS", "dispatch-mode state"), ("DisableTorchDispatch", "dispatch-mode state"),
    ("PythonTLSSnapshot", "dispatch-mode state"), ("c10::Dispatcher::", "the dispatcher"),
    ("c10::OperatorHandle", "the dispatcher"), ("c10::impl::OperatorEntry", "the dispatcher"),
    ("c10::KernelFunction", "the dispatcher"), ("torch::jit::", "TorchScript"),
    ("torch::autograd::VariableType", "an autograd kernel"), ("torch::autograd::generated::", "an autograd kernel"),
    ("at::Context::set", "global state"),
)
BACKENDS = ("native", "cpu", "cuda", "meta", "compositeexplicitautograd", "compositeimplicitautograd",
            "compositeexplicitautogradnonfunctional", "sparsecpu", "sparsecuda", "mkldnn", "quantizedcpu",
            "quantizedcuda", "nestedtensorcpu", "nestedtensorcuda", "mps", "xpu", "functionalization")
_OPS_CALL = re.compile(r"\bat::_ops::(\w+)::(call|redispatch)\b")
_BACKEND = re.compile(r"\bat::(" + "|".join(BACKENDS) + r")::(\w+)")
_DISPATCH_METHOD = re.compile(r"\bat::(?:Tensor|TensorBase)::__dispatch_(\w+)")
_TORCHISH = re.compile(r"\b(at|c10|torch|caffe2)::")


@functools.cache
def aten_op_names() -> frozenset[str]:
    """Every ATen operator's name (`cumsum`, `add_`), from the registered schemas."""
    import torch

    return frozenset(s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::"))


def _op_of(name: str, ops: frozenset[str]) -> str | None:
    """The ATen operator a backend function is the kernel of (`cumsum_out` -> cumsum, `structured_cumsum_out` ->
    cumsum, `add_outf` -> add), or None where the name is no operator (a helper: `getCurrentCUDAStream`, `blas`)."""
    for n in (name, re.sub(r"^structured_", "", name)):
        for cand in (n, re.sub(r"_(outf|out|symint|functional)$", "", n), re.sub(r"_(outf|out)_symint$", "", n)):
            if cand in ops or cand.rstrip("_") in ops:
                return cand
    return None


def judge_symbol(sym: str, policy: Policy, ops: frozenset[str] | None = None) -> str | None:
    """Why a demangled symbol an extension imports is PyTorch compute or an escape, or None where it is fine."""
    if not _TORCHISH.search(sym):
        return None
    for pat, what in ESCAPES:
        if pat in sym:
            return f"{what} ({pat})"
    m = _OPS_CALL.search(sym)
    if m:
        if m.group(2) == "redispatch":
            return f"a redispatch below the Python key (at::_ops::{m.group(1)}::redispatch)"
        name = m.group(1)
        return None if policy.allows(name) or name in MOVES else f"operator entry point at::_ops::{name}::call"
    m = _DISPATCH_METHOD.search(sym)
    if m:
        name = m.group(1)
        return None if policy.allows(name) or name in MOVES else f"operator entry point Tensor::{name}"
    m = _BACKEND.search(sym)
    if m:
        ns, name = m.groups()
        if name.endswith("_stub"):
            return f"a backend kernel stub at::{ns}::{name}"
        op = _op_of(name, ops if ops is not None else aten_op_names())
        if op is None:
            return None  # a helper of that namespace (the current stream, device properties, cuBLAS handles)
        # past the dispatcher: no guard records it, so a library operator must come through at::_ops (listed in
        # library_calls); only the strict tier's own (allocation, views, GEMM, convolution) and copies pass
        return None if policy.allows(op) == "strict" or op in MOVES else f"a backend kernel at::{ns}::{name}"
    return None


def imported_symbols(path: str) -> list[str]:
    """The dynamic symbols `path` imports (undefined), demangled."""
    nm = _run(["nm", "-D", "--undefined-only", path], capture_output=True, text=True, timeout=120)
    names = [ln.split()[-1] for ln in nm.stdout.splitlines() if ln.strip()]
    if not names:
        return []
    dem = _run(["c++filt"], input="\n".join(names), capture_output=True, text=True, timeout=120)
    return dem.stdout.splitlines()


def judge_object(path: str, policy: Policy) -> tuple[list[str], list[str]]:
    """(the refused imports of one shared object, one per distinct reason; the library operators it imports, as
    `aten::NAME`, for library_calls: a call made past the Python key would not reach the guard's list)."""
    out: dict[str, str] = {}
    lib: list[str] = []
    for sym in imported_symbols(path):
        why = judge_symbol(sym, policy)
        if why and why not in out:
            out[why] = sym
        m = _OPS_CALL.search(sym)
        if not why and m and policy.allows(m.group(1)) == "library":
            lib.append(f"aten::{m.group(1)}")
    return list(out), list(dict.fromkeys(lib))


def loaded_objects() -> set[str]:
    """The shared objects mapped into this process (from /proc/self/maps; the extension modules imported, where
    there is no /proc)."""
    try:
        with open("/proc/self/maps") as f:
            return {ln.split(None, 5)[5].strip() for ln in f if len(ln.split(None, 5)) == 6
                    and ".so" in ln.split(None, 5)[5]}
    except OSError:
        return {getattr(m, "__file__", "") or "" for m in list(sys.modules.values())
                if (getattr(m, "__file__", "") or "").endswith(".so")}


def _system(path: str) -> bool:
    """A library of the Python installation or the system (torch's, Triton's, CUDA's, libc): not the candidate's."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    if any(path.startswith(p.rstrip("/") + "/") for p in prefixes if p):
        return True
    return "/site-packages/" in path or "/dist-packages/" in path or path.startswith(
        ("/usr/lib", "/lib", "/usr/local/cuda", "/usr/local/nvidia", "/usr/lib64"))


class ExtensionScan:
    """The shared objects loaded since `before` (the worker's own, snapshot before the task and candidate loaded),
    each judged once by its libtorch imports. `check()` scans what is new and says why the candidate is refused, or
    None; `on=False` (the layer switched off) scans and reports, and refuses nothing."""

    def __init__(self, before: set[str], policy: Policy, on: bool = True) -> None:
        self.before, self.policy, self.on = set(before), policy, on
        self.judged: dict[str, list[str]] = {}
        self.library: list[str] = []

    def check(self) -> str | None:
        for path in sorted(loaded_objects() - self.before - set(self.judged)):
            if _system(path) or not _exists(path):
                self.judged[path] = []
                continue
            try:
                self.judged[path], lib = judge_object(path, self.policy)
                self.library += [x for x in lib if x not in self.library]
            except (OSError, subprocess.SubprocessError) as e:  # nm missing: the layer cannot judge, says so
                self.judged[path] = []
                self.errors = [*getattr(self, "errors", []), f"{Path(path).name}: {type(e).__name__}"]
        bad = {p: r for p, r in self.judged.items() if r}
        if bad and self.on:
            p, r = next(iter(bad.items()))
            return f"extension {Path(p).name} imports PyTorch compute: {'; '.join(r[:3])}"
        return None

    def report(self) -> list[dict]:
        """The extensions scanned and what each was refused for (empty for a clean one)."""
        return [{"file": Path(p).name, "refused": r} for p, r in self.judged.items() if not _system(p)]


# ------------------------------------------------------------------------------------------------ kernel names

# libtorch's own kernels, as the profiler names them: its namespaces (at::native, the cub it vendors as
# at_cuda_detail, its flash and memory-efficient attention) and the few kernels it defines outside them. Specific
# names only: a candidate's own kernel called `reduce_kernel` or templated on c10::Half is not libtorch's
TORCH_KERNEL = re.compile("|".join([
    r"\bat::native::", r"\bat::cuda::", r"\bat_cuda_detail::", r"\bpytorch_flash::", r"PyTorchMemEffAttention",
    r"\bfmha_cutlass", r"\bcunn_\w+<", r"\bCatArrayBatchedCopy",
    r"\btensor_kernel_scan_(innermost|outer)_dim", r"\bindexSelect(Large|Small)Index", r"\bgatherTopK<",
    r"\bsortKeyValueInplace", r"\bradixSortKVInPlace", r"\bsoftmax_warp_forward<", r"\bfused_dropout_kernel",
    r"\bRowwiseMomentsCUDAKernel", r"\bLayerNormForwardCUDAKernel", r"\bvectorized_layer_norm_kernel",
]))
GEMM_CONV_KERNEL = re.compile(r"gemm|gemv|cutlass|cudnn|xmma|cublas|nvjet|splitKreduce|implicit_convolve|convolve_|"
                              r"fprop|dgrad|wgrad|winograd|fft2d|nchwToNhwc|nhwcToNchw|conv2d_\w*kernel|"
                              r"scalePackedTensor|dot_kernel|reduce_1Block_kernel|cudnn", re.I)


# libtorch kernels that fill or copy, by name: what the strict tier's own operators launch (zero_, fill_, copy_,
# clone, contiguous), allowed even where the profiler could not tie the kernel to its operator
MOVE_KERNEL = re.compile(r"FillFunctor|direct_copy_kernel|\bcopy_kernel|_copy_kernel_cuda")


def classify_kernel(name: str) -> str:
    """"torch" (libtorch's own kernel), "gemm_conv" (cuBLAS, cuDNN, CUTLASS) or "own" (the candidate's: Triton
    kernels, its __global__ functions). libtorch's names win: its attention kernels are CUTLASS-based."""
    if TORCH_KERNEL.search(name):
        return "torch"
    if GEMM_CONV_KERNEL.search(name):
        return "gemm_conv"
    return "own"


def judge_kernels(kernels: list[tuple[str, list[str]]], policy: Policy) -> list[str]:
    """The kernels of one forward that are PyTorch compute: (name, the ATen operators it was launched under, innermost
    first) -> the refused names. A libtorch kernel passes when an operator it ran under is one the policy allows
    (a copy, a fill, the bias add inside a convolution, a library operator)."""
    refused = []
    for name, ops in kernels:
        if classify_kernel(name) != "torch" or MOVE_KERNEL.search(name):
            continue
        if any(policy.allows(o) or o.split("::")[-1] in MOVES for o in ops):
            continue
        refused.append(name if len(name) < 120 else name[:117] + "...")
    return list(dict.fromkeys(refused))


def profile_kernels(fn: Callable[[], Any], sync: Callable[[], Any]) -> list[tuple[str, list[str]]]:
    """(kernel name, the ATen operators it ran under, innermost first) for each kernel `fn` launches, from
    torch.profiler with CUDA activity. A kernel the profiler could not tie to a launch has no operators."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    out: list[tuple[str, list[str]]] = []
    attributed: set[int] = set()
    events = list(prof.events())
    for e in events:
        for k in getattr(e, "kernels", []) or []:
            ops, p = [], e
            while p is not None:
                if str(p.name).startswith(("aten::", "prims::")):
                    ops.append(p.name)
                p = getattr(p, "cpu_parent", None)
            out.append((k.name, ops))
            attributed.add(id(k))
    named = {n for n, _ in out}
    for e in events:  # device-side events the CPU side did not claim
        if e.device_type == torch.autograd.DeviceType.CUDA and not str(e.name).startswith(("Memcpy", "Memset")) \
                and e.name not in named:
            ops, p = [], getattr(e, "cpu_parent", None)
            while p is not None:
                if str(p.name).startswith(("aten::", "prims::")):
                    ops.append(p.name)
                p = getattr(p, "cpu_parent", None)
            out.append((e.name, ops))
    return out
