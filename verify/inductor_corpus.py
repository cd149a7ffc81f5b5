"""Honest corpus from torch.compile: inductor's own generated code for a task (Triton on a GPU, C++ on a CPU),
wrapped as ModelNew. The wrapper keeps the task's module tree (so `load_state_dict` fills it), embeds the generated
wrapper source and loads it the way inductor does (PyCodeCache), then calls its `call` with the graph inputs in the
order dynamo placed them. It is generated code, trusted, so the corpus verifies it with `off=("static",)`; the
runtime checks apply. Inductor's code calls allocation, GEMM/convolution and, for some tasks, its fallback operators
(cumsum, SDPA, ...): such a candidate is written to pairs.jsonl with `"policy": "library", "allow": [those ops]`,
the tier it needs; one that calls an operator that is neither is skipped.

    python -m verify.inductor_corpus DATASET_DIR --n 60 --device cuda --out runs/verify_corpus
writes one candidate per task and pairs.jsonl for `verify_bench.py --corpus`."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

TEMPLATE = '''import torch
from torch._inductor.codecache import PyCodeCache

TASK_SOURCE = {task!r}
_ns = {{"__name__": "task"}}
exec(compile(TASK_SOURCE, "<task>", "exec"), _ns)
SOURCES = {sources!r}  # input shapes -> inductor's wrapper source for them
ORDER = {order!r}  # graph inputs: ("param", "lin.weight") or ("input", 0)


class ModelNew(_ns["Model"]):
    def __init__(self, *args):
        super().__init__(*args)
        self._mods = {{k: PyCodeCache.load(src) for k, src in SOURCES.items()}}  # compiles the kernels once

    def forward(self, *xs):
        key = repr([tuple(x.shape) if isinstance(x, torch.Tensor) else x for x in xs])
        mod = self._mods[key]
        state = dict(self.named_parameters())
        state.update(self.named_buffers())
        args = [state[name] if kind == "param" else xs[name] for kind, name in ORDER[key]]
        out = mod.call(args)
        return out[0] if len(out) == 1 else tuple(out)
'''


def _placeholder_to_source(name: str, arg_names: list[str]) -> tuple[str, Any]:
    """dynamo's placeholder name -> ("param", dotted path) or ("input", index)."""
    m = re.fullmatch(r"L_self_(.+)_", name)
    if m:
        path = re.sub(r"_modules_|_parameters_|_buffers_", ".", "_" + m.group(1)).strip(".")
        path = re.sub(r"^(modules|parameters|buffers)_", "", path)
        return "param", path
    m = re.fullmatch(r"L_(.+)_", name)
    if m and m.group(1) in arg_names:
        return "input", arg_names.index(m.group(1))
    raise ValueError(f"unmapped graph input {name}")


def generate(task_code: str, device: str, variants: list[dict]) -> str:
    """The candidate source for `task_code` (one compiled wrapper per shape variant)."""
    import inspect

    import torch
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    ns: dict[str, Any] = {"__name__": "task"}
    exec(compile(task_code, "<task>", "exec"), ns)  # noqa: S102 - a release task, run by the corpus builder
    arg_names = [p for p in inspect.signature(ns["Model"].forward).parameters if p != "self"]
    defaults = {k: ns[k] for v in variants for k in v if k in ns}
    sources, orders = {}, {}
    for v in [{}, *variants]:
        for k in defaults:
            ns[k] = v.get(k, defaults[k])
        model = ns["Model"](*ns["get_init_inputs"]()).to(device).eval()
        xs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
        seen: list[list[str]] = []

        def backend(gm: Any, example: Any, seen: list = seen) -> Any:
            seen.append([n.target for n in gm.graph.nodes if n.op == "placeholder"])
            return compile_fx(gm, example)

        torch._dynamo.reset()
        with torch.no_grad():
            _, codes = run_and_get_code(torch.compile(model, backend=backend, fullgraph=True), *xs)
        key = repr([tuple(x.shape) if isinstance(x, torch.Tensor) else x for x in xs])
        sources[key] = re.sub(r"# kernel path: .*\n", "", codes[-1])  # this machine's cache paths, not code
        orders[key] = [_placeholder_to_source(n, arg_names) for n in seen[-1]]
    return TEMPLATE.format(task=task_code, sources=sources, order=orders)


