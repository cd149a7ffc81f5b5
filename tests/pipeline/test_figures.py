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
