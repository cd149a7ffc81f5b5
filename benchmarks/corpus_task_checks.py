"""The honest corpus's tasks through the dataset's shortcut checks (measures/shortcuts.py) at their real sizes, with
the verifier's own draws: weights seeded k and inputs seeded 500 + k for draw k (`opsynth verify`'s seed 0), each
draw building its model afresh. A corpus pair whose task the checks drop cannot show whether honest candidates
are punished: a correct kernel that rounds differently fails a fragile task at random.

    python benchmarks/corpus_task_checks.py --device cpu --corpus benchmarks/verify_inductor/pairs.jsonl \
        --kinds fragile --max-minutes 50
    python benchmarks/corpus_task_checks.py --task data/releases/opsynth-ops-h200-v1:79c6cdbad6aa9222 \
        --kinds fragile --ulp-steps 16 --out OUT

Each task runs in a worker subprocess (--workers at once, --timeout-s each). Prints a table and writes
benchmarks/results/corpus_task_checks_<device>[_ulp<N>][_f64x<N>][_<tag>].json (with its "headline")."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

INPUT_SEED = 500  # the verifier draws draw k's inputs from seed * 1000 + k + 500 (verify/worker.py)


def check_task(item: tuple[str, str, tuple[str, ...], int, int | None]) -> dict:
    """One task's shortcut measurements on `device` at its real sizes, the verifier's draws."""
    import torch

    from measures.shortcuts import measure
    from measures.tensor_checks import flatten
    from verify.task import load_task

    spec, device, kinds, steps, f64_draws = item
    t0 = time.perf_counter()
    task = load_task(spec)
    ns: dict = {"__name__": f"task_{task['task_id']}"}
    exec(compile(task["code"], f"<task {task['task_id']}>", "exec"), ns)  # noqa: S102 - a released task
    dev = torch.device(device)
    on = dev if dev.type == "cuda" else torch.device("cpu")

    def model_for(k: int):
        torch.manual_seed(k)
        with on:
            return ns["Model"](*ns["get_init_inputs"]()).to(dev).eval()

    def draw(k: int):
        torch.manual_seed(k + INPUT_SEED)
        with on:
            return tuple(x.to(dev) if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]())

    with torch.no_grad():
        model = model_for(0)
        ref0 = flatten(model(*draw(0)))
        # subs: draw 0's output is the fragility check's reference too, not a second forward
        m = measure(model, draw, ref0, 1e-2, kinds=kinds, subs=[ref0], model_for=model_for, ulp_steps=steps,
                    f64_draws=f64_draws)
    return {"task_id": task["task_id"], "seconds": round(time.perf_counter() - t0, 1),
            **{k: m.get(k) for k in ("shortcut_checks", "dead_inputs", "skippable_ops", "fragile",
                                     "fragile_ulp_ratio", "fragile_ulp_steps", "fragile_f64_ratio",
                                     "fragile_weights")}}


def dropped(r: dict) -> str:
    """The finding that drops the task, or ''."""
    if r.get("error"):
        return ""
    if r.get("dead_inputs"):
        return f"dead input {r['dead_inputs'][0]}"
    if r.get("skippable_ops"):
        return f"skippable operator {r['skippable_ops'][0]}"
    return f"fragile: {r['fragile']}" if r.get("fragile") else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--corpus", action="append", default=[], help="JSONL of {task, candidate[, kind]}; repeatable")
    ap.add_argument("--task", action="append", default=[], help="a task (DATASET_DIR:task_id or a file) besides the "
                    "corpus's; repeatable")
    ap.add_argument("--kinds", default="dead,skip,fragile")
    ap.add_argument("--ulp-steps", type=int, default=1, help="the fragility check's input move in ulps "
                    "(profile.shortcut_ulp_steps)")
    ap.add_argument("--f64-draws", type=int, default=None, help="the float64 reference on the first N draws only "
                    "(profile.shortcut_f64_draws; default: every draw)")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop starting tasks after this")
    ap.add_argument("--workers", type=int, default=1, help="tasks checked at once, each in its own subprocess")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results"))
    ap.add_argument("--commit", help="the commit measured (default: git rev-parse of this checkout)")
    ap.add_argument("--tag", help="a suffix for the result file's name, for another set of tasks at the same settings")
    a = ap.parse_args()
    kinds = tuple(a.kinds.split(","))
    tasks = list(dict.fromkeys([json.loads(ln)["task"] for f in a.corpus for ln in Path(f).read_text().splitlines()
                                if ln.strip()] + a.task))
    if not tasks:
        ap.error("name the tasks: --corpus FILE or --task SPEC")
    box = time.time() + 60 * (a.max_minutes if a.max_minutes is not None else 1e6)

    def one(spec: str) -> dict | None:
        if time.time() > box:
            return None
        with mp.get_context("spawn").Pool(1) as pool:  # a crash or a hang costs this task, not the run
            try:
                r = pool.apply_async(check_task, ((spec, a.device, kinds, a.ulp_steps, a.f64_draws),)).get(timeout=a.timeout_s)
            except Exception as e:  # noqa: BLE001 - a task the checks cannot run is counted with its error
                r = {"task_id": spec.rsplit(":", 1)[-1], "error": f"{type(e).__name__}: {e}"[:300]}
        r["dropped_by"] = dropped(r)
        print(f"{r['task_id']:<18} {r.get('seconds', '-')!s:>7} {r['dropped_by'] or r.get('error') or 'kept'}",
              flush=True)
        return r

    # the checks time nothing, so tasks may share the device; rows keep the listed order
    with ThreadPoolExecutor(max(1, a.workers)) as ex:
        rows = [r for r in ex.map(one, tasks) if r is not None]
    import torch

    commit = a.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=ROOT).stdout.strip()
    hw = "2-core CPU (no GPU)" if a.device == "cpu" else torch.cuda.get_device_name()
    argv = [x.replace(str(ROOT) + "/", "") for x in sys.argv[1:]]
    argv = ["OUT" if x == a.out and Path(x).is_absolute() and not x.startswith(str(ROOT)) else x for x in argv]
    ok = [r for r in rows if not r.get("error")]
    out_ = [r for r in ok if r["dropped_by"]]
    what = "honest-corpus tasks" if a.corpus else "tasks named"
    how = (f", {a.ulp_steps}-ulp move" if a.ulp_steps != 1 else "") + \
        (f", float64 on {a.f64_draws} draw(s)" if a.f64_draws is not None else "")
    headline = [{"figure": f"{what} the shortcut checks drop (real sizes, the verifier's draws{how})",
                 "value": f"{len(out_)} of {len(ok)} checked" + (f": {', '.join(r['task_id'] for r in out_)}"
                                                                  if out_ else "")
                 + (f" ({len(rows) - len(ok)} failed to run)" if len(ok) < len(rows) else ""),
                 "target": "0" if a.corpus else None, "command": "python benchmarks/corpus_task_checks.py " + " ".join(argv),
                 "hardware": hw, "torch": torch.__version__, "commit": commit}]
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    ulps = ("" if a.ulp_steps == 1 else f"_ulp{a.ulp_steps}") + ("" if a.f64_draws is None else f"_f64x{a.f64_draws}") \
        + (f"_{a.tag}" if a.tag else "")
    path = Path(a.out) / f"corpus_task_checks_{'cpu' if a.device == 'cpu' else 'gpu'}{ulps}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"headline": headline, "kinds": list(kinds), "ulp_steps": a.ulp_steps, "f64_draws": a.f64_draws, "listed": len(tasks), "rows": rows},
                               indent=1, default=str) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
