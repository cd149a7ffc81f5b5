"""The cost mode's shortcuts give the same outputs as the real meta kernels, and its numbers are right."""

import functools

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from operators.cost import CostMode, aten_names, peak_bytes, predict_ms
from operators.trace import _Recorder


def _m(*shape):
    return torch.randn(*shape, device="meta")


CASES = {
    "log_softmax": lambda: F.log_softmax(_m(4, 8, 16), dim=1),
    "softmax": lambda: F.softmax(_m(4, 8, 16), dim=-1),
    "hardswish": lambda: F.hardswish(_m(4, 8)),
    "hardsigmoid": lambda: F.hardsigmoid(_m(4, 8)),
    "cumsum": lambda: torch.cumsum(_m(4, 8, 3), dim=1),
    "cumprod": lambda: torch.cumprod(_m(4, 8), dim=1),
    "logcumsumexp": lambda: torch.logcumsumexp(_m(4, 8), dim=1),
    "tril": lambda: torch.tril(_m(3, 5, 6), diagonal=1),
    "prelu": lambda: F.prelu(_m(4, 3, 5), torch.full((3,), 0.25, device="meta")),
    "mish": lambda: F.mish(_m(4, 8)),
    "softplus": lambda: F.softplus(_m(4, 8), beta=2.0),
    "elu": lambda: F.elu(_m(4, 8)),
    "leaky_relu": lambda: F.leaky_relu(_m(4, 8), 0.2),
    "hardtanh": lambda: F.hardtanh(_m(4, 8)),
    "layer_norm": lambda: F.layer_norm(_m(4, 6, 10), (10,)),
    "layer_norm2": lambda: F.layer_norm(_m(4, 6, 10), (6, 10)),
    "batch_norm": lambda: F.batch_norm(_m(4, 6, 5, 5), None, None, training=True),
    "group_norm": lambda: F.group_norm(_m(4, 6, 5, 5), 3),
    "bicubic": lambda: F.interpolate(_m(2, 3, 8, 9), scale_factor=2.0, mode="bicubic"),
    "bilinear": lambda: F.interpolate(_m(2, 3, 8, 9), scale_factor=0.5, mode="bilinear"),
    "nearest": lambda: F.interpolate(_m(2, 3, 8, 9), scale_factor=2.0, mode="nearest"),
    "linear": lambda: F.interpolate(_m(2, 3, 8), scale_factor=2.0, mode="linear"),
    "trilinear": lambda: F.interpolate(_m(2, 3, 4, 4, 4), scale_factor=2.0, mode="trilinear"),
    "grid_sample": lambda: F.grid_sample(_m(2, 3, 8, 8), _m(2, 5, 7, 2), align_corners=False),
    "cdist": lambda: torch.cdist(_m(2, 6, 4), _m(2, 9, 4)),
    "gelu": lambda: F.gelu(_m(4, 8), approximate="tanh"),
    "gt_float": lambda: (_m(4, 8) > 0.5).float(),
    "broadcast_add": lambda: _m(4, 3, 5) + _m(3, 1),
    "mean": lambda: _m(4, 3, 5).mean(dim=1),
    "mean_keepdim": lambda: _m(4, 3, 5).mean(dim=(1, 2), keepdim=True),
    "sum": lambda: _m(4, 3, 5).sum(dim=-1),
    "amax": lambda: torch.amax(_m(4, 3, 5), dim=1, keepdim=True),
    "amin": lambda: torch.amin(_m(4, 3, 5), dim=2),
    "vector_norm": lambda: torch.linalg.vector_norm(_m(4, 3, 5), ord=1, dim=1),
    "norm": lambda: torch.norm(_m(4, 3, 5), p=2, dim=2),
    "logsumexp": lambda: torch.logsumexp(_m(4, 3, 5), dim=1, keepdim=True),
    "std": lambda: torch.std(_m(4, 3, 5), dim=1),
    "var_keepdim": lambda: torch.var(_m(4, 3, 5), dim=2, keepdim=True),
    "prod": lambda: torch.prod(_m(4, 3, 5), dim=1),
    "sum_all": lambda: _m(4, 3).sum(),
    "mm": lambda: _m(6, 5) @ _m(5, 7),
    "linear_3d": lambda: F.linear(_m(2, 6, 5), _m(7, 5), _m(7)),
    "addmm": lambda: torch.addmm(_m(7), _m(6, 5), _m(5, 7), beta=0.5),
    "bmm": lambda: torch.bmm(_m(3, 6, 5), _m(3, 5, 2)),
    "baddbmm": lambda: torch.baddbmm(_m(3, 6, 2), _m(3, 6, 5), _m(3, 5, 2)),
    "clamp_min_": lambda: _m(4, 5).clamp_min_(1e-6),
    "clamp_min_tensor": lambda: _m(4, 5).clamp_min_(torch.tensor(1e-8, device="meta")),
    "mul_broadcast_": lambda: _m(4, 5).mul_(_m(4, 1)),
    "mul_scalar_transposed": lambda: _m(4, 6, 5).transpose(1, 2) * 0.5,
    "exp_permuted": lambda: torch.exp(_m(2, 3, 4, 5).permute(0, 2, 3, 1)),
    "add_scalar_tensor_transposed": lambda: _m(4, 6).t() + torch.tensor(2.0, device="meta"),
    "sigmoid_sliced": lambda: torch.sigmoid(_m(4, 6)[:, ::2]),
    "contiguous_transposed": lambda: _m(4, 6, 5).transpose(0, 1).contiguous(),
    "clone_transposed": lambda: torch.clone(_m(4, 6, 5).transpose(0, 1)),
    "mha": lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True, device="meta")(
        _m(2, 3, 8), _m(2, 3, 8), _m(2, 3, 8), need_weights=False)[0],
    "add_": lambda: _m(4, 5).add_(_m(5), alpha=2),
    "lerp_": lambda: _m(4, 5).lerp_(_m(4, 5), 0.5),
    "cosine_similarity": lambda: F.cosine_similarity(_m(4, 6, 5), _m(4, 6, 5), dim=1),
    "logsigmoid": lambda: F.logsigmoid(_m(4, 6, 5)),
    "tril_bool": lambda: torch.ones(5, 5, dtype=torch.bool, device="meta").tril(),
    "triu_batched": lambda: torch.triu(_m(3, 5, 6), diagonal=-1),
    "add_both_transposed": lambda: _m(4, 6, 5).transpose(1, 2) + _m(4, 6, 5).transpose(1, 2),
    "sub_both_permuted": lambda: torch.sub(_m(2, 3, 4, 5).permute(0, 2, 3, 1), _m(2, 3, 4, 5).permute(0, 2, 3, 1)),
    "add_transposed_and_contiguous": lambda: _m(4, 6, 5).transpose(1, 2) + _m(4, 5, 6),
    "add_sliced_pair": lambda: _m(4, 6)[:, ::2] + _m(4, 6)[:, ::2],
    "unfold": lambda: F.unfold(_m(2, 3, 8, 9), kernel_size=(2, 3), dilation=1, padding=(0, 1), stride=(1, 2)),
    "roll": lambda: torch.roll(_m(4, 6, 5), shifts=(1, -2), dims=(1, 2)),
    "flip": lambda: torch.flip(_m(4, 6, 5), dims=(0, 2)),
    "renorm": lambda: torch.renorm(_m(4, 6, 5), p=2, dim=1, maxnorm=1.0),
    "dist": lambda: torch.dist(_m(4, 6, 5), _m(6, 5), p=3),
    "mean_all": lambda: _m(4, 6, 5).mean(),
    "sum_all_3d": lambda: torch.sum(_m(4, 6, 5)),
    "std_mean": lambda: torch.std_mean(_m(4, 6, 5), dim=1, keepdim=True)[1],
    "var_mean": lambda: torch.var_mean(_m(4, 6, 5), dim=2)[0],
    "bce": lambda: F.binary_cross_entropy(torch.sigmoid(_m(4, 6)), torch.rand(4, 6, device="meta")),
    "bce_none": lambda: F.binary_cross_entropy(torch.sigmoid(_m(4, 6)), torch.rand(4, 6, device="meta"),
                                               reduction="none"),
    "bce_logits_sum": lambda: F.binary_cross_entropy_with_logits(_m(4, 6), _m(4, 6), reduction="sum"),
    "smooth_l1": lambda: F.smooth_l1_loss(_m(4, 6, 5), _m(4, 6, 5), beta=0.5),
    "huber_none": lambda: F.huber_loss(_m(4, 6, 5), _m(4, 6, 5), reduction="none", delta=2.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_shortcut_outputs_and_trace_equal_the_meta_kernels(name):
    real_rec = _Recorder()
    with real_rec, torch.no_grad():
        real = CASES[name]()
    mode = CostMode()
    with mode, torch.no_grad():
        fast = CASES[name]()
    assert (fast.shape, fast.dtype) == (real.shape, real.dtype)
    if fast.numel() > 1:
        assert fast.stride() == real.stride() or fast.is_contiguous() == real.is_contiguous() is True
    if not real.is_contiguous():
        assert fast.stride() == real.stride()
    assert aten_names(mode.records) == real_rec.ops


def test_flops_bytes_and_roofline():
    mode = CostMode()
    x, w = torch.empty(64, 128, device="meta"), torch.empty(128, 256, device="meta")
    mode.fixed_ids = {id(w)}
    with mode, torch.no_grad():
        y = torch.relu(x @ w)
    mm, relu = mode.records
    assert mm.name == "aten.mm" and mm.flops == 2 * 64 * 128 * 256
    assert mm.fixed_bytes == 128 * 256 * 4 and mm.act_bytes == (64 * 128 + 64 * 256) * 4
    assert relu.flops == 0 and relu.act_bytes == 2 * y.numel() * 4
    t = predict_ms(mode.records, bandwidth_gbps=1.0, tflops=1.0, launch_us=0.0)
    expect = (max(mm.flops / 1e12, (mm.act_bytes + mm.fixed_bytes) / 1e9) + relu.act_bytes / 1e9) * 1e3
    assert t == pytest.approx(expect)
    assert predict_ms(mode.records, 1.0, 1.0, 0.0, batch_scale=2.0) > t
    assert peak_bytes(mode.records, x.numel() * 4, w.numel() * 4) == (x.numel() + 2 * y.numel() + w.numel()) * 4


def test_pointwise_dtype_cache_tells_bool_int_and_float_scalars_apart():
    import torch

    from operators.cost import CostMode

    x = torch.empty(4, 3, dtype=torch.int64, device="meta")
    with CostMode():
        as_int = x + 1
        as_float = x + 1.0
        as_bool = x * True
    want = [(x + 1).dtype, (x + 1.0).dtype, (x * True).dtype]
    assert [as_int.dtype, as_float.dtype, as_bool.dtype] == want == [torch.int64, torch.float32, torch.int64]


REJECTED = {
    "layer_norm_other_width": lambda: F.layer_norm(_m(4, 6, 9), (10,)),
    "layer_norm_weight": lambda: F.layer_norm(_m(4, 6, 10), (10,), weight=_m(9)),
    "group_norm_weight": lambda: F.group_norm(_m(4, 6, 5, 5), 3, weight=_m(5)),
    "batch_norm_weight": lambda: F.batch_norm(_m(4, 6, 5, 5), None, None, weight=_m(5), training=True),
    "grid_sample_batch": lambda: F.grid_sample(_m(2, 3, 8, 8), _m(3, 5, 7, 2), align_corners=False),
    "unfold_too_small": lambda: F.unfold(_m(2, 3, 2, 9), kernel_size=3),
    "roll_bad_dim": lambda: torch.roll(_m(4, 6), shifts=1, dims=2),
    "renorm_bad_p": lambda: torch.renorm(_m(4, 6), p=0, dim=1, maxnorm=1.0),
    "dist_shapes": lambda: torch.dist(_m(4, 6), _m(5, 6)),
    "smooth_l1_shapes": lambda: F.smooth_l1_loss(_m(4, 6), _m(5, 6)),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(REJECTED))
def test_shortcuts_reject_what_the_meta_kernels_reject(name):
    # a shape variant is kept only if it runs: a shortcut must not accept what torch refuses
    with pytest.raises((RuntimeError, IndexError)) as real:
        with torch.no_grad():
            REJECTED[name]()
    with pytest.raises(real.type):
        with CostMode(), torch.no_grad():
            REJECTED[name]()


def _outcome(fn, mode=None):
    try:
        with (mode or torch.no_grad()), torch.no_grad():
            out = fn()
    except (RuntimeError, IndexError) as e:
        return type(e).__name__
    # the stride of a size-1 dim never matters (views, contiguity); torch keeps the input's, shortcuts may not
    stride = tuple(st if n != 1 else None for n, st in zip(out.shape, out.stride(), strict=True))
    return tuple(out.shape), stride, out.dtype


def test_unfold_shortcut_equals_meta_over_random_sizes():
    import random

    rng = random.Random(0)
    for _ in range(400):
        x = _m(rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 12), rng.randint(1, 12))
        kw = {"kernel_size": (rng.randint(1, 4), rng.randint(1, 4)), "dilation": (rng.randint(1, 2), rng.randint(1, 2)),
              "padding": (rng.randint(0, 2), rng.randint(0, 2)), "stride": (rng.randint(1, 3), rng.randint(1, 3))}
        run = functools.partial(F.unfold, x, **kw)
        assert _outcome(run, CostMode()) == _outcome(run), kw


def test_pointwise_shortcut_equals_meta_over_random_layouts():
    import random

    rng = random.Random(1)
    for _ in range(300):
        shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]
        perms = [rng.sample(range(len(shape)), len(shape)) for _ in range(2)]
        if rng.random() < 0.5:
            perms[1] = perms[0]
        xs = []
        for perm in perms:
            base = _m(*[shape[i] for i in perm])  # a dense tensor whose memory order is `perm`
            xs.append(base.permute(*[perm.index(i) for i in range(len(shape))]))
        run = functools.partial(rng.choice([torch.add, torch.sub, torch.mul, torch.maximum]), *xs)
        assert _outcome(run, CostMode()) == _outcome(run), (shape, perms)
