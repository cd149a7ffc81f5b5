"""One build directory for the suite's extensions per test session (the shared one and the C++ routes' own): built
once, loaded by every candidate."""

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
def suite_tasks(tmp_path_factory):
    """Each suite task (verify.suite.TASKS) as a file: name -> path."""
    from verify.suite import TASKS

    d = tmp_path_factory.mktemp("task")
    for name, code in TASKS.items():
        (d / f"{name}.py").write_text(code)
    return {name: str(d / f"{name}.py") for name in TASKS}


@pytest.fixture(scope="session")
def suite_task(suite_tasks):
    return suite_tasks["linear_relu"]
