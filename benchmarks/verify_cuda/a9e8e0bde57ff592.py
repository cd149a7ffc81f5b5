"""Hand-written CUDA candidate for task a9e8e0bde57ff592 of opsynth-ops-h200-v1 (gemm_epilogue).

torch.matmul of a 4-D input by a [width, 256] weight (cuBLAS) -> nn.Hardtanh(-1, 2) -> torch.mul(y): the
epilogue is one grid-stride kernel, in place on the GEMM's fresh output.
float32 only; sizes are read from the tensors at run time; the extension is built by load_inline at import.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "void epilogue_(torch::Tensor x, torch::Tensor y);"

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

__global__ void epilogue_kernel(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)blockDim.x * gridDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    const float w = y[i];
    float r;
    // nn.Hardtanh(-1, 2) (NaN passes through) -> torch.mul(., y)
    const float h = v < -1.0f ? -1.0f : (v > 2.0f ? 2.0f : v);
    r = h * w;
    x[i] = r;
  }
}

// x: the GEMM output (written in place), y: the second operand of the epilogue
void epilogue_(torch::Tensor x, torch::Tensor y) {
  TORCH_CHECK(x.is_cuda() && y.is_cuda(), "expected CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat, "expected float32");
  TORCH_CHECK(x.is_contiguous() && y.is_contiguous(), "expected contiguous tensors");
  TORCH_CHECK(x.sizes() == y.sizes(), "expected tensors of one shape");
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t n = x.numel();
  if (n == 0) return;
  epilogue_kernel<<<pw_blocks(n), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

ext = load_inline(name="opsynth_verify_cuda_a9e8e0bde57ff592", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["epilogue_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.matmul_weight = nn.Parameter(torch.randn(width, 256) * 0.02)

    def forward(self, x, y):
        out = torch.matmul(x, self.matmul_weight)
        ext.epilogue_(out, y.contiguous())
        return out
