"""Pin the ATen ops of operators that foreign datasets name but the catalog does not sample (nn.LSTM, torch.isin...),
and behaviours of catalog operators that only foreign code reaches (torch.max of two tensors, a masked attention).

`python -m pinning.foreign` runs each example below on meta and on the CPU under the recorder and writes
`foreign_pins.json` (name -> the distinct ATen op sets seen). `operators.labels.label_findings` reads it beside the
catalog's pins, so an audited row that labels one of these can be judged instead of reported as unknown. GPU-only
kernels of these operators (cuDNN RNNs) are listed by hand in operators.labels.DEVICE_EQUIVALENT.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch

from operators.labels import FOREIGN_PIN_FILE

OUT = FOREIGN_PIN_FILE  # operators/foreign_pins.json, read by operators.labels
nn, F = torch.nn, torch.nn.functional
X4 = (2, 4, 6, 6)

# name -> [(module or callable factory, input factory)]: a few parameter variants where behaviour changes
EXAMPLES: dict[str, list[tuple[Callable, Callable]]] = {
    "nn.LSTM": [(lambda: nn.LSTM(8, 16, batch_first=True), lambda: (torch.rand(2, 5, 8),)),
                (lambda: nn.LSTM(8, 16, num_layers=2, bidirectional=True), lambda: (torch.rand(5, 2, 8),))],
    "nn.GRU": [(lambda: nn.GRU(8, 16, batch_first=True), lambda: (torch.rand(2, 5, 8),))],
    "nn.RNN": [(lambda: nn.RNN(8, 16), lambda: (torch.rand(5, 2, 8),)),
               (lambda: nn.RNN(8, 16, nonlinearity="relu"), lambda: (torch.rand(5, 2, 8),))],
    "nn.SyncBatchNorm": [(lambda: nn.SyncBatchNorm(4), lambda: (torch.rand(*X4),)),
                         (lambda: nn.SyncBatchNorm(4).eval(), lambda: (torch.rand(*X4),))],
    "nn.AdaptiveLogSoftmaxWithLoss": [(lambda: nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 10]),
                                       lambda: (torch.rand(4, 8), torch.tensor([0, 6, 12, 19]))),
                                      (lambda: nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 10]).log_prob,
                                       lambda: (torch.rand(4, 8),)),
                                      (lambda: nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 10]).predict,
                                       lambda: (torch.rand(4, 8),))],
    "torch.isin": [(lambda: torch.isin, lambda: (torch.randint(0, 9, (16,)), torch.tensor([1, 3])))],
    "torch.stft": [(lambda: lambda x: torch.stft(x, 16, return_complex=True, window=torch.hann_window(16)),
                    lambda: (torch.rand(2, 64),))],
    "torch.view_as_complex": [(lambda: torch.view_as_complex, lambda: (torch.rand(4, 2),))],
    "torch.polar": [(lambda: torch.polar, lambda: (torch.rand(4), torch.rand(4)))],
    "torch.masked_select": [(lambda: torch.masked_select, lambda: (torch.rand(8), torch.rand(8) > 0.5))],
    "torch.masked_fill": [(lambda: lambda x, m: torch.masked_fill(x, m, 0.0), lambda: (torch.rand(8), torch.rand(8) > 0.5))],
    "torch.histc": [(lambda: lambda x: torch.histc(x, bins=4), lambda: (torch.rand(8),))],
    "torch.diag": [(lambda: torch.diag, lambda: (torch.rand(4, 4),)), (lambda: torch.diag, lambda: (torch.rand(4),))],
    "torch.bitwise_xor": [(lambda: torch.bitwise_xor, lambda: (torch.randint(0, 9, (8,)), torch.randint(0, 9, (8,))))],
    "torch.isnan": [(lambda: torch.isnan, lambda: (torch.rand(8),))],
    "torch.isinf": [(lambda: torch.isinf, lambda: (torch.rand(8),))],
    "torch.isneginf": [(lambda: torch.isneginf, lambda: (torch.rand(8),))],
    "torch.nonzero": [(lambda: torch.nonzero, lambda: (torch.rand(8),))],
    "torch.dist": [(lambda: torch.dist, lambda: (torch.rand(8), torch.rand(8)))],
    "torch.equal": [(lambda: torch.equal, lambda: (torch.rand(8), torch.rand(8)))],
    "torch.arange": [(lambda: lambda x: torch.arange(8), lambda: (torch.rand(8),))],
    "torch.linspace": [(lambda: lambda x: torch.linspace(0, 1, 8), lambda: (torch.rand(8),))],
    "torch.multiply": [(lambda: torch.multiply, lambda: (torch.rand(8), torch.rand(8)))],
    "torch.mode": [(lambda: lambda x: torch.mode(x, 1), lambda: (torch.rand(4, 8),))],
    "F.multi_head_attention_forward": [
        (lambda: nn.MultiheadAttention(8, 2), lambda: (*[torch.rand(5, 2, 8)] * 3,)),
        (lambda: nn.MultiheadAttention(8, 2, kdim=4, vdim=4), lambda: (torch.rand(5, 2, 8), *[torch.rand(5, 2, 4)] * 2)),
        (lambda: lambda q: nn.MultiheadAttention(8, 2)(q, q, q, need_weights=False), lambda: (torch.rand(5, 2, 8),)),
        (lambda: nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=True), lambda: (*[torch.rand(5, 2, 8)] * 3,))],
    # behaviours of catalog operators that foreign code reaches with arguments the sampler does not draw
    "nn.MultiheadAttention": [(lambda: nn.MultiheadAttention(8, 2), lambda: (*[torch.rand(5, 2, 8)] * 3,)),
                              (lambda: lambda q: nn.MultiheadAttention(8, 2)(q, q, q, attn_mask=torch.rand(5, 5)),
                               lambda: (torch.rand(5, 2, 8),)),
                              (lambda: nn.MultiheadAttention(8, 2, batch_first=True), lambda: (*[torch.rand(2, 5, 8)] * 3,)),
                              (lambda: lambda q: nn.MultiheadAttention(8, 2)(q, q, q, need_weights=False),
                               lambda: (torch.rand(5, 2, 8),)),
                              (lambda: nn.MultiheadAttention(8, 2, dropout=0.1), lambda: (*[torch.rand(5, 2, 8)] * 3,)),
                              (lambda: lambda q, m: nn.MultiheadAttention(8, 2)(q, q, q, key_padding_mask=m),
                               lambda: (torch.rand(5, 2, 8), torch.rand(2, 5) > 0.5)),
                              (lambda: nn.MultiheadAttention(8, 2, kdim=4, vdim=4),
                               lambda: (torch.rand(5, 2, 8), *[torch.rand(5, 2, 4)] * 2))],
    # batched and vector matmuls run bmm, mv, dot; a 2d padding module given two pads pads in 1d
    "torch.matmul": [(lambda: torch.matmul, lambda: (torch.rand(2, 3, 4), torch.rand(2, 4, 5))),
                     (lambda: torch.matmul, lambda: (torch.rand(2, 3, 4), torch.rand(4, 5))),
                     (lambda: torch.matmul, lambda: (torch.rand(3, 4), torch.rand(4))),
                     (lambda: torch.matmul, lambda: (torch.rand(4), torch.rand(4)))],
    **{f"nn.{kind}Pad{d}d": [(lambda kind=kind, d=d, pad=pad: getattr(nn, f"{kind}Pad{d}d")(pad),
                              lambda n=n: (torch.rand(*([2, 3] + [6] * n)),))
                             for n, pad in ((1, (1, 1)), (2, (1, 1, 1, 1))) if n < d]
       for kind in ("Reflection", "Replication") for d in (2, 3)},
    "nn.CrossEntropyLoss": [(lambda: nn.CrossEntropyLoss(), lambda: (torch.rand(2, 5, 4, 4), torch.randint(0, 5, (2, 4, 4)))),
                            (lambda: nn.CrossEntropyLoss(), lambda: (torch.rand(4, 5), torch.rand(4, 5)))],
    "F.cross_entropy": [(lambda: F.cross_entropy, lambda: (torch.rand(2, 5, 4, 4), torch.randint(0, 5, (2, 4, 4)))),
                        (lambda: F.cross_entropy, lambda: (torch.rand(4, 5), torch.rand(4, 5)))],
    "torch.max": [(lambda: torch.max, lambda: (torch.rand(8), torch.rand(8)))],
    "torch.min": [(lambda: torch.min, lambda: (torch.rand(8), torch.rand(8)))],
    "torch.einsum": [(lambda eq=eq: lambda x, y: torch.einsum(eq, x, y), lambda: (torch.rand(4, 4), torch.rand(4, 4)))
                     for eq in ("ij,ij->ij", "ij,jk->ik", "ij,ik->ijk", "ij,ij->i")]
    + [(lambda: lambda x, y: torch.einsum("i,j->ij", x, y), lambda: (torch.rand(4), torch.rand(4)))]
    + [(lambda eq=eq: lambda x: torch.einsum(eq, x), lambda: (torch.rand(2, 3, 4),)) for eq in ("ijk->ijk", "ijk->ikj", "ijk->ij")],
    "F.kl_div": [(lambda: lambda x, y: F.kl_div(x, y), lambda: (torch.rand(4, 8), torch.rand(4, 8))),
                 (lambda: lambda x, y: F.kl_div(x, y, reduction="batchmean"), lambda: (torch.rand(4, 8), torch.rand(4, 8))),
                 (lambda: lambda x, y: F.kl_div(x, y, reduction="sum"), lambda: (torch.rand(4, 8), torch.rand(4, 8)))],
    "nn.KLDivLoss": [(lambda: nn.KLDivLoss(), lambda: (torch.rand(4, 8), torch.rand(4, 8))),
                     (lambda: nn.KLDivLoss(reduction="batchmean"), lambda: (torch.rand(4, 8), torch.rand(4, 8))),
                     (lambda: nn.KLDivLoss(reduction="sum"), lambda: (torch.rand(4, 8), torch.rand(4, 8)))],
    "nn.GRUCell": [(lambda: nn.GRUCell(8, 16), lambda: (torch.rand(2, 8),))],
    "nn.LSTMCell": [(lambda: nn.LSTMCell(8, 16), lambda: (torch.rand(2, 8),))],
}


def _trace(make: Callable, inputs: Callable, device: str) -> frozenset[str]:
    from operators.trace import SKIP_OPS, _Recorder

    torch.manual_seed(0)
    with torch.device(device):
        fn = make()
        args = inputs()
    rec = _Recorder()
    with torch.no_grad(), rec:
        fn(*args)
    return frozenset(rec.ops) - SKIP_OPS


def pin() -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for name, examples in EXAMPLES.items():
        seen: list[frozenset[str]] = []
        for make, inputs in examples:
            for device in ("meta", "cpu"):
                try:
                    sig = _trace(make, inputs, device)
                except (RuntimeError, NotImplementedError, TypeError, ValueError):
                    continue  # data-dependent ops do not run on meta; the CPU run pins them
                if sig and sig not in seen:
                    seen.append(sig)
        if not seen:
            raise RuntimeError(f"no example of {name} ran; fix its entry in EXAMPLES")
        out[name] = [sorted(s) for s in seen]
    return out


def main() -> None:
    data = {"torch": torch.__version__, "ops": pin()}
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"pinned {len(data['ops'])} foreign operators -> {OUT.name}")


if __name__ == "__main__":
    main()
