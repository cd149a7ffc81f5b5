"""Profile settings as arms on the same tasks, one after another on this machine: for each arm a copy of the run
with the tasks at indices [A, B) (or only those --ids names) unmeasured (benchmarks/remeasure_copy.py), its own
empty inductor and Triton caches, and `opsynth profile COPY --set ...` (the common settings, then the arm's); then
the arms side by side (benchmarks/arms_compare.py). Host CPUs differ between GPU machines, so settings compare only on one machine.

    python benchmarks/profile_arms.py --run DIR --index A:B --out OUTDIR \\
        --arm base --arm mps=profile.mps=true --arm w20=workers=20,profile.mps=true \\
        [--set profile.median_precision=0.015 ...] [--workers 16] [--gpus 0] [--max-seconds 180]
    python benchmarks/profile_arms.py --run DIR --ids ID,ID,... --out OUTDIR --arm base --arm cap=profile.KEY=VALUE

An arm's items are `profile.KEY=VALUE` settings (passed as --set) and `workers=N` (that arm's workers per GPU).

An arm that reaches --max-seconds is stopped as Ctrl-C stops a run (its finished shards are kept) and compared on
the tasks every arm finished. OUTDIR/NAME is each arm's copy, OUTDIR/arms.json the comparison. pyarrow and stdlib
(the CLI the arms run needs what `opsynth profile` needs).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from arms_compare import compare, read_arm  # noqa: E402
from remeasure_copy import remeasure_copy, select_tasks  # noqa: E402


def parse_arm(spec: str) -> tuple[str, list[str], int | None]:
    """NAME or NAME=ITEM,ITEM (profile.KEY=VALUE or workers=N) -> (NAME, the --set values, workers or None)."""
    name, _, items = spec.partition("=")
    sets, workers = [], None
    for item in filter(None, items.split(",")):
        key, _, value = item.partition("=")
        if key == "workers" and value.isdigit() and int(value) > 0:
            workers = int(value)
        elif key.startswith("profile.") and value:
            sets.append(item)
        else:
            name = ""
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        sys.exit(f"error: --arm {spec!r}: give NAME or NAME=ITEM[,ITEM], ITEM profile.KEY=VALUE or workers=N (NAME: "
                 "letters, digits, _ or -)")
    return name, sets, workers


def profile_command(copy: Path, n: int, sets: list[str], workers: int | None, gpus: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "pipeline.cli", "profile", str(copy), "--limit", str(n)]
    cmd += ["--workers", str(workers)] if workers else []
    cmd += ["--gpus", gpus] if gpus else []
    for s in sets:
        cmd += ["--set", s]
    return cmd


def run_arm(cmd: list[str], caches: Path, max_seconds: float) -> tuple[float, int]:
    """Run one arm's profile with empty caches; (wall seconds, exit code). Past max_seconds it gets SIGINT (the
    run keeps its finished shards), then SIGKILL after a grace period."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"), "TRITON_CACHE_DIR": str(caches / "triton"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    try:
        rc = proc.wait(timeout=max_seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    return time.monotonic() - t0, rc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--index", help="A:B, the task indices every arm measures")
    ap.add_argument("--ids", help="ID,ID,...: only these tasks (within --index when both are given)")
    ap.add_argument("--out", type=Path, required=True, help="a new folder: the arms' copies and arms.json")
    ap.add_argument("--arm", action="append", required=True, help="NAME[=profile.KEY=VALUE,...]; the first is the "
                    "reference")
    ap.add_argument("--set", action="append", default=[], help="profile.KEY=VALUE for every arm (before the arm's)")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--gpus")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="per arm")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    _, _, ids = select_tasks(a.run, a.index, a.ids)
    arms = [parse_arm(s) for s in a.arm]
    if len({n for n, _, _ in arms}) != len(arms):
        sys.exit("error: two arms share a name")
    if a.out.exists():
        sys.exit(f"error: {a.out} exists; give a new folder")
    a.out.mkdir(parents=True)
    n = len(ids)  # tasks the run has measured (each copy forgets them) or not yet (pending in the copy too)
    runs, measured = [], {}
    for name, sets, workers in arms:
        copy = a.out / name
        remeasure_copy(a.run, copy, ids)
        cmd = profile_command(copy, n, [*a.set, *sets], workers or a.workers, a.gpus)
        wall, rc = run_arm(cmd, a.out / f"{name}.caches", a.max_seconds)
        rows = read_arm(copy / "measurements")
        measured[name] = {t: r for t, r in rows.items() if t in ids}
        runs.append({"arm": name, "settings": [*a.set, *sets], "workers": workers or a.workers,
                     "wall_s": round(wall, 1), "exit_code": rc, "measured": len(measured[name]), "of": n})
        print(f"arm {name}: {len(measured[name])} of {n} tasks measured in {wall:.1f} s (exit {rc})", flush=True)
    res = {"label": a.label, "command": "benchmarks/profile_arms.py " + " ".join(sys.argv[1:]), "run": str(a.run),
           "index": a.index, "ids": sorted(ids) if a.ids else None, "runs": runs,
           **compare(measured, {r["arm"]: r["workers"] or 1 for r in runs})}
    (a.out / "arms.json").write_text(json.dumps(res, indent=1) + "\n")
    if not res["tasks"]:
        sys.exit(f"error: no task of --index/--ids was measured by every arm (wrote {a.out / 'arms.json'}); give the "
                 "arms more --max-seconds or fewer tasks")
    for r in res["arms"]:
        e, c = r["eager_over_first"], r["compile_over_first"]
        print(f"{r['arm']:<16} wall/task {r['wall_s']:.3f} s, /{r['workers']} workers {r['s_per_task_at_full_occupancy']:.4f}"
              f" s; eager/first {e.get('median_ratio')}, compiled/first {c.get('median_ratio')}")
    print(f"wrote {a.out / 'arms.json'} ({res['tasks']} tasks measured in every arm)")


if __name__ == "__main__":
    main()
