"""compose_rows against a local HTTP server speaking the chat-completions protocol."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from operators.llm_composer import LLMSettings, build_prompt, compose_rows, extract_code
from operators.trace import trace_code

KEY = "sk-test-SECRET-key-4711"

TEMPLATE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch_size = 4
in_features = 8
out_features = 3

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
"""

NATURAL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A fully connected layer followed by a ReLU."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.fc(x)
        return F.relu(x)


batch_size = 4
in_features = 8
out_features = 3


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

ANSWERS = {
    "Good": f"Here you go:\n```python\n{NATURAL}```\n",
    "WrongOps": f"```python\n{NATURAL.replace('F.relu(x)', 'torch.sigmoid(x)')}```",
    "Garbage": "I am sorry, I cannot help with that.",
    "Forbidden": f"```python\nimport os\n{NATURAL}```",
    "Sizes": f"```python\n{NATURAL.replace('out_features = 3', 'out_features = 5')}```",
    "Crash": f"```python\n{NATURAL.replace('return F.relu(x)', 'raise ValueError(1)')}```",
}


class FakeLLM:
    """POST /v1/chat/completions; the row name in the prompt picks the behaviour."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.fail_first: dict[str, int] = {}  # name -> 503s before answering
        self.delay_s: dict[str, float] = {}
        self.answers = dict(ANSWERS)
        self.inflight = self.max_inflight = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = req["messages"][-1]["content"]
                name = re.search(r"for the operator graph (\w+)", prompt).group(1)
                fake.requests.append(name)
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "no such route"}})
                if name == "BadKey" or self.headers.get("Authorization") != f"Bearer {KEY}":
                    auth = self.headers.get("Authorization", "")
                    return self._send(401, {"error": {"message": f"Incorrect API key provided: {auth[7:]}",
                                                      "type": "invalid_request_error"}})
                if fake.fail_first.get(name, 0) > 0:
                    fake.fail_first[name] -= 1
                    return self._send(503, {"error": {"message": "overloaded"}})
                with fake.lock:
                    fake.inflight += 1
                    fake.max_inflight = max(fake.max_inflight, fake.inflight)
                time.sleep(fake.delay_s.get(name, 0.0))
                with fake.lock:
                    fake.inflight -= 1
                content = fake.answers.get(name, ANSWERS["Good"])
                return self._send(200, {"id": "c1", "object": "chat.completion", "created": 0,
                                        "model": req["model"], "choices": [{
                                            "index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": content}}],
                                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def llm(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    f = FakeLLM()
    yield f
    f.close()


def _row(name: str, i: int, aten: bool = True) -> dict:
    return {"task_id": f"{i:016x}", "name": name, "code": TEMPLATE, "ops": ["nn.Linear", "torch.relu"],
            "categories": ["gemm", "activation"], "data_source": "torch#2", "num_ops": 2, "is_dag": False,
            "graph": json.dumps({"nodes": [{"id": 0, "op": "nn.Linear"}, {"id": 1, "op": "torch.relu"}]}),
            "aten_ops": trace_code(TEMPLATE) if aten else [], "composer": "template", "composer_note": "",
            "seed": i}


def _settings(llm: FakeLLM, **kw) -> LLMSettings:
    return LLMSettings(base_url=llm.url, model="fake-coder", retry_base_s=0.01, **kw)


def test_accepts_good_answers_and_falls_back_with_reasons(llm: FakeLLM, tmp_path: Path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    names = ["Good", "WrongOps", "Garbage", "Forbidden", "Sizes", "Crash", "BadKey"]
    rows = [_row(n, i, aten=n != "Good") for i, n in enumerate(names)]
    out = compose_rows(rows, _settings(llm), tmp_path / "cache")
    by = {r["name"]: r for r in out}
    assert [r["task_id"] for r in out] == [r["task_id"] for r in rows]
    good = by["Good"]
    assert good["composer"] == "llm" and good["code"] == NATURAL and good["composer_note"] == ""
    assert good["aten_ops"] == trace_code(TEMPLATE)  # filled from the template when the sampler left it empty
    ns: dict = {}
    exec(good["code"], ns)
    assert ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]()).shape == (4, 3)
    expect = {"WrongOps": "traced ops differ from the graph: missing aten.relu; extra aten.sigmoid",
              "Garbage": "LLM answer has no python code block",
              "Forbidden": "static check: forbidden import 'os'",
              "Sizes": "sizes differ from the graph: out_features=5 (wanted 3)",
              "Crash": "trace failed: ValueError",
              "BadKey": "LLM endpoint error: AuthenticationError"}
    for name, note in expect.items():
        r = by[name]
        assert r["composer"] == "template" and r["code"] == TEMPLATE, name
        assert r["composer_note"].startswith(note), (name, r["composer_note"])
        assert "\n" not in r["composer_note"]
    seen = capsys.readouterr()
    texts = [json.dumps(out), seen.out, seen.err, caplog.text]
    texts += [p.read_text() for p in (tmp_path / "cache").iterdir()]
    assert all(KEY not in t for t in texts)
    assert "***" in by["BadKey"]["composer_note"]  # the echoed key was scrubbed, not just absent


def test_concurrent_requests_and_cache_hit_sends_no_request(llm: FakeLLM, tmp_path: Path):
    rows = [_row("Good", 0), _row("WrongOps", 1), _row("Other", 2)]
    llm.delay_s = {"Good": 0.5, "WrongOps": 0.5, "Other": 0.5}
    first = compose_rows(rows, _settings(llm, concurrency=2), tmp_path)
    assert sorted(llm.requests) == ["Good", "Other", "WrongOps"] and llm.max_inflight == 2
    second = compose_rows(rows, _settings(llm), tmp_path)
    assert len(llm.requests) == 3 and second == first
    assert len(list(tmp_path.glob("*.json"))) == 3


def test_retry_then_success_budget_and_timeout(llm: FakeLLM, tmp_path: Path):
    llm.fail_first = {"Flaky": 2}
    out = compose_rows([_row("Flaky", 0)], _settings(llm, max_retries=3), tmp_path / "a")
    assert out[0]["composer"] == "llm" and llm.requests == ["Flaky"] * 3

    llm.requests.clear()
    llm.fail_first = {"Busy": 10}
    rows = [_row("Busy", 0)] + [_row(f"Row{i}", i) for i in range(1, 4)]
    out = compose_rows(rows, _settings(llm, budget=3, max_retries=5, concurrency=1), tmp_path / "b")
    assert len(llm.requests) == 3  # retries count against the budget too
    assert all(r["composer"] == "template" for r in out)
    assert out[0]["composer_note"] == "LLM request budget of 3 spent"
    assert {r["composer_note"] for r in out[1:]} == {"LLM request budget of 3 spent"}

    llm.requests.clear()
    llm.delay_s = {"Slow": 3.0}
    out = compose_rows([_row("Slow", 0)], _settings(llm, timeout_s=0.3, max_retries=1), tmp_path / "c")
    assert out[0]["composer"] == "template" and llm.requests == ["Slow", "Slow"]
    assert out[0]["composer_note"] == "LLM endpoint timed out after 2 attempt(s)"


def test_prompt_and_extraction():
    p = build_prompt(_row("Conv_Thing", 0))
    assert "Conv_Thing" in p and "out_features = 3" in p and "def get_init_inputs():" in p
    assert "only `import torch`" in p and "nn.Linear" in p
    assert extract_code("```py\nclass Model: pass\n```\nand ```python\nx = 1\n```") == "class Model: pass\n"
    assert extract_code("no code here") is None


def test_real_sampled_rows(llm: FakeLLM, tmp_path: Path):
    from operators.sample import sample_tasks
    from pipeline.rundir.config import load_preset

    rows = sample_tasks(load_preset("demo").sample, 0, range(2), set())
    restyled = rows[0]["code"].replace("class Model(nn.Module):", "class Model(nn.Module):  # restyled")
    llm.answers[rows[0]["name"]] = f"```python\n{restyled}```"  # rows[1] gets the Linear answer: wrong ops
    out = compose_rows(rows, _settings(llm), tmp_path)
    assert out[0]["composer"] == "llm" and out[0]["code"] == restyled and out[0]["task_id"] == rows[0]["task_id"]
    assert out[1]["composer"] == "template" and out[1]["code"] == rows[1]["code"]
    assert out[1]["composer_note"].startswith(("traced ops differ", "sizes differ"))
    assert "operators, in this order:" in build_prompt(rows[1])
