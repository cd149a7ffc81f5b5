"""The static gate before any execution: KernelBench shape, and nothing that reaches the host (danger, not style)."""

import importlib.util

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


HARMLESS = [
    ("import math", "from typing import *"),
    ("import math", "from typing import List, Optional\nimport math"),
    ("import math", "from dataclasses import dataclass\nimport math"),
    ("import math", "import functools, itertools, collections\nfrom collections import OrderedDict\nimport math"),
    ("import math", "import numpy as np\nimport math"),
    ("import math", "from torch.nn import Linear\nimport math"),
    # a parameter or local variable called `input` is a name, not the builtin
    ("def forward(self, x):\n        return", "def forward(self, input):\n        x = input\n        return"),
    ("return [torch.rand(4, n)]", "input = torch.rand(4, n)\n    return [input]"),
    ("n = 8", "input = 8\nn = input"),
    ("return [n]", "return [getattr(torch, 'float32') and n]"),
    ("self.lin = nn.Linear(n, n)", "self.ops = nn.ModuleList([nn.Linear(n, n)])\n        self.lin = self.ops[0]"),
    ("return [n]", "return [[n].remove(n) or n]"),
    ("return [n]", "return [hasattr(torch, 'bias') or n]"),
    ("return [n]", "return [torch.jit.script(nn.Linear(n, n)) and n]"),
    # torch's own names that share a host module's name, and harmless string annotations
    ("return [torch.rand(4, n)]", "return [torch.rand(4, n).select(0, 1), torch.select(torch.rand(2, 2), 0, 0)]"),
    ("return [torch.rand(4, n)]", "return [torch.signal.windows.hann(n)]"),
    ("def forward(self, x):", "def forward(self, x: \"torch.Tensor\") -> \"torch.Tensor\":"),
    ("import math", "import math\nfrom typing import List\nfrom operator import mul"),
]


@pytest.mark.parametrize("edit", HARMLESS)
def test_harmless_names_and_imports_pass(edit):
    code = GOOD.replace(*edit)
    assert code != GOOD
    assert check_task_source(code) is None


