"""One build directory for the suite's shared extensions per test session: built once, loaded by every candidate."""

import pytest


@pytest.fixture(scope="session")
def ext_dir(tmp_path_factory):
    import os

    from verify.suite import prebuild

    d = tmp_path_factory.mktemp("torch_ext")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(d)  # the build below and every worker use this directory
    prebuild()
    yield str(d)
    os.environ.pop("TORCH_EXTENSIONS_DIR", None)


@pytest.fixture(scope="session")
def suite_task(tmp_path_factory):
    from verify.suite import TASK

    p = tmp_path_factory.mktemp("task") / "linear_relu.py"
    p.write_text(TASK)
    return str(p)
