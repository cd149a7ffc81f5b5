"""On a GPU: the side-stream route is caught, and an honest CUDA kernel (load_inline) gets reward >= 1 twice."""

import pytest

from verify.api import verify
from verify.suite import ROUTES

CUDA_RELU = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor relu_cuda(torch::Tensor x);"
CU = r"""
#include <torch/extension.h>
__global__ void k(const float* a, float* b, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] > 0.f ? a[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
  auto xc = x.contiguous(); auto y = torch::empty_like(xc); long n = xc.numel();
  k<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
ext = load_inline(name="opsynth_verify_cuda_relu", cpp_sources=CPP, cuda_sources=CU, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return ext.relu_cuda(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
'''


def _need_cuda():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.mark.gpu
def test_side_stream_route_is_caught(ext_dir, suite_task):
    _need_cuda()
    src, why, off, _ = ROUTES["side stream"]
    res = verify(suite_task, src, device="cuda", off=off, rounds=2, extensions_dir=ext_dir)
    assert res["reward"] == -1 and why in (res["hack"] or ""), res


@pytest.mark.gpu
def test_honest_cuda_kernel_gets_a_reward(ext_dir, suite_task):
    _need_cuda()
    a = verify(suite_task, CUDA_RELU, device="cuda", extensions_dir=ext_dir)
    b = verify(suite_task, CUDA_RELU, device="cuda", extensions_dir=ext_dir)
    assert a["correct"] and a["reward"] >= 1 and b["reward"] >= 1, (a, b)
