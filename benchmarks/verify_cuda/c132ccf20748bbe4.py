"""Hand-written CUDA candidate for task c132ccf20748bbe4 of opsynth-ops-h200-v1 (gemm_epilogue).

torch.mm (cuBLAS) -> torch.clamp(-1, 0.5): the clamp is one grid-stride kernel, in place on the GEMM's fresh
output.
float32 only; sizes are read from the tensors at run time; the extension is built by load_inline at import.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "void epilogue_(torch::Tensor x);"

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

__global__ void epilogue_kernel(float* __restrict__ x, int64_t n) {
  const int64_t stride = (int64_t)blockDim.x * gridDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    float r;
    // torch.clamp(min=-1, max=0.5), NaN passes through
    r = v < -1.0f ? -1.0f : (v > 0.5f ? 0.5f : v);
    x[i] = r;
  }
}

// x: the GEMM output, written in place
void epilogue_(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "expected float32");
  TORCH_CHECK(x.is_contiguous(), "expected a contiguous tensor");
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t n = x.numel();
  if (n == 0) return;
  epilogue_kernel<<<pw_blocks(n), 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

ext = load_inline(name="opsynth_verify_cuda_c132ccf20748bbe4", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["epilogue_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features):
        super().__init__()
        self.mm_weight = nn.Parameter(torch.randn(in_features, 64) * 0.02)

    def forward(self, x):
        mm = torch.mm(x, self.mm_weight)
        ext.epilogue_(mm)
        return mm
