"""The README is a short guide and docs/ a manual of current facts: size, headings, links."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
CALL_HEADING = re.compile(r"^#+ .*\bcalls? \d+", re.I | re.M)


def test_the_readme_is_at_most_25000_characters():
    assert len(README.read_text()) <= 25_000


def test_no_heading_in_the_readme_or_docs_names_a_gpu_call():
    bad = [f"{p.name}: {m.group(0)}" for p in PAGES for m in CALL_HEADING.finditer(p.read_text())]
    assert bad == []


def test_the_readme_passes_no_profile_settings_by_hand():
    assert "--set profile." not in README.read_text()


def test_every_docs_link_in_the_readme_resolves():
    links = re.findall(r"\]\((docs/[^)#\s]+)", README.read_text())
    assert links, "the README links into docs/"
    missing = sorted({link for link in links if not (ROOT / link).exists()})
    assert missing == []


def test_the_heading_rule_catches_a_call_heading():
    assert CALL_HEADING.search("## Calls 5-8 (details)") and not CALL_HEADING.search("## Running on GPUs")
