"""What one full garbage collection costs a profile worker once inductor is loaded, before and after the harness
freezes what survives a task (pipeline.gpu.harness.collect_and_freeze).

    python benchmarks/gc_pass.py [--tasks 4] [--out benchmarks/results/gc_pass.json]

Compiles a small module `--tasks` times (a fresh Dynamo each time, as a worker's tasks do), timing gc.collect() after
each: first unfrozen (every pass walks inductor's and Triton's objects, as in a worker that imported them after its
start-up freeze), then with collect_and_freeze after each compile. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def passes(n: int, freeze: bool) -> list[float]:
    import torch
    import torch._dynamo as dynamo

    from pipeline.gpu.harness import collect_and_freeze

    out = []
    for i in range(n):
        dynamo.reset()
        model = torch.nn.Sequential(torch.nn.Linear(64 + i, 64), torch.nn.GELU(), torch.nn.LayerNorm(64))
        torch.compile(model)(torch.randn(8, 64 + i))
        del model
        if freeze:
            collect_and_freeze()
        t0 = time.perf_counter()
        gc.collect()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gc_pass.json")
    a = ap.parse_args()
    import torch

    gc.unfreeze()
    before = passes(a.tasks, freeze=False)
    objects = len(gc.get_objects())
    after = passes(a.tasks, freeze=True)
    res = {"command": "benchmarks/gc_pass.py " + " ".join(sys.argv[1:]), "torch": torch.__version__,
           "host": platform.processor() or platform.machine(), "tracked_objects_unfrozen": objects,
           "collect_s_unfrozen": [round(x, 4) for x in before], "collect_s_frozen": [round(x, 4) for x in after],
           "median_unfrozen_s": round(statistics.median(before), 4), "median_frozen_s": round(statistics.median(after), 4)}
    print(f"{'':<10}{'median s':>10}  per pass")
    print(f"{'unfrozen':<10}{res['median_unfrozen_s']:>10}  {res['collect_s_unfrozen']} ({objects} objects tracked)")
    print(f"{'frozen':<10}{res['median_frozen_s']:>10}  {res['collect_s_frozen']}")
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
