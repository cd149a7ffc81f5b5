"""What a candidate's forward may use, as a policy tier (recorded in every result as `policy`):

- `strict` (the default): the candidate's own kernels, plus allocation, views, metadata, same-dtype copies and the
  GEMM/convolution libraries (matmul, mm, bmm, addmm, linear, conv*: cuBLAS, cuDNN, MKL/oneDNN). Every other ATen
  computation is refused, inductor's fallback operators included.
- `library`: strict, plus the ATen operators the trainer names (`--allow aten::cumsum`, repeatable, or a named set
  such as `--allow inductor-fallbacks`). Each allowed call a candidate makes is listed in the result's
  `library_calls`.
- `torch`: anything (the compute guard is off; `--allow-torch` is its alias). Every other check stays.

The same policy judges the ATen calls the dispatch mode sees (verify/guard.py), the libtorch symbols a built
extension imports (verify/layers.py) and the libtorch kernels a CUDA forward launches (verify/layers.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from opsynth.errors import OpsynthError

TIERS = ("strict", "library", "torch")

ALLOC = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "full", "full_like", "new_full", "scalar_tensor", "lift_fresh", "resize_", "set_",
    "record_stream", "_local_scalar_dense", "is_nonzero", "detach", "alias", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "dim", "size", "stride", "numel", "is_same_size",
    "_alloc_from_pool",  # inductor's view into a pooled buffer
    "zero_", "fill_",  # filling a buffer it allocated (inductor zeroes the outputs of its atomic reductions)
})
VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "as_strided", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
    "flatten", "unflatten", "select", "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind",
    "contiguous", "view_as", "expand_as", "movedim", "diagonal", "unfold", "_reshape_alias", "reinterpret_tensor",
})
GEMM_CONV = frozenset({
    "mm", "bmm", "addmm", "addmv", "mv", "baddbmm", "addbmm", "matmul", "linear", "_scaled_mm", "dot",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution", "cudnn_convolution_transpose",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "mkldnn_convolution", "_mm_plus_mm", "_int_mm",
    "_weight_int4pack_mm", "_convolution_mode", "_addmm_activation",
})
MOVES = frozenset({"_to_copy", "copy_", "clone"})  # copies: allowed when they keep the dtype (guard._moves_only)
STRICT = ALLOC | VIEWS | GEMM_CONV


def inductor_fallbacks() -> frozenset[str]:
    """aten::NAME of every ATen operator in inductor's fallback registry (torch._inductor.lowering.fallbacks): the
    operators inductor's generated code calls back into PyTorch for (cumsum, cummax, SDPA kernels, linalg...)."""
    try:
        from torch._inductor import lowering
    except Exception:  # noqa: BLE001 - a torch without inductor: the set is empty
        return frozenset()
    out = set()
    for op in lowering.fallbacks:
        parts = str(op).split(".")
        if len(parts) >= 2 and parts[0] in ("aten", "prims"):
            out.add(f"{parts[0]}::{parts[1]}")
    return frozenset(out)


# named sets a trainer may allow by name: name -> (what it is, a function giving its aten::NAME members)
NAMED_SETS = {
    "inductor-fallbacks": ("every ATen operator inductor falls back to PyTorch for", inductor_fallbacks),
    "sdpa": ("the scaled-dot-product attention kernels", lambda: frozenset(
        f"aten::{n}" for n in ("scaled_dot_product_attention", "_scaled_dot_product_efficient_attention",
                               "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
                               "_scaled_dot_product_cudnn_attention", "_efficient_attention_forward",
                               "_flash_attention_forward", "_scaled_dot_product_fused_attention_overrideable"))),
}
_OP = re.compile(r"(aten|prims)::([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Policy:
    """A tier and, for `library`, the operators it allows (`aten::NAME`), with the names they were asked by."""

    tier: str = "strict"
    allow: frozenset[str] = field(default_factory=frozenset)
    asked: tuple[str, ...] = ()

    def allows(self, op: str) -> str:
        """How `op` (`aten::NAME` or a bare NAME, in-place or not) is judged: "strict" (allocation, a view, a GEMM or
        convolution), "library" (an operator this library tier names: listed in library_calls), "torch" (any op
        under the torch tier), or "" (refused)."""
        ns, name = op.split("::", 1) if "::" in op else ("aten", op)
        for n in dict.fromkeys((name, name.rstrip("_"))):
            if n in STRICT:
                return "strict"
        if self.tier == "torch":
            return "torch"
        if self.tier == "library" and any(f"{ns}::{n}" in self.allow for n in (name, name.rstrip("_"))):
            return "library"
        return ""

    def describe(self) -> dict:
        """The JSON a result carries: the tier and, for library, what was asked."""
        return {"tier": self.tier, "allow": list(self.asked)} if self.tier == "library" else {"tier": self.tier}


def make_policy(policy: str | None = None, allow: list[str] | tuple[str, ...] | None = None,
                allow_torch: bool = False) -> Policy:
    """The policy from the CLI's or the library call's words: `policy` a tier name, `allow` operators (`aten::cumsum`)
    or named sets (`inductor-fallbacks`), `allow_torch` the old switch (an alias of policy="torch"). `--allow`
    without a tier means library; a tier that contradicts what else was given is an error, said plainly."""
    allow = [a.strip() for a in (allow or []) if a and a.strip()]
    tier = policy or ("torch" if allow_torch else "library" if allow else "strict")
    if tier == "allow-torch":
        tier = "torch"
    if tier not in TIERS:
        raise OpsynthError(f"--policy {tier!r}: choose strict, library or torch")
    if allow_torch and tier != "torch":
        raise OpsynthError(f"--allow-torch is --policy torch; it cannot go with --policy {tier}")
    if tier == "library" and not allow:
        raise OpsynthError("--policy library needs the operators it allows: --allow aten::cumsum (repeatable) or "
                           f"a named set ({', '.join(NAMED_SETS)})")
    if allow and tier != "library":
        raise OpsynthError(f"--allow names library operators; it goes with --policy library, not {tier}")
    ops: set[str] = set()
    for a in allow:
        if a in NAMED_SETS:
            ops |= NAMED_SETS[a][1]()
            continue
        a2 = a.replace("aten.", "aten::", 1) if a.startswith("aten.") else a
        m = _OP.fullmatch(a2.split(".")[0])
        if not m:
            raise OpsynthError(f"--allow {a!r}: name an ATen operator as aten::NAME (e.g. aten::cumsum) or a named set "
                               f"({', '.join(NAMED_SETS)})")
        ops.add(f"{m.group(1)}::{m.group(2).rstrip('_')}")
    return Policy(tier, frozenset(ops), tuple(allow))


def from_job(job: dict) -> Policy:
    """The worker's policy from its job (the parent resolved named sets already)."""
    p = job.get("policy") or {"tier": "torch" if job.get("allow_torch") else "strict"}
    return Policy(p["tier"], frozenset(p.get("ops", ())), tuple(p.get("allow", ())))


def to_job(p: Policy) -> dict:
    return {"tier": p.tier, "ops": sorted(p.allow), "allow": list(p.asked)}
