import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fix_rms_norm_kernel(x_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    out_row = out_ptr + row * n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        t = tl.where(x >= 0, tl.floor(x), tl.ceil(x))  # torch.fix: round toward zero
        acc += t * t
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        t = tl.where(x >= 0, tl.floor(x), tl.ceil(x))
        tl.store(out_row + cols, t * rstd, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, n_cols = x.shape
        out = torch.empty_like(x)
        eps = torch.finfo(x.dtype).eps  # F.rms_norm's default
        fix_rms_norm_kernel[(rows,)](x, out, n_cols, eps, BLOCK=2048, num_warps=8)
        return out
