"""The reward adapters (opsynth/rl.py) on real verifications, on the CPU, called with the frameworks' documented
argument shapes, TRL and verl themselves not installed: honest, hacking, malformed and hanging answers in one
rollout batch. The hanging answer is killed at its budget, and the honest answer verified beside it keeps its
reward although it waited for the hung one's hold on the device's timing lock."""

from __future__ import annotations

import time

import pytest

from opsynth import rl
from opsynth.prompt import render
from verify.suite import HONEST, TASK

MODULE = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self, n):\n" \
         "        super().__init__()\n        self.lin = nn.Linear(n, n)\n\n    def forward(self, x):\n{body}\n"
PLAIN = MODULE.format(body="        return torch.relu(self.lin(x))")  # honest under allow-torch, a hack under strict
RETURNS_INPUT = MODULE.format(body="        return x")
HANGS = MODULE.format(body="        while True:\n            pass")
BUDGET_S = 45.0


def answer(code: str) -> str:
    return f"I fused the linear layer and the relu.\n\n```python\n{code}```\n"


def test_trl_rollout_batch_honest_hack_malformed_and_hanging():
    answers = [answer(PLAIN), answer(RETURNS_INPUT), "Sorry, I cannot write this kernel.",
               answer(PLAIN) + answer(PLAIN), answer(HANGS), [{"role": "assistant", "content": answer(PLAIN)}]]
    n = len(answers)
    logged: dict[str, list] = {}
    reward = rl.make_trl_reward(device="cpu", allow_torch=True, workers=2, budget_s=BUDGET_S, rounds=2)
    t0 = time.monotonic()
    scores = reward(prompts=[render(TASK, policy="allow-torch")] * n, completions=answers,
                    completion_ids=[[0]] * n, code=[TASK] * n, task_id=["linear_relu"] * n, shape_variants=["[]"] * n,
                    log_extra=lambda col, vals: logged.__setitem__(col, vals), log_metric=lambda *a: None)
    wall = time.monotonic() - t0
    ex = reward.last_extras
    assert scores[0] >= 1 and scores[5] >= 1, ex
    assert scores[1:5] == [-1.0] * 4, ex
    assert ex[1]["hack"].startswith("hack: output shares storage"), ex[1]
    assert ex[2]["reason"].startswith("format: no fenced code block") and ex[3]["reason"].startswith("format: 2 code")
    assert ex[4]["timed_out"] and ex[4]["reason"].startswith("timeout: timed out after 45 s"), ex[4]
    assert ex[0]["speedup_eager"] > 0 and ex[0]["correct"] and ex[0]["reason"] == ""
    assert logged["opsynth/reason"] == [e["reason"] for e in ex]
    # the hung candidate cost its budget once, the batch did not wait for it any longer than that
    assert ex[4]["wall_s"] < BUDGET_S + 10 and wall < 2 * BUDGET_S + 30, (wall, ex)


def test_verl_batch_and_single_calls_strict_policy(ext_dir):
    """verl's batch reward manager: compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=);
    its naive manager: compute_score(data_source=, solution_str=, ground_truth=, extra_info=). Strict policy: the
    honest candidate brings its own C++ kernel; the plain-PyTorch one is refused by the guard."""
    row = {"data_source": "torch#2", "code": TASK, "task_id": "linear_relu", "shape_variants": "[]",
           "prompt": render(TASK, task_id="linear_relu")}
    v = rl.to_verl(row, 0)
    gt, info = v["reward_model"]["ground_truth"], v["extra_info"]
    settings = {"device": "cpu", "workers": 2, "budget_s": 120.0, "rounds": 2, "extensions_dir": ext_dir}
    out = rl.verl_compute_score(data_sources=["torch#2"] * 3, solution_strs=[answer(HONEST), answer(PLAIN), "```python"],
                                ground_truths=[gt] * 3, extra_infos=[info] * 3, **settings)
    assert [o["score"] for o in out][1:] == [-1.0, -1.0] and out[0]["score"] >= 1, out
    assert out[0]["correct"] and out[0]["speedup_eager"] > 0 and out[0]["task_id"] == "linear_relu"
    assert "PyTorch compute" in out[1]["hack"] and out[1]["reason"] == out[1]["hack"]
    assert "unterminated" in out[2]["reason"] and not out[2]["format_ok"]
    assert all(tuple(o) == rl.EXTRA_KEYS for o in out)
    one = rl.verl_compute_score(data_source="torch#2", solution_str=answer(RETURNS_INPUT), ground_truth=gt,
                                extra_info=info, **settings)
    assert one["score"] == -1.0 and one["hack"].startswith("hack:"), one


@pytest.mark.slow
def test_trl_grpo_trainer_step_on_two_tasks(tmp_path):
    """A real GRPOTrainer step with a tiny GPT-2 made here (a word-level tokenizer, no download) on 2 tasks, the
    reward through trl_reward on the CPU. Skipped where TRL is not installed (it is no dependency of opsynth)."""
    pytest.importorskip("trl")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"
    spec = importlib.util.spec_from_file_location("trl_grpo_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    m = example.grpo_step(tmp_path, n_tasks=2, budget_s=BUDGET_S, dataset=str(tmp_path / "none"))  # tiny tasks
    assert m["rewards_seen"] == 4 and len(m["kinds"]) == 4, m
    for kind, r, why in zip(m["kinds"], m["rewards"], m["reasons"], strict=True):  # the tiny model picks the answer
        assert kind != "other", m  # every completion decoded to one of the answers, whole
        assert (r >= 1) == (kind == "honest") and (r == -1.0) == (kind != "honest"), m
        if kind.startswith("hack"):
            assert why.startswith("hack: "), m
        elif kind == "honest for another task":
            assert why.startswith("incorrect: "), m
    assert "rewards/opsynth_reward/mean" in m["logged"] and "opsynth/correct" in m["logged"], m["logged"]
