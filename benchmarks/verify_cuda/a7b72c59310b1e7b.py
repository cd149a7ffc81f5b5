"""Hand-written CUDA candidate for task a7b72c59310b1e7b of opsynth-ops-h200-v1 (reduction).

nn.Tanh -> torch.mean(dim=1) of a 3-D input (a middle dim): one thread per output element, grid-stride,
reading down the reduced dim.
float32 only; sizes are read from the tensors at run time; the extension is built by load_inline at import.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor fused_forward(torch::Tensor x);"

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <math.h>

// grid-stride launch: at most 8192 blocks of 256 threads, 64-bit indices
static inline unsigned int pw_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned int)(b < 8192 ? b : 8192);
}

// mean over dim 1 of x viewed as [outer, n_red, inner]: one thread per output element (outer, inner), reading
// down the reduced dim with a stride of `inner` (neighbouring threads read neighbouring addresses)
__global__ void mid_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t outer, int64_t n_red,
                           int64_t inner) {
  const int64_t total = outer * inner;
  const int64_t stride = (int64_t)blockDim.x * gridDim.x;
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
    const int64_t b = o / inner;
    const int64_t i = o - b * inner;
    const float* p = x + b * n_red * inner + i;
    float acc = 0.0f;
    for (int64_t c = 0; c < n_red; ++c) acc += tanhf(p[c * inner]);  // nn.Tanh
    out[o] = acc / (float)n_red;  // torch.mean
  }
}

torch::Tensor fused_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "expected float32");
  TORCH_CHECK(x.is_contiguous(), "expected a contiguous tensor");
  const c10::cuda::CUDAGuard device_guard(x.device());
  TORCH_CHECK(x.dim() >= 2, "expected at least two dims");
  const int64_t outer = x.size(0);
  const int64_t n_red = x.size(1);
  int64_t inner = 1;
  for (int64_t d = 2; d < x.dim(); ++d) inner *= x.size(d);
  auto sizes = x.sizes().vec();
  sizes.erase(sizes.begin() + 1);  // keepdim=False
  auto out = torch::empty(sizes, x.options());
  const int64_t total = outer * inner;
  if (total == 0) return out;
  TORCH_CHECK(n_red > 0, "mean over an empty dim");
  mid_kernel<<<pw_blocks(total), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), outer, n_red, inner);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

ext = load_inline(name="opsynth_verify_cuda_a7b72c59310b1e7b", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["fused_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.tanh = nn.Tanh()

    def forward(self, x):
        return ext.fused_forward(x.contiguous())
