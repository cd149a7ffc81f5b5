"""The isolated tracer: task output cannot corrupt the exchange, GPU-API code takes its CPU path, data flow."""

from operators.trace import _parse_reply, trace_isolated

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
TAIL = "\ndef get_inputs():\n    return [torch.randn(4, 8)]\n\ndef get_init_inputs():\n    return []\n"

NOISY = HEAD + '''
print("at import")
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        print('{"ok": true, "ops": ["aten.fake"]}')
    def forward(self, x):
        print("forward", x.shape, flush=True)
        return torch.relu(x)
''' + TAIL

GRAPH = HEAD + '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8).cuda()
        self.stream = torch.cuda.Stream()
        self.graph = None
    def _eager(self, x):
        return torch.tanh(self.lin(x))
    def forward(self, x):
        if not torch.isfinite(x).all().item():
            raise ValueError("bad input")
        if {cond}:
            if self.graph is None:
                self.static = x.clone()
                with torch.cuda.stream(self.stream):
                    self.out = self._eager(self.static)
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    self.out = self._eager(self.static)
            self.static.copy_(x)
            self.graph.replay()
            return self.out
        return self._eager(x.to("cuda"))
''' + TAIL.replace("torch.randn(4, 8)", "torch.randn(4, 8, device='cuda')")

BN = HEAD + '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8)
    def forward(self, x):
        s = x.sum()  # read and thrown away
        return self.bn(x)
''' + TAIL


def test_prints_in_a_task_do_not_reach_the_exchange_and_a_failure_stays_with_its_task():
    broken = HEAD + "class Model(nn.Module):\n    def forward(self, x):\n        return undefined_name\n" + TAIL
    res = trace_isolated([NOISY, broken, NOISY], timeout_s=60)
    assert [r["ok"] for r in res] == [True, False, True]
    assert res[0]["ops"] == ["aten.relu"] and res[2]["ops"] == ["aten.relu"]
    assert "NameError" in res[1]["error"]


def test_unreadable_reply_is_a_per_item_error_not_an_exception():
    assert _parse_reply("forward torch.Size([4, 8])\n") is None
    assert _parse_reply('["not", "a", "reply"]\n') is None
    assert _parse_reply('{"ok": true, "ops": []}\n') == {"ok": True, "ops": []}


def test_gpu_wrappers_trace_their_cpu_path_and_replayed_captures():
    eager, always = trace_isolated([GRAPH.format(cond="x.is_cuda"), GRAPH.format(cond="True")], timeout_s=60)
    assert eager["ok"] and always["ok"], (eager, always)
    assert eager["live_ops"] == ["aten.t", "aten.addmm", "aten.tanh"]
    assert eager["inputs"] == [[4, 8]]
    # capture and replay: the output is what the capture computed; the warm-up run before it is dead
    assert [op for op in always["live_ops"] if op not in ("aten.clone",)] == ["aten.t", "aten.addmm", "aten.tanh"]
    assert always["ops"].count("aten.addmm") == 1  # ops recorded during capture are kept apart


def test_live_ops_drop_what_the_output_does_not_depend_on():
    (res,) = trace_isolated([BN], timeout_s=60)
    assert "aten.add_" in res["ops"] and "aten.sum" in res["ops"]  # num_batches_tracked += 1, the thrown-away sum
    assert res["live_ops"] == ["aten.native_batch_norm"]