def refused_calls(source: str, policy: Any = None) -> list[str]:
    """ATen ops inductor's wrapper source calls (`aten.X.overload(` / `torch.ops.aten.X.`) that `policy` (default:
    strict) refuses: inductor fell back to PyTorch compute for them, so the candidate needs the library tier with
    those operators allowed (`library_ops`). Copies pass here (inductor's keep the dtype; the guard checks that at
    run time)."""
    from verify.guard import MOVES, ComputeGuard

    guard = ComputeGuard(policy)
    names = set(re.findall(r"\baten\.(\w+)\.\w+\(", source))
    return sorted(n for n in names if not guard.allows(n) and n not in MOVES)


def library_ops(source: str) -> list[str]:
    """`aten::NAME` of each operator the candidate calls beyond strict, all of them inductor fallbacks (the library
    tier's `--allow` for it); raises if one is not a fallback (inductor's code would not call it)."""
    from verify.policy import inductor_fallbacks

    ops = [f"aten::{n.rstrip('_')}" for n in refused_calls(source)]
    fb = inductor_fallbacks()
    missing = [o for o in ops if o not in fb]
    if missing:
        raise ValueError(f"not inductor fallbacks: {missing}")
    return ops


def _one(args: tuple[dict, str]) -> tuple[dict, str | None, str, list[str]]:
    """(row, candidate source or None, why skipped, the library operators it needs) in a pool process."""
    row, device = args
    try:
        src = generate(row["code"], device, json.loads(row["shape_variants"] or "[]"))
        try:
            return row, src, "", library_ops(src)
        except ValueError:  # an operator neither strict nor an inductor fallback: not a candidate of any tier
            return row, None, f"inductor falls back to PyTorch compute for {', '.join(refused_calls(src))}", []
    except Exception as e:  # noqa: BLE001 - a task inductor cannot wrap is skipped, with why
        return row, None, f"{type(e).__name__}: {str(e)[:100]}", []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="runs/verify_corpus")
    ap.add_argument("--jobs", type=int, default=1, help="tasks compiled at once, one process each")
    a = ap.parse_args()
    import multiprocessing as mp
    import os

    import pyarrow.dataset as ds

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = ds.dataset(str(Path(a.dataset) / "data")).to_table(columns=["task_id", "code", "shape_variants"])
    todo = [(row, a.device) for row in rows.slice(0, a.n * 2).to_pylist()]
    # inductor's own compile pool per job would oversubscribe the cores the jobs already share
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 2) // max(1, a.jobs))))
    made = 0
    # one line per candidate as it comes, so a run cut short keeps what it generated
    with (out / "pairs.jsonl").open("w") as pairs, \
            mp.get_context("spawn").Pool(max(1, a.jobs), maxtasksperchild=1) as pool:
        for row, src, why, ops in pool.imap_unordered(_one, todo):
            if made >= a.n:
                break
            if src is None:
                print(f"{row['task_id']}: skipped ({why})")
                continue
            p = out / f"{row['task_id']}.py"
            p.write_text(src)
            line = {"task": f"{a.dataset}:{row['task_id']}", "candidate": str(p), "kind": "inductor"}
            if ops:  # it calls inductor's fallback operators: a candidate of the library tier, with them allowed
                line.update(policy="library", allow=ops)
            pairs.write(json.dumps(line) + "\n")
            pairs.flush()
            made += 1
            print(f"{row['task_id']}: ok ({made}/{a.n})", flush=True)
        pool.terminate()


if __name__ == "__main__":
    main()
