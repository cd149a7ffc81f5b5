"""True labels: which ATen ops each catalog operator runs, pinned, and the check of `ops` against a trace.

`aten_pins.json` maps every sampleable catalog operator to the ATen ops it was seen to execute on the
meta device over many sampled parameters and ranks, and for real on the CPU (`python -m pinning.labels`
regenerates it; a test checks it is current). `aten_pins_cuda.json` holds what each operator executes on a
GPU (cuDNN batch norm, fused RMSNorm, other one_hot and attention paths), pinned on the GPU with
`python -m pinning.labels --device cuda`. `check_labels(ops, aten_ops, device)` then says, for any module
(template or LLM written), whether each labelled operator left its evidence in the trace and whether every
kernel in the trace is explained by some labelled operator; a trace from a GPU may show either pin's
behaviours. Layout-only ops (views, copies) never need a label.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PIN_FILE = Path(__file__).with_name("aten_pins.json")
CUDA_PIN_FILE = Path(__file__).with_name("aten_pins_cuda.json")
REPIN_CUDA = "python -m pinning.labels --device cuda"
# layout-only ops: no kernel launch and no traffic (the cost model skips them)
VIEW_OPS = frozenset({
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten.expand", "aten.t", "aten.transpose",
    "aten.permute", "aten.unsqueeze", "aten.squeeze", "aten.as_strided", "aten.slice", "aten.select",
    "aten.alias", "aten.detach", "aten.split", "aten.split_with_sizes", "aten.chunk", "aten.unbind",
    "aten.narrow", "aten.diagonal", "aten.movedim", "aten.unfold", "aten.view_as_real", "aten.lift_fresh",
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.tensor_split", "aten.expand_as",
})
# glue that any code may add without a label: layout ops, copies, casts, fills, scalar reads
GLUE = VIEW_OPS | {
    "aten.clone", "aten.contiguous", "aten.copy_", "aten.zeros", "aten.zeros_like", "aten.ones_like",
    "aten.fill_", "aten.zero_", "aten.flatten", "aten._reshape_alias", "aten.new_empty", "aten.new_zeros",
    "aten.resize_", "aten.lift_fresh_copy", "aten.unsafe_split", "aten.view_as", "aten.squeeze_",
    "aten.unsqueeze_", "aten.scalar_tensor", "aten._local_scalar_dense", "aten.item",
}


# one op, several device kernels: the fused attention backends all count as one behaviour
CANONICAL = {name: "aten._scaled_dot_product_fused_attention" for name in (
    "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_efficient_attention", "aten._scaled_dot_product_cudnn_attention",
    "aten._scaled_dot_product_fused_attention_overrideable", "aten._scaled_dot_product_attention_math",
)}


def canonical(aten_ops) -> set[str]:
    return {CANONICAL.get(a, a) for a in aten_ops}


def pins(device: str = "cpu") -> dict[str, tuple[frozenset[str], ...]]:
    """Catalog name -> the distinct sets of ATen ops it ran alone (one per parameter/rank behaviour): on meta and
    the CPU, and for device "cuda" (or "cuda:N") also those pinned on a GPU (both kept: a GPU trace may show
    either, e.g. a path the CPU pin found at a batch of one)."""
    return _pins("cuda" if str(device).startswith("cuda") else "cpu")


@lru_cache(maxsize=2)
def _pins(device: str) -> dict[str, tuple[frozenset[str], ...]]:
    data = json.loads(PIN_FILE.read_text())
    table = {k: tuple(frozenset(s) for s in v) for k, v in data["ops"].items()}
    if device == "cpu":
        return table
    for name, sigs in device_pins().items():
        base = table.get(name, ())
        table[name] = base + tuple(s for s in sigs if s not in base)
    return table


@lru_cache(maxsize=1)
def device_pins() -> dict[str, tuple[frozenset[str], ...]]:
    """Catalog name -> the ATen op sets it ran on a GPU (aten_pins_cuda.json; empty until it is pinned)."""
    if not CUDA_PIN_FILE.is_file():
        return {}
    data = json.loads(CUDA_PIN_FILE.read_text())
    return {k: tuple(frozenset(s) for s in e["behaviours"]) for k, e in data["ops"].items()}


def reload_pins() -> None:
    """Forget the pins read so far (after a pin file was rewritten, or a test pointed the paths elsewhere)."""
    _pins.cache_clear()
    device_pins.cache_clear()


def _signature(sig: frozenset[str]) -> frozenset[str]:
    """What must show up in a trace for this behaviour: its kernels, or its layout ops if it has none."""
    return (sig - GLUE) or sig


def _shows(sig: frozenset[str], traced: set[str]) -> bool:
    """A behaviour shows in a trace when all its kernels ran; composite modules (3+ kernels, e.g. attention,
    whose inner kernels vary with shapes) need two thirds of them."""
    want = _signature(sig)
    hit = len(want & traced)
    return hit == len(want) or (len(want) >= 3 and 3 * hit >= 2 * len(want))


def check_labels(ops: list[str], aten_ops: list[str], device: str = "cpu") -> list[str]:
    """Mismatches between catalog labels and a trace of ATen ops (overload packets); [] = labels true.

    A labelled operator is present when the trace holds the kernels of one of its pinned behaviours;
    every traced op must be glue or belong to some labelled operator's pins. `device` is where the trace
    ran: "cpu" (also for meta traces) checks against the CPU pins, "cuda" against those and the GPU pins.
    """
    table = pins(device)
    traced = canonical(aten_ops)
    problems = [f"unknown operator {op!r} (not in the pinned catalog)" for op in dict.fromkeys(ops) if op not in table]
    for op in dict.fromkeys(ops):
        sigs = table.get(op, ())
        if sigs and not any(_shows(s, traced) for s in sigs):
            want = sorted({a for s in sigs for a in _signature(s)})
            problems.append(f"{op} is labelled but its ATen ops did not run (expected one behaviour of {want})")
    explained = set(GLUE).union(*(s for op in ops for s in table.get(op, ())))
    for name in sorted(traced - explained):
        problems.append(f"{name} ran but no labelled operator explains it")
    return problems


def require_pinned(names: list[str]) -> None:
    """Fail at load, naming the entries, if catalog operators were added without re-pinning their labels."""
    from opsynth.errors import OpsynthError

    missing = sorted(set(names) - set(pins()))
    if missing:
        raise OpsynthError(f"catalog operator(s) {missing[:5]} have no pinned ATen labels; "
                           "run: python -m pinning.labels (it also checks they run on meta)")


# ---- label findings on foreign data -----------------------------------------------------------------------------
FOREIGN_PIN_FILE = Path(__file__).with_name("foreign_pins.json")
# arithmetic code does between operators (x + y, x * s): never evidence of an unlabelled operator
ARITHMETIC_GLUE = frozenset({"aten.add", "aten.sub", "aten.mul", "aten.div", "aten.rsub", "aten.neg", "aten.true_divide"})
# comparisons code makes between operators (x > 0 before a torch.all, a mask for torch.where): glue as well
COMPARISONS = frozenset({"aten.gt", "aten.lt", "aten.ge", "aten.le", "aten.eq", "aten.ne"})
# device kernels of one behaviour: a GPU (cuDNN) or the CPU (oneDNN) picks its own batch-norm and RNN kernels
DEVICE_EQUIVALENT = {
    **{a: "aten.native_batch_norm" for a in (
        "aten.cudnn_batch_norm", "aten.miopen_batch_norm", "aten._native_batch_norm_legit",
        "aten._native_batch_norm_legit_no_training", "aten._batch_norm_with_update", "aten._batch_norm_no_update")},
    **{a: "aten.rnn kernel" for a in ("aten._cudnn_rnn", "aten.miopen_rnn", "aten.mkldnn_rnn_layer")},
}
RNN_LABELS = ("nn.LSTM", "nn.GRU", "nn.RNN")
# labels that name a container or a layout step: they run no kernel of their own, so they need no evidence
NO_KERNEL_LABELS = frozenset({
    "nn.Sequential", "nn.ModuleList", "nn.ModuleDict", "nn.ParameterList", "nn.ParameterDict", "nn.Parameter",
    "nn.Identity", "nn.Container", "nn.functional", "torch.squeeze", "torch.unsqueeze", "torch.clone",
    "torch.detach", "torch.t", "torch.unbind", "torch.split_with_sizes", "torch.view_as_real", "torch.scalar_tensor",
    "torch.is_complex", "torch.meshgrid", "torch.reshape", "torch.flatten", "torch.transpose", "torch.permute",
})
# other spellings of catalog operators that foreign datasets use
LABEL_ALIASES = {
    "add": "torch.add", "+": "torch.add", "mul": "torch.mul", "*": "torch.mul", "sub": "torch.sub", "-": "torch.sub",
    "div": "torch.div", "/": "torch.div", "F.upsample": "F.interpolate", "F.upsample_bilinear": "F.interpolate",
    "F.upsample_nearest": "F.interpolate", "nn.LazyConv1d": "nn.Conv1d", "nn.LazyConv2d": "nn.Conv2d",
    "nn.LazyConv3d": "nn.Conv3d", "nn.LazyConvTranspose1d": "nn.ConvTranspose1d",
    "nn.LazyConvTranspose2d": "nn.ConvTranspose2d", "nn.LazyConvTranspose3d": "nn.ConvTranspose3d",
    "nn.LazyBatchNorm1d": "nn.BatchNorm1d", "nn.LazyBatchNorm2d": "nn.BatchNorm2d", "nn.LazyBatchNorm3d": "nn.BatchNorm3d",
    "nn.LazyInstanceNorm2d": "nn.InstanceNorm2d", "nn.LazyLinear": "nn.Linear", "nn.NLLLoss2d": "nn.NLLLoss",
    "torch.native_batch_norm": "F.batch_norm", "F.max_pool2d_with_indices": "F.max_pool2d",
    "F.max_pool1d_with_indices": "F.max_pool1d", "F.adaptive_max_pool1d_with_indices": "F.adaptive_max_pool1d",
    "torch.binary_cross_entropy_with_logits": "F.binary_cross_entropy_with_logits", "torch.constant_pad_nd": "F.pad",
}
FINDING_KINDS = ("wrong label", "missing label", "cannot judge", "labels true")


@dataclass(frozen=True)
class LabelFindings:
    """What a trace says about a row's labels, each kind apart. Only `wrong` and `missing` are label errors:
    `unknown` names operators we hold no pins for, `unjudged` ops ran that such an operator may explain."""

    wrong: tuple[str, ...] = ()      # labelled operators whose ATen ops never ran
    missing: tuple[str, ...] = ()    # ATen ops that ran and no label explains (glue and arithmetic excluded)
    unknown: tuple[str, ...] = ()    # labelled operators we cannot judge (not pinned)
    unjudged: tuple[str, ...] = ()   # unexplained ATen ops while an unknown label could explain them

    @property
    def kind(self) -> str:
        """The row's finding: wrong label, missing label (when no wrong one), cannot judge, or labels true."""
        if self.wrong:
            return "wrong label"
        if self.missing:
            return "missing label"
        return "cannot judge" if self.unknown else "labels true"

    def reason(self) -> str:
        """One line naming the label errors (empty when there are none)."""
        parts = [f"labelled but never ran: {', '.join(self.wrong)}"] if self.wrong else []
        if self.missing:
            parts.append(f"ran without a label: {', '.join(self.missing)}")
        return "; ".join(parts)


