"""The static check judges Triton by what Triton is: `tl.load`/`tl.store` and the kernel-writing API pass, the rest of
triton and every host route stay refused, and a Triton name bound to anything else is refused (so `tl = torch` cannot
borrow the Triton rule). The Triton corpus (benchmarks/verify_triton) passes it here, where triton is not installed;
it runs on a GPU (tests/verify/test_triton_corpus.py)."""

import pytest

from verify.static import check_candidate_source

BASE = "import torch\nimport torch.nn as nn\n{}\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
KERNEL = '''import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
                 key=["n"])
@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) + tl.sum(x, axis=0) * 0, mask=mask)


def launch(x, y):
    n = x.numel()
    k[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
'''
PASS = {
    "plain kernel": KERNEL,
    "from triton import language as tl": "from triton import language as tl\nimport triton\nf = tl.extra.cuda.libdevice.tanh\n",
    "libdevice": "from triton.language.extra import libdevice\nimport triton.language as tl\nf = libdevice.exp\n",
    "from triton import jit, cdiv": "from triton import jit, cdiv\nimport triton.language as tl\n",
    "import triton.language": "import triton.language\nf = triton.language.load\n",
    "next_power_of_2": "import triton\nb = triton.next_power_of_2(1000)\n",
}
REFUSE = {
    "torch.load": ("y = torch.load('f')\n", ".load"),
    "numpy load": ("import numpy as np\ny = np.load('f')\n", ".load"),
    "pickle.load": ("import pickle\ny = pickle.load(0)\n", "pickle"),
    "an object's .load": ("import triton.language as tl\nclass A:\n    pass\nA().load('f')\n", ".load"),
    "tl rebound to torch": ("import triton.language as tl\ntl = torch\ny = tl.load('f')\n", "binds the Triton name"),
    "tl as a parameter": ("import triton.language as tl\ndef f(tl):\n    return tl.load('f')\n", "binds the Triton name"),
    "tl imported from torch": ("import triton.language as tl\nfrom torch import serialization as tl\n",
                               "binds the Triton name"),
    "triton.runtime import": ("import triton.runtime\n", "triton.runtime"),
    "from triton.runtime": ("from triton.runtime import driver\n", "triton.runtime"),
    "triton.runtime attribute": ("import triton\nd = triton.runtime.driver\n", "triton.runtime"),
    "triton.compile": ("import triton\nd = triton.compile\n", "triton.compile"),
    "triton.testing": ("import triton\nd = triton.testing.do_bench\n", "triton.testing"),
    "a private Triton attribute": ("import triton.language as tl\nd = tl._C\n", "private"),
    "os inside a kernel file": (KERNEL + "import os\n", "'os'"),
}


@pytest.mark.parametrize("case", PASS)
def test_triton_kernels_pass(case):
    assert check_candidate_source(BASE.format(PASS[case])) is None


@pytest.mark.parametrize("case", REFUSE)
def test_host_routes_and_the_rest_of_triton_stay_refused(case):
    code, why = REFUSE[case]
    reason = check_candidate_source(BASE.format(code))
    assert reason and why in reason, reason
