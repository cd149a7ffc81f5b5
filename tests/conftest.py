"""Collection on a bare GPU image: `pytest -m gpu tests` there (torch and pyarrow, no duckdb, polars or Ray) skips
the test modules that import a package the image lacks, instead of stopping at the first one. Only when the run
selects GPU tests: on the CPU every module is collected, and a missing package fails as it should. And every test's
report databases go to a cache folder of its own, never the user's."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest


def _top_level_packages(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:  # module-level imports only: those run at collection
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if "gpu" not in (config.getoption("markexpr", "") or "") or collection_path.suffix != ".py":
        return None
    missing = [p for p in _top_level_packages(collection_path) if importlib.util.find_spec(p) is None]
    return True if missing else None


@pytest.fixture(autouse=True)
def _report_cache(tmp_path_factory, monkeypatch):
    """`opsynth report` keeps its databases in the user's cache folder: a test's go to a folder of its own (the
    commands a test starts inherit it)."""
    monkeypatch.setenv("OPSYNTH_CACHE_DIR", str(tmp_path_factory.mktemp("opsynth-cache")))