@lru_cache(maxsize=1)
def foreign_pins() -> dict[str, tuple[frozenset[str], ...]]:
    """Operators foreign datasets name beyond the catalog (foreign_pins.json, `python -m pinning.foreign`)."""
    if not FOREIGN_PIN_FILE.is_file():
        return {}
    data = json.loads(FOREIGN_PIN_FILE.read_text())
    table = {k: tuple(frozenset(s) for s in v) for k, v in data["ops"].items()}
    for name in RNN_LABELS:  # a GPU runs one cuDNN kernel for the whole recurrence
        table[name] = (*table.get(name, ()), frozenset({"aten.rnn kernel"}))
    return table


def _foreign_canonical(ops) -> set[str]:
    """Canonical names with device kernels merged and in-place forms read as their op (mish_ is mish)."""
    out = set()
    for a in canonical(ops):
        a = DEVICE_EQUIVALENT.get(a, a)
        out.add(a[:-1] if a.endswith("_") and not a.endswith("__") else a)
    return out


def _foreign_shows(sig: frozenset[str], traced: set[str], glue: set[str]) -> bool:
    """`_shows` over canonical names, with glue and arithmetic not required (a running-stats update, add_, does
    not run in eval mode), nor the comparisons the sampler's renderer adds to make boolean inputs (torch.all is
    pinned with the `x > 0` before it), which foreign code need not have."""
    want = (sig - glue - COMPARISONS) or sig
    hit = len(want & traced)
    return hit == len(want) or (len(want) >= 3 and 3 * hit >= 2 * len(want))


