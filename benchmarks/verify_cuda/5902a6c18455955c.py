"""Hand-written CUDA candidate for task 5902a6c18455955c of opsynth-ops-h200-v1 (pointwise).

torch.relu -> nn.Tanh -> torch.tanh, one fused grid-stride kernel.
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
    // torch.relu (NaN passes through) -> tanh -> tanh
    const float re = v < 0.0f ? 0.0f : v;
    r = tanhf(tanhf(re));
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

ext = load_inline(name="opsynth_verify_cuda_5902a6c18455955c", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["fused_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.fused_forward(x.contiguous())
