"""Run a task module and record the ATen ops that actually execute in `forward`.

`trace_code` runs in this process and is meant for code the project rendered itself; untrusted code
(LLM output, audited datasets, reference problems) goes through `trace_isolated`, which runs the same
function in a subprocess with a per-item timeout so a hang or crash costs one item.

Tracing happens on the meta device by default: no memory is allocated and sizes do not matter.
Copies of benchmark problems often touch the GPU API (a CUDA-graph or stream wrapper built in `__init__`,
`.cuda()` calls, `.item()` checks): the isolated tracer runs them under `gpu_stand_ins`, which makes them
take their CPU path, so what gets recorded is what the module computes. The worker talks to its parent
over its own pipe, so whatever a task prints cannot corrupt the exchange.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
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
    """Records the ATen ops that run; with `dataflow`, also which earlier ops each one read, so `live_ops`
    can keep only what the module's output depends on (a counter update, a guard, a print's reduction: not)."""

    def __init__(self, dataflow: bool = False, glue: Any = None) -> None:
        super().__init__()
        self.glue = glue  # an identity_glue.Glue: its ops are not recorded and pass their input's history on
        self.dataflow = dataflow or glue is not None
        self.node_captured: list[bool] = []  # per node: ran inside a (stand-in) CUDA graph capture
        self.used_by: list[set[int]] = []  # per node: the kept nodes that read it (-1: identity glue read it)
        self.ops: list[str] = []
        self.captured: list[str] = []  # ops run while a (stand-in) CUDA graph captures
        self.capturing = False
        self.nodes: list[tuple[str, frozenset[int]]] = []  # (name, nodes it read)
        self.producer: dict[int, frozenset[int]] = {}  # id(tensor) -> the nodes that produced it
        self.written: dict[int, frozenset[int]] = {}  # storage -> the last in-place write into it
        self.keep: list[Any] = []  # tensors whose ids and storages are keys stay alive, so keys stay unique

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = aten_name(func)
        out = func(*args, **(kwargs or {}))
        if self.glue is not None:
            self.glue.see(_tensors(args, kwargs))
            hit = self.glue.identity(name, tuple(args), dict(kwargs or {}), out)
            if hit is not None:
                self.glue.count(hit[0])
                self._bypass(args, kwargs, out, hit[1])
                return out
            name = self.glue.rename(name, tuple(args))
            self.glue.after(name, tuple(args), dict(kwargs or {}), out)
            self.glue.see(_tensors(out, None))
        if name not in SKIP_OPS:
            (self.captured if self.capturing else self.ops).append(name)
        if self.dataflow:
            self._link(name, args, kwargs, out)
        return out

    def _reads(self, t: torch.Tensor) -> frozenset[int]:
        """The nodes a read of `t` depends on: what produced it, and the last in-place write to its storage
        (a write through a view, such as pad's slice + copy_, changes what its base holds)."""
        got = self.producer.get(id(t), _NONE)
        return got | self.written.get(_storage(t), _NONE) if self.written else got

    def _link(self, name: str, args: Any, kwargs: Any, out: Any) -> None:
        reads = _NONE
        for t in _tensors(args, kwargs):
            reads = reads | self._reads(t)
        if name in SKIP_OPS:
            src = reads  # a copy or alias passes its input's history on
        else:
            self.nodes.append((name, reads))
            self.node_captured.append(self.capturing)
            self.used_by.append(set())
            for n in reads:
                self.used_by[n].add(len(self.nodes) - 1)
            src = frozenset({len(self.nodes) - 1})
        for t in _tensors(out, None):
            self.producer[id(t)] = src
            self.keep.append(t)
        if name.endswith("_"):  # in place: the mutated argument's storage now holds this node's result
            first = next(iter(_tensors(args, kwargs)), None)
            if first is not None:
                self.producer[id(first)] = src
                self.written[_storage(first)] = src
                self.keep.append(first)

    def _bypass(self, args: Any, kwargs: Any, out: Any, src: Any) -> None:
        """Identity glue ran: its result (and, in place, its target) carries `src`'s history; what the glue read is
        marked read by glue only, so a factory or view that fed nothing else drops out (`glue_ops`)."""
        for t in _tensors(args, kwargs):
            for n in self._reads(t):
                self.used_by[n].add(-1)
        hist = self._reads(src)
        res = next(iter(_tensors(out, None)), None)  # native_dropout's (result, mask): the result
        first = next(iter(_tensors(args, kwargs)), None)
        if res is not None:
            self.producer[id(res)] = hist
            self.keep.append(res)
            if first is not None and res is first:  # in place (x.mul_(1), copy_ into a fresh tensor)
                self.written[_storage(first)] = hist

    def glue_ops(self, result: Any) -> tuple[list[str], list[str]]:
        """(ops, captured ops) with the nodes that only identity glue read removed (transitively)."""
        live = set(self._live(result))
        dead: set[int] = set()
        for n in range(len(self.nodes) - 1, -1, -1):
            users = self.used_by[n]
            if n not in live and users and all(u == -1 or u in dead for u in users):
                dead.add(n)
        ops = [self.nodes[i][0] for i in range(len(self.nodes)) if i not in dead and not self.node_captured[i]]
        cap = [self.nodes[i][0] for i in range(len(self.nodes)) if i not in dead and self.node_captured[i]]
        return ops, cap

    def _live(self, result: Any) -> list[int]:
        """Indices of the nodes the tensors in `result` depend on, in run order."""
        from torch.utils._pytree import tree_leaves  # a model's result may nest (tuples of tuples, dicts)

        todo = [n for t in tree_leaves(result) if isinstance(t, torch.Tensor) for n in self._reads(t)]
        live: set[int] = set()
        while todo:
            n = todo.pop()
            if n not in live:
                live.add(n)
                todo.extend(self.nodes[n][1])
        return sorted(live)

    def live_ops(self, result: Any) -> list[str]:
        """Ops the tensors in `result` depend on, in run order; captured ops count (a replay returns what the
        capture computed), the warm-up run before a capture is dead once the capture overwrites its output."""
        return [self.nodes[i][0] for i in self._live(result)]


_NONE: frozenset[int] = frozenset()


def _tensors(args: Any, kwargs: Any) -> list[torch.Tensor]:
    """The tensors among an ATen call's arguments (or results): top level and inside lists/tuples."""
    out = []
    for a in (*(args if isinstance(args, tuple | list) else (args,)), *(kwargs.values() if kwargs else ())):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, tuple | list):
            out.extend(x for x in a if isinstance(x, torch.Tensor))
    return out


