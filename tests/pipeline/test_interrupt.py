"""Interrupts with compile on: Ctrl-C stops a run cleanly (workers stopped, no half shard, one line, exit 130),
and a compile artefact a killed worker cut short is never trusted again (the task compiles as before)."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.gpu.executors import make_executor
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, FilterSection, RunSection, load_preset
from pipeline.rundir.store import RunDir

ROOT = Path(__file__).resolve().parents[2]
CODE = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.log_softmax(x @ x.T, dim=-1).relu() * {k}
def get_inputs():
    return [torch.rand(32, 32)]
def get_init_inputs():
    return []
'''


def _settings() -> WorkerSettings:
    cfg = Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0, max_eager_ms=1e9))
    # the task's output is all zeros (relu of a log-softmax): the filter would skip its compile, which is under test
    return WorkerSettings.from_config(cfg).with_profile(timeout_s=300.0, memory_limit_gb=4.0, compile=True, warmup=1,
                                                        min_runs=3, max_runs=5, skip_compile_when_rejected=False)


def _tasks(n: int) -> list[dict]:
    return [{"task_id": f"t{k}", "code": CODE.replace("{k}", str(k + 2)), "flops": 0, "bytes_moved": 0}
            for k in range(n)]


def _cut_short(cache: Path) -> list[Path]:
    """What a worker killed mid-link leaves: the compiler's outputs at their final names, empty (new files: a
    library a running worker has mapped is not touched, as a linker's new output would not touch it)."""
    hit = [p for p in cache.rglob("*") if p.is_file() and p.suffix in (".so", ".o")]
    for p in hit:
        p.unlink()
        p.write_bytes(b"")
    return hit


def test_an_artefact_cut_short_in_the_shared_cache_is_rebuilt(tmp_path, monkeypatch):
    cache = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    with make_executor("local", device="cpu", workers=1, settings=_settings()) as ex:
        (first,) = ex.imap_unordered(_tasks(1))
    assert first["status"] == "ok" and first["compile_ok"], first
    with make_executor("local", device="cpu", workers=1, settings=_settings()) as ex:
        assert ex.wait_ready() == 1
        assert _cut_short(cache)  # under a running worker, after its start-up check
        (again,) = ex.imap_unordered(_tasks(1))
    assert again["status"] == "ok" and again["compile_ok"], again.get("compile_error")
    assert again["compile_cache_repaired"] is True
    assert not [p for p in cache.rglob("*.so") if p.stat().st_size == 0]  # never loaded again
    _cut_short(cache)
    with make_executor("local", device="cpu", workers=1, settings=_settings()) as ex:
        (third,) = ex.imap_unordered(_tasks(1))  # a new worker deletes them before it compiles anything
    assert third["status"] == "ok" and third["compile_ok"] and not third["compile_cache_repaired"]


def test_a_failure_that_only_the_shared_cache_gives_is_not_believed(tmp_path, monkeypatch):
    from pipeline.gpu.harness import Harness

    shared = tmp_path / "shared"
    (shared / "ab").mkdir(parents=True)
    (shared / "ab" / "cab.main.so").write_bytes(b"\x7fELF" + bytes(60))  # an ELF header that looks whole
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))
    h = Harness("cpu", _settings().with_profile(memory_limit_gb=0.0))

    def compile_fn():
        here = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        if here == shared:
            raise RuntimeError("C++ compile error: 'at::vec' has not been declared")
        (here / "ab").mkdir()
        (here / "ab" / "cab.main.so").write_bytes(b"built")
        return 42

    assert h._with_cache_repair(compile_fn, "t") == (42, True)
    assert not (shared / "ab" / "cab.main.so").exists()  # the shared copy that failed is gone
    h.cache.use_shared()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(shared)

    def always_fails():
        raise RuntimeError("a real compile error")

    with pytest.raises(RuntimeError, match="a real compile error"):
        h._with_cache_repair(always_fails, "t")


def _config(tmp_path: Path) -> Path:
    cfg = load_preset("demo").to_toml()
    cfg = cfg.replace("n = 72", "n = 6").replace("shard_size = 8", "shard_size = 1").replace("workers = 2", "workers = 1")
    p = tmp_path / "small.toml"
    p.write_text(cfg)
    return p


