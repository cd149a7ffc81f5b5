"""docs/figures.md is what the committed result files give, one row per figure."""

import json

from pipeline.outputs import figures


def _row(fig, value):
    return {"figure": fig, "value": value, "target": None, "command": "python benchmarks/x.py",
            "hardware": "2-core CPU (no GPU)", "torch": "2.13.0+cpu", "commit": "abc1234"}


def test_the_committed_figures_page_is_in_step_with_the_results():
    assert figures.PAGE.read_text() == figures.render(), "run python -m pipeline.outputs.figures"


def test_every_result_file_in_the_tree_has_a_headline_row_on_the_page():
    page = figures.PAGE.read_text()
    for r in figures.headlines():
        assert r["value"].replace("|", "\\|") in page and r["file"] in page


def test_a_rerun_changes_a_figures_row_and_adds_none(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"headline": [_row("speed", "1 task/s")]}))
    (tmp_path / "b.json").write_text(json.dumps({"no": "headline"}))
    before = figures.render(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps({"headline": [_row("speed", "2 tasks/s")]}))
    after = figures.render(tmp_path)
    assert "1 task/s" in before and "2 tasks/s" in after and "1 task/s" not in after
    assert len(after.splitlines()) == len(before.splitlines())


def test_a_headline_without_its_fields_is_named(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"headline": [{"figure": "x"}]}))
    try:
        figures.headlines(tmp_path)
    except SystemExit as e:
        assert "a.json" in str(e) and "value" in str(e)
    else:
        raise AssertionError("a headline without its fields was accepted")


def test_pipeline_yield_writes_the_headline_the_figures_page_reads(tmp_path):
    import sys

    sys.path.insert(0, str(figures.ROOT / "benchmarks"))
    from pipeline_yield import headline

    result = {"command": "benchmarks/pipeline_yield.py --run R", "gpu": "NVIDIA H200", "gpus": 1, "torch": "2.11",
              "commit": "abc1234", "sampled": 3000, "published": 2682, "published_over_sampled": 0.894,
              "gpu_s_per_published": 0.1972, "gpu_utilisation": {"mean_all": 90.81}}
    (tmp_path / "pipeline_yield_h200.json").write_text(json.dumps({"headline": headline(result)}))
    rows = {r["figure"]: r["value"] for r in figures.headlines(tmp_path)}
    assert rows["published / sampled, fresh h200 tasks"] == "89.4% (2,682 of 3,000)"
    assert rows["profile GPU-s per published task"] == "0.1972"
    committed = {r["figure"] for r in figures.headlines() if r["file"] == "pipeline_yield_h200.json"}
    assert set(rows) == committed  # a rerun changes the committed rows, adds none