DANGEROUS = [
    (("import math", "import os"), "forbidden import 'os'"),
    (("import math", "import sys"), "forbidden import 'sys'"),
    (("import math", "import os.path as p"), "forbidden import 'os.path'"),
    (("import math", "import subprocess"), "forbidden import 'subprocess'"),
    (("import math", "from subprocess import run"), "forbidden import 'subprocess.run'"),
    (("import math", "import socket"), "forbidden import 'socket'"),
    (("import math", "import ctypes"), "forbidden import 'ctypes'"),
    (("import math", "from importlib import import_module"), "forbidden import 'importlib.import_module'"),
    (("import math", "import builtins"), "forbidden import 'builtins'"),
    (("import math", "from torch.utils import cpp_extension"), "forbidden import 'torch.utils.cpp_extension'"),
    (("import math", "from torch import hub"), "forbidden import 'torch.hub'"),
    (("import math", "from torch import load"), "forbidden attribute .load"),
    (("import math", "from . import x"), "forbidden relative import"),
    # imports hidden inside a function are found too
    (("return [n]", "import os\n    return [n]"), "forbidden import 'os'"),
    (("return [n]", "return [open('/etc/passwd').read()]"), "forbidden name 'open'"),
    (("return [n]", "return [eval('n')]"), "forbidden name 'eval'"),
    (("return [n]", "exec('n = 1')\n    return [n]"), "forbidden name 'exec'"),
    (("return [n]", "return [compile('1', 'f', 'eval')]"), "forbidden name 'compile'"),
    (("return [n]", "return [__import__('os')]"), "forbidden name '__import__'"),
    (("return [n]", "return [input()]"), "forbidden builtin 'input'"),
    (("return [n]", "return [__builtins__['open']]"), "forbidden name '__builtins__'"),
    (("return [n]", "return [torch.load('w.pt')]"), "forbidden attribute .load"),
    (("return [n]", "return [torch._C._get_tracing_state()]"), "forbidden attribute ._C"),
    (("return [n]", "return [torch.ops.myns.myop(n)]"), "forbidden attribute .ops"),
    # obfuscated routes: dunder chains, reflection, aliases, format strings, shadowing in another scope
    (("return [n]", "return [x.__class__.__subclasses__()]"), "forbidden dunder"),
    (("return [n]", "return [().__class__.__base__]"), "forbidden dunder"),
    (("return [n]", "return [get_inputs.__globals__['torch']]"), "forbidden dunder attribute .__globals__"),
    (("return [n]", "return [getattr(torch, 'lo' + 'ad')('w.pt')]"), "computed attribute name"),
    (("return [n]", "return [getattr(get_inputs, '__globals__')]"), "private attribute '__globals__'"),
    (("return [n]", "return [getattr(torch, 'load')('w.pt')]"), "forbidden attribute .load"),
    (("return [n]", "g = getattr\n    return [g(torch, 'load')]"), "forbidden use of 'getattr'"),
    (("return [n]", "t = torch\n    return [t.load('w.pt')]"), "forbidden attribute .load"),
    (("return [n]", "return ['{0.__init__.__globals__}'.format(Model)]"), "format string"),
    (("return [n]", "return [vars()['n']]"), "forbidden name 'vars'"),
    (("return [n]", "return [globals()['n']]"), "forbidden name 'globals'"),
    (("return [n]", "return [(lambda input: input)(1), input()]"), "forbidden builtin 'input'"),
    (("return [n]", "return [[input for input in range(2)], input()]"), "forbidden builtin 'input'"),
    (("return [n]", "return [(lambda f: f.f_globals)(None)]"), "forbidden attribute .f_globals"),
    (("return [n]", "import numpy as np\n    return [np.fromfile('x')]"), "forbidden attribute .fromfile"),
    # allowed modules re-export host modules: reached by attribute, by an alias, or by getattr with a constant
    (("return [n]", "return [torch.os.listdir('/')]"), "forbidden attribute .os: it reaches a host module"),
    (("return [n]", "return [torch.builtins.open('/etc/passwd')]"), "forbidden attribute .builtins"),
    (("return [n]", "return [torch.importlib.import_module('o' + 's')]"), "forbidden attribute .importlib"),
    (("return [n]", "return [getattr(torch, 'importlib')]"), "forbidden attribute .importlib"),
    (("return [n]", "t = torch\n    return [t.sys.modules['os']]"), "forbidden attribute .sys"),
    (("return [n]", "import collections\n    return [collections._sys.modules]"), "forbidden attribute ._sys"),
    (("return [n]", "import enum\n    return [enum.bltns.eval('n')]"), "forbidden attribute .bltns"),
    (("return [n]", "return [torch.ctypes.CDLL(None)['sys' + 'tem']]"), "forbidden attribute .ctypes"),
    (("return [n]", "import numpy as np\n    return [np.zeros(1).ctypes.data]"), "forbidden attribute .ctypes"),
    (("return [n]", "self_ = [torch]\n    return [self_[0].subprocess]"), "forbidden attribute .subprocess"),
    # string evaluation and getattr by another name, from allowed modules (star imports included)
    (("def forward(self, x):", "def forward(self, x: \"__import__('os')\"):"), "forbidden name '__import__'"),
    (("n = 8", "v: 'List[open]' = 1\nn = 8"), "forbidden name 'open'"),
    (("return [n]", "import typing\n    return [typing.get_type_hints(Model.forward)]"), "forbidden attribute .get_type_hints"),
    (("return [n]", "return [get_type_hints(Model.forward)]"), "forbidden name 'get_type_hints'"),
    (("return [n]", "import operator\n    return [operator.attrgetter('lo' + 'ad')(torch)]"), "forbidden attribute .attrgetter"),
    (("import math", "from operator import methodcaller"), "forbidden attribute .methodcaller"),
    (("return [n]", "return [type(n).__mro__[1].__subclasses__()]"), "forbidden dunder"),
    (("return [n]", "return [__import__('importlib').import_module('os')]"), "forbidden name '__import__'"),
]