def _storage(t: torch.Tensor) -> int:
    """One key for a tensor and all its views (the storage they share); the tensor's id when it has none."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError):
        return id(t)


# ---- CPU stand-ins for the GPU API -------------------------------------------------------------------
class _StandInStream:
    """torch.cuda.Stream / Event stand-in: every method is a no-op."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None

    def __enter__(self) -> _StandInStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _StandInGraph(_StandInStream):
    """torch.cuda.CUDAGraph stand-in: capture and replay do nothing (the eager run already happened)."""


_REC: list[_Recorder] = []


@contextlib.contextmanager
def _graph_capture(*args: Any, **kwargs: Any) -> Iterator[None]:
    """torch.cuda.graph stand-in: what runs inside is capture, recorded apart (it repeats the warm-up run)."""
    rec = _REC[-1] if _REC else None
    if rec is not None:
        rec.capturing = True
    try:
        yield
    finally:
        if rec is not None:
            rec.capturing = False


def _is_gpu_device(d: Any) -> bool:
    if isinstance(d, int) and not isinstance(d, bool):
        return True  # .to(0) / .cuda(0)
    if isinstance(d, torch.device):
        return d.type != "cpu" and d.type != "meta"
    return isinstance(d, str) and d.split(":")[0] in ("cuda", "hip", "xpu", "mps")


