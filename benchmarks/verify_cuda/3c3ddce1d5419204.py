"""Hand-written CUDA candidate for task 3c3ddce1d5419204 of opsynth-ops-h200-v1 (norm).

F.rms_norm over the last dim (eps=None: float32 epsilon) -> nn.LeakyReLU(0.2): one thread block per row,
shared-memory tree sum of squares, then a second pass that writes.
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

#define BLOCK 256

// tree reduction in shared memory; every thread of the block gets the result
__device__ __forceinline__ float block_sum(float v, float* sh) {
  const int tid = threadIdx.x;
  sh[tid] = v;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] += sh[tid + s];
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

// max that propagates NaN, as torch.amax / softmax's max do
__device__ __forceinline__ float nan_max(float a, float b) {
  return (a != a || a > b) ? a : b;
}

__device__ __forceinline__ float block_max(float v, float* sh) {
  const int tid = threadIdx.x;
  sh[tid] = v;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] = nan_max(sh[tid], sh[tid + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

// one block per row: F.rms_norm over the last dim (eps = float32 machine epsilon, the eps=None default),
// then nn.LeakyReLU(0.2)
__global__ void row_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n_cols) {
  __shared__ float sh[BLOCK];
  const int64_t base = (int64_t)blockIdx.x * n_cols;
  const float* xr = x + base;
  float* orow = out + base;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < n_cols; j += BLOCK) {
    const float v = xr[j];
    acc += v * v;
  }
  const float ss = block_sum(acc, sh);
  const float inv = rsqrtf(ss / (float)n_cols + 1.1920928955078125e-07f);
  for (int64_t j = threadIdx.x; j < n_cols; j += BLOCK) {
    const float y = xr[j] * inv;
    orow[j] = y > 0.0f ? y : y * 0.2f;
  }
}

torch::Tensor fused_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "expected float32");
  TORCH_CHECK(x.is_contiguous(), "expected a contiguous tensor");
  const c10::cuda::CUDAGuard device_guard(x.device());
  TORCH_CHECK(x.dim() >= 1, "expected at least one dim");
  const int64_t n_cols = x.size(-1);
  const int64_t rows = n_cols == 0 ? 0 : x.numel() / n_cols;
  auto out = torch::empty_like(x);
  if (rows == 0 || n_cols == 0) return out;
  TORCH_CHECK(rows <= 2147483647LL, "too many rows for a 1-D grid");
  row_kernel<<<(unsigned int)rows, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n_cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

ext = load_inline(name="opsynth_verify_cuda_3c3ddce1d5419204", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["fused_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.fused_forward(x.contiguous())
