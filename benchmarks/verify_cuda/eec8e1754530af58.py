"""Hand-written CUDA candidate for task eec8e1754530af58 of opsynth-ops-h200-v1 (pointwise).

F.softplus(beta=0.5, threshold=20) -> nn.SiLU -> nn.Hardsigmoid, one fused grid-stride kernel.
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

__global__ void fused_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t stride = (int64_t)blockDim.x * gridDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    float r;
    // F.softplus(beta=0.5, threshold=20): x where x*beta > threshold, else log1p(exp(x*beta)) / beta
    const float bx = v * 0.5f;
    const float sp = bx > 20.0f ? v : log1pf(expf(bx)) / 0.5f;
    // nn.SiLU: x / (1 + exp(-x))
    const float s = sp / (1.0f + expf(-sp));
    // nn.Hardsigmoid: min(max(x + 3, 0), 6) / 6
    r = fminf(fmaxf(s + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
    out[i] = r;
  }
}

torch::Tensor fused_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "expected float32");
  TORCH_CHECK(x.is_contiguous(), "expected a contiguous tensor");
  const c10::cuda::CUDAGuard device_guard(x.device());
  auto out = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  fused_kernel<<<pw_blocks(n), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

ext = load_inline(name="opsynth_verify_cuda_eec8e1754530af58", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["fused_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.fused_forward(x.contiguous())
