"""Bad input at the command line: one readable line naming the problem and the fix, non-zero exit."""

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.rundir.config import load_preset
from pipeline.rundir.store import RunDir

ROOT = Path(__file__).resolve().parents[2]


def opsynth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode != 0
    lines = [x for x in p.stderr.splitlines() if x.startswith("opsynth: error:")]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    return lines[0]


def test_unknown_stage():
    p = opsynth("sampel", "runs/x")
    assert p.returncode == 2 and "No such command 'sampel'" in p.stderr and "Traceback" not in p.stderr


def test_unknown_preset():
    assert "choose one of" in _one_error_line(opsynth("run", "--preset", "nope"))


@pytest.mark.parametrize("text, fragment", [("[run\n", "not valid TOML"), ("[run]\nn = 'x'\n", "[run] n"),
                                            ("[sample]\nmax_ops = 9\n", "max_ops")])
def test_malformed_config(tmp_path, text, fragment):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    line = _one_error_line(opsynth("run", "--config", str(cfg), "--out", str(tmp_path / "r")))
    assert fragment in line and str(cfg) in line
    assert not (tmp_path / "r").exists()


def test_missing_config_file(tmp_path):
    assert "does not exist" in _one_error_line(opsynth("run", "--config", str(tmp_path / "none.toml")))


def test_stage_on_a_directory_that_is_not_a_run(tmp_path):
    assert "not a run directory" in _one_error_line(opsynth("filter", str(tmp_path)))


def test_stage_before_its_input_exists(tmp_path):
    RunDir(tmp_path / "r").init(load_preset("demo"))
    line = _one_error_line(opsynth("filter", str(tmp_path / "r")))
    assert f"run `opsynth sample {tmp_path / 'r'}` before" in line  # the first stage missing (tests/pipeline/test_stage_order.py)


def test_run_directory_from_a_different_config_is_refused_and_kept(tmp_path):
    rd = RunDir(tmp_path / "r")
    rd.init(load_preset("demo"))
    before = (tmp_path / "r" / "config.toml").read_text()
    line = _one_error_line(opsynth("run", "--preset", "demo", "--seed", "99", "--out", str(tmp_path / "r")))
    assert "different config" in line and "seed" in line
    assert (tmp_path / "r" / "config.toml").read_text() == before


def test_bad_gpu_list(tmp_path):
    RunDir(tmp_path / "r").init(load_preset("demo"))
    assert "--gpus" in _one_error_line(opsynth("profile", str(tmp_path / "r"), "--gpus", "zero"))


def test_gpus_on_a_cpu_run_is_refused(tmp_path):
    RunDir(tmp_path / "r").init(load_preset("demo"))  # run.device = "cpu"
    line = _one_error_line(opsynth("profile", str(tmp_path / "r"), "--gpus", "0"))
    assert "--gpus 0 picks GPUs" in line and "on the cpu" in line and "drop --gpus" in line
    line = _one_error_line(opsynth("run", "--preset", "demo", "--gpus", "0,1", "--out", str(tmp_path / "new")))
    assert "--gpus 0,1 picks GPUs" in line and not (tmp_path / "new").exists()


def test_init_writes_config_and_manifest_only(tmp_path):
    p = opsynth("init", str(tmp_path / "r"), "--preset", "demo", "--n", "9", "--seed", "4", "--device", "cpu")
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (tmp_path / "r").iterdir()) == ["config.toml", "manifest.json"]
    cfg = RunDir(tmp_path / "r").load_config()
    assert (cfg.name, cfg.run.n, cfg.run.seed) == ("demo", 9, 4)
    again = opsynth("init", str(tmp_path / "r"), "--preset", "demo", "--n", "9", "--seed", "4")
    assert again.returncode == 0 and "already a run directory" in again.stdout


@pytest.mark.parametrize("args, fragment", [(["--n", "0"], "run.n must be >= 1"),
                                            (["--device", "gpu"], "run.device"),
                                            (["--preset", "nope"], "choose one of"),
                                            (["--preset", "demo", "--config", "x.toml"], "not both")])
def test_a_failed_init_leaves_nothing_behind(tmp_path, args, fragment):
    assert fragment in _one_error_line(opsynth("init", str(tmp_path / "r"), *args))
    assert not (tmp_path / "r").exists()


