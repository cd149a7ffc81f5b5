"""A copy of a run directory in which the tasks at indices [A, B) (or only the named ones) are unmeasured again, so
`opsynth profile COPY` measures exactly those (with other `--set` settings, or the same ones to see the run-to-run
noise), and `benchmarks/pipeline_yield.py --run DIR --since-index A --until-index B --repeat COPY` sets the two side
by side.

    python benchmarks/remeasure_copy.py --run DIR --out COPY --index A:B [--rows MEASUREMENTS.parquet]
    python benchmarks/remeasure_copy.py --run DIR --out COPY --ids TASK_ID,TASK_ID,...   # e.g. the tasks that stalled

`--rows` puts measurement rows kept from an earlier re-measure (an earlier copy's measurements/ folder) in
place of the removed ones, so that copy, and the side-by-side figures drawn from it, can be made again without a GPU.

pyarrow and stdlib only (it runs on a bare GPU image). Measurement shards keep their other rows and their
completion markers: the profile stage measures what a done shard lacks. COPY must not exist.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.rundir.schema import MEASUREMENTS, conform  # noqa: E402
from pipeline.rundir.store import RunDir  # noqa: E402


def select_tasks(run: Path, index: str | None, ids: str | None) -> tuple[int, int, set[str]]:
    """(A, B, task ids) that --index A:B and/or --ids ID,ID,... name in `run` (--ids alone: anywhere in the run);
    exits with one line when they name nothing, an index outside the run or an id it lacks."""
    tasks = [r["task_id"] for r in RunDir(run).read_rows("tasks", ["task_id"])]
    first, _, end = (index or f"0:{len(tasks)}").partition(":")
    if not (index or ids) or not (first.isdigit() and end.isdigit()):
        sys.exit(f"error: --index {index!r} / --ids {ids!r}: give A:B, two task indices, and/or ID,ID,... task ids")
    a, b = int(first), int(end)
    if not 0 <= a < b <= len(tasks):
        sys.exit(f"error: --index {a}:{b} is not within the run's {len(tasks)} tasks")
    chosen = set(tasks[a:b])
    if ids:
        named = set(filter(None, (t.strip() for t in ids.split(","))))
        if missing := sorted(named - chosen):
            sys.exit(f"error: --ids: {len(missing)} not among the run's tasks {a}-{b} (e.g. {missing[0]}); give ids "
                     "from its tasks table")
        chosen = named
    return a, b, chosen


def remeasure_copy(run: Path, out: Path, gone: set[str], to_profile: bool = True) -> int:
    """Copy `run` to `out` without the measurements of the tasks `gone` (select_tasks names them); how many were
    removed. A copy `to_profile` is refused while other tasks of `run` are unmeasured."""
    if out.exists():
        sys.exit(f"error: {out} exists; give a new folder for the copy")
    tasks = [r["task_id"] for r in RunDir(run).read_rows("tasks", ["task_id"])]
    measured = {r["task_id"] for r in RunDir(run).read_rows("measurements", ["task_id"])}
    if to_profile and (pending := [i for i, t in enumerate(tasks) if t not in measured and t not in gone]):
        # the copy's profile would measure those too, and first (it takes pending tasks in order): call 56's arms
        # measured tasks 31,700 on when asked for 32,700-33,699, and none of the asked ones before their time ran out
        sys.exit(f"error: {run} has {len(pending)} unmeasured tasks besides the chosen ones (the first at index "
                 f"{pending[0]}); the copy's profile would measure them first: choose --index from {pending[0]} or "
                 "profile the run up to there first")
    shutil.copytree(run, out)
    rd, removed = RunDir(out), 0
    for k in rd.done_shards("measurements"):
        path = rd.shard_path("measurements", k)
        table = pq.read_table(path)
        keep = pc.invert(pc.is_in(table.column("task_id"), value_set=pa.array(sorted(gone))))
        kept = table.filter(keep)
        removed += table.num_rows - kept.num_rows
        if kept.num_rows == table.num_rows:
            continue
        if kept.num_rows:
            pq.write_table(kept, path)
        else:
            path.unlink()
            rd.marker_path("measurements", k).unlink()
    return removed


def restore_rows(copy: Path, rows: list[dict]) -> int:
    """Put measurement rows of tasks the copy lacks into their shards (shard k: the tasks at positions
    [k*S, (k+1)*S)), in task order, each shard with its marker; how many rows went in."""
    rd = RunDir(copy)
    pos = {r["task_id"]: i for i, r in enumerate(rd.read_rows("tasks", ["task_id"]))}
    size = rd.load_config().run.shard_size
    missing = {r["task_id"]: r for r in rows if r["task_id"] in pos}
    have = {r["task_id"] for r in rd.read_rows("measurements", ["task_id"])}
    if unknown := [r["task_id"] for r in rows if r["task_id"] not in pos or r["task_id"] in have]:
        sys.exit(f"error: {len(unknown)} rows name tasks the copy does not lack (e.g. {unknown[0]}); give the rows "
                 "of the tasks --index removed")
    for k in sorted({pos[t] // size for t in missing}):
        old = pq.read_table(rd.shard_path("measurements", k)).to_pylist() if rd.is_done("measurements", k) else []
        new = [r for t, r in missing.items() if pos[t] // size == k]
        merged = sorted(old + new, key=lambda r: pos[r["task_id"]])
        rd.write_shard("measurements", k, conform(merged, MEASUREMENTS), MEASUREMENTS)
    return len(missing)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--index", help="A:B, the task indices to measure again")
    ap.add_argument("--ids", help="ID,ID,...: only these tasks (within --index when both are given)")
    ap.add_argument("--rows", type=Path, help="measurement rows kept from an earlier re-measure of those tasks")
    a = ap.parse_args()
    first, end, chosen = select_tasks(a.run, a.index, a.ids)
    n = remeasure_copy(a.run, a.out, chosen, to_profile=not a.rows)  # with --rows nothing is profiled
    if a.rows:
        back = restore_rows(a.out, pq.read_table(a.rows).to_pylist())
        print(f"{a.out}: {n} measurements of tasks {first}-{end} replaced by {back} rows of {a.rows}; run `opsynth "
              f"filter {a.out} && opsynth dedupe {a.out}` before comparing")
        return
    print(f"{a.out}: {n} measurements of tasks {first}-{end} removed; `opsynth profile {a.out}` measures them again")


if __name__ == "__main__":
    main()
