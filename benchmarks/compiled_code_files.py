"""The compiled programs behind a moved compile checksum: for every task that two or more profile runs of the same
tasks compiled to other bits (compile_checksum), which runs ran which program (compile_code, pipeline.gpu.compiled_code)
and, where the inductor cache each run compiled into is still there, a copy of each program's output code to diff.

    python benchmarks/compiled_code_files.py --run runs/A --cache CACHE_A --run runs/B --cache CACHE_B \\
        --out DIR

Prints one line per such task and writes DIR/summary.json (and DIR/<task>/<run>-<hash>.py). pyarrow and stdlib only
(it runs on a bare GPU image).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.gpu.compiled_code import source_hash  # noqa: E402
from pipeline.rundir.store import RunDir  # noqa: E402

COLUMNS = ("task_id", "eager_checksum", "compile_checksum", "compile_rerun_checksum", "compile_code",
           "compile_benchmarks", "compile_agrees_1e2", "compile_max_abs_err")


def programs(cache: Path) -> dict[str, Path]:
    """source_hash -> file of every Python module under an inductor cache dir (output code and kernels alike)."""
    out: dict[str, Path] = {}
    for p in cache.rglob("*.py"):
        try:
            out.setdefault(source_hash(p.read_text(encoding="utf-8"), str(cache)), p)
        except (OSError, UnicodeDecodeError):
            continue
    return out


def moved(runs: list[dict[str, dict]]) -> list[str]:
    """Tasks every run measured with a compile checksum whose checksums are not all the same."""
    common = set.intersection(*(set(r) for r in runs)) if runs else set()
    return sorted(t for t in common if all(r[t].get("compile_checksum") is not None for r in runs)
                  and len({r[t]["compile_checksum"] for r in runs}) > 1)


def pairs(runs: list[dict[str, dict]], names: list[str]) -> list[dict]:
    """For each two runs, pipeline_yield.outputs_moved's count of the tasks both compiled, those that computed other
    compiled bits, and of those the ones with a choice timed in either run."""
    from pipeline_yield import outputs_moved  # beside this script; pyarrow and stdlib too

    out = []
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            got = outputs_moved(runs[i], runs[j], set(runs[i]) & set(runs[j]))
            out.append({"runs": [names[i], names[j]], "compiled_in_both": got["compiled_in_both"],
                        "compiled_moved": got["compiled_moved"],
                        "moved_with_timed_choices": got["compiled_moved_timed_choices"]})
    return out


def verdicts_differ(runs: list[dict[str, dict]]) -> list[dict]:
    """Tasks whose compile verdict (agreement at 1e-2) is not the same in every run, with each run's largest
    difference and timed choices."""
    common = set.intersection(*(set(r) for r in runs)) if runs else set()
    out = []
    for t in sorted(common):
        seen = [r[t].get("compile_agrees_1e2") for r in runs]
        if None not in seen and len(set(seen)) > 1:
            out.append({"task_id": t, "agrees": seen, "max_abs_err": [r[t].get("compile_max_abs_err") for r in runs],
                        "compile_benchmarks": [r[t].get("compile_benchmarks") for r in runs]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, type=Path)
    ap.add_argument("--cache", action="append", default=[], type=Path,
                    help="the inductor cache dir of each --run, in the same order (optional)")
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    if a.cache and len(a.cache) != len(a.run):
        sys.exit(f"error: {len(a.run)} --run but {len(a.cache)} --cache: give one cache per run, or none")
    runs = [{m["task_id"]: m for m in RunDir(r).read_rows("measurements")} for r in a.run]
    caches = [programs(c) if c.is_dir() else {} for c in a.cache] or [{} for _ in a.run]
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for t in moved(runs):
        row = {"task_id": t, "runs": [{k: r[t].get(k) for k in COLUMNS[1:]} for r in runs]}
        for run, r, found in zip(a.run, runs, caches, strict=True):
            for h in filter(None, (r[t].get("compile_code") or "").split(",")):
                if h in found:
                    (a.out / t).mkdir(exist_ok=True)
                    shutil.copy(found[h], a.out / t / f"{run.name}-{h}.py")
        codes = {r[t].get("compile_code") for r in runs}
        print(f"{t}: compile checksums {[r[t]['compile_checksum'] for r in runs]}, "
              f"{'one program' if len(codes) == 1 else f'{len(codes)} programs'}, benchmarks "
              f"{[r[t].get('compile_benchmarks') for r in runs]}, agrees {[r[t].get('compile_agrees_1e2') for r in runs]}")
        rows.append(row)
    names = [r.name for r in a.run]
    summary = {"runs": [str(r) for r in a.run], "tasks_in_all": len(set.intersection(*(set(r) for r in runs))),
               "compiled_moved": len(rows), "compiled_moved_with_timed_choices": sum(
                   any((x.get("compile_benchmarks") or 0) > 0 for x in row["runs"]) for row in rows),
               "pairs": pairs(runs, names), "verdicts_differ": verdicts_differ(runs), "rows": rows}
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{len(rows)} tasks compiled to other bits in some run; {a.out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
