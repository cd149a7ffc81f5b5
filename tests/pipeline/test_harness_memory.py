"""What a task holds while the harness checks it (pipeline.gpu.harness): at most one forward's peak beside one output
and a few chunks, the reservation a GPU worker makes for it. Measured on the CPU by counting the bytes of every
storage the profile creates (operators.peak.LiveBytes), which is what a GPU worker's hard cap sees."""

from measures import tensor_checks as tc
from operators.peak import LiveBytes
from pipeline.gpu.harness import Harness
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, FilterSection, RunSection

N = 1 << 20  # elements of the input, the one intermediate and the output: 4 MiB each

# the output is as large as the input and larger than any intermediate: the tasks whose checks outgrew their
# reservation on the H200 (outputs of ~1.3 GiB beside ~6 GiB peaks)
CODE = f'''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.sin(x) * 2
def get_inputs():
    return [torch.rand({N})]
def get_init_inputs():
    return []
'''


def test_the_eager_checks_hold_one_forward_beside_one_output(monkeypatch):
    # eager only: dynamo traces through a dispatch mode active around it, so what LiveBytes sees of a compiled run
    # is not what runs without it (the compile-agreement check's chunking is tested in tests/filters)
    # the draws' samples and the saturation check's sample are bounded apart from the output (4M and 1M elements, a
    # few MB beside outputs of GBs): small here, so that what the test sees is what grows with the output
    for name, value in (("CHUNK", 1 << 12), ("SAMPLE", 1 << 12), ("SATURATION_SAMPLE", 1 << 12)):
        monkeypatch.setattr(tc, name, value)
    s = WorkerSettings.from_config(Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0,
                                                                                         max_eager_ms=1e9)))
    s = s.with_profile(memory_limit_gb=0.0, compile=False, warmup=1, min_runs=3, max_runs=3)
    h = Harness("cpu", s)
    with LiveBytes() as live:
        m = h.profile({"task_id": "t", "code": CODE, "flops": 0, "bytes_moved": 0})
    assert m["status"] == "ok" and m["deterministic"] and m["output_numel"] == N
    forward_peak = 3 * 4 * N  # input, sin(x), the output
    # one forward's peak beside the reference output, and a few chunks; before, the determinism check held three
    # outputs and its temporaries (7 x 4 MiB beside the input)
    assert live.peak <= forward_peak + 4 * N + 16 * 4 * tc.CHUNK, live.peak / (4 * N)
