import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_abs_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    out_row = out_ptr + row * n_cols
    # the running sum in float64: a long row's rounding stays below the reference's
    carry = tl.sum(tl.zeros([BLOCK], dtype=tl.float64), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float64)
        s = tl.cumsum(x, axis=0) + carry
        tl.store(out_row + cols, tl.abs(s).to(tl.float32), mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, n_cols = x.shape
        out = torch.empty_like(x)
        cumsum_abs_kernel[(rows,)](x, out, n_cols, BLOCK=1024, num_warps=4)
        return out
