"""The static gate before any execution: KernelBench shape, allowed imports, no escape hatches."""

import pytest

from filters.static_check import REFERENCE_IMPORTS, check_task_source

GOOD = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, n):
        super(Model, self).__init__()
        self.lin = nn.Linear(n, n)
    def forward(self, x):
        return F.gelu(self.lin(x)) * math.sqrt(2.0)

n = 8
def get_inputs():
    return [torch.rand(4, n)]
def get_init_inputs():
    return [n]
'''


def test_a_kernelbench_module_passes():
    assert check_task_source(GOOD) is None


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (("import math", "import os"), "forbidden import 'os'"),
        (("import math", "from subprocess import run"), "forbidden import from 'subprocess'"),
        (("import math", "from . import x"), "forbidden import"),
        (("return [n]", "return [open('/etc/passwd').read()]"), "forbidden name 'open'"),
        (("return [n]", "return [eval('n')]"), "forbidden name 'eval'"),
        (("return [n]", "return [__import__('os')]"), "forbidden name '__import__'"),
        (("return [n]", "return [torch.load('w.pt')]"), "forbidden attribute .load"),
        (("return [n]", "return [x.__class__.__subclasses__()]"), "forbidden dunder"),
        (("class Model(", "class Net("), "missing top-level Model"),
        (("def get_inputs", "def inputs"), "missing top-level get_inputs"),
        (("return [n]", "return [n"), "syntax error"),
    ],
)
def test_bad_sources_are_rejected_with_a_reason(edit, fragment):
    code = GOOD.replace(*edit)
    assert code != GOOD
    reason = check_task_source(code)
    assert reason is not None and fragment in reason


def test_reference_imports_are_only_for_trusted_code():
    code = GOOD.replace("import math", "import numpy as np")
    assert check_task_source(code) is not None
    assert check_task_source(code, REFERENCE_IMPORTS) is None


def test_empty_source():
    assert "empty" in check_task_source("   ")