def test_init_refuses_a_different_config_and_a_folder_that_is_not_a_run(tmp_path):
    RunDir(tmp_path / "r").init(load_preset("demo"))
    before = (tmp_path / "r" / "config.toml").read_text()
    line = _one_error_line(opsynth("init", str(tmp_path / "r"), "--preset", "demo", "--seed", "7"))
    assert "run.seed: 0 there, 7 now" in line and "another directory" in line
    line = _one_error_line(opsynth("init", str(tmp_path / "r"), "--preset", "demo", "--n", "100"))
    assert "run.n: 72 there, 100 now" in line and f"opsynth sample {tmp_path / 'r'} --n 100" in line
    assert (tmp_path / "r" / "config.toml").read_text() == before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    assert "not a run directory" in _one_error_line(opsynth("init", str(tmp_path / "other")))
    assert sorted(x.name for x in (tmp_path / "other").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("args, fragment", [(["sample", "--add", "0"], "--add must be >= 1"),
                                            (["sample", "--add", "2", "--n", "80"], "not both"),
                                            (["sample", "--n", "5"], "run.n can only grow"),
                                            (["profile", "--max-minutes", "0"], "--max-minutes must be > 0"),
                                            (["profile", "--limit", "0"], "--limit must be >= 1")])
def test_bad_growth_and_budget_flags(tmp_path, args, fragment):
    RunDir(tmp_path / "r").init(load_preset("demo"))
    before = (tmp_path / "r" / "config.toml").read_text()
    assert fragment in _one_error_line(opsynth(args[0], str(tmp_path / "r"), *args[1:]))
    assert (tmp_path / "r" / "config.toml").read_text() == before


def test_corrupted_shard_names_the_file_and_the_fix(tmp_path):
    from pipeline.rundir.schema import MEASUREMENTS, TASKS

    rd = RunDir(tmp_path / "r")
    rd.init(load_preset("demo"))
    rd.write_shard("tasks", 0, [{"task_id": "t0", "code": "x", "ops": ["torch.relu"]}], TASKS)
    rd.write_shard("measurements", 0, [{"task_id": "t0", "status": "ok"}], MEASUREMENTS)
    shard = rd.shard_path("measurements", 0)
    shard.write_bytes(shard.read_bytes()[:40])  # truncated, as a full disk or a copy cut short leaves it
    line = _one_error_line(opsynth("filter", str(rd.path)))
    assert str(shard) in line and "cannot be read" in line and f"opsynth profile {rd.path}" in line
    assert str(rd.marker_path("measurements", 0)) in line


def test_failed_audit_leaves_nothing_and_the_retry_runs(tmp_path):
    out = tmp_path / "D"
    line = _one_error_line(opsynth("audit", str(tmp_path / "missing.parquet"), "--out", str(out)))
    assert "missing.parquet does not exist" in line and not out.exists()
    src = tmp_path / "tasks.jsonl"
    src.write_text('{"code": "import torch\\nclass Model(torch.nn.Module):\\n    pass\\n"}\n')
    # a failure after init (here: the input has no row the importer can read) takes the new directory back too
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert "cannot read" in _one_error_line(opsynth("audit", str(bad), "--out", str(out)))
    assert not out.exists()
    p = opsynth("audit", str(src), "--out", str(out), "--stages", "dedupe")
    assert p.returncode == 0, p.stderr
    assert RunDir(out).read_rows("tasks")[0]["code"].startswith("import torch")


def test_reference_typo_is_refused_before_anything_is_written(tmp_path):
    line = _one_error_line(opsynth("run", "--reference", "buitlin", "--out", str(tmp_path / "r"), "--n", "8"))
    assert "'buitlin' does not exist" in line and not (tmp_path / "r").exists()
    line = _one_error_line(opsynth("run", "--reference", "builtin:v9", "--out", str(tmp_path / "r")))
    assert "builtin:v0" in line and not (tmp_path / "r").exists()


def test_publish_of_an_unfinished_run_is_refused(tmp_path):
    from pipeline.rundir.schema import TASKS

    rd = RunDir(tmp_path / "r")
    rd.init(load_preset("demo"))
    rd.write_shard("tasks", 0, [{"task_id": "t0", "code": "x", "ops": ["torch.relu"]}], TASKS)
    rd.write_verdicts("decontaminate", [{"task_id": "t0", "keep": True}])
    line = _one_error_line(opsynth("publish", str(rd.path), "--repo-id", "org/name", "--dry-run"))
    assert "not finished" in line and "profile not run" in line and "--allow-incomplete" in line
    assert not (rd.path / "dataset").exists()
