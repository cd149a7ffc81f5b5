"""`pytest -m gpu` on an image without the CPU stack's packages skips the modules that need them; a plain run
still fails on them."""

import shutil
import subprocess
import sys
from pathlib import Path


def test_a_module_importing_a_missing_package_is_skipped_only_when_gpu_tests_are_selected(tmp_path):
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_needs_absent.py").write_text("import opsynth_absent_package_xyz\n\ndef test_a():\n    pass\n")
    (tmp_path / "test_gpu.py").write_text(
        "import pytest\n\n@pytest.mark.gpu\ndef test_b():\n    pass\n\ndef test_c():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)

    gpu = run("-m", "gpu")
    assert gpu.returncode == 0 and "1 passed, 1 deselected" in gpu.stdout, gpu.stdout
    plain = run()
    assert plain.returncode != 0 and "opsynth_absent_package_xyz" in plain.stdout, plain.stdout
