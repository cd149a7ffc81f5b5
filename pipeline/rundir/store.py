"""The run directory: one folder of parquet shards per table, completion markers, config and manifest.

Layout (a contract other tools rely on):

    DIR/config.toml            resolved config
    DIR/manifest.json          versions, seeds, host, stage times and counts
    DIR/<table>/part-00000.parquet  +  DIR/<table>/_done/part-00000
    DIR/dataset/               written by `publish`

A shard's old completion marker is removed, the shard is written to a hidden temporary file and renamed
to its visible name, and only then is its new marker written; a shard counts as done when both exist. So
a run killed mid-shard leaves no partial rows and no old rows marked as new (a shard rewritten after the
run grew stays not done until its new rows are in place), a rerun recomputes exactly the shards that are
not done, and every visible `part-*.parquet` is complete (plain `pyarrow`/`duckdb`/`polars` reads of `DIR/<table>/` are safe:
the markers live in `_done/`, which those readers skip).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import OpsynthError
from pipeline.rundir.stage_defs import VERDICT_SHARDS, WRITER

READ_THREADS = 16  # shards are small (64-5,000 rows): opening each costs more than decoding it
TABLES = ("tasks", "measurements", "verdicts", "contamination", "dedupe", "prescreen", "labels", "shortcuts")
# verdicts/ holds one shard per deciding stage, so each stage rewrites only its own decisions


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def map_shards(fn: Callable[[int], Any], shards: list[int]) -> list[Any]:
    """fn over shards, in their order, on a few threads: a 37,000-task run holds ~600 shards per table and opening
    one takes ~2 ms of mostly I/O and Arrow's C++ (which release the GIL); one at a time that was seconds at every
    stage's start (the profile stage's before its first worker could start). The first error is raised."""
    if len(shards) < 8:
        return [fn(s) for s in shards]
    with ThreadPoolExecutor(min(READ_THREADS, len(shards))) as pool:
        return list(pool.map(fn, shards))


class RunDir:
    """A run directory on local disk."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    # ---- shards -------------------------------------------------------------------------------
    def table_dir(self, table: str) -> Path:
        return self.path / table

    def shard_path(self, table: str, shard: int) -> Path:
        return self.table_dir(table) / f"part-{shard:05d}.parquet"

    def marker_path(self, table: str, shard: int) -> Path:
        return self.table_dir(table) / "_done" / f"part-{shard:05d}"

    def is_done(self, table: str, shard: int) -> bool:
        return self.marker_path(table, shard).exists() and self.shard_path(table, shard).exists()

    def done_shards(self, table: str) -> list[int]:
        d = self.table_dir(table) / "_done"
        shards = sorted(int(p.name.split("-")[1]) for p in d.glob("part-*")) if d.is_dir() else []
        return [s for s in shards if self.shard_path(table, s).exists()]

    def task_done_times(self, table: str) -> dict[str, float]:
        """task_id -> when its shard of `table` was completed (the completion marker's time): dates a row written
        before its table recorded when each task was taken."""
        out: dict[str, float] = {}
        for s in self.done_shards(table):
            try:
                at = float(json.loads(self.marker_path(table, s).read_text())["time"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a marker without a time dates nothing
            for t in pq.read_table(self.shard_path(table, s), columns=["task_id"]).column(0).to_pylist():
                out[t] = at
        return out

    def last_write_time(self) -> float:
        """mtime of the newest completion marker of any table (0.0 for an empty run)."""
        return max((p.stat().st_mtime for p in self.path.glob("*/_done/part-*")), default=0.0)

    def write_shard(self, table: str, shard: int, rows: list[dict[str, Any]] | pa.Table,
                    schema: pa.Schema | None = None) -> Path:
        """Write one shard atomically, then its completion marker."""
        d = self.table_dir(table)
        d.mkdir(parents=True, exist_ok=True)
        t = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        if schema is not None and isinstance(rows, pa.Table):
            t = t.select(schema.names).cast(schema)
        path = self.shard_path(table, shard)
        for stale in d.glob(f".{path.name}.tmp-*"):  # left by a writer that was killed
            stale.unlink(missing_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        marker = self.marker_path(table, shard)
        marker.parent.mkdir(exist_ok=True)
        marker.unlink(missing_ok=True)  # a kill before the new marker leaves the shard not done, never old-but-done
        try:
            pq.write_table(t, tmp, compression="zstd")
            os.replace(tmp, path)
            _atomic_write_bytes(marker, json.dumps({"rows": t.num_rows, "time": time.time()}).encode())
        except BaseException:  # Ctrl-C included: no temporary file is left beside the shards
            tmp.unlink(missing_ok=True)
            raise
        return path

    def replace_table(self, table: str, rows: list[dict[str, Any]] | pa.Table,
                      schema: pa.Schema | None = None) -> Path:
        """Write a whole table as shard 0, dropping older shards (for cheap whole-table stages)."""
        d = self.table_dir(table)
        if d.is_dir():
            for p in (d / "_done").glob("part-*"):
                if p.name != "part-00000":
                    p.unlink()
        path = self.write_shard(table, 0, rows, schema)
        for p in d.glob("part-*.parquet"):
            if p.name != path.name:
                p.unlink()
        return path

    def read_table(self, table: str, columns: list[str] | None = None) -> pa.Table | None:
        """All completed shards of a table in shard order, or None if it has none."""
        shards = self.done_shards(table)
        if not shards:
            return None
        parts = map_shards(lambda s: self._read_shard(table, s, columns), shards)
        return pa.concat_tables(parts, promote_options="default")

    def _read_shard(self, table: str, shard: int, columns: list[str] | None) -> pa.Table:
        path = self.shard_path(table, shard)
        try:
            return pq.read_table(path, columns=columns)
        except (OSError, ValueError, pa.ArrowException) as e:  # truncated, overwritten, not parquet at all
            why = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
            if table == "verdicts":
                stage = {v: k for k, v in VERDICT_SHARDS.items()}.get(shard, "filter")
            else:
                stage = WRITER.get(table, table)
            again = "`opsynth audit` again" if stage == "import" else f"`opsynth {stage} {self.path}`"
            raise OpsynthError(f"{path} cannot be read ({why}); delete it and its marker "
                               f"{self.marker_path(table, shard)}, then run {again} to write it again") from None

    def read_rows(self, table: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
        t = self.read_table(table, columns)
        return [] if t is None else t.to_pylist()

    def measurement_rows(self) -> list[dict[str, Any]]:
        """measurements/ with the shortcut measurements a shortcuts-only profile call took (shortcuts/, status ok)
        over each task's stored ones: what the filter judges and publish writes. A task whose checks ran and failed
        (out of memory, a crash) carries `shortcut_error` instead, so the filter does not keep it unchecked."""
        from pipeline.rundir.schema import SHORTCUT_CALL_COLUMNS

        shortcuts = self.read_rows("shortcuts")
        extra = {r["task_id"]: r for r in shortcuts if r.get("status") == "ok"}
        failed = {r["task_id"]: f"{r['status']}: {r.get('error') or 'no detail'}" for r in shortcuts
                  if r.get("status") not in ("ok", "skipped", None)}

        def over(m: dict[str, Any]) -> dict[str, Any]:
            e = extra.get(m["task_id"])
            if e is None:
                return {}
            # the measurement's own started_at stays (its profile_call); the checks' is kept beside it
            return {**{k: v for k, v in e.items() if k not in ("status", "error", "started_at")
                       and k not in SHORTCUT_CALL_COLUMNS},
                    "shortcuts_table": True, "shortcut_started_at": e.get("started_at")}

        return [{**m, **over(m), **({"shortcut_error": failed[m["task_id"]]} if m["task_id"] in failed else {})}
                for m in self.read_rows("measurements")]

    def require_table(self, table: str, stage_hint: str, columns: list[str] | None = None) -> pa.Table:
        t = self.read_table(table, columns)
        if t is None:
            raise OpsynthError(f"{self.path} has no {table}/ table yet; run `opsynth {stage_hint} {self.path}` first")
        return t

    def write_verdicts(self, stage: str, rows: list[dict[str, Any]]) -> Path:
        """Replace `stage`'s verdicts (task_id, keep, reason); other stages' verdicts stay."""
        from pipeline.rundir.schema import VERDICTS

        full = [{"task_id": r["task_id"], "stage": stage, "keep": bool(r["keep"]), "reason": r.get("reason") or ""}
                for r in rows]
        return self.write_shard("verdicts", VERDICT_SHARDS[stage], full, VERDICTS)

    # ---- config and manifest ------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / "config.toml"

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def load_config(self):
        from pipeline.rundir.config import load_file

        if not self.config_path.exists():
            raise OpsynthError(
                f"{self.path} is not a run directory (no config.toml); create one with `opsynth init {self.path}` "
                f"or `opsynth run --out {self.path}`"
            )
        return load_file(self.config_path)

    def shard_rows(self, table: str, shard: int) -> int:
        """Rows of a done shard (from the parquet footer: no data is read)."""
        return pq.read_metadata(self.shard_path(table, shard)).num_rows

    def init(self, config) -> None:
        """Create the directory for `config`, or check that an existing one was made by the same config
        (`check_config`)."""
        self.path.mkdir(parents=True, exist_ok=True)
        if self.config_path.exists():
            self.check_config(config)
            return
        _atomic_write_bytes(self.config_path, config.to_toml().encode())
        self.update_manifest(created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), host=host_info())

    def check_config(self, config):
        """The config to continue this run directory with, given `config` (a preset or file, with the command's
        flags): the run's own config.toml, with `config`'s run.workers and run.device (they change how a run
        executes, not what it produces). Refused, naming the first differing field and the fix, when `config`
        differs in anything else, except the settings `opsynth filter/publish DIR --set` changed for this run
        (logged in the manifest's filter_settings/publish_settings): those stay as the user set them."""
        import dataclasses

        from pipeline.rundir.config import load_file

        old_cfg = load_file(self.config_path)
        kept = dataclasses.replace(old_cfg, run=dataclasses.replace(
            old_cfg.run, workers=config.run.workers, device=config.run.device))
        old, now = old_cfg.to_dict(), config.to_dict()
        set_here = self._set_by_hand()
        # the fields changed by `--set` take the run's values: only a difference elsewhere is a different config
        explained = json.loads(json.dumps(now))
        for section, key in set_here:
            if section in old and key in old[section]:
                explained[section][key] = old[section][key]
        if _comparable(old) == _comparable(explained):
            return kept
        diff = _first_difference(old, explained)
        grows = _comparable(old_cfg.with_overrides(n=config.run.n).to_dict()) == _comparable(explained)
        refiltered = _comparable({**old, "filter": now["filter"]}) == _comparable(now)
        fix = (f"grow it with `opsynth sample {self.path} --n {config.run.n}`"
               if grows and config.run.n > old_cfg.run.n else
               f"its filter thresholds change with `opsynth filter {self.path} --set filter.KEY=VALUE`, and "
               f"the stage commands (`opsynth profile {self.path}`, ...) continue it as it is"
               if refiltered else f"use another directory or delete {self.path} to start over")
        raise OpsynthError(f"{self.path} was made by a different config ({diff}); {fix}")

    def _set_by_hand(self) -> set[tuple[str, str]]:
        """(section, key) of every setting `opsynth filter/publish DIR --set` changed in this run."""
        m = self.manifest()
        return {tuple(k.split(".", 1)) for section in ("filter", "publish")
                for entry in m.get(f"{section}_settings") or [] for k in (entry.get("set") or {})
                if "." in k}

    def grow(self, n: int) -> tuple[int, int]:
        """Raise run.n in config.toml to `n` (every other field stays) and log it in the manifest; returns
        (old n, new n). Tasks already sampled, measured or decided are untouched."""
        from pipeline.rundir.config import grown

        old = self.load_config()
        new = grown(old, n, str(self.config_path))
        if new.run.n != old.run.n:
            _atomic_write_bytes(self.config_path, new.to_toml().encode())
            growth = [*self.manifest().get("growth", []),
                      {"from": old.run.n, "to": new.run.n, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]
            self.update_manifest(growth=growth)
        return old.run.n, new.run.n

    def set_filter(self, pairs: list[str]):
        """Replace filter thresholds in config.toml (`filter.KEY=VALUE` pairs, checked as in a config file) and log
        the change in the manifest's `filter_settings`; returns the new config. Only the filter section changes:
        the tasks and measurements stay, and dedupe, publish and the card read the new thresholds from config.toml."""
        from pipeline.rundir.config import with_filter_settings

        return self._set_section("filter", pairs, with_filter_settings)

    def set_publish(self, pairs: list[str]):
        """Replace publish settings in config.toml (`publish.KEY=VALUE` pairs, e.g. the validation share of a
        release) and log the change in the manifest's `publish_settings`; returns the new config."""
        from pipeline.rundir.config import with_publish_settings

        return self._set_section("publish", pairs, with_publish_settings)

    def _set_section(self, section: str, pairs: list[str], apply: Any):
        old = self.load_config()
        new, given = apply(old, pairs, f"{self.path} with --set")
        before = {f"{section}.{k}": getattr(getattr(old, section), k) for k in given}
        after = {f"{section}.{k}": getattr(getattr(new, section), k) for k in given}
        if after != before:
            _atomic_write_bytes(self.config_path, new.to_toml().encode())
            log = [*self.manifest().get(f"{section}_settings", []),
                   {"set": after, "before": before, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]
            self.update_manifest(**{f"{section}_settings": log})
        return new

    def manifest(self) -> dict[str, Any]:
        return json.loads(self.manifest_path.read_text()) if self.manifest_path.exists() else {}

    def update_manifest(self, **entries: Any) -> None:
        m = self.manifest()
        for k, v in entries.items():
            if isinstance(v, dict) and isinstance(m.get(k), dict):
                m[k].update(v)
            else:
                m[k] = v
        _atomic_write_bytes(self.manifest_path, json.dumps(m, indent=2, default=str).encode())

    def record_stage(self, stage: str, seconds: float, **counts: Any) -> None:
        """This call of `stage` in the manifest: its figures, and in `calls` every call so far (a time-boxed
        profile runs in several calls; what the run cost is their sum, `seconds_all_calls`)."""
        entry = {"seconds": round(seconds, 3), **counts, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.set_stage_calls(stage, [*self.stage_calls(stage), entry])

    def stage_calls(self, stage: str) -> list[dict[str, Any]]:
        """Every recorded call of `stage`, oldest first (a manifest from before `calls` existed holds one)."""
        before = (self.manifest().get("stages") or {}).get(stage)
        if not before:
            return []
        return list(before.get("calls") or [{k: v for k, v in before.items() if k not in ("calls", "seconds_all_calls")}])

    def set_stage_calls(self, stage: str, calls: list[dict[str, Any]]) -> None:
        """The manifest's entry for `stage`: its last call's figures, every call, and their summed seconds."""
        self.update_manifest(stages={stage: {**calls[-1], "calls": [dict(c) for c in calls],
                                             "seconds_all_calls": round(sum(c.get("seconds") or 0 for c in calls), 3)}})


def _comparable(d: dict[str, Any]) -> dict[str, Any]:
    d = json.loads(json.dumps(d))
    for k in ("workers", "device"):
        d["run"].pop(k, None)
    return d


def _first_difference(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> str:
    for k in sorted(set(a) | set(b)):
        if k in ("workers", "device") and prefix == "run.":
            continue
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            r = _first_difference(va, vb, f"{prefix}{k}.")
            if r:
                return r
        elif va != vb and not (isinstance(va, list | tuple) and isinstance(vb, list | tuple) and list(va) == list(vb)):
            return f"{prefix}{k}: {va!r} there, {vb!r} now"
    return ""


def host_info() -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for pkg in ("opsynth", "torch", "datasets", "pyarrow"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"hostname": socket.gethostname(), "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions}


def chunks(items: list[Any], size: int) -> Iterable[tuple[int, list[Any]]]:
    for i in range(0, len(items), size):
        yield i // size, items[i : i + size]
