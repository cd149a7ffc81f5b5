import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_inplace_kernel(y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    t = tl.exp(-2.0 * tl.abs(y))
    r = (1.0 - t) / (1.0 + t)
    tl.store(y_ptr + offsets, tl.where(y < 0, -r, r), mask=mask)


class ModelNew(nn.Module):
    """The GEMM with its bias through cuBLAS (addmm), tanh as a Triton epilogue over its output."""

    def __init__(self, length, out_features):
        super().__init__()
        self.linear = nn.Linear(length, out_features, bias=True)

    def forward(self, x):
        lead = x.shape[:-1]
        y = torch.addmm(self.linear.bias, x.reshape(-1, x.shape[-1]), self.linear.weight.t())
        n_elements = y.numel()
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731
        tanh_inplace_kernel[grid](y, n_elements, BLOCK_SIZE=1024)
        return y.view(*lead, y.shape[-1])