@pytest.mark.parametrize("edit, fragment", DANGEROUS)
def test_what_can_reach_the_host_is_refused_with_a_reason(edit, fragment):
    code = GOOD.replace(*edit)
    assert code != GOOD
    reason = check_task_source(code)
    assert reason is not None and fragment in reason, reason
    assert "(line " in reason


def test_a_parameter_called_input_does_not_shadow_the_builtin_elsewhere():
    code = GOOD.replace("def forward(self, x):", "def forward(self, x, input=None):").replace(
        "return [n]", "return [input()]")
    assert "forbidden builtin 'input'" in check_task_source(code)


def test_a_missing_third_party_package_has_its_own_reason():
    code = GOOD.replace("import math", "import math\nfrom transformers.activations import ACT2FN")
    reason = check_task_source(code)
    assert reason.startswith("needs package 'transformers'") and "imported at module level" in reason


def test_a_package_imported_inside_a_function_says_where():
    # Ops-6K rows build a transformers config in get_init_inputs: the module imports, the task cannot run
    code = GOOD.replace("return [n]", "import transformers\n    return [transformers.BertConfig()]")
    reason = check_task_source(code)
    assert reason.startswith("needs package 'transformers'") and "imported inside get_init_inputs()" in reason


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (("class Model(", "class Net("), "missing top-level Model"),
        (("def get_inputs", "def inputs"), "missing top-level get_inputs"),
        (("return [n]", "return [n"), "syntax error"),
    ],
)
def test_not_kernelbench_format(edit, fragment):
    assert fragment in check_task_source(GOOD.replace(*edit))


def test_reference_imports_are_only_for_trusted_code():
    code = GOOD.replace("import math", "import einops")
    installed = importlib.util.find_spec("einops") is not None
    # einops (tensor rearranging, nothing else) is accepted in tasks where it is installed
    assert (check_task_source(code) is None) == installed
    assert check_task_source(code, REFERENCE_IMPORTS) is None


def test_empty_source():
    assert "empty" in check_task_source("   ")


LAYERS = GOOD.replace("        self.lin = nn.Linear(n, n)\n",
                      "        for i in range(2):\n            setattr(self, f\"layer{i}\", nn.Linear(n, n))\n").replace(
    "return F.gelu(self.lin(x)) * math.sqrt(2.0)",
    "for i in range(2):\n            x = getattr(self, f\"layer{i}\")(x)\n        return x")


@pytest.mark.parametrize("code", [
    LAYERS,
    GOOD.replace("import math", "import math\nimport torch.functional"),
    LAYERS.replace('getattr(self, f"layer{i}")', '[getattr(self, f"layer{j}") for j in range(2)][i]'),
])
def test_harmless_forms_of_rewrites_pass(code):
    assert check_task_source(code) is None


@pytest.mark.parametrize(("old", "new", "fragment"), [
    ('getattr(self, f"layer{i}")', 'getattr(self, f"{i}layer")', "computed attribute name"),
    ('getattr(self, f"layer{i}")', 'getattr(torch, f"layer{i}")', "computed attribute name"),
    ('getattr(self, f"layer{i}")', 'getattr(self, f"_layer{i}")', "computed attribute name"),
    ('getattr(self, f"layer{i}")', 'getattr(self, f"lo{i}")', "computed attribute name"),  # could spell `load`
    ('setattr(self, f"layer{i}", nn.Linear(n, n))', 'setattr(torch, f"layer{i}", nn.Linear(n, n))', "'setattr'"),
    ('setattr(self, f"layer{i}", nn.Linear(n, n))', 'setattr(self, f"layer{i}", open)', "'open'"),
    ('setattr(self, f"layer{i}", nn.Linear(n, n))', 'setattr(self, "__class__", nn.Linear)', "'setattr'"),
])
def test_reflection_on_self_stays_narrow(old, new, fragment):
    assert fragment in (check_task_source(LAYERS.replace(old, new)) or "")