def _alive(mark: str) -> list[int]:
    """Processes started with OPSYNTH_TEST_MARK=mark (the run and its workers) that are still alive."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if f"OPSYNTH_TEST_MARK={mark}".encode() in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_ctrl_c_during_profile_with_compile_on(tmp_path, sig):
    cfg, out, mark = _config(tmp_path), tmp_path / "R", uuid.uuid4().hex
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "OPSYNTH_TEST_MARK": mark,
           "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "--config", str(cfg), "--out", str(out)]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    done = out / "measurements" / "_done"
    deadline = time.time() + 500
    while time.time() < deadline and p.poll() is None and len(list(done.glob("part-*"))) < 1:
        time.sleep(0.05)
    assert p.poll() is None, "the run finished before it could be interrupted"
    time.sleep(1.0)  # into the next task's compile
    os.killpg(p.pid, sig)  # what Ctrl-C in a terminal does: the whole foreground group
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    rd = RunDir(out)
    n_done = sum(1 for _ in rd.read_rows("measurements", ["task_id"]))
    last = err.strip().splitlines()[-1]
    assert last == f"opsynth: interrupted during profile: {n_done} of 6 tasks kept; rerun the same command to continue"
    assert "Traceback" not in err
    time.sleep(0.5)
    assert _alive(mark) == []  # no worker (or compiler) left running
    left = sorted(q.name for q in (out / "measurements").iterdir() if q.name != "_done")
    assert left == [f"part-{k:05d}.parquet" for k in rd.done_shards("measurements")]  # no half or hidden shard
    for k in rd.done_shards("measurements"):
        assert pq.read_table(rd.shard_path("measurements", k)).num_rows == 1
    # the interrupted call is logged: its time counts in what the run cost, its finished tasks say where it stopped
    cut = rd.manifest()["stages"]["profile"]
    assert cut["interrupted"] is True and cut["stopped"] is True and cut["calls"][-1]["interrupted"] is True
    assert cut["profiled"] + cut["skipped"] == n_done and cut["seconds"] > 0

    _cut_short(tmp_path / "inductor")  # whatever the stop left in the cache, the worst it could be
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    rows = rd.read_rows("measurements")
    assert len(rows) == 6
    after = rd.manifest()["stages"]["profile"]
    assert [c.get("interrupted", False) for c in after["calls"]] == [True, False] and "interrupted" not in after
    assert after["seconds_all_calls"] == pytest.approx(sum(c["seconds"] for c in after["calls"]), abs=0.01)
    compiled = [m for m in rows if m["status"] == "ok" and not (m["compile_error"] or "").startswith("skipped")]
    assert compiled and all(m["compile_ok"] for m in compiled), [m["compile_error"] for m in compiled]


def test_ctrl_c_during_sample_says_what_is_kept_and_what_is_sampled_again(tmp_path):
    import re

    out, mark = tmp_path / "R", uuid.uuid4().hex
    env = {**os.environ, "OPSYNTH_TEST_MARK": mark, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "pipeline.cli"]
    subprocess.run([*cli, "init", str(out), "--preset", "demo", "--n", "48"], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    p = subprocess.Popen([*cli, "sample", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    done = out / "tasks" / "_done"
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None and len(list(done.glob("part-*"))) < 1:
        time.sleep(0.02)
    assert p.poll() is None, "sampling finished before it could be interrupted"
    time.sleep(0.15)  # into the next shard (8 tasks a shard, a few hundredths of a second to 0.3 s a task)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "Traceback" not in err, err
    rd = RunDir(out)
    kept = sum(1 for _ in rd.read_rows("tasks", ["task_id"]))
    assert kept % 8 == 0 and kept >= 8  # whole shards only
    last = err.strip().splitlines()[-1]
    m = re.fullmatch(rf"opsynth: interrupted during sample: {kept} of 48 tasks kept"
                     r"(?: \(whole shards\); the (\d+) tasks? sampled since, in an unfinished shard, will be sampled "
                     r"again)?; rerun the same command to continue", last)
    assert m, last
    assert m.group(1) is None or 1 <= int(m.group(1)) < 8
    again = subprocess.run([*cli, "sample", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr
    ids = [r["task_id"] for r in rd.read_rows("tasks", ["task_id"])]
    assert len(ids) == len(set(ids)) == 48
