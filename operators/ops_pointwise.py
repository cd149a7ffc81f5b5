"""Catalog entries: activations, elementwise math and comparisons (shape-preserving pointwise operators).

Each activation appears in the spellings users write (nn module, F function, torch function, Tensor
method) where PyTorch has them. Domains keep values finite: log needs positive input, asin needs (0, 1).
"""

from __future__ import annotations

from operators.spec import POSITIVE, Operand, OpSpec, fn, mod, pick

Y = (Operand("y"),)
Y_POS = (Operand("y", draw="rand1"),)

# (module, functional, torch, Tensor method, argument template, sampler, out domain, extra spellings)
_ACTIVATIONS = [
    ("ReLU", "relu", "relu", "relu", "", None, "nonneg"),
    ("ReLU6", "relu6", None, None, "", None, "nonneg"),
    ("LeakyReLU", "leaky_relu", None, None, "negative_slope={negative_slope}",
     pick(negative_slope=[0.01, 0.1, 0.2]), "any"),
    ("ELU", "elu", None, None, "alpha={alpha}", pick(alpha=[0.5, 1.0, 1.5]), "any"),
    ("SELU", "selu", "selu", None, "", None, "any"),
    ("CELU", "celu", "celu", None, "alpha={alpha}", pick(alpha=[0.5, 1.0, 2.0]), "any"),
    ("GELU", "gelu", None, None, "approximate={approximate}", pick(approximate=["none", "tanh"]), "any"),
    ("SiLU", "silu", None, None, "", None, "any"),
    ("Mish", "mish", None, None, "", None, "any"),
    ("Softplus", "softplus", None, None, "beta={beta}, threshold={threshold}",
     pick(beta=[0.5, 1.0, 2.0], threshold=[10.0, 20.0]), "pos"),
    ("Softsign", "softsign", None, None, "", None, "any"),
    ("Softshrink", "softshrink", None, None, "lambd={lambd}", pick(lambd=[0.25, 0.5]), "any"),
    ("Hardshrink", "hardshrink", None, None, "lambd={lambd}", pick(lambd=[0.25, 0.5]), "any"),
    ("Tanhshrink", "tanhshrink", None, None, "", None, "any"),
    ("Hardtanh", "hardtanh", None, None, "min_val={min_val}, max_val={max_val}",
     pick(min_val=[-1.0, -2.0], max_val=[1.0, 2.0]), "any"),
    ("Hardsigmoid", "hardsigmoid", None, None, "", None, "nonneg"),
    ("Hardswish", "hardswish", None, None, "", None, "any"),
    ("Sigmoid", "sigmoid", "sigmoid", "sigmoid", "", None, "unit"),
    ("Tanh", "tanh", "tanh", "tanh", "", None, "any"),
    ("LogSigmoid", "logsigmoid", None, None, "", None, "any"),
    ("Threshold", "threshold", None, None, "{threshold}, {value}",
     pick(threshold=[0.0, 0.1, 0.5], value=[0.0, -1.0]), "any"),
]


def _activations() -> list[OpSpec]:
    out: list[OpSpec] = []
    for module, func, torch_name, method, args, sampler, dom in _ACTIVATIONS:
        kw = {"params": sampler} if sampler else {}
        out.append(mod(f"nn.{module}", "activation", args, out=dom, **kw))
        out.append(fn(f"F.{func}", "activation", args, out=dom, **kw))
        if torch_name:
            out.append(fn(f"torch.{torch_name}", "activation", args, out=dom, **kw))
        if method:
            out.append(fn(f"Tensor.{method}", "activation", args, out=dom, **kw))
    glu = pick(dim=[-1, 1])
    out += [
        mod("nn.GLU", "activation", "dim={dim}", params=glu),
        fn("F.glu", "activation", "dim={dim}", params=glu),
        mod("nn.PReLU", "activation", "num_parameters={C}"),
        OpSpec("F.prelu", "activation", "F.prelu({x}, {weight})", attrs=(("weight", "nn.Parameter(torch.full(({C},), 0.25))"),)),
        fn("torch.special.expit", "activation", out="unit"),
        fn("torch.rrelu", "activation", stochastic=True),
        fn("F.rrelu", "activation", "training=True", stochastic=True),
        mod("nn.RReLU", "activation", stochastic=True),
    ]
    return out


