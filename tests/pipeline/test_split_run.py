"""A run made stage by stage, as on separate machines: init, sample, decontaminate, profile in slices (--limit,
--max-minutes, a SIGKILL between), sample --add, profile again, filter, dedupe, publish. It ends where one
`opsynth run` with the final n ends: every task measured once, the same published dataset."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.rundir.config import load_preset
from pipeline.rundir.store import RunDir

ROOT = Path(__file__).resolve().parents[2]


def _opsynth(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeline.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def ok(*args: str) -> str:
    p = _opsynth(*args)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    cfg = load_preset("demo").to_toml()
    cfg = cfg.replace("n = 72", "n = 10").replace("shard_size = 8", "shard_size = 2").replace("workers = 2", "workers = 1")
    cfg = cfg.replace("compile = true", "compile = false").replace("warm_worker = true", "warm_worker = false")
    cfg = cfg.replace("require_compile = true", "require_compile = false")
    # a CPU task whose threaded kernels round differently now and then (LocalResponseNorm) would be judged
    # non-deterministic in one run and not in the other: the split run is compared on what it sampled and kept
    cfg = cfg.replace("require_deterministic = true", "require_deterministic = false")
    p = tmp_path_factory.mktemp("cfg") / "small.toml"
    p.write_text(cfg)
    return p


@pytest.fixture(scope="module")
def whole(small, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "run"
    ok("run", "--config", str(small), "--out", str(out))
    return out


def _dataset(run: Path) -> list[tuple]:
    rows = pq.read_table(run / "dataset" / "data").to_pylist()
    return sorted((r["task_id"], r["code"], r["ops"]) for r in rows)


def _why_apart(a: Path, b: Path, ids: set[str]) -> str:
    """Each run's verdicts and measurement status for the tasks one published and the other did not."""
    def of(run: Path) -> dict:
        rd = RunDir(run)
        m = {r["task_id"]: (r["status"], r.get("eager_ms")) for r in rd.read_rows("measurements") if r["task_id"] in ids}
        v = [(r["task_id"], r["stage"], r["keep"], r["reason"]) for r in rd.read_rows("verdicts") if r["task_id"] in ids]
        return {"measurements": m, "verdicts": v}
    return f"split: {of(a)}; whole: {of(b)}"


def _shards(rd: RunDir, table: str) -> dict[int, list[str]]:
    return {k: pq.read_table(rd.shard_path(table, k), columns=["task_id"]).column(0).to_pylist()
            for k in rd.done_shards(table)}


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _stopped(out: str) -> str:
    lines = [x for x in out.splitlines() if x.startswith("stopped after")]
    assert len(lines) == 1 and lines[0].endswith("tasks measured; rerun to continue"), out
    return lines[0]


def _whole_shards(rd: RunDir, short: dict[int, list[str]] | None = None) -> list[int]:
    """Done measurement shards, each holding its task shard's ids (or, for a shard measured before the run grew
    and not measured since, the ids it had then)."""
    tasks, meas = _shards(rd, "tasks"), _shards(rd, "measurements")
    assert all(ids == tasks[k] or ids == (short or {}).get(k) for k, ids in meas.items()), (tasks, meas)
    return sorted(meas)


def test_split_run_grows_and_resumes_to_the_one_shot_result(small, whole, tmp_path):
    d = tmp_path / "split"
    ok("init", str(d), "--config", str(small), "--n", "5")
    assert sorted(p.name for p in d.iterdir()) == ["config.toml", "manifest.json"]
    ok("sample", str(d))
    ok("decontaminate", str(d))
    rd = RunDir(d)
    assert "2 of 5 tasks measured" in _stopped(ok("profile", str(d), "--limit", "1"))
    assert list(_shards(rd, "measurements")) == [0]
    assert "stopped after" not in ok("profile", str(d))  # continues: shards 1 and 2 (one task, the last)
    assert _whole_shards(rd) == [0, 1, 2]
    short = {2: _shards(rd, "measurements")[2]}
    before = {m["task_id"]: m for m in rd.read_rows("measurements")}
    files = {p: p.read_bytes() for t in ("measurements", "verdicts") for p in (d / t).rglob("part-*")}

    ok("sample", str(d), "--add", "5")
    assert rd.load_config().run.n == 10 and [g["to"] for g in rd.manifest()["growth"]] == [10]
    assert rd.read_rows("tasks", ["task_id", "code"]) == RunDir(whole).read_rows("tasks", ["task_id", "code"])
    assert {p: p.read_bytes() for p in files} == files  # measurements and verdicts untouched
    ok("decontaminate", str(d))

    assert "5 of 10 tasks measured" in _stopped(ok("profile", str(d), "--max-minutes", "0.001"))
    assert _whole_shards(rd, short) == [0, 1, 2] and _shards(rd, "measurements")[2] == short[2]
    # killed while it measures the grown shard 2 and shards 3, 4
    p = _opsynth("profile", str(d), start_new_session=True)
    marker = rd.marker_path("measurements", 2)
    old = marker.stat().st_mtime_ns
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None and _mtime(marker) in (old, None):  # None: being rewritten
        time.sleep(0.02)
    assert p.poll() is None, "profile finished before it could be killed"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert _whole_shards(rd) in ([0, 1, 2], [0, 1, 2, 3])

    assert "stopped after" not in ok("profile", str(d))
    measured = [m["task_id"] for m in rd.read_rows("measurements", ["task_id"])]
    assert measured == [t["task_id"] for t in rd.read_rows("tasks", ["task_id"])] and len(set(measured)) == 10
    after = {m["task_id"]: m for m in rd.read_rows("measurements")}
    assert all(after[t] == m for t, m in before.items())  # measured once: the first rows kept as they were
    for stage in ("filter", "dedupe", "publish"):
        ok(stage, str(d))
    split_ids, whole_ids = {r[0] for r in _dataset(d)}, {r[0] for r in _dataset(whole)}
    assert len(split_ids) > 5 and split_ids == whole_ids, _why_apart(d, whole, split_ids ^ whole_ids)
    assert _dataset(d) == _dataset(whole)
