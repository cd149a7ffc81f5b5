import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def diff_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols - 1
    a = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    b = tl.load(x_ptr + row * n_cols + cols + 1, mask=mask, other=0.0)
    tl.store(out_ptr + row * (n_cols - 1) + cols, b - a, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, n_cols = x.shape
        out = torch.empty((rows, n_cols - 1), device=x.device, dtype=x.dtype)
        BLOCK = 1024
        diff_kernel[(rows, triton.cdiv(n_cols - 1, BLOCK))](x, out, n_cols, BLOCK=BLOCK)
        return out
