"""One build directory for the suite's shared C++ extension per test session: built once, loaded by every candidate."""

import pytest


@pytest.fixture(scope="session")
def ext_dir(tmp_path_factory):
    import os

    from torch.utils.cpp_extension import load_inline

    from verify.suite import EXT_SOURCE

    d = tmp_path_factory.mktemp("torch_ext")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(d)  # the build below and every worker use this directory
    load_inline(name="opsynth_verify_suite", cpp_sources=EXT_SOURCE,
                functions=["relu_k", "relu_aten", "relu_bf16", "relu_cached", "zero_"], verbose=False)
    yield str(d)
    os.environ.pop("TORCH_EXTENSIONS_DIR", None)


@pytest.fixture(scope="session")
def suite_task(tmp_path_factory):
    from verify.suite import TASK

    p = tmp_path_factory.mktemp("task") / "linear_relu.py"
    p.write_text(TASK)
    return str(p)