# (name, needs, out) for unary elementwise math; a Tensor.* spelling is added for the names in _METHODS
_UNARY = [
    ("torch.abs", "any", "nonneg"), ("torch.neg", "any", "any"), ("torch.exp", "any", "pos"),
    ("torch.exp2", "any", "pos"), ("torch.expm1", "any", "any"), ("torch.log", "pos", "any"),
    ("torch.log2", "pos", "any"), ("torch.log10", "pos", "any"), ("torch.log1p", "nonneg", "nonneg"),
    ("torch.sqrt", "nonneg", "nonneg"), ("torch.rsqrt", "pos", "pos"), ("torch.reciprocal", "pos", "pos"),
    ("torch.square", "any", "nonneg"), ("torch.sin", "any", "any"), ("torch.cos", "any", "any"),
    ("torch.tan", "unit", "pos"), ("torch.asin", "unit", "pos"), ("torch.acos", "unit", "pos"),
    ("torch.atan", "any", "any"), ("torch.sinh", "any", "any"), ("torch.cosh", "any", "pos"),
    ("torch.asinh", "any", "any"), ("torch.atanh", "unit", "pos"), ("torch.erf", "any", "any"),
    ("torch.erfc", "any", "nonneg"), ("torch.erfinv", "unit", "pos"), ("torch.lgamma", "pos", "any"),
    ("torch.digamma", "pos", "any"), ("torch.sign", "any", "any"), ("torch.sgn", "any", "any"),
    ("torch.ceil", "any", "any"), ("torch.floor", "any", "any"), ("torch.round", "any", "any"),
    ("torch.trunc", "any", "any"), ("torch.frac", "any", "any"), ("torch.sinc", "any", "any"),
    ("torch.deg2rad", "any", "same"), ("torch.rad2deg", "any", "same"), ("torch.logit", "unit", "any"),
    ("torch.nan_to_num", "any", "same"), ("torch.i0", "any", "pos"), ("torch.fix", "any", "any"),
    ("torch.absolute", "any", "nonneg"), ("torch.negative", "any", "any"), ("torch.arcsin", "unit", "pos"),
    ("torch.arccos", "unit", "pos"), ("torch.arctan", "any", "any"), ("torch.arcsinh", "any", "any"),
    ("torch.arctanh", "unit", "pos"), ("torch.special.erfcx", "any", "pos"), ("torch.special.i0e", "any", "pos"),
    ("torch.special.i1", "any", "any"), ("torch.special.i1e", "any", "any"), ("torch.special.ndtr", "any", "unit"),
    ("torch.special.ndtri", "unit", "any"), ("torch.special.log_ndtr", "any", "any"),
    ("torch.special.entr", "nonneg", "any"), ("torch.special.sinc", "any", "any"),
    ("torch.special.gammaln", "pos", "any"), ("torch.special.psi", "pos", "any"),
    ("torch.special.logit", "unit", "any"), ("torch.special.exp2", "any", "pos"),
    ("torch.special.expm1", "any", "any"), ("torch.special.log1p", "nonneg", "nonneg"),
    ("torch.special.erf", "any", "any"), ("torch.special.erfinv", "unit", "pos"),
    ("torch.special.bessel_j0", "any", "any"), ("torch.special.bessel_j1", "any", "any"),
]
_METHODS = {"abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "sin", "cos", "erf",
            "floor", "ceil", "round", "sign", "log1p", "expm1", "frac", "trunc", "atan", "sinh"}

# binary elementwise: (name, call template, operands, needs, out, join)
_BINARY = [
    ("torch.add", "torch.add({x}, {y})", Y, True), ("torch.sub", "torch.sub({x}, {y})", Y, True),
    ("torch.mul", "torch.mul({x}, {y})", Y, True), ("torch.div", "torch.div({x}, {y})", Y_POS, False),
    ("torch.true_divide", "torch.true_divide({x}, {y})", Y_POS, False),
    ("torch.remainder", "torch.remainder({x}, {y})", Y_POS, False),
    ("torch.fmod", "torch.fmod({x}, {y})", Y_POS, False),
    ("torch.atan2", "torch.atan2({x}, {y})", Y, True), ("torch.hypot", "torch.hypot({x}, {y})", Y, True),
    ("torch.logaddexp", "torch.logaddexp({x}, {y})", Y, True),
    ("torch.logaddexp2", "torch.logaddexp2({x}, {y})", Y, True),
    ("torch.xlogy", "torch.xlogy({x}, {y})", Y_POS, False),
    ("torch.copysign", "torch.copysign({x}, {y})", Y, True),
    ("torch.special.xlog1py", "torch.special.xlog1py({x}, {y})", Y_POS, False),
    ("torch.rsub", "torch.rsub({x}, {y})", Y, True),
    ("Tensor.add", "{x}.add({y})", Y, True), ("Tensor.sub", "{x}.sub({y})", Y, True),
    ("Tensor.mul", "{x}.mul({y})", Y, True), ("Tensor.div", "{x}.div({y})", Y_POS, False),
    ("torch.lerp", "torch.lerp({x}, {y}, {weight})", Y, True),
    ("torch.addcmul", "torch.addcmul({x}, {y}, {z}, value={value})", (Operand("y"), Operand("z")), False),
    ("torch.addcdiv", "torch.addcdiv({x}, {y}, {z}, value={value})",
     (Operand("y"), Operand("z", draw="rand1")), False),
]


