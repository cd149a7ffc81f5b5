import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_L": 256}, num_warps=2), triton.Config({"BLOCK_L": 1024}, num_warps=4)],
    key=["C", "L"],
)
@triton.jit
def amax_dim1_kernel(x_ptr, out_ptr, C, L, BLOCK_C: tl.constexpr, BLOCK_L: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    offs_c = tl.arange(0, BLOCK_C)
    offs_l = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    mask = (offs_c[:, None] < C) & (offs_l[None, :] < L)
    x = tl.load(x_ptr + b * C * L + offs_c[:, None] * L + offs_l[None, :], mask=mask, other=-float("inf"))
    tl.store(out_ptr + b * L + offs_l, tl.max(x, axis=0), mask=offs_l < L)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        B, C, L = x.shape
        out = torch.empty((B, L), device=x.device, dtype=x.dtype)
        grid = lambda meta: (B, triton.cdiv(L, meta["BLOCK_L"]))  # noqa: E731
        amax_dim1_kernel[grid](x, out, C, L, BLOCK_C=triton.next_power_of_2(C))
        return out
