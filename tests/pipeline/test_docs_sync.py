"""docs/run-directory.md and docs/configuration.md say what the schema and the config dataclasses say."""

import dataclasses

from pipeline.outputs import docs_gen
from pipeline.rundir import config, schema


def test_the_committed_pages_are_in_step_with_the_source():
    for path, text in docs_gen.pages().items():
        assert path.read_text() == text, f"{path.name} is stale: run python -m pipeline.outputs.docs_gen"


def test_every_column_and_field_has_a_meaning():
    assert docs_gen.missing_meanings() == [], "add a comment in the source or an entry in docs_gen"


def test_every_table_column_is_on_the_run_directory_page():
    page = docs_gen.render_run_directory()
    for name, arrow in schema.BY_TABLE.items():
        assert f"## {name}/" in page
        for col in arrow.names:
            assert f"| `{col}` |" in page, f"{name}.{col}"
    for col in schema.COLUMNS:
        assert f"| `{col}` |" in page


def test_every_config_field_is_on_the_configuration_page_with_its_default():
    page = docs_gen.render_configuration()
    for f in dataclasses.fields(config.Config):
        if f.name == "name":
            continue
        assert f"## [{f.name}]" in page
        for sub in dataclasses.fields(getattr(config.Config(), f.name)):
            default = docs_gen._default(getattr(getattr(config.Config(), f.name), sub.name))
            assert f"| `{sub.name}` |" in page and f"`{default}`" in page, f"{f.name}.{sub.name}"
    for preset in config.presets():
        assert f"### {preset}" in page


def test_a_field_or_column_without_a_meaning_is_reported(monkeypatch):
    # filter.min_eager_ms and tasks.predicted_ms carry no comment in the source: their meaning is written in docs_gen
    monkeypatch.delitem(docs_gen.FIELD_MEANINGS, "filter.min_eager_ms")
    monkeypatch.delitem(docs_gen.COLUMN_MEANINGS, "predicted_ms")
    gaps = docs_gen.missing_meanings()
    assert "filter.min_eager_ms" in gaps and "TASKS.predicted_ms" in gaps
    assert docs_gen.main([]) == 1


def test_a_history_comment_is_not_a_meaning():
    assert docs_gen._pick(None, "measured in calls 66-67") == ""
    assert docs_gen._pick(None, "tasks per shard") == "tasks per shard"
    assert docs_gen._pick("written meaning", "measured in call 3") == "written meaning"


def test_no_page_cites_a_measurement_session():
    for text in docs_gen.pages().values():
        assert not docs_gen.HISTORY.search(text)
