"""Catalog entries: matmul/linear, convolutions (1d/2d/3d, transposed), normalization, pooling, attention
and embedding: the operators that carry weights or windows, with samplers that keep them valid.
"""

from __future__ import annotations

import random

from operators.spec import Code, Dim, Operand, OpSpec, Reject, fn, mod, pick

WIDTHS = [16, 32, 64, 128, 256, 512]


def _width(rng: random.Random, dims: tuple[Dim, ...]) -> dict:
    return {"out_features": rng.choice(WIDTHS), "bias": rng.random() < 0.8}


def _small_features(rng: random.Random, dims: tuple[Dim, ...]) -> dict:
    if dims[-1].value > 256:
        raise Reject("bilinear weights grow with the square of the features")
    return {"out_features": rng.choice([16, 32, 64])}


def _matmul() -> list[OpSpec]:
    w = (("weight", "nn.Parameter(torch.randn({L}, {out_features}) * 0.02)"),)
    wt = (("weight", "nn.Parameter(torch.randn({out_features}, {L}) * 0.02)"),)
    bias = ("bias", "nn.Parameter(torch.zeros({out_features}))")
    yk = (Operand("y", "({L}, {out_features})"),)
    return [
        mod("nn.Linear", "matmul_linear", "{L}, {out_features}, bias={bias}", ranks=(2, 3), params=_width,
            consts=("out_features",)),
        mod("nn.Bilinear", "matmul_linear", "{L}, {L}, {out_features}", call="{m}({x}, {y})", ranks=(2,),
            operands=(Operand("y"),), params=_small_features, consts=("out_features",)),
        OpSpec("F.linear", "matmul_linear", "F.linear({x}, {weight}, {bias})", ranks=(2, 3), params=_width,
               attrs=(wt[0], bias)),
        OpSpec("F.bilinear", "matmul_linear", "F.bilinear({x}, {y}, {weight})", ranks=(2,), params=_small_features,
               operands=(Operand("y"),), attrs=(("weight", "nn.Parameter(torch.randn({out_features}, {L}, {L}) * 0.02)"),)),
        OpSpec("torch.matmul", "matmul_linear", "torch.matmul({x}, {weight})", ranks=(2, 3, 4), params=_width, attrs=w),
        OpSpec("Tensor.matmul", "matmul_linear", "{x}.matmul({y})", ranks=(2, 3, 4), params=_width, operands=yk),
        OpSpec("Tensor.__matmul__", "matmul_linear", "{x} @ {weight}", ranks=(2, 3), params=_width, attrs=w),
        OpSpec("torch.mm", "matmul_linear", "torch.mm({x}, {weight})", ranks=(2,), params=_width, attrs=w),
        OpSpec("Tensor.mm", "matmul_linear", "{x}.mm({y})", ranks=(2,), params=_width, operands=yk),
        OpSpec("torch.bmm", "matmul_linear", "torch.bmm({x}, {y})", ranks=(3,), params=_width,
               operands=(Operand("y", "({N}, {L}, {out_features})"),)),
        OpSpec("Tensor.bmm", "matmul_linear", "{x}.bmm({y})", ranks=(3,), params=_width,
               operands=(Operand("y", "({N}, {L}, {out_features})"),)),
        OpSpec("torch.baddbmm", "matmul_linear", "torch.baddbmm({z}, {x}, {y}, beta={beta}, alpha={alpha})", ranks=(3,),
               params=lambda r, d: {**_width(r, d), "beta": r.choice([0.5, 1.0]), "alpha": r.choice([1.0, 2.0])},
               operands=(Operand("y", "({N}, {L}, {out_features})"), Operand("z", "({N}, {d1}, {out_features})"))),
        OpSpec("torch.addmm", "matmul_linear", "torch.addmm({bias}, {x}, {weight})", ranks=(2,), params=_width,
               attrs=(w[0], bias)),
        OpSpec("torch.addbmm", "matmul_linear", "torch.addbmm({bias}, {x}, {y})", ranks=(3,), params=_width,
               operands=(Operand("y", "({N}, {L}, {out_features})"),), attrs=(bias,)),
        OpSpec("torch.einsum", "matmul_linear", "torch.einsum('...ij,jk->...ik', {x}, {weight})", ranks=(2, 3, 4),
               params=_width, attrs=w),
        OpSpec("torch.inner", "matmul_linear", "torch.inner({x}, {weight})", ranks=(2, 3), params=_width, attrs=wt),
        OpSpec("torch.tensordot", "matmul_linear", "torch.tensordot({x}, {weight}, dims=1)", ranks=(2, 3, 4),
               params=_width, attrs=w),
        OpSpec("torch.linalg.matmul", "matmul_linear", "torch.linalg.matmul({x}, {weight})", ranks=(2, 3),
               params=_width, attrs=w),
        OpSpec("torch.linalg.multi_dot", "matmul_linear", "torch.linalg.multi_dot([{x}, {weight}, {weight2}])",
               ranks=(2,), params=_width, attrs=(w[0], ("weight2", "nn.Parameter(torch.randn({out_features}, {L}) * 0.02)"))),
        OpSpec("torch.mv", "matmul_linear", "torch.mv({x}, {weight})", ranks=(2,),
               attrs=(("weight", "nn.Parameter(torch.randn({L}))"),)),
        OpSpec("torch.addmv", "matmul_linear", "torch.addmv({bias}, {x}, {weight})", ranks=(2,),
               attrs=(("bias", "nn.Parameter(torch.zeros({N}))"), ("weight", "nn.Parameter(torch.randn({L}))"))),
        OpSpec("torch.linalg.vecdot", "matmul_linear", "torch.linalg.vecdot({x}, {y})", operands=(Operand("y"),),
               join=True),
        OpSpec("torch.cdist", "matmul_linear", "torch.cdist({x}, {y})", ranks=(3,),
               params=pick(points=[64, 128, 256]), operands=(Operand("y", "({N}, {points}, {L})"),), out="nonneg"),
        OpSpec("torch.outer", "matmul_linear", "torch.outer({x}.flatten(), {weight})", ranks=(2,),
               params=pick(out_features=[8, 16]), attrs=(("weight", "nn.Parameter(torch.randn({out_features}))"),)),
    ]