def _elementwise() -> list[OpSpec]:
    out = [fn(n, "elementwise", needs=needs, out=dom) for n, needs, dom in _UNARY]
    out += [fn(f"Tensor.{n[6:]}", "elementwise", needs=needs, out=dom)
            for n, needs, dom in _UNARY if n.startswith("torch.") and n[6:] in _METHODS]
    for name, call, ops, join in _BINARY:
        params = pick(weight=[0.25, 0.5, 0.75]) if "lerp" in name else pick(value=[0.5, 1.0, 2.0])
        out.append(OpSpec(name, "elementwise", call, operands=ops, join=join, params=params))
    powp = pick(exponent=[2, 3])
    out += [
        fn("torch.pow", "elementwise", "{exponent}", params=powp),
        fn("Tensor.pow", "elementwise", "{exponent}", params=powp),
        fn("torch.float_power", "elementwise", "2", terminal=True),
        OpSpec("torch.polygamma", "elementwise", "torch.polygamma({n}, {x})", needs="pos", params=pick(n=[1, 2])),
        fn("torch.mvlgamma", "elementwise", "p=1", needs="pos"),
        OpSpec("torch.special.multigammaln", "elementwise", "torch.special.multigammaln({x} + 1.0, 1)", needs="pos"),
        OpSpec("Tensor.__mul__", "elementwise", "{x} * {scale}", params=pick(scale=[0.5, 2.0, 3.0])),
        OpSpec("Tensor.__add__", "elementwise", "{x} + {shift}", params=pick(shift=[0.5, 1.0, -1.0])),
        OpSpec("Tensor.__truediv__", "elementwise", "{x} / {divisor}", params=pick(divisor=[2.0, 3.0, 10.0])),
    ]
    return out


def _comparison() -> list[OpSpec]:
    out: list[OpSpec] = []
    for op in ("gt", "lt", "ge", "le", "greater", "less", "greater_equal", "less_equal"):
        out.append(OpSpec(f"torch.{op}", "comparison", f"torch.{op}({{x}}, {{y}}).float()", operands=Y,
                          join=True, out="nonneg"))
    for op in ("eq", "ne"):  # two continuous draws are never equal: compared at integer resolution instead
        out.append(OpSpec(f"torch.{op}", "comparison", f"torch.{op}({{x}}.round(), {{y}}.round()).float()",
                          operands=Y, join=True, out="nonneg"))
    for op in ("gt", "lt", "ge", "le"):
        out.append(OpSpec(f"Tensor.{op}", "comparison", f"{{x}}.{op}({{threshold}}).float()",
                          params=pick(threshold=[0.0, 0.5]), out="nonneg"))
    for op in ("maximum", "minimum", "fmax", "fmin"):
        out.append(OpSpec(f"torch.{op}", "comparison", f"torch.{op}({{x}}, {{y}})", operands=Y, join=True))
    clamp = pick(lo=[-1.0, -0.5, 0.0], hi=[0.5, 1.0, 2.0])
    out += [
        fn("torch.clamp", "comparison", "min={lo}, max={hi}", params=clamp),
        fn("torch.clip", "comparison", "min={lo}, max={hi}", params=clamp),
        fn("Tensor.clamp", "comparison", "min={lo}, max={hi}", params=clamp),
        fn("torch.clamp_min", "comparison", "{lo}", params=clamp),
        fn("torch.clamp_max", "comparison", "{hi}", params=clamp),
        OpSpec("torch.where", "comparison", "torch.where({x} > {threshold}, {x}, {y})", operands=Y, join=True,
               params=pick(threshold=[0.0, 0.5])),
        OpSpec("Tensor.masked_fill", "comparison", "{x}.masked_fill({x} < {threshold}, {value})",
               params=pick(threshold=[0.0, -0.5], value=[0.0, -1.0])),
        OpSpec("torch.heaviside", "comparison", "torch.heaviside({x}, {y})", operands=Y, join=True,
               flat_on=POSITIVE),
        OpSpec("torch.isclose", "comparison", "torch.isclose({x}, {y}, rtol={rtol}, atol={atol}).float()",
               operands=Y, join=True, params=pick(rtol=[0.1], atol=[0.1, 0.5]), out="nonneg"),
        OpSpec("torch.signbit", "comparison", "torch.signbit({x}).float()", out="nonneg",
               flat_on=("nonneg", *POSITIVE)),
        OpSpec("torch.logical_and", "comparison", "torch.logical_and({x} > 0, {y} > 0).float()", operands=Y,
               join=True, out="nonneg", flat_on=POSITIVE),
        OpSpec("torch.logical_or", "comparison", "torch.logical_or({x} > 0, {y} > 0).float()", operands=Y,
               join=True, out="nonneg", flat_on=POSITIVE),
        OpSpec("torch.logical_xor", "comparison", "torch.logical_xor({x} > 0, {y} > 0).float()", operands=Y,
               join=True, out="nonneg", flat_on=POSITIVE),
        OpSpec("torch.logical_not", "comparison", "torch.logical_not({x} > 0).float()", out="nonneg", flat_on=POSITIVE),
    ]
    return out


SPECS: list[OpSpec] = _activations() + _elementwise() + _comparison()
