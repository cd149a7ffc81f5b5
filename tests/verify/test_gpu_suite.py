"""On a GPU: the side-stream route is caught, an honest CUDA kernel (load_inline) gets reward >= 1 twice, and a
worker past its memory cap runs out of memory."""

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


@pytest.mark.gpu
def test_a_candidate_past_its_memory_cap_runs_out_of_memory(ext_dir, suite_task):
    _need_cuda()
    # an honest kernel that also holds 2 GiB it never needs: under a 1 GiB cap its forward runs out of memory
    hog = CUDA_RELU.replace("    def forward(self, x):\n",
                            "    def forward(self, x):\n        self.hog = torch.empty(2**29, device=x.device)\n")
    capped = verify(suite_task, hog, device="cuda", extensions_dir=ext_dir, gpu_memory_cap=2**30)
    free = verify(suite_task, hog, device="cuda", extensions_dir=ext_dir)
    assert capped["reward"] == -1 and "out of memory" in (capped["error"] or "").lower(), capped
    assert free["correct"] and free["reward"] >= 1, free


@pytest.mark.gpu
def test_a_cpp_escape_is_caught_by_the_kernels_it_launches_and_paid_without_that_layer(ext_dir, suite_tasks):
    """At::_ops::cumsum past the Python key, with the extension layer off: the dispatch mode never sees it, the
    profiler sees libtorch's scan kernel launched under no allowed operator."""
    _need_cuda()
    route = "C++ past the Python key, by kernel name (CUDA)"
    src, why, off, _ = ROUTES[route]
    task = suite_tasks["cumsum_relu"]
    caught = verify(task, src, device="cuda", off=off, rounds=2, extensions_dir=ext_dir)
    assert caught["reward"] == -1 and why in (caught["hack"] or ""), caught
    slipped = verify(task, src, device="cuda", off=(*off, "kernel_names"), rounds=2, extensions_dir=ext_dir)
    assert slipped["correct"] and slipped["reward"] >= 1 and slipped["hack"] is None, slipped


@pytest.mark.gpu
def test_library_tier_on_the_gpu_lists_the_call_and_its_kernels_pass(ext_dir, suite_tasks):
    _need_cuda()
    from verify.suite import HONEST_CUMSUM, LIBRARY_CUMSUM

    task = suite_tasks["cumsum_relu"]
    strict = verify(task, LIBRARY_CUMSUM, device="cuda", rounds=2, extensions_dir=ext_dir)
    assert strict["reward"] == -1 and "aten::cumsum" in strict["hack"], strict
    lib = verify(task, LIBRARY_CUMSUM, device="cuda", rounds=2, extensions_dir=ext_dir, allow=["aten::cumsum"])
    assert lib["correct"] and lib["reward"] >= 1 and lib["library_calls"] == ["aten::cumsum"], lib
    own = verify(task, HONEST_CUMSUM, device="cuda", rounds=2, extensions_dir=ext_dir)
    assert own["correct"] and own["reward"] >= 1 and own["kernels"], own
