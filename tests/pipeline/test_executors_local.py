"""The local executor's worker lifecycle: ready workers, early stop by the consumer, inline debugging path."""


from pipeline.gpu.executors import make_executor
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, FilterSection, RunSection

CODE = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.cos(x) * {k}
def get_inputs():
    return [torch.rand(16, 16)]
def get_init_inputs():
    return []
'''


def settings() -> WorkerSettings:
    cfg = Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0, max_eager_ms=1e9))
    return WorkerSettings.from_config(cfg).with_profile(timeout_s=20.0, memory_limit_gb=3.0, compile=False, warmup=1,
                                                        min_runs=3, max_runs=5)


def tasks(n):
    return [{"task_id": f"t{k}", "code": CODE.replace("{k}", str(k + 1)), "flops": 0, "bytes_moved": 0}
            for k in range(n)]


def test_consumer_stopping_early_leaves_a_working_executor():
    with make_executor("local", device="cpu", workers=2, settings=settings()) as ex:
        assert ex.wait_ready() == 2
        pids = {w.proc.pid for w in ex.workers}
        first = next(iter(ex.imap_unordered(tasks(6))))  # the generator is dropped with tasks in flight
        assert first["status"] == "ok"
        rest = {r["task_id"]: r for r in ex.imap_unordered(tasks(3))}
        assert sorted(rest) == ["t0", "t1", "t2"] and all(r["status"] == "ok" for r in rest.values())
        assert len(ex.workers) == 2
    assert not pids & {w.proc.pid for w in ex.workers}  # closed: no worker left


def test_inline_executor_gives_the_same_measurements():
    with make_executor("inline", device="cpu", settings=settings()) as ex:
        (r,) = list(ex.imap_unordered(tasks(1)))
    assert r["status"] == "ok" and r["aten_ops"] == ["aten.cos", "aten.mul"] and "_fatal" not in r


def test_a_replacement_worker_leaves_the_compile_warmup_to_its_first_task():
    """Under MPS one fault replaces every worker of a GPU at once and the GPU idles until they are ready: a
    replacement starts without the compile warm-up (the caches are warm by then); a first worker compiles."""
    crash = {"task_id": "boom", "code": CODE.replace("torch.cos(x) * {k}", "__import__('os')._exit(3)"),
             "flops": 0, "bytes_moved": 0}
    with make_executor("local", device="cpu", workers=1, settings=settings().with_profile(compile=True)) as ex:
        assert ex.wait_ready() == 1 and ex.workers[0].warm_compiled
        (r,) = list(ex.imap_unordered([crash]))
        assert r["status"] != "ok"
        assert ex.wait_ready() == 1
        assert not ex.workers[0].warm_compiled
        (ok,) = list(ex.imap_unordered(tasks(1)))
        assert ok["status"] == "ok" and ok["compile_ok"]  # its first task compiles without the warm-up
