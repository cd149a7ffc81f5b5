"""The harness frees each task's reference cycles before it freezes what survives (pipeline.gpu.harness
.collect_and_freeze): a task's garbage is never frozen, a later task's cycles are still found, and what a compile
left in torch's caches stops being walked by every collection."""

import gc
from pathlib import Path

from pipeline.gpu.harness import Harness
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, FilterSection, RunSection


def _code(marker: Path) -> str:
    # the model holds itself (a reference cycle, as compiled frames and tracebacks do): only the collector frees it,
    # and its __del__ says when
    return f'''
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.me = [self]
    def forward(self, x):
        return torch.relu(x) + 1
    def __del__(self):
        open({str(marker)!r}, "a").write("freed\\n")
def get_inputs():
    return [torch.rand(64, 64)]
def get_init_inputs():
    return []
'''


def _harness(compile_: bool) -> Harness:
    s = WorkerSettings.from_config(Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0,
                                                                                         max_eager_ms=1e9)))
    return Harness("cpu", s.with_profile(memory_limit_gb=0.0, compile=compile_, warmup=1, min_runs=3, max_runs=3))


def test_a_tasks_cycles_are_freed_before_the_survivors_are_frozen(tmp_path):
    h = _harness(compile_=True)
    gc.unfreeze()
    first, second = tmp_path / "first", tmp_path / "second"
    m = h.profile({"task_id": "a", "code": _code(first), "flops": 0, "bytes_moved": 0})
    assert m["status"] == "ok" and m["compile_ok"], m["error"] or m.get("compile_error")
    # every model the task built (eager and the compiled one's module) was collected, not frozen alive
    assert first.exists() and set(first.read_text().split()) == {"freed"}
    frozen = gc.get_freeze_count()
    assert frozen > 0  # inductor's modules and caches, imported by the task's compile, are out of later passes
    m = h.profile({"task_id": "b", "code": _code(second), "flops": 0, "bytes_moved": 0})
    assert m["status"] == "ok"
    assert second.exists()  # the next task's cycles are young again: still found
    gc.unfreeze()


def test_dynamos_hold_on_a_tasks_compiled_graph_ends_with_the_task(tmp_path, monkeypatch):
    # Dynamo keeps each compiled backend (ours wraps the compiled graph) until it is reset: reset before the freeze,
    # the task's graph is freed with the task instead of frozen alive until the next compile's reset
    import weakref

    from pipeline.gpu import harness

    made = []

    class Recorded(harness._LockedBackend):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))

    monkeypatch.setattr(harness, "_LockedBackend", Recorded)
    h = _harness(compile_=True)
    gc.unfreeze()
    m = h.profile({"task_id": "a", "code": _code(tmp_path / "a"), "flops": 0, "bytes_moved": 0})
    assert m["status"] == "ok" and m["compile_ok"], m
    assert made and all(r() is None for r in made)
    gc.unfreeze()
