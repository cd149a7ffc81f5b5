"""The prompt (opsynth/prompt.py) and the reward adapters' own logic (opsynth/rl.py), without verifying anything and
without TRL or verl installed: answers parsed out of completions, the -1 of a malformed answer with its reason, the
frameworks' argument shapes, a verifier that fails, the template's config and its agreement with the verifier.
tests/verify/test_rl_adapters.py verifies real answers through the adapters."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import pytest

from opsynth import prompt as P
from opsynth import rl

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
"""
GOOD = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


def fenced(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```\n"


@pytest.mark.parametrize(("answer", "why"), [
    ("I would fuse the ops.", "no fenced code block"),
    ("", "an empty answer"),
    (None, "an empty answer"),
    (fenced(GOOD) + "\nand also\n" + fenced(GOOD), "2 code blocks"),
    (fenced(GOOD) + "\n```python\nclass ModelNew: pass\n", "the last unterminated"),
    ("```python\nclass ModelNew:\n    pass\n", "unterminated code block"),
    (fenced("x = 1\n"), "no top-level class ModelNew"),
    (fenced("def f():\n    class ModelNew: pass\n"), "no top-level class ModelNew"),
    (fenced("class ModelNew(:\n"), "does not parse"),
    (fenced("int main() {}\n", "cpp"), "tagged 'cpp'"),
])
def test_a_malformed_answer_gets_its_reason(answer, why):
    code, reason = rl.extract_candidate(answer)
    assert code is None and reason.startswith("format: ") and why in reason


@pytest.mark.parametrize("answer", [
    "Here is the kernel:\n" + fenced(GOOD) + "\nIt is faster.",
    fenced(GOOD, "py"),
    fenced(GOOD, ""),
    "````python\n" + GOOD + "````\n",
    "<think>maybe ```python\nx = 1\n``` or two blocks</think>\n" + fenced(GOOD),
    fenced(GOOD.replace("        return x", "        s = '''\n```python\n'''\n        return x")),
])
def test_one_python_block_defining_modelnew_is_the_candidate(answer):
    code, reason = rl.extract_candidate(answer)
    assert reason is None and "class ModelNew" in code


def test_completions_as_text_or_chat_messages():
    text = fenced(GOOD)
    assert rl.answer_text(text) == text
    assert rl.answer_text([{"role": "assistant", "content": text}]) == text
    assert rl.answer_text([{"role": "assistant", "content": [{"type": "text", "text": text}]}]) == text
    assert rl.answer_text({"role": "assistant", "content": text}) == text
    assert rl.answer_text([{"role": "user", "content": "x"}]) is None
    assert rl.answer_text(42) is None


def test_task_of_a_published_row():
    t = rl.task_of({"code": TASK, "task_id": "abc", "shape_variants": '[{"n": 8}]', "eager_ms": 1.5,
                    "peak_memory_bytes": 2048.0, "unrelated": 1})
    assert t == {"task_id": "abc", "code": TASK, "shape_variants": [{"n": 8}], "eager_ms": 1.5, "compile_ms": None,
                 "peak_memory_bytes": 2048}
    assert rl.task_of({"code": TASK, "shape_variants": "not json"})["shape_variants"] == []
    assert len(rl.task_of({"code": TASK})["task_id"]) == 16
    assert rl.task_of({"task_id": "x"}) is None and rl.task_of(None) is None


@pytest.fixture
def no_verifier(monkeypatch):
    """verify_batch must not run: every answer below is malformed."""
    import verify.api

    def boom(*a, **k):
        raise AssertionError("verify_batch ran for malformed answers")
    monkeypatch.setattr(verify.api, "verify_batch", boom)


MALFORMED = ["no code at all", fenced(GOOD) * 2, fenced("y = 2\n")]


def test_trl_shape_malformed_answers_score_minus_one_with_extras(no_verifier):
    """TRL calls reward_funcs(prompts=, completions=, completion_ids=, **columns, trainer_state=, log_extra=,
    log_metric=), the columns one entry per completion."""
    logged, metrics, heard = {}, {}, []
    reward = rl.make_trl_reward(device="cpu", on_extras=heard.append)
    n = len(MALFORMED)
    prompts = [P.render(TASK)] * n
    completions = [[{"role": "assistant", "content": c}] for c in MALFORMED]
    out = reward(prompts=prompts, completions=completions, completion_ids=[[1, 2]] * n, code=[TASK] * n,
                 task_id=["t0"] * n, shape_variants=["[]"] * n, ops=['["torch.tanh"]'] * n, trainer_state=object(),
                 log_extra=lambda col, vals: logged.__setitem__(col, vals),
                 log_metric=lambda name, v: metrics.__setitem__(name, v))
    assert out == [-1.0, -1.0, -1.0] and all(isinstance(x, float) for x in out)
    reasons = logged["opsynth/reason"]
    assert "no fenced code block" in reasons[0] and "2 code blocks" in reasons[1] and "ModelNew" in reasons[2]
    assert metrics["opsynth/format_error"] == 1.0 and metrics["opsynth/correct"] == 0.0
    assert heard == [reward.last_extras] and [e["task_id"] for e in reward.last_extras] == ["t0"] * 3
    assert all(tuple(e) == rl.EXTRA_KEYS for e in reward.last_extras)
    assert reward.__name__ == "opsynth_reward" and rl.trl_reward.__name__ == "opsynth_reward"