def _conv_params(nd: int, transposed: bool):
    def sample(rng: random.Random, dims: tuple[Dim, ...]) -> dict:
        c = dims[1].value
        if c > 1024:
            raise Reject("too many channels for a convolution")
        k = rng.choice([1, 3, 5] if nd < 3 else [1, 3])
        out = {"out_channels": rng.choice([8, 16, 32, 64, 128]), "kernel_size": k,
               "stride": rng.choice([1, 1, 2]), "padding": rng.choice([0, k // 2]), "groups": 1,
               "bias": rng.random() < 0.8, "kshape": Code(", ".join([str(k)] * nd))}
        if not transposed and c >= 8 and rng.random() < 0.2:  # depthwise
            out["groups"] = c
            out["out_channels"] = c * rng.choice([1, 2])
        if transposed:
            out["output_padding"] = rng.choice([0, 1]) if out["stride"] > 1 else 0
        return out

    return sample


def _conv() -> list[OpSpec]:
    out: list[OpSpec] = []
    for nd in (1, 2, 3):
        cp, tp = _conv_params(nd, False), _conv_params(nd, True)
        r = (nd + 2,)
        c = ("out_channels", "kernel_size")
        out.append(mod(f"nn.Conv{nd}d", "convolution", "{C}, {out_channels}, {kernel_size}, stride={stride}, "
                       "padding={padding}, groups={groups}, bias={bias}", ranks=r, params=cp, consts=c))
        out.append(mod(f"nn.ConvTranspose{nd}d", "convolution", "{C}, {out_channels}, {kernel_size}, stride={stride}, "
                       "padding={padding}, output_padding={output_padding}, bias={bias}", ranks=r, params=tp, consts=c))
        w = (("weight", "nn.Parameter(torch.randn({out_channels}, {C} // {groups}, {kshape}) * 0.05)"),)
        wt = (("weight", "nn.Parameter(torch.randn({C}, {out_channels}, {kshape}) * 0.05)"),)
        for prefix in ("F", "torch"):
            out.append(OpSpec(f"{prefix}.conv{nd}d", "convolution",
                              f"{prefix}.conv{nd}d({{x}}, {{weight}}, stride={{stride}}, padding={{padding}}, groups={{groups}})",
                              ranks=r, params=cp, attrs=w))
            out.append(OpSpec(f"{prefix}.conv_transpose{nd}d", "convolution",
                              f"{prefix}.conv_transpose{nd}d({{x}}, {{weight}}, stride={{stride}}, padding={{padding}}, "
                              "output_padding={output_padding})", ranks=r, params=tp, attrs=wt))
    unfold = pick(kernel_size=[2, 3], stride=[1, 2])
    out += [
        mod("nn.Unfold", "convolution", "kernel_size={kernel_size}, stride={stride}", ranks=(4,), params=unfold),
        fn("F.unfold", "convolution", "kernel_size={kernel_size}, stride={stride}", ranks=(4,), params=unfold),
    ]
    return out


def _groups(rng: random.Random, dims: tuple[Dim, ...]) -> dict:
    c = dims[1].value
    divisors = [g for g in (2, 4, 8, 16, 32) if c % g == 0 and g < c]
    if not divisors:
        raise Reject("group norm needs a channel count with a divisor")
    return {"num_groups": rng.choice(divisors), "affine": rng.random() < 0.7}


def _norm() -> list[OpSpec]:
    aff = pick(affine=[True, False], eps=[1e-5])
    lrn = pick(size=[2, 3, 5])
    out = [
        mod("nn.BatchNorm1d", "normalization", "{C}", ranks=(2, 3)),
        mod("nn.BatchNorm2d", "normalization", "{C}", ranks=(4,)),
        mod("nn.BatchNorm3d", "normalization", "{C}", ranks=(5,)),
        mod("nn.InstanceNorm1d", "normalization", "{C}, affine={affine}", ranks=(3,), params=aff),
        mod("nn.InstanceNorm2d", "normalization", "{C}, affine={affine}", ranks=(4,), params=aff),
        mod("nn.InstanceNorm3d", "normalization", "{C}, affine={affine}", ranks=(5,), params=aff),
        mod("nn.LayerNorm", "normalization", "{L}, elementwise_affine={affine}", params=aff),
        mod("nn.GroupNorm", "normalization", "{num_groups}, {C}, affine={affine}", ranks=(3, 4, 5), params=_groups),
        mod("nn.LocalResponseNorm", "normalization", "{size}", ranks=(3, 4, 5), params=lrn),
        mod("nn.CrossMapLRN2d", "normalization", "{size}", ranks=(4,), params=lrn),
        mod("nn.RMSNorm", "normalization", "{L}"),
        fn("F.normalize", "normalization", "p={p}, dim={dim}", params=pick(p=[1.0, 2.0], dim=[1, -1])),
        fn("F.layer_norm", "normalization", "({L},)"),
        OpSpec("torch.layer_norm", "normalization", "torch.layer_norm({x}, [{L}])"),
        fn("F.group_norm", "normalization", "{num_groups}", ranks=(3, 4, 5), params=_groups),
        fn("F.batch_norm", "normalization", "None, None, training=True"),
        fn("F.instance_norm", "normalization", ranks=(3, 4, 5)),
        fn("F.local_response_norm", "normalization", "{size}", ranks=(3, 4, 5), params=lrn),
        fn("F.rms_norm", "normalization", "({L},)"),
    ]
    return out


def _pool_params(rng: random.Random, dims: tuple[Dim, ...]) -> dict:
    k = rng.choice([2, 3])
    return {"kernel_size": k, "stride": rng.choice([k, 1, 2]), "output_size": rng.choice([1, 2, 4, 7]),
            "norm_type": rng.choice([1.0, 2.0])}


def _pool() -> list[OpSpec]:
    out: list[OpSpec] = []
    win = "kernel_size={kernel_size}, stride={stride}"
    for nd in (1, 2, 3):
        r = (nd + 2,)
        for name, args in (("MaxPool", win), ("AvgPool", win), ("AdaptiveAvgPool", "{output_size}"),
                           ("AdaptiveMaxPool", "{output_size}"), ("LPPool", "{norm_type}, {kernel_size}, stride={stride}")):
            dom = "nonneg" if name == "LPPool" else "same"
            needs = "pos" if name == "LPPool" else "any"
            out.append(mod(f"nn.{name}{nd}d", "pooling", args, ranks=r, params=_pool_params, out=dom, needs=needs))
            snake = {"MaxPool": "max_pool", "AvgPool": "avg_pool", "AdaptiveAvgPool": "adaptive_avg_pool",
                     "AdaptiveMaxPool": "adaptive_max_pool", "LPPool": "lp_pool"}[name]
            out.append(fn(f"F.{snake}{nd}d", "pooling", args, ranks=r, params=_pool_params, out=dom, needs=needs))
        out.append(fn(f"torch.max_pool{nd}d", "pooling", "{kernel_size}", ranks=r, params=_pool_params, out="same"))
    out += [
        fn("torch.avg_pool1d", "pooling", "{kernel_size}", ranks=(3,), params=_pool_params, out="same"),
        fn("torch.adaptive_avg_pool1d", "pooling", "{output_size}", ranks=(3,), params=_pool_params, out="same"),
        mod("nn.Upsample", "pooling", "scale_factor={scale}, mode={mode}", ranks=(4,),
            params=pick(scale=[2.0], mode=["nearest", "bilinear", "bicubic"]), out="same"),
        mod("nn.UpsamplingNearest2d", "pooling", "scale_factor={scale}", ranks=(4,), params=pick(scale=[2]), out="same"),
        mod("nn.UpsamplingBilinear2d", "pooling", "scale_factor={scale}", ranks=(4,), params=pick(scale=[2]), out="same"),
        fn("F.interpolate", "pooling", "scale_factor={scale}, mode={mode}", ranks=(3, 4, 5),
           params=lambda r, d: {"scale": r.choice([0.5, 2.0]),
                                "mode": r.choice(["nearest", {3: "linear", 4: "bilinear", 5: "trilinear"}[len(d)]])}),
        mod("nn.FractionalMaxPool2d", "pooling", "2, output_ratio=0.5", ranks=(4,), stochastic=True),
        mod("nn.FractionalMaxPool3d", "pooling", "2, output_ratio=0.5", ranks=(5,), stochastic=True),
        fn("F.fractional_max_pool2d", "pooling", "2, output_ratio=0.5", ranks=(4,), stochastic=True),
    ]
    return out


def _heads(rng: random.Random, dims: tuple[Dim, ...]) -> dict:
    e = dims[-1].value
    heads = [h for h in (1, 2, 4, 8, 16) if e % h == 0 and e // h >= 8]
    if not heads or e > 1024:
        raise Reject("embed dim must split into heads")
    return {"num_heads": rng.choice(heads), "causal": rng.random() < 0.5}


def _tokens(rng: random.Random, dims: tuple[Dim, ...]) -> dict:
    return {"num_embeddings": rng.choice([1000, 5000, 32000]), "embedding_dim": rng.choice([64, 128, 256, 512]),
            "mode": rng.choice(["mean", "sum", "max"]), "num_classes": rng.choice([16, 64, 128])}


def _attention() -> list[OpSpec]:
    emb_w = (("weight", "nn.Parameter(torch.randn({num_embeddings}, {embedding_dim}))"),)
    tok = {"ranks": (2,), "params": _tokens, "token_input": "num_embeddings", "consts": ("num_embeddings", "embedding_dim")}
    return [
        mod("nn.MultiheadAttention", "attention_embedding", "{L}, {num_heads}, batch_first=True",
            call="{m}({x}, {x}, {x}, need_weights=False)[0]", ranks=(3,), params=_heads, layout="seq"),
        OpSpec("F.scaled_dot_product_attention", "attention_embedding",
               "F.scaled_dot_product_attention({x}, {y}, {z}, is_causal={causal})", ranks=(3, 4), params=_heads,
               operands=(Operand("y"), Operand("z")), layout="seq"),
        mod("nn.TransformerEncoderLayer", "attention_embedding",
            "{L}, {num_heads}, dim_feedforward={ff}, dropout=0.0, batch_first=True", ranks=(3,), layout="seq",
            params=lambda r, d: {**_heads(r, d), "ff": 2 * d[-1].value}),
        mod("nn.Embedding", "attention_embedding", "{num_embeddings}, {embedding_dim}", **tok),
        OpSpec("F.embedding", "attention_embedding", "F.embedding({x}, {weight})", attrs=emb_w, **tok),
        mod("nn.EmbeddingBag", "attention_embedding", "{num_embeddings}, {embedding_dim}, mode={mode}", **tok),
        OpSpec("F.embedding_bag", "attention_embedding", "F.embedding_bag({x}, {weight}, mode={mode})", attrs=emb_w, **tok),
        OpSpec("F.one_hot", "attention_embedding", "F.one_hot({x}, {num_embeddings}).float()", ranks=(2,),
               params=lambda r, d: {"num_embeddings": r.choice([16, 64, 128])}, token_input="num_embeddings",
               out="nonneg"),
        mod("nn.Dropout", "attention_embedding", "p=0.1", stochastic=True),
        fn("F.dropout", "attention_embedding", "p=0.1, training=True", stochastic=True),
        mod("nn.AlphaDropout", "attention_embedding", "p=0.1", stochastic=True),
        mod("nn.Dropout2d", "attention_embedding", "p=0.1", ranks=(4,), stochastic=True),
    ]


SPECS: list[OpSpec] = _matmul() + _conv() + _norm() + _pool() + _attention()
