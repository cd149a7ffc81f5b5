"""docs/run-directory.md and docs/configuration.md are what pipeline.outputs.docs_gen builds from the schema and
the config dataclasses, and every column and field has a meaning."""

import dataclasses

from pipeline.outputs import docs_gen
from pipeline.rundir import config, schema


def test_the_generated_pages_are_not_stale():
    for name, build in docs_gen.PAGES.items():
        assert (docs_gen.DOCS / name).read_text() == build(), f"run python -m pipeline.outputs.docs_gen ({name})"


def test_every_column_and_config_field_has_a_meaning():
    assert docs_gen.missing_meanings() == [], "add a meaning in schema.py / config.py or docs_gen's tables"


def test_every_table_column_and_field_is_on_its_page():
    rd = (docs_gen.DOCS / "run-directory.md").read_text()
    for table, sch in schema.BY_TABLE.items():
        assert f"## {table}" in rd
        for name in sch.names:
            assert f"| `{name}` |" in rd, f"{table}.{name}"
    cfg = (docs_gen.DOCS / "configuration.md").read_text()
    for section in dataclasses.fields(config.Config):
        if dataclasses.is_dataclass(getattr(config, str(section.type), section.type)):
            sec = getattr(config, str(section.type), section.type)
            for f in dataclasses.fields(sec):
                assert f"| `{section.name}.{f.name}` |" in cfg


def test_a_column_without_a_meaning_is_reported(monkeypatch):
    monkeypatch.setitem(docs_gen.COLUMN_DOCS, "task_id", "")
    monkeypatch.setattr(docs_gen, "_column_meanings", lambda: {"tasks": {"zz_new": ""}})
    assert "tasks.zz_new" in docs_gen.missing_meanings()


def test_the_page_says_which_columns_each_shipped_release_lacks():
    page = (docs_gen.DOCS / "run-directory.md").read_text()
    releases = docs_gen.release_columns()
    assert releases, "no shipped release under data/releases/*/data to compare with"
    for name, have in releases.items():
        assert set(have) <= set(schema.PUBLISHED.names), f"{name} has columns run-directory.md does not describe"
        line = next(ln for ln in page.splitlines() if ln.startswith(f"- `data/releases/{name}`"))
        lacks = [c for c in schema.PUBLISHED.names if c not in have]
        assert f"({len(have)} columns)" in line
        assert all(f"`{c}`" in line for c in lacks) and (lacks or "every column" in line)