def test_trl_without_the_code_column_scores_minus_one(no_verifier):
    out = rl.trl_reward(prompts=["p"], completions=[fenced(GOOD)], task_id=["t0"])
    assert out == [-1.0] and "no task code" in rl.trl_reward.last_extras[0]["reason"]


def test_verl_single_and_batch_shapes(no_verifier):
    one = rl.verl_compute_score("torch#1", MALFORMED[0], TASK, {"task_id": "t0", "index": 3}, device="cpu")
    assert one["score"] == -1.0 and tuple(one) == rl.EXTRA_KEYS and one["task_id"] == "t0"
    import numpy as np  # verl hands the batch manager numpy object arrays

    many = rl.verl_compute_score(data_sources=np.array(["torch#1"] * 3, dtype=object), solution_strs=MALFORMED,
                                 ground_truths=[TASK] * 3, extra_infos=np.array([{"task_id": "t0"}] * 3, dtype=object),
                                 device="cpu", some_future_kwarg=1)
    assert [m["score"] for m in many] == [-1.0] * 3 and all(tuple(m) == rl.EXTRA_KEYS for m in many)
    mismatched = rl.verl_compute_score(data_sources=["a"], solution_strs=MALFORMED, ground_truths=[TASK])
    assert [m["score"] for m in mismatched] == [-1.0] * 3 and "adapter failed" in mismatched[0]["reason"]


def test_a_verifier_that_fails_gives_minus_one_not_an_exception(monkeypatch):
    import verify.api

    def broken(*a, **k):
        raise OSError("no more processes")
    monkeypatch.setattr(verify.api, "verify_batch", broken)
    out = rl.trl_reward(prompts=["p", "p"], completions=[fenced(GOOD), "none"], code=[TASK] * 2)
    assert out == [-1.0, -1.0]
    assert "the verifier failed: OSError: no more processes" in rl.trl_reward.last_extras[0]["reason"]
    assert rl.trl_reward.last_extras[1]["reason"].startswith("format:")


def test_the_adapters_pass_their_settings_to_verify_batch(monkeypatch):
    import verify.api

    seen = {}

    def fake(pairs, **kw):
        seen.update(kw, pairs=pairs)
        return [{"task_id": t["task_id"], "correct": True, "reward": 2, "hack": None, "speedup_eager": 1.5,
                 "speedup_compile": None, "wall_s": 3.0} for t, _ in pairs]
    monkeypatch.setattr(verify.api, "verify_batch", fake)
    reward = rl.make_trl_reward(device="cuda", gpus=[0, 1], budget_s=60, allow_torch=True, rounds=3, score="speedup")
    out = reward(prompts=["p"] * 3, completions=[fenced(GOOD), "none", fenced(GOOD)], code=[TASK] * 3,
                 task_id=["a", "b", "c"], shape_variants=['[{"n": 2}]', None, "[]"], peak_memory_bytes=[10, None, 5])
    assert out == [1.5, -1.0, 1.5]  # score="speedup": the speedup over eager of a correct answer
    assert seen["workers"] == 2 and seen["gpus"] == [0, 1] and seen["device"] == "cuda" and seen["allow_torch"]
    assert seen["timeout_s"] == 60 and seen["lock_wait_grace_s"] == 60 and seen["rounds"] == 3
    assert [t["task_id"] for t, _ in seen["pairs"]] == ["a", "c"] and seen["pairs"][0][0]["shape_variants"] == [{"n": 2}]
    e = reward.last_extras[0]
    assert e["reward_level"] == 2 and e["speedup_eager"] == 1.5 and e["speedup_compile"] == 0.0 and e["reason"] == ""


def test_the_policy_tier_and_precision_reach_verify_batch(monkeypatch):
    import verify.api

    seen = {}

    def fake(pairs, **kw):
        seen.update(kw)
        return [{"task_id": t["task_id"], "correct": True, "reward": 1, "hack": None, "speedup_eager": 1.0,
                 "speedup_compile": None, "wall_s": 1.0} for t, _ in pairs]
    monkeypatch.setattr(verify.api, "verify_batch", fake)
    reward = rl.make_trl_reward(device="cpu", policy="library", allow="aten::cumsum", precision="tf32")
    assert reward(prompts=["p"], completions=[fenced(GOOD)], code=[TASK], task_id=["a"]) == [1.0]
    assert seen["policy"] == "library" and seen["allow"] == ["aten::cumsum"] and seen["precision"] == "tf32"
    assert not seen["allow_torch"]


