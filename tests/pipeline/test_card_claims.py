"""Each rule the dataset card states, checked against the code that applies it (so a card claim cannot drift from
what the pipeline does), and the card read back from a real publish."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
from pathlib import Path

import pytest

from pipeline.outputs import card
from pipeline.rundir.config import Config, FilterSection

_spec = importlib.util.spec_from_file_location("publish_fixture", Path(__file__).with_name("test_publish.py"))
publish_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(publish_fixture)


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[str, dict]:
    from pipeline.outputs.publish import publish

    tmp = tmp_path_factory.mktemp("card")
    rd = publish_fixture.make_run(tmp)
    rd.record_stage("profile", 100.0, device="cuda", gpus=1, settings={"profile.median_precision": 0.015})
    rd.record_stage("profile", 50.0, device="cuda", gpus=1)
    out = publish(rd, tmp / "out")
    return (out / "README.md").read_text(), json.loads((out / "manifest.json").read_text())


# ---- dedupe: the representative of a near cluster -----------------------------------------------------------
@pytest.mark.parametrize("filt", [FilterSection(min_eager_ms=1.0, max_eager_ms=100.0),
                                  FilterSection(min_eager_ms=0.0, max_eager_ms=100.0)])
def test_card_window_is_the_dedupe_stage_window(filt):
    from pipeline.stages.dedupe import runtime_window

    cfg = Config(filter=filt)
    assert card.dedupe_window(cfg.to_dict()) == runtime_window(cfg)


def _near_pair(eager: list[float], predicted: list[float]) -> list[bool]:
    from detectors.dedupe import dedupe

    graph = json.dumps({"nodes": [{"kind": "input", "id": "x", "shape": [4, 4]},
                                  {"kind": "op", "op": "torch.tanh", "id": "y"}],
                        "edges": [{"arg": "x", "source": "x", "target": "y"}]})
    rows = dedupe(["a", "b"], ["code a", "code b"], None, graphs=[graph, graph], ops=[["torch.tanh"]] * 2,
                  eager_ms=eager, predicted_ms=predicted, window=(1.0, 100.0))
    return [r["keep"] for r in rows]


def test_representative_is_chosen_by_predicted_runtime_as_the_card_says():
    text = card.representative_rule(Config().to_dict())
    assert "predicted runtime" in text and "log-middle (10 ms)" in text
    # a's eager time is at the log-middle, but b's prediction is: the prediction decides
    assert _near_pair(eager=[10.0, 50.0], predicted=[50.0, 10.0]) == [False, True]


def test_ties_are_broken_by_task_id_within_the_stated_share():
    from detectors.dedupe import RUNTIME_TIE_PCT

    assert f"within {RUNTIME_TIE_PCT}% of the nearest" in card.representative_rule(Config().to_dict())
    inside = 10.0 * (1 + RUNTIME_TIE_PCT / 100) ** 0.5
    assert _near_pair(eager=[1.0, 1.0], predicted=[inside, 10.0]) == [True, False]  # a tie: the first task_id


def test_card_states_the_dedupe_rule(published):
    text, manifest = published
    assert card.representative_rule(manifest["config"]) in text
    assert "eager time is nearest" not in text


# ---- rejections ----------------------------------------------------------------------------------------------
SUMMARY = ([{"stage": "decontaminate", "reason_kind": "contaminated by ast", "count": 2}]
           + [{"stage": "filter", "reason_kind": f"compile failed: InductorError: case {i}", "count": 1} for i in range(3)]
           + [{"stage": "filter", "reason_kind": k, "count": n} for k, n in [
               ("too fast", 50), ("too slow", 40), ("input-insensitive", 30), ("degenerate output", 20),
               ("non-deterministic", 10), ("early_reject: eager run alone on the GPU N ms > N ms", 9),
               ("early_reject: peak memory N GiB > N GiB", 8),
               ("compile failed: BackendCompilerFailed: backend='<__main__._LockedBackend object at 0x...>' raised:", 4),
               ("error: RuntimeError: view size is not compatible", 2), ("crashed: AcceleratorError: CUDA error", 1)]]
           + [{"stage": "dedupe", "reason_kind": "near duplicate of another task: same graph up to sizes", "count": 181},
              {"stage": "dedupe", "reason_kind": "exact duplicate of another task", "count": 8}])


def test_rejection_table_covers_every_stage_and_every_task():
    rows, grouped = card.rejection_rows(SUMMARY)
    assert [s for s in dict.fromkeys(r[0] for r in rows)] == ["decontaminate", "filter", "dedupe"]
    assert sum(r[2] for r in rows) == sum(r["count"] for r in SUMMARY)
    assert grouped and sum(r[0] == "filter" for r in rows) == card.REASONS_PER_STAGE
    assert any(r[1].endswith("rarer reasons") for r in rows if r[0] == "filter")


def test_ungrouped_table_says_nothing_of_grouping():
    rows, grouped = card.rejection_rows(SUMMARY[:1] + SUMMARY[-2:])
    assert not grouped and len(rows) == 3
    text = "\n".join(card._funnel({"funnel": [], "rows": 1, "rejections": SUMMARY[:1]}))
    assert "counted together" not in text
    assert "counted together" in "\n".join(card._funnel({"funnel": [], "rows": 1, "rejections": SUMMARY}))


def test_reasons_are_shown_as_kinds():
    shown = {card.shown_kind(r["reason_kind"]) for r in SUMMARY}
    assert not any("object at 0x" in k or re.search(r"N \w+ [<>] N", k) for k in shown), shown
    assert "compile failed: InductorError" in shown and "compile failed: BackendCompilerFailed" in shown
    assert "too slow (rejected early, by a quick run)" in shown
    assert "peak memory over the cap (rejected early, by a quick run)" in shown
    assert "error: RuntimeError" in shown and "crashed: AcceleratorError" in shown


def test_card_lists_dedupe_rejections(published):
    text, manifest = published
    stages = {r["stage"] for r in manifest["rejections"]}
    table = text.split("| stage | reason | tasks |")[1].split("\n\n")[0]
    assert {line.split("|")[1].strip() for line in table.strip().splitlines()[1:]} == stages


# ---- contamination ---------------------------------------------------------------------------------------------
def test_contamination_rule_names_both_conditions(published):
    text, manifest = published
    rule = card.contamination_rule(manifest["config"])
    assert rule in text
    assert f"at least {manifest['config']['decontaminate']['ast_threshold']:g}" in rule
    assert "shares that problem's computation" in rule and "`kb_shared_computation`" in rule


def test_shared_computation_is_published():
    from pipeline.outputs.publish import published_row
    from pipeline.rundir.schema import CONTAMINATION, PUBLISHED

    assert "kb_shared_computation" in PUBLISHED.names and "kb_shared_computation" in CONTAMINATION.names
    row = published_row(publish_fixture._task(0), None, {"kb_ast_similarity": 0.95, "kb_shared_computation": False},
                        "0")
    assert row["kb_shared_computation"] is False


def test_ast_detector_needs_shared_computation():
    """A task whose text is the problem's but whose traced computation is another is not AST-contaminated, and the
    row says why (kb_shared_computation false); with the problem's computation it is."""
    import numpy as np

    from detectors.contamination import ReferenceMatrix, ast_fingerprint, compare

    code = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
            "        return torch.softmax(torch.matmul(x, x), dim=-1)\n")
    ops = ("aten.mm", "aten.mm", "aten.add", "aten._softmax", "aten.sum")
    ref = ReferenceMatrix(["level2/1_X"], [ast_fingerprint(code)], np.zeros((1, 128), np.uint64), [ops],
                          core=[ops], levels=[2])
    task = {"ast": [ast_fingerprint(code)] * 2, "minhash": np.ones((2, 128), np.uint64),
            "ops": [ops, ("aten.conv2d", "aten.relu", "aten.max_pool2d", "aten.mean", "aten.sigmoid")],
            "core": [ops, ("aten.conv2d", "aten.relu", "aten.max_pool2d", "aten.mean", "aten.sigmoid")]}
    same, other = compare(task, ref, use_op_signature=False)
    assert same["kb_ast_similarity"] == 1.0 and same["kb_shared_computation"] and "ast" in same["detectors_fired"]
    assert other["kb_ast_similarity"] == 1.0 and not other["kb_shared_computation"] and not other["contaminated"]


