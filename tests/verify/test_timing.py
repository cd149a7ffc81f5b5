"""The timed rounds: a speedup on the reward's 5% line gets extra rounds, one clear of it does not."""

from verify.timing import BOUNDARY, near_boundary


def test_near_boundary_reads_either_baseline():
    on_line = {"candidate": [1.0, 1.0, 1.0], "eager": [1.06, 1.05, 1.04], "compile": [2.0, 2.0, 2.0]}
    assert near_boundary(on_line)
    clear = {"candidate": [1.0] * 3, "eager": [BOUNDARY * 1.2] * 3, "compile": [BOUNDARY * 0.8] * 3}
    assert not near_boundary(clear)
    compile_on_line = {**clear, "compile": [BOUNDARY * 1.01] * 3}
    assert near_boundary(compile_on_line)
    assert not near_boundary({"candidate": [], "eager": [1.0]})


def test_extra_rounds_only_when_a_speedup_is_near_the_line(tmp_path):
    from verify.api import verify
    from verify.suite import TASK

    task = tmp_path / "t.py"
    task.write_text(TASK)
    twin = TASK + "\n\nclass ModelNew(Model):\n    pass\n"
    kw = dict(device="cpu", allow_torch=True, compile=False, draws=1, rounds=4, off=("precision",))
    # near=0: no speedup is that close, the rounds asked for; near=100: every speedup is, 20 rounds more
    plain = verify(str(task), twin, near=0.0, **kw)
    extended = verify(str(task), twin, near=100.0, **kw)
    assert plain["timed_rounds"] == 4 and plain["times_ms"]["candidate"]["runs"] == 12, plain
    assert extended["timed_rounds"] == 24 and extended["times_ms"]["eager"]["runs"] == 72, extended
    assert extended["timed_checks"] == 24 and extended["correct"], extended