def test_settings_are_checked_and_unknown_ones_dropped():
    assert rl.RewardSettings.of(None, device="cpu", bogus=1).device == "cpu"
    with pytest.raises(ValueError, match="score"):
        rl.RewardSettings(score="log")
    with pytest.raises(ValueError, match="budget_s"):
        rl.RewardSettings(budget_s=0)
    with pytest.raises(ValueError, match="precision"):
        rl.RewardSettings(precision="bf16")
    from opsynth.errors import OpsynthError

    with pytest.raises(OpsynthError, match="--policy library needs"):
        rl.RewardSettings(policy="library")
    with pytest.raises(OpsynthError, match="allow-torch"):
        rl.RewardSettings(policy="strict", allow_torch=True)


def test_to_verl_rows():
    row = {"ops": "[]", "data_source": "torch#1", "code": TASK, "prompt": P.render(TASK, task_id="t0"),
           "task_id": "t0", "shape_variants": "[]", "eager_ms": 1.0, "peak_memory_bytes": 10}
    v = rl.to_verl(row, 7)
    assert v["prompt"] == row["prompt"] and v["reward_model"] == {"style": "rule", "ground_truth": TASK}
    assert v["extra_info"]["index"] == 7 and v["extra_info"]["task_id"] == "t0" and v["data_source"] == "torch#1"
    old = rl.to_verl({k: x for k, x in row.items() if k != "prompt"}, 0)  # a dataset published before the column
    assert old["prompt"] == P.render(TASK, task_id="t0")
    task = rl._verl_task(v["reward_model"]["ground_truth"], v["extra_info"])
    assert task["task_id"] == "t0" and task["code"] == TASK and task["peak_memory_bytes"] == 10


# -- the prompt ------------------------------------------------------------------------------------------------------

def test_the_prompt_holds_the_code_the_rules_and_the_format():
    msgs = P.render(TASK, task_id="t0")
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert TASK.strip() in user and "Policy: strict" in user and "atol = rtol = 0.01" in user
    assert "exactly one fenced Python code block" in user and "ModelNew" in user and "caching results" in user
    assert "Policy: allow-torch" in P.render(TASK, policy="allow-torch")[1]["content"]
    # the rendered prompt's own code block is the task, and its answer format is what extract_candidate reads
    blocks, _ = rl.code_blocks(user)
    assert blocks == [("python", TASK)]


def test_the_prompt_states_the_verifiers_numbers():
    from pathlib import Path

    from verify.reward import MARGIN

    assert P.SPEEDUP_MARGIN == MARGIN
    import re

    worker = (Path(__file__).resolve().parents[1] / "verify" / "worker.py").read_text()
    tols = re.findall(r'job\.get\("tol", ([0-9.e-]+)\)', worker)
    assert tols and all(float(t) == P.TOLERANCE for t in tols)


def test_templates_are_validated_versioned_and_survive_the_config_file(tmp_path):
    from pipeline.rundir.config import ConfigError, from_dict, load_preset, with_publish_settings

    cfg = load_preset("demo")
    assert P.prompt_version() == P.PROMPT_VERSION
    user = "Task {task_id}:\n```python\n{code}\n```\n{answer_format}\nLiteral {{braces}} and \"quotes\"\tand tabs."
    custom, given = with_publish_settings(cfg, [f"publish.prompt_user={json.dumps(user)}"], "test")
    assert given == {"prompt_user": user}
    back = from_dict(tomllib.loads(custom.to_toml()), "round trip")
    assert back.publish.prompt_user == user
    msgs = P.render(TASK, task_id="t9", user=user)
    assert msgs[1]["content"].startswith("Task t9:\n```python\n") and "{braces}" in msgs[1]["content"]
    assert P.prompt_version(user=user).startswith("custom-")
    for bad, why in [("{nope}", "unknown placeholder"), ("{", "not a str.format template"),
                     ("no task here", "must hold the task")]:
        with pytest.raises(ConfigError, match=why):
            with_publish_settings(cfg, [f"publish.prompt_user={json.dumps(bad)}"], "test")
    with pytest.raises(ConfigError, match="prompt_policy"):
        from_dict({**cfg.to_dict(), "publish": {**dataclasses.asdict(cfg.publish), "prompt_policy": "lax"}}, "x")


def test_verl_loads_the_module_by_its_file_path(no_verifier):
    """verl's custom_reward_function.path: the file executed as `custom_module`, which older verl leaves out of
    sys.modules."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("custom_module", rl.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "custom_module" not in sys.modules
    out = module.verl_compute_score("torch#1", "no code", TASK, {"task_id": "t0"})
    assert out["score"] == -1.0 and out["reason"].startswith("format:")