# ---- usage, Hub, cost ------------------------------------------------------------------------------------------
def test_usage_snippet_applies_the_smallest_shape_variant(published):
    text, _ = published
    snippet = text.split("```python\n")[1].split("```")[0]
    code = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
            "batch_size = 4096\nfeatures = 4096\n"
            "def get_inputs():\n    return [torch.rand(batch_size, features)]\ndef get_init_inputs():\n    return []\n")
    row = {"code": code, "shape_variants": json.dumps([{"batch_size": 8192}, {"batch_size": 2, "features": 8}]),
           "task_id": "t", "ops": "[]", "eager_ms": 1.0}

    class Rows(list):
        def take(self, n):
            return self[:n]

    scope = {"Rows": Rows, "row": row}
    exec(snippet.replace("from datasets import load_dataset", "load_dataset = lambda *a, **k: Rows([row])"), scope)
    assert scope["out"].shape == (2, 8)


def test_publisher_section_is_not_in_the_consumers_card(published):
    text, _ = published
    assert "Putting it on the Hub" not in text and "--dry-run" not in text and "HF_TOKEN" not in text


def test_cost_table_counts_calls_per_setting(published):
    text, manifest = published
    calls = manifest["stage_records"]["profile"]["calls"]
    changed = card.settings_calls(calls)
    assert changed == {("profile.median_precision", "0.015"): 1}
    assert "| `profile.median_precision` | 0.015 | 1 |" in text
    cell = next(line for line in text.splitlines() if line.startswith("| profile settings |"))
    assert len(cell) < 300 and "1 of 2 call(s)" in cell


def test_dataclass_default_config_renders(published):
    """The rules render for a config with every default (a run made without a preset)."""
    cfg = dataclasses.asdict(Config())
    assert card.contamination_rule(cfg) and card.representative_rule(cfg)
