"""Run a task module and record the ATen ops that actually execute in `forward`.

`trace_code` runs in this process and is meant for code the project rendered itself; untrusted code
(LLM output, audited datasets, reference problems) goes through `trace_isolated`, which runs the same
function in a subprocess with a per-item timeout so a hang or crash costs one item.

Tracing happens on the meta device by default: no memory is allocated and sizes do not matter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# bookkeeping ops that are not part of what a task computes; never recorded
SKIP_OPS = {"aten.detach", "aten.lift_fresh", "aten._to_copy", "aten.alias", "prim.device"}


def aten_name(func: Any) -> str:
    """The name an ATen call is recorded under (`aten.convolution`): one vocabulary for the sampler's trace,
    the profile worker's and the pinned labels."""
    name = str(func.overloadpacket).replace("::", ".")
    if not name.startswith("aten."):
        name = f"aten.{name}" if "." not in name else name
    return name


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = aten_name(func)
        if name not in SKIP_OPS:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def load_module(code: str, name: str = "task") -> dict[str, Any]:
    """Exec a task's source the way KernelBench's harness does and return its namespace."""
    ns: dict[str, Any] = {"__name__": name}
    exec(compile(code, f"<{name}>", "exec"), ns)  # noqa: S102 - callers have statically checked `code`
    return ns


def trace_code(code: str, device: str = "meta") -> list[str]:
    """ATen ops (overload packets, e.g. 'aten.convolution') executed by Model.forward, in order."""
    ns = load_module(code)
    with torch.device(device), torch.no_grad():
        model = ns["Model"](*ns["get_init_inputs"]())
        inputs = ns["get_inputs"]()
        rec = _Recorder()
        with rec:
            model(*inputs)
    return rec.ops


def trace_as_worker(code: str, device: str, seed: int = 42) -> list[str]:
    """ATen ops of one forward executed the way a profile worker runs it (pipeline.harness): weights and inputs
    created under the device from one seed, the forward under no_grad outside the device context, in training
    mode. For real devices only (cpu, cuda): kernels chosen by size and backend show here, not on meta."""
    ns = load_module(code)
    dev = torch.device(device)
    torch.manual_seed(seed)
    with torch.device(dev):
        model = ns["Model"](*ns["get_init_inputs"]())
    model = model.to(dev)
    torch.manual_seed(seed + 1)
    with torch.device(dev):
        inputs = [t.to(dev) if isinstance(t, torch.Tensor) else t for t in ns["get_inputs"]()]
    rec = _Recorder()
    with torch.no_grad(), rec:
        model(*inputs)
    return rec.ops


def backend_settings() -> dict[str, Any]:
    """The process-wide switches that decide which ATen kernels a CUDA forward runs (cuDNN on/off, TF32,
    SDPA backends, deterministic algorithms): recorded with the device pins so a change is visible."""
    cuda = torch.backends.cuda
    return {
        "cudnn_enabled": torch.backends.cudnn.enabled, "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic, "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_allow_tf32": cuda.matmul.allow_tf32, "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "sdp_flash": cuda.flash_sdp_enabled(), "sdp_mem_efficient": cuda.mem_efficient_sdp_enabled(),
        "sdp_math": cuda.math_sdp_enabled(), "sdp_cudnn": cuda.cudnn_sdp_enabled(),
    }


def _serve() -> None:
    """Subprocess side of `trace_isolated`: one JSON request per line in, one JSON result per line out. A request
    may name several devices (meta first, then cpu): the first that traces wins, and the result says which."""
    reply, sys.stdout = sys.stdout, sys.stderr  # a print() in the traced code must not break the protocol
    for line in sys.stdin:
        req = json.loads(line)
        errors = []
        out: dict[str, Any] = {}
        for device in req.get("devices") or [req.get("device", "meta")]:
            try:
                out = {"ok": True, "ops": trace_code(req["code"], device), "device": device}
                break
            except BaseException as e:  # noqa: BLE001 - any failure of the traced code is a result
                errors.append(f"{device}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
        if not out:
            out = {"ok": False, "error": "; ".join(errors)[:600]}
        reply.write(json.dumps(out) + "\n")
        reply.flush()


def _memory_cap(limit_bytes: int | None):
    """preexec_fn that caps the tracer's address space: a foreign task's real tensors fail with an allocation error
    instead of taking the machine."""
    if not limit_bytes:
        return None

    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    return cap


def trace_isolated(codes: list[str], timeout_s: float = 30.0, device: str = "meta",
                   devices: list[str] | None = None, mem_limit_bytes: int | None = None) -> list[dict[str, Any]]:
    """Trace each source in a subprocess; returns {'ok', 'ops', 'device'} or {'ok': False, 'error'} per item.
    devices: try these in order instead of `device` (e.g. meta, then cpu for data-dependent code);
    mem_limit_bytes: address-space cap of the subprocess."""
    import selectors

    results: list[dict[str, Any]] = []
    proc = None
    for code in codes:
        if proc is None or proc.poll() is not None:
            proc = subprocess.Popen([sys.executable, "-m", "operators.trace"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                    preexec_fn=_memory_cap(mem_limit_bytes))
        assert proc.stdin and proc.stdout
        try:
            proc.stdin.write(json.dumps({"code": code, "device": device, "devices": devices}) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            results.append({"ok": False, "error": "tracer process died"})
            proc = None
            continue
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout_s)
        sel.close()
        line = proc.stdout.readline() if ready else ""
        if line:
            results.append(json.loads(line))
            continue
        proc.kill()
        proc.wait()
        why = f"timed out after {timeout_s:g}s" if not ready else f"crashed (exit {proc.returncode})"
        results.append({"ok": False, "error": f"tracing {why}"})
        proc = None
    if proc is not None:
        proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a slow exit must not cost the results already collected
            proc.kill()
            proc.wait()
    return results


if __name__ == "__main__":
    _serve()
