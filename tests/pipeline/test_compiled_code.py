"""pipeline.compiled_code: the hash of a task's compiled program is the same for the same task and another for
another; the benchmark count sees every timed choice; the repeat report tells moved eager bits, moved compiled bits
of another program and of a timed choice apart."""

import sys
from pathlib import Path

from pipeline.compiled_code import benchmarks_run, count_benchmarks, source_hash
from tests.pipeline.test_harness_checks import run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pipeline_yield import outputs_moved  # noqa: E402


def test_source_hash_ignores_where_the_files_lie_and_sees_the_program():
    a = "# kernel path: /tmp/a/x.py\nimport c\nload('/tmp/a/k.so')\ndef call(): return 1\n"
    b = "# kernel path: /var/b/y.py\nimport c\nload('/var/b/k.so')\ndef call(): return 1\n"
    assert source_hash(a, "/tmp/a") == source_hash(b, "/var/b")
    assert source_hash(a, "/tmp/a") != source_hash(a.replace("return 1", "return 2"), "/tmp/a")


def test_the_same_task_compiles_to_the_same_program_and_another_to_another():
    first, again = (run("torch.sin(x * self.w) + 1", compile=True) for _ in range(2))
    other = run("torch.cos(x * self.w) + 1", compile=True)
    assert first["compile_ok"] and first["compile_code"], first
    assert first["compile_code"] == again["compile_code"] != other["compile_code"]
    assert first["compile_benchmarks"] == 0  # nothing inductor times on a CPU
    assert "compile_code" not in run("x + 1")  # not compiled: no program


def test_every_call_of_the_benchmarker_counts_once():
    class Bench:
        def benchmark_gpu(self, fn):
            return fn()

    bench = Bench()
    assert count_benchmarks(bench) and not count_benchmarks(bench)  # a second wrapper would count twice
    before = benchmarks_run()
    assert [bench.benchmark_gpu(lambda: 3.0) for _ in range(3)] == [3.0] * 3
    assert benchmarks_run() - before == 3
    assert not count_benchmarks(object())


def test_outputs_moved_names_which_side_moved_and_why():
    m1 = {"same": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a"},
          "eager": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a"},
          "code": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a"},
          "timed": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a", "compile_benchmarks": 4},
          "old": {"compile_checksum": None}}
    m2 = {"same": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a"},
          "eager": {"eager_checksum": 1.5, "compile_checksum": 2.0, "compile_code": "a"},
          "code": {"eager_checksum": 1.0, "compile_checksum": 2.5, "compile_code": "b"},
          "timed": {"eager_checksum": 1.0, "compile_checksum": 2.5, "compile_code": "a", "compile_benchmarks": 0},
          "old": {"compile_checksum": 3.0}}
    got = outputs_moved(m1, m2, set(m1))
    assert got["compiled_in_both"] == 4 and got["eager_moved"] == 1 and got["compiled_moved"] == 2
    assert got["examples"]["other_code"] == ["code"] and got["examples"]["timed"] == ["timed"]