def label_findings(ops: list[str], aten_ops: list[str], device: str = "cpu") -> LabelFindings:
    """Judge a foreign row's `ops` labels against the ATen ops its forward ran on `device` (meta and cpu traces
    use the CPU pins, cuda traces also the GPU pins). Labels are catalog names, their foreign spellings
    (LABEL_ALIASES), containers (NO_KERNEL_LABELS) or foreign operators pinned in foreign_pins.json; any other
    name is unknown, and while one is unknown no unexplained op is called a missing label."""
    table = dict(pins(device))
    for name, sigs in foreign_pins().items():
        table[name] = (*table.get(name, ()), *sigs)
    traced = _foreign_canonical(aten_ops)
    glue = _foreign_canonical(GLUE | ARITHMETIC_GLUE | COMPARISONS)
    wrong, unknown, explained = [], [], set(glue)
    for label in dict.fromkeys(ops):
        if label in NO_KERNEL_LABELS:
            continue
        sigs = tuple(frozenset(_foreign_canonical(s)) for s in table.get(LABEL_ALIASES.get(label, label), ()))
        if not sigs:
            unknown.append(label)
            continue
        explained.update(*sigs)
        # the kernel named like the operator (torch.eq -> aten.eq) is evidence enough: the pins also hold the
        # sampler's companions (torch.eq is pinned with the round that makes equal values likely)
        named = f"aten.{label.rsplit('.', 1)[-1].lower()}"
        if named not in traced and not any(_foreign_shows(s, traced, glue) for s in sigs):
            wrong.append(label)
    rest = sorted(traced - explained)
    return LabelFindings(tuple(wrong), () if unknown else tuple(rest), tuple(unknown), tuple(rest) if unknown else ())
