"""A run's GPU stage on a machine that takes a small upload: `pack` copies what `opsynth profile` reads into a new
folder, and `unpack` brings the profile calls made there back into the full run.

The packed run holds config.toml, the manifest, the verdicts as they are, the tasks with only the columns profile
reads (the code; the graphs and traced ops are most of a run's bytes), the done measurement shards with only the
columns profile reads of them, and the done shortcut shards. Shards keep their numbers and completion markers, so
profile on the packed run resumes exactly as it would on the full one. Unpack copies each output shard the full run
does not have done yet (a shard, then its marker), and a shortcut shard that the packed run measured again later than
the full run's copy (a shortcuts-only call measures stale rows again); it never overwrites a measurement shard, and
appends the packed run's profile calls to the full run's manifest, so every measurement keeps the call (and its
settings) that took it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pipeline.errors import OpsynthError
from pipeline.rundir.store import RunDir

# the columns of tasks/ that profile reads (pipeline/stages/profile.py _run)
PROFILE_TASK_COLUMNS = ("task_id", "code", "ops", "flops", "bytes_moved", "predicted_peak_bytes")
# the columns of prescreen/ that profile reads (profile.shortcut_screen_margin)
PROFILE_PRESCREEN_COLUMNS = ("task_id", "status", "resampled", "input_ratios", "op_ratios")
# of a done measurement shard, profile reads which tasks it holds and their status
PROFILE_MEASUREMENT_COLUMNS = ("task_id", "status")
OUTPUT_TABLES = ("measurements", "shortcuts")  # what a profile call writes (shortcuts: profile.shortcuts_only)


def _copy_shard(src: RunDir, dst: RunDir, table: str, k: int) -> None:
    """Shard k of `table` as it is, then its completion marker (a copy cut off midway leaves no done shard)."""
    path = dst.shard_path(table, k)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.copy")
    shutil.copyfile(src.shard_path(table, k), tmp)
    tmp.replace(path)
    dst.marker_path(table, k).parent.mkdir(exist_ok=True)
    shutil.copyfile(src.marker_path(table, k), dst.marker_path(table, k))


def _copy_done(src: RunDir, dst: RunDir, table: str, columns: tuple[str, ...] | None = None,
               whole: set[int] = frozenset()) -> int:
    """Every done shard of `table` into dst (only `columns`, except shards in `whole`); the count."""
    shards = src.done_shards(table)
    for k in shards:
        if columns is None or k in whole:
            _copy_shard(src, dst, table, k)
        else:
            have = pq.read_schema(src.shard_path(table, k)).names  # a shard written before a column existed
            dst.write_shard(table, k, pq.read_table(src.shard_path(table, k), columns=[c for c in columns if c in have]))
    return len(shards)


def pack(src_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Copy what profile reads of the run at src_dir into out_dir (which must not exist yet)."""
    src = RunDir(src_dir)
    src.load_config()  # a folder that is no run directory says so here, with the fix
    if out_dir.exists():
        raise OpsynthError(f"{out_dir} exists: pack writes a new folder; give another path or remove it")
    if not src.done_shards("tasks"):
        raise OpsynthError(f"{src_dir} has no tasks yet: run `opsynth sample {src_dir}` first")
    dst = RunDir(out_dir)
    out_dir.mkdir(parents=True)
    try:
        shutil.copyfile(src.config_path, dst.config_path)
        if src.manifest_path.exists():
            shutil.copyfile(src.manifest_path, dst.manifest_path)
        counts = {"tasks": _copy_done(src, dst, "tasks", PROFILE_TASK_COLUMNS),
                  "verdicts": _copy_done(src, dst, "verdicts"),
                  "prescreen": _copy_done(src, dst, "prescreen", PROFILE_PRESCREEN_COLUMNS),
                  "shortcuts": _copy_done(src, dst, "shortcuts")}
        # a measurement shard written before the run grew holds fewer tasks than its tasks shard: profile reads it
        # whole to add the new ones, so it goes whole
        grown = {k for k in src.done_shards("measurements") if src.is_done("tasks", k)
                 and src.shard_rows("measurements", k) != src.shard_rows("tasks", k)}
        counts["measurements"] = _copy_done(src, dst, "measurements", PROFILE_MEASUREMENT_COLUMNS, grown)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)  # half a pack would resume wrongly: none at all is left
        raise
    return {"packed": str(out_dir), "shards": counts,
            "bytes": sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())}


def _latest_start(rd: RunDir, table: str, k: int) -> float:
    """The latest `started_at` in shard k of `table` (-inf where the shard has no such column or value)."""
    import pyarrow.compute as pc

    path = rd.shard_path(table, k)
    if "started_at" not in pq.read_schema(path).names:
        return float("-inf")
    top = pc.max(pq.read_table(path, columns=["started_at"])["started_at"]).as_py()
    return float("-inf") if top is None else float(top)


def _measured_again(src: RunDir, dst: RunDir, table: str, k: int) -> bool:
    """Whether the packed run's done shard k of `table` holds checks taken after the full run's copy of it."""
    if table != "shortcuts" or src.shard_path(table, k).read_bytes() == dst.shard_path(table, k).read_bytes():
        return False
    return _latest_start(src, table, k) > _latest_start(dst, table, k)


def unpack(packed_dir: Path, run_dir: Path) -> dict[str, Any]:
    """Bring the profile output shards and profile calls of packed_dir into the full run at run_dir."""
    src, dst = RunDir(packed_dir), RunDir(run_dir)
    src.load_config()
    dst.load_config()
    if src.config_path.read_text() != dst.config_path.read_text():
        raise OpsynthError(f"{packed_dir} was not packed from {run_dir} (their config.toml differ): unpack it into "
                           "the run it came from")
    theirs = {t["task_id"] for t in src.read_rows("tasks", ["task_id"])}
    ours = {t["task_id"] for t in dst.read_rows("tasks", ["task_id"])}
    if not theirs <= ours:
        raise OpsynthError(f"{packed_dir} holds tasks {run_dir} does not: unpack it into the run it came from")
    copied: dict[str, int] = {}
    replaced = 0
    for table in OUTPUT_TABLES:
        copied[table] = 0
        for k in src.done_shards(table):
            if dst.is_done(table, k):
                # the full run's shard stands (a packed measurement shard is a column subset of it), unless the
                # packed run measured its shortcut checks again since
                if _measured_again(src, dst, table, k):
                    _copy_shard(src, dst, table, k)
                    replaced += 1
                continue
            _copy_shard(src, dst, table, k)
            copied[table] += 1
    ours_calls = dst.stage_calls("profile")
    known = {json.dumps(c, sort_keys=True, default=str) for c in ours_calls}
    new = [c for c in src.stage_calls("profile") if json.dumps(c, sort_keys=True, default=str) not in known]
    if new:
        # oldest first, as the calls were made: a published row's `profile_call` id is the call's place in this list
        dst.set_stage_calls("profile", sorted(ours_calls + new, key=lambda c: c.get("finished") or ""))
    return {"shards": copied, "measured_again": replaced, "profile_calls": len(new)}
