"""The pinning tool for true labels: run every sampleable catalog operator alone over many draws and write the
ATen ops it executes.

`python -m pinning.labels` (about a minute) traces on meta and for real on the CPU and writes
operators/aten_pins.json. `python -m pinning.labels --device cuda` (on a GPU box; torch, networkx and
pyarrow suffice) executes each operator's plan (pinning.plan: tiny sizes, the h200 preset's sizes, a
batch of one) on the GPU the way a profile worker does and writes operators/aten_pins_cuda.json: the GPU
name, torch version, backend switches and, per operator, its GPU behaviours and the plan's fingerprint.
`--ops A,B` pins only those operators into the existing file; `--stale` only those a CPU test would flag
(missing, failed, or with another fingerprint); `--device cpu` runs the same device path on the CPU and writes
only where `--out` says. Rerun after editing the catalog or upgrading torch; tests flag stale pins.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from operators.labels import CUDA_PIN_FILE, GLUE, PIN_FILE, canonical
from pinning.plan import fingerprint, plan

# after these the CUDA context is unusable: the remaining operators cannot be traced in this process
_FATAL_CUDA = ("device-side assert", "illegal memory access", "misaligned address", "unspecified launch failure",
               "CUDA error: an illegal")


def pin_spec(spec, samples: int = 24, seed: int = 0) -> list[list[str]]:
    """The distinct sets of ATen ops `spec` runs alone over `samples` draws per rank, traced on meta and,
    where the CPU dispatches differently (fused attention, one_hot), executed for real on CPU at tiny sizes
    (and at a batch of one).

    Raises OpsynthError naming the entry if it never runs on meta at any rank.
    """
    from operators.sample import single_op_graph
    from opsynth.errors import OpsynthError

    seen: set[frozenset[str]] = set()
    errors: list[str] = []
    for i in range(samples * len(spec.ranks)):
        rng = random.Random(f"{seed}:{spec.name}:{i}")
        try:
            g = single_op_graph(spec, rng, spec.ranks[i % len(spec.ranks)])
        except Exception as e:  # noqa: BLE001 - collected, reported if nothing ever runs
            errors.append(str(e))
            continue
        for _, d in g.nodes(data=True):
            if d["kind"] == "op":
                seen.add(frozenset(canonical(d["aten"])))
        if i < 4 * len(spec.ranks):
            seen.add(frozenset(canonical(_cpu_trace(g))))
            # a batch of one takes other CPU paths (MultiheadAttention: one addmm into the fused kernel); ops
            # that refuse it (BatchNorm in training) are not asked
            with contextlib.suppress(Exception):
                seen.add(frozenset(canonical(_cpu_trace(g, {"batch_size": 1}))))
            # an upstream operator may hand over a permuted layout: the GPU's fused attention returns (B, H, L, D)
            # laid out as (B, L, H, D), and matmul then runs clone + bmm instead of view + mm (a task rejected for
            # its label on the H200, call 31); ops that refuse such an input are not asked
            strided = permuted_inputs(g)
            if strided is not None:
                with contextlib.suppress(Exception):
                    seen.add(frozenset(canonical(_cpu_trace(strided))))
            # a keepdim reduction upstream hands over a last dim of 1, and some operators then take another path
            # (einsum contracts a dim of 1 by a product, no bmm: a task rejected for its label on the H200, call 53);
            # only a path with kernels of its own counts, so no operator's evidence becomes layout ops alone
            with contextlib.suppress(Exception):
                unit = frozenset(canonical(_cpu_trace(single_op_graph(spec, random.Random(f"{seed}:{spec.name}:{i}:1"),
                                                                      spec.ranks[i % len(spec.ranks)], unit_last=True))))
                if unit - GLUE:
                    seen.add(unit)
    if not seen:
        raise OpsynthError(f"operator spec {spec.name!r} cannot run on the meta device "
                           f"({errors[-1] if errors else 'no sample'}); fix or remove its entry in operators/ops_*.py")
    return sorted(sorted(s) for s in seen)


def permuted_inputs(g):
    """A copy of graph g whose tensor inputs of rank >= 3 hold the same values with dims 1 and 2 swapped in
    memory (what a fused attention kernel returns), or None when g has no such input."""
    h = g.copy()
    changed = False
    for _, d in h.nodes(data=True):
        if d["kind"] == "input" and len(d.get("shape") or ()) >= 3:
            d["expr"] = f"{d['expr']}.transpose(1, 2).contiguous().transpose(1, 2)"
            changed = True
    return h if changed else None


def _cpu_trace(g, constants: dict[str, int] | None = None) -> list[str]:
    import warnings

    from operators.render import render
    from operators.trace import trace_code

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trace_code(render(g, constants), device="cpu")


def pin_catalog(samples: int = 24, seed: int = 0) -> dict[str, list[list[str]]]:
    from operators.catalog import sampleable

    return {spec.name: pin_spec(spec, samples, seed) for spec in sampleable()}


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]


def pin_device_spec(spec, device: str, seed: int = 0, seconds: dict[str, float] | None = None,
                    **plan_args: int) -> dict[str, Any]:
    """One operator's entry of the device pin: the distinct ATen op sets its plan ran (canonical names), the
    plan's fingerprint, how many steps ran, and the first errors of required steps. Never raises for a step;
    `plan_args` (tiny, batch1, large) shrink the plan for trials; `seconds` adds up the time per step kind."""
    import warnings

    import torch

    from operators.trace import trace_as_worker

    t0 = time.perf_counter()
    steps = plan(spec, seed, **plan_args)
    seconds = seconds if seconds is not None else {}
    seconds["plan"] = seconds.get("plan", 0.0) + time.perf_counter() - t0
    seen: set[frozenset[str]] = set()
    errors: list[str] = []
    ran = 0
    for step in steps:
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ops = trace_as_worker(step.code, device)
        except Exception as e:  # noqa: BLE001 - one failing module is a result, not the end of the pin
            if any(m in str(e) for m in _FATAL_CUDA):
                raise
            if not step.optional:
                errors.append(f"{step.kind}: {_first_line(e)}")
            continue
        finally:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds[step.kind] = seconds.get(step.kind, 0.0) + time.perf_counter() - t0
        seen.add(frozenset(canonical(ops)))
        ran += 1
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # sizes differ from op to op: cached blocks of one would only fragment the next
    entry: dict[str, Any] = {"behaviours": sorted(sorted(s) for s in seen), "fingerprint": fingerprint(steps),
                             "steps": len(steps), "ran": ran}
    if errors:
        entry["failed_steps"], entry["errors"] = len(errors), errors[:3]
    return entry


def _header(device: str, seed: int, plan_args: dict[str, int]) -> dict[str, Any]:
    import torch

    from operators.trace import backend_settings
    from pinning import plan as pin_plan

    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else ""
    return {"torch_version": torch.__version__, "device": device.split(":")[0], "gpu": gpu,
            "settings": backend_settings(),
            "plan": {"seed": seed, "tiny": pin_plan.TINY, "batch1": pin_plan.BATCH1, "large": pin_plan.LARGE,
                     "preset": pin_plan.PRESET, **plan_args}}


def stale_ops(data: dict[str, Any], specs: list) -> list[str]:
    """Operators of `specs` a device pin `data` must (re)run: missing, with no behaviour, or pinned from another
    plan than the one the catalog and this code give now (recomputed on meta: no GPU needed)."""
    ops = data.get("ops", {})
    keys = ("seed", "tiny", "batch1", "large")
    args = {k: v for k, v in data.get("plan", {}).items() if k in keys}
    return [s.name for s in specs
            if s.name not in ops or not ops[s.name]["behaviours"] or ops[s.name]["fingerprint"] != fingerprint(plan(s, **args))]


def pin_device(device: str, names: list[str] | None = None, out: Path | None = None, only_stale: bool = False,
               seed: int = 0, plan_args: dict[str, int] | None = None, log=print) -> dict[str, Any]:
    """Pin the device behaviours of every sampleable operator (or `names`) and write them to `out` (merged into
    it when only some operators are pinned); returns the file's content. `plan_args` shrink the plan (trials)."""
    import torch

    from operators.catalog import sampleable
    from opsynth.errors import OpsynthError

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OpsynthError("--device cuda needs a visible CUDA GPU; run this on the GPU box (or try --device cpu)")
    if out is not None and out.resolve() == PIN_FILE.resolve():
        raise OpsynthError(f"{out} is the CPU pin; the device pin writes elsewhere (default {CUDA_PIN_FILE.name})")
    plan_args = dict(plan_args or {})
    specs = sampleable()
    header = _header(device, seed, plan_args)
    old = json.loads(out.read_text()) if out is not None and out.is_file() else {}
    partial = bool(names) or only_stale
    if names:
        known = {s.name for s in specs}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise OpsynthError(f"--ops names no sampleable catalog operator: {unknown}; "
                               "see `opsynth catalog` for the names")
        specs = [s for s in specs if s.name in set(names)]
    if only_stale:
        specs = [s for s in specs if s.name in set(stale_ops(old, specs))]
    if partial and old:
        same = {k: old.get(k) for k in ("torch_version", "gpu", "plan")} == {k: header[k] for k in ("torch_version", "gpu", "plan")}
        if not same:
            raise OpsynthError(f"{out} was pinned with torch {old.get('torch_version')} on {old.get('gpu')!r} "
                               f"(plan {old.get('plan')}); pin every operator again: {' '.join(_command(device))}")
    t0 = time.time()
    entries: dict[str, Any] = dict(old.get("ops", {})) if partial else {}
    failed: dict[str, str] = {}
    seconds: dict[str, float] = {}
    fatal = ""
    for k, spec in enumerate(specs, 1):
        if fatal:
            break
        try:
            entries[spec.name] = pin_device_spec(spec, device, seed, seconds, **plan_args)
        except Exception as e:  # noqa: BLE001 - recorded; the pin goes on with the next operator
            msg = _first_line(e)
            entries[spec.name] = {"behaviours": [], "fingerprint": "", "steps": 0, "ran": 0, "errors": [msg]}
            if any(m in str(e) for m in _FATAL_CUDA):
                fatal = msg
        if not entries[spec.name]["behaviours"]:
            failed[spec.name] = (entries[spec.name].get("errors") or ["no step ran"])[0]
        if k % 50 == 0:
            log(f"  {k}/{len(specs)} operators, {time.time() - t0:.0f} s", file=sys.stderr)
    data = {**header, "ops": dict(sorted(entries.items()))}
    if out is not None:
        out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    log("  seconds by step kind: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))
    _summary(data, specs, failed, fatal, time.time() - t0, out, device, log)
    return data


def _command(device: str, names: list[str] | None = None) -> list[str]:
    cmd = ["python", "-m", "pinning.labels", "--device", device.split(":")[0]]
    return cmd + (["--ops", ",".join(names)] if names else [])


def _summary(data: dict, specs: list, failed: dict[str, str], fatal: str, seconds: float, out: Path | None,
             device: str, log) -> None:
    """Which operators run other kernels on this device than in the CPU pin, which failed, and one summary line."""
    from operators.labels import pins

    cpu = pins("cpu")
    pinned = [s.name for s in specs if s.name in data["ops"]]
    other = {n: sorted(set().union(*map(frozenset, data["ops"][n]["behaviours"])) - set().union(*cpu.get(n, ())))
             for n in pinned}
    other = {n: v for n, v in other.items() if v}
    for n, v in other.items():
        log(f"  {n}: {device} only {v}")
    for n, why in failed.items():
        log(f"  FAILED {n}: {why}")
    if fatal:
        rest = [s.name for s in specs if s.name not in data["ops"]]
        log(f"  the {device} context broke ({fatal}); {len(rest)} operators not pinned: run {' '.join(_command(device))} --stale")
    where = f"to {out}" if out is not None else "(not written: give --out)"
    log(f"pinned {len(pinned) - len(failed)}/{len(specs)} operators on {data['gpu'] or device} {where} in {seconds:.0f} s: "
        f"{len(other)} with {device}-only ATen ops, {len(failed)} failed" + (f" ({', '.join(list(failed)[:8])})" if failed else ""))


def device_pin_problem(path: Path, specs: list) -> str | None:
    """Why the device pin at `path` is not current for `specs` (one line naming the operators and the exact
    command that re-pins them), or None."""
    if not path.is_file():
        return f"{path.name} does not exist; on a GPU box run: {' '.join(_command('cuda'))}"
    stale = stale_ops(json.loads(path.read_text()), specs)
    if not stale:
        return None
    return (f"{len(stale)} operator(s) missing, failed or stale in {path.name} ({', '.join(stale[:10])}"
            f"{', ...' if len(stale) > 10 else ''}); on a GPU box run: {' '.join(_command('cuda', stale))}")


def check_device_pin(path: Path) -> int:
    from operators.catalog import sampleable

    problem = device_pin_problem(path, sampleable())
    print(problem or f"{path.name} is current for every sampleable operator")
    return 1 if problem else 0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pinning.labels", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="", help="cuda: pin what each operator runs on this GPU "
                    f"({CUDA_PIN_FILE.name}); cpu: the same path on the CPU (a trial). Left out: the CPU pin")
    ap.add_argument("--ops", default="", help="comma-separated catalog names: pin only these (merged into the file)")
    ap.add_argument("--stale", action="store_true", help="pin only operators missing, failed or stale in the file")
    ap.add_argument("--out", default="", help=f"where the device pin goes (cuda: {CUDA_PIN_FILE.name} by default)")
    ap.add_argument("--check", action="store_true", help=f"no GPU needed: list the operators {CUDA_PIN_FILE.name} "
                    "lacks or pinned from another plan, and the command that re-pins them (exit 1 if any)")
    a = ap.parse_args(argv)
    if a.check:
        sys.exit(check_device_pin(CUDA_PIN_FILE))
    if not a.device:
        import torch

        ops = pin_catalog()
        PIN_FILE.write_text(json.dumps({"torch_version": torch.__version__, "ops": ops}, indent=1, sort_keys=True) + "\n")
        print(f"pinned {len(ops)} operators to {PIN_FILE}")
        return
    from opsynth.errors import OpsynthError

    out = Path(a.out) if a.out else (CUDA_PIN_FILE if a.device.startswith("cuda") else None)
    names = [n.strip() for n in a.ops.split(",") if n.strip()] or None
    try:
        pin_device(a.device, names, out, a.stale)
    except OpsynthError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