class _GpuToHere(TorchFunctionMode):
    """Keeps tensors where the trace runs: `.cuda()` and moves to a GPU are no-ops, factories asked for a GPU
    device get the trace device, and `.item()`-like reads of meta tensors return a stand-in value."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.device = device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name in ("cuda", "pin_memory") and args and isinstance(args[0], torch.Tensor):
            return args[0]
        if _is_gpu_device(kwargs.get("device")):
            kwargs["device"] = self.device
        if name == "to" and args and isinstance(args[0], torch.Tensor):
            args = tuple(a for i, a in enumerate(args) if i == 0 or not _is_gpu_device(a))
            if len(args) == 1 and not kwargs:
                return args[0]
        if args and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta":
            stand_in = _meta_value(name, args[0])
            if stand_in is not None:
                return stand_in
        return func(*args, **kwargs)


def _meta_value(name: str, t: torch.Tensor) -> Any:
    """A plausible Python value for reading a meta tensor (which has no data): a data-dependent branch then
    takes one side instead of ending the trace."""
    if name not in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        return None
    one = True if t.dtype == torch.bool else (1 if not t.is_floating_point() and not t.is_complex() else 1.0)
    if name == "tolist":
        return torch.full(t.shape, one, dtype=t.dtype, device="cpu").tolist()
    if name == "__bool__":
        return True
    return {"__int__": int, "__index__": int, "__float__": float}.get(name, lambda v: v)(one)


@contextlib.contextmanager
def gpu_stand_ins(device: str) -> Iterator[None]:
    """Run GPU-touching task code on `device`: torch.cuda reports no GPU, streams, events and graphs are
    no-op stand-ins, graph capture is recorded apart, and tensors stay on `device`."""
    import torch.cuda as tc

    names = {"is_available": lambda: False, "device_count": lambda: 0, "CUDAGraph": _StandInGraph,
             "graph": _graph_capture, "Stream": _StandInStream, "Event": _StandInStream,
             "stream": lambda *a, **k: contextlib.nullcontext(), "current_stream": _StandInStream,
             "default_stream": _StandInStream, "synchronize": lambda *a, **k: None,
             "set_device": lambda *a, **k: None, "empty_cache": lambda *a, **k: None,
             "make_graphed_callables": lambda callables, *a, **k: callables}
    saved = {n: getattr(tc, n) for n in names if hasattr(tc, n)}
    for n, v in names.items():
        setattr(tc, n, v)
    try:
        with _GpuToHere(device):
            yield
    finally:
        for n in names:
            if n in saved:
                setattr(tc, n, saved[n])
            else:
                delattr(tc, n)


def load_module(code: str, name: str = "task") -> dict[str, Any]:
    """Exec a task's source the way KernelBench's harness does and return its namespace."""
    ns: dict[str, Any] = {"__name__": name}
    exec(compile(code, f"<{name}>", "exec"), ns)  # noqa: S102 - callers have statically checked `code`
    return ns


def trace_code(code: str, device: str = "meta") -> list[str]:
    """ATen ops (overload packets, e.g. 'aten.convolution') executed by Model.forward, in order."""
    return trace_program(code, device)["ops"]


def trace_program(code: str, device: str = "meta", stand_ins: bool = False,
                  glue: Any = None) -> dict[str, Any]:
    """{'ops': ATen ops of Model.forward in order, 'inputs': shape of each input (None for non-tensors)}.

    With `stand_ins`, GPU-API calls take their CPU path (`gpu_stand_ins`); ops that ran only inside a CUDA
    graph capture count when nothing else ran (a wrapper that never runs its module eagerly), and
    'live_ops' lists the ops the output depends on (`_Recorder.live_ops`).
    With `glue` (identity-glue rule names, `operators.identity_glue.RULES`), ops that provably leave their input
    unchanged are not recorded, nor what fed only them; 'glue_removed' counts them by rule.
    """
    from operators.identity_glue import Glue, parse_rules

    rules = parse_rules(glue)
    g = Glue(rules) if rules else None
    cm = gpu_stand_ins(device) if stand_ins else contextlib.nullcontext()
    with cm:
        ns = load_module(code)
        with torch.device(device), torch.no_grad():
            model = ns["Model"](*ns["get_init_inputs"]())
            inputs = ns["get_inputs"]()
            rec = _Recorder(dataflow=stand_ins, glue=g)
            _REC.append(rec)
            consts = g.constants() if g is not None else contextlib.nullcontext()
            try:
                with consts, rec:
                    result = model(*inputs)
            finally:
                _REC.pop()
    shapes = [list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs]
    ops, captured = rec.glue_ops(result) if g is not None else (rec.ops, rec.captured)
    out: dict[str, Any] = {"ops": ops or captured, "inputs": shapes}
    if stand_ins or g is not None:
        out["live_ops"] = rec.live_ops(result)
    if g is not None:
        out["glue_removed"] = dict(g.removed)
    return out


def trace_as_worker(code: str, device: str, seed: int = 42) -> list[str]:
    """ATen ops of one forward executed the way a profile worker runs it (pipeline.gpu.harness): weights and inputs
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


