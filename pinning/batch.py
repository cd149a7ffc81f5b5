"""The pinning tool for batch scaling: sample tasks, re-run every node of each at six other batch sizes on
meta, and write the operators whose every eligible node scaled exactly to operators/batch_linear.json
(`python -m pinning.batch`, a few minutes; rerun after editing the catalog or upgrading torch;
tests/operators/test_batch_scale.py re-checks each listed operator)."""

from __future__ import annotations

import argparse
import json
import warnings
from collections import Counter
from pathlib import Path

from operators import batch_scale

PIN_FILE = batch_scale.PIN_FILE


def _node_runs(g, consts: dict[str, int]) -> dict[str, tuple] | None:
    """Per op node: (argument layouts, output layout, records) from a fresh meta run (None: it fails)."""
    import torch

    from operators import graph
    from operators.cost import CostMode

    runs: dict[str, tuple] = {}
    real = graph._run_call

    def spy(key, call, ns, mode):
        first = len(mode.records)
        out = real(key, call, ns, mode)
        layout = graph._layout(out) if isinstance(out, torch.Tensor) else None
        runs[call] = (key, layout, [tuple(vars(r).values()) for r in mode.records[first:]])
        return out

    graph._MEMO.clear()
    graph._run_call = spy
    try:
        graph.execute(g, consts, CostMode())
    except Exception:  # noqa: BLE001 - a graph that does not run at this batch says nothing
        return None
    finally:
        graph._run_call = real
    return runs


def _scaled(records: list[tuple], b: int, b2: int) -> list[tuple] | None:
    out = []
    for name, flops, act, fixed, out_bytes, view, family in records:
        if flops % b or act % b or out_bytes % b or family % b:
            return None
        out.append((name, flops // b * b2, act // b * b2, fixed, out_bytes // b * b2, view, family // b * b2))
    return out


def sweep(preset: str, seed: int, n: int) -> tuple[Counter, Counter]:
    """(checks that scaled exactly, checks that did not) per operator, over `n` tasks of `preset`."""
    from operators import graph
    from operators.render import as_graph
    from operators.sample import sample_tasks
    from pipeline.rundir.config import load_preset

    good, bad = Counter(), Counter()
    saved = batch_scale.BATCH_LINEAR
    batch_scale.BATCH_LINEAR = frozenset()  # every node runs on meta
    try:
        rows = sample_tasks(load_preset(preset).sample, seed, range(n), set())
        for row in rows:
            g = as_graph(row["graph"])
            consts = g.graph["constants"]
            b = consts[batch_scale.BATCH]
            ref = _node_runs(g, consts) if b > 1 else None
            if ref is None:
                continue
            for b2 in sorted({2, 3, max(2, b // 2), b + 1, 7919, 3 * b} - {b}):
                other = _node_runs(g, {**consts, batch_scale.BATCH: b2})
                if other is None:
                    continue
                for _, d in g.nodes(data=True):
                    if d["kind"] != "op" or d["call"] not in ref or d["call"] not in other:
                        continue
                    (key, layout, records), (_, layout2, records2) = ref[d["call"]], other[d["call"]]
                    names = graph._STATIC[key[0]]
                    bkey = batch_scale.batch_key(d["op"], key, names, b, listed=False)
                    if layout is None or bkey is None or not batch_scale._outer(layout, b):
                        continue
                    same = _scaled(records, b, b2) == records2 and (b2, *layout[0][1:]) == layout2[0] \
                        and layout[1:] == layout2[1:]
                    (good if same else bad)[d["op"]] += 1
    finally:
        batch_scale.BATCH_LINEAR = saved
    return good, bad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--h200-tasks", type=int, default=2500)
    ap.add_argument("--demo-tasks", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--min-checks", type=int, default=3)
    ap.add_argument("--out", default=str(PIN_FILE))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    good, bad = Counter(), Counter()
    for preset, n in (("h200", args.h200_tasks), ("demo", args.demo_tasks)):
        g, b = sweep(preset, args.seed, n)
        good.update(g)
        bad.update(b)
    ops = sorted(op for op, k in good.items() if k >= args.min_checks and op not in bad)
    note = (f"Catalog operators whose meta result scales exactly with the batch (operators/batch_scale.py): every "
            f"eligible node of {args.h200_tasks:,} h200 and {args.demo_tasks:,} demo tasks (seed {args.seed}) "
            "re-run at batches 2, 3, b/2, b+1, 3b and 7919 matched the scaled run at the solved batch b, with no "
            "exception. Written by python -m pinning.batch; re-checked per operator by "
            "tests/operators/test_batch_scale.py.")
    Path(args.out).write_text(json.dumps({"note": note, "operators": ops}, indent=1) + "\n")
    print(f"{len(ops)} operators scale with the batch; not listed (a check failed): {sorted(bad)}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
