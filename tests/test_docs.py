"""The README is a short guide and docs/ a manual of current facts: size, headings, links, no commit hashes or
history outside the generated figures page, and the auditing page's queries run on the shipped release."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
CALL_HEADING = re.compile(r"^#+ .*\bcalls? \d+", re.I | re.M)
# a commit hash: 7 to 40 hex digits with a digit and a letter among them, a word of its own. Task ids are 16 hex
# digits (a release's rows are named by them), so exactly 16 is an id, not a commit
HEX = re.compile(r"(?<![0-9A-Za-z_/.@-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_-])")
HISTORY = re.compile(r"\bcommits? [0-9a-f]{7,40}\b|not measured yet|has not (?:reached|been [a-z]+) [a-z ]*yet|^#+ .*known problem", re.I | re.M)
# measurements live on the figures page, generated with the commit that measured each
GENERATED_WITH_COMMITS = {"figures.md"}
MANUAL = [p for p in PAGES if p.name not in GENERATED_WITH_COMMITS]


def test_the_readme_is_at_most_25000_characters():
    assert len(README.read_text()) <= 25_000


def test_no_heading_in_the_readme_or_docs_names_a_gpu_call():
    bad = [f"{p.name}: {m.group(0)}" for p in PAGES for m in CALL_HEADING.finditer(p.read_text())]
    assert bad == []


def test_the_readme_passes_no_profile_settings_by_hand():
    # the CLI table names the option (`--set profile.KEY=VALUE`); no command passes a setting
    assert not re.search(r"--set profile\.(?!KEY=VALUE)", README.read_text())


def test_every_docs_link_in_the_readme_resolves():
    links = re.findall(r"\]\((docs/[^)#\s]+)", README.read_text())
    assert links, "the README links into docs/"
    missing = sorted({link for link in links if not (ROOT / link).exists()})
    assert missing == []


def test_the_heading_rule_catches_a_call_heading():
    assert CALL_HEADING.search("## Calls 5-8 (details)") and not CALL_HEADING.search("## Running on GPUs")


def history_in(text: str) -> list[str]:
    """Commit hashes and history phrases in a page, each with its line number."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        out += [f"{i}: {m.group(0)}" for m in HEX.finditer(line) if len(m.group(0)) != 16]
        out += [f"{i}: {m.group(0)}" for m in HISTORY.finditer(line)]
    return out


@pytest.mark.parametrize("page", MANUAL, ids=lambda p: p.name)
def test_no_commit_hash_or_history_outside_the_figures_page(page):
    assert history_in(page.read_text()) == []


def test_the_history_rule_catches_commits_and_spares_task_ids():
    assert history_in("measured at commit 903bc34") and history_in("baseline bb91683, before")
    assert history_in("## Known problem: x") and history_in("| not measured yet |")
    assert history_in(f"a full hash {'a1b2c3d4' * 5}")
    assert history_in("task `79c6cdbad6aa9222` fails draw 2; data/releases/v1:c0527850f4788258 and 1,487 passed "
                      "with kernelbench_main@423217d9fda9, a decade, 2b3e5c") == []


SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.S)


def test_the_auditing_pages_queries_run_on_the_shipped_release(monkeypatch):
    import duckdb

    queries = SQL_BLOCK.findall((ROOT / "docs" / "auditing.md").read_text())
    assert len(queries) >= 4, "docs/auditing.md leads with ready-to-paste queries"
    monkeypatch.chdir(ROOT)  # the page's paths are from the repository root
    con = duckdb.connect()
    for sql in queries:
        assert con.execute(sql).fetchall(), sql
    con.close()