SMALL = "cpu-small"  # a device name for `trace_isolated`: real CPU tensors, the source's sizes shrunk (`shrink_sizes`)
SHRINK_ABOVE = 64  # integer size constants above this are divided by SHRINK_FACTOR
SHRINK_FACTOR = 8


def shrink_sizes(code: str, above: int = SHRINK_ABOVE, factor: int = SHRINK_FACTOR) -> str:
    """`code` with its module-level integer constants above `above` divided by `factor` (batch 128 -> 16, 4096 -> 512),
    so a forward that meta cannot run (`.item()` on data, a data-dependent branch) runs on real tensors in little
    memory; ratios between sizes stay, so layers still fit together. The code unchanged when it does not parse."""
    import ast

    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            for node in ast.walk(stmt.value):
                if isinstance(node, ast.Constant) and type(node.value) is int and node.value > above:
                    node.value = max(1, node.value // factor)
    return ast.unparse(tree)


def _trace_small(code: str, glue: Any) -> dict[str, Any]:
    """trace_program on CPU at reduced sizes; the input shapes reported are the original ones where meta can build
    them (the shape detector compares those), else the reduced ones."""
    out = trace_program(shrink_sizes(code), "cpu", stand_ins=True, glue=glue)
    try:
        with gpu_stand_ins("meta"):
            ns = load_module(code)
            with torch.device("meta"):
                inputs = ns["get_inputs"]()
        out["inputs"] = [list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs]
    except Exception:  # noqa: BLE001 - the reduced shapes stand
        pass
    return out


def _serve() -> None:
    """Subprocess side of `trace_isolated`: one JSON request per line in, one JSON result per line out. A request
    may name several devices (meta first, then cpu): the first that traces wins, and the result says which.

    The protocol moves to private copies of fds 0 and 1; the task's own stdout goes to stderr and its stdin
    is empty, so a `print` in `forward` (or in `__init__`, or at import) cannot reach the parent's reader.
    """
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    sys.stdout = sys.stderr
    for line in requests:
        req = json.loads(line)
        errors: list[str] = []
        out: dict[str, Any] = {}
        devices = req.get("devices") or [req.get("device", "meta")]
        for device in devices:
            try:
                got = (_trace_small(req["code"], req.get("glue")) if device == SMALL else
                       trace_program(req["code"], device, stand_ins=True, glue=req.get("glue")))
                out = {"ok": True, **got, "device": device}
                break
            except BaseException as e:  # noqa: BLE001 - any failure of the traced code is a result
                where = f"{device}: " if len(devices) > 1 else ""  # which device failed, when several were tried
                errors.append(f"{where}{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
        if not out:
            out = {"ok": False, "error": "; ".join(errors)[:600]}
        try:
            text = json.dumps(out)
        except (TypeError, ValueError) as e:
            text = json.dumps({"ok": False, "error": f"unserializable trace result ({e})"[:300]})
        replies.write(text + "\n")
        replies.flush()


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
                   devices: list[str] | None = None, mem_limit_bytes: int | None = None,
                   glue: Sequence[str] | str | None = None) -> list[dict[str, Any]]:
    """Trace each source in a subprocess; returns {'ok', 'ops', 'device'} or {'ok': False, 'error'} per item.
    devices: try these in order instead of `device` (e.g. meta, then cpu for data-dependent code);
    mem_limit_bytes: address-space cap of the subprocess; glue: identity-glue rules to apply (`trace_program`)."""
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
            rules = sorted(glue) if glue is not None and not isinstance(glue, str) else glue
            proc.stdin.write(json.dumps({"code": code, "device": device, "devices": devices, "glue": rules}) + "\n")
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
        reply = _parse_reply(line)
        if reply is not None:
            results.append(reply)
            continue
        proc.kill()
        proc.wait()
        why = (f"timed out after {timeout_s:g}s" if not ready else
               f"sent an unreadable reply ({line[:60]!r})" if line else f"crashed (exit {proc.returncode})")
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


def _parse_reply(line: str) -> dict[str, Any] | None:
    """The worker's reply, or None if the line is not one (the worker is then replaced)."""
    if not line:
        return None
    try:
        reply = json.loads(line)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) and "ok" in reply else None


if __name__ == "__main__":
    _serve()
