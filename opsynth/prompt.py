"""The prompt of a task, in one place: the chat messages (`[{"role", "content"}, ...]`) that TRL's GRPOTrainer and
verl both read from a dataset's `prompt` column. They hold the task's code, the rules the reward enforces (the
policy tier, what counts as a hack, the tolerance, the reward levels) and the answer format (one fenced Python block
defining `ModelNew`), which is what `opsynth.rl` parses out of an answer.

The built-in template has a version (PROMPT_VERSION), recorded in the dataset's manifest and card; change the text
and the version together. A config may replace either message's template (`publish.prompt_system`,
`publish.prompt_user`); its version is then `custom-` and a hash of the texts. Templates are `str.format` strings
over FIELDS. Nothing here imports anything: the pipeline and the reward adapters both read it. The numbers stated
(TOLERANCE, SPEEDUP_MARGIN) are the verifier's (tests/test_rl.py checks they agree)."""

from __future__ import annotations

import hashlib
import string

PROMPT_VERSION = "opsynth-prompt-v1"
POLICIES = ("strict", "allow-torch")
TOLERANCE = 1e-2  # verify/worker.py: atol = rtol of every draw
SPEEDUP_MARGIN = 1.05  # verify/reward.py MARGIN: "more than 5% faster"

POLICY_RULES = {
    "strict": (
        "Policy: strict. Inside `forward` you may allocate tensors, read shapes, take views, fill buffers "
        "(`zero_`, `fill_`), copy values without changing their dtype, and call matrix multiplications and "
        "convolutions (GEMM and conv library calls). Every other computation, a dtype cast included, must run in "
        "kernels you write: C++/CUDA through `from torch.utils.cpp_extension import load_inline`, or Triton "
        "(`import triton`, `import triton.language as tl`). Any other PyTorch compute in `forward` (`torch.*`, "
        "`F.*`, tensor methods, `torch.ops.aten`, or at::* calls from C++) is refused as a hack."),
    "allow-torch": (
        "Policy: allow-torch. `forward` may use any PyTorch operator, so a plain-PyTorch rewrite is allowed; your "
        "own kernels (`from torch.utils.cpp_extension import load_inline`, or Triton) are allowed too. Every other "
        "rule below still holds."),
}

HACKS = """\
- returning an input, or a tensor that shares storage with an input or a weight;
- caching results between calls (by shape, by pointer, by input values) or returning a stale output: every call \
gets fresh inputs, and timed runs are checked against the reference on the same input;
- changing an input in place;
- work that finishes after `forward` returns (a thread, a side stream);
- lower precision than the reference (bf16/fp16 rounding, TF32 or reduced-precision switches);
- calling `torch.compile`; replacing `torch.cuda.synchronize`, timers or CUDA events;
- exiting the process, or writing a fake result;
- importing anything beyond torch and its submodules, math, numpy, a few pure standard-library modules \
(typing, functools, collections, itertools, dataclasses), `load_inline` and triton: no os, sys, subprocess, \
threading, ctypes or files."""

ANSWER_FORMAT = (
    "Reply with exactly one fenced Python code block (```python ... ```) holding a complete module that defines "
    "`class ModelNew(nn.Module)` at the top level, with the same `__init__` arguments as `Model` and the same "
    "parameters and buffers (weights are copied with `load_state_dict`). Explain outside the block if you like; an "
    "answer with no code block, more than one, or one without `ModelNew` scores -1.")

DEFAULT_SYSTEM = """\
You are an expert GPU kernel engineer. You rewrite PyTorch modules as faster custom kernels that compute the same \
result."""

DEFAULT_USER = """\
Write `ModelNew`, a faster version of the `Model` below that computes the same outputs.

```python
{code}
```

Rules (the reward enforces them):
{policy_rules}

Correctness: `ModelNew`'s outputs must match `Model`'s at atol = rtol = {tolerance} on fresh random inputs and \
weights, on several draws, and at the task's other sizes.

Counted as a hack (reward -1):
{hacks}

Reward: -1 if incorrect, failing to build, or a hack; 1 if correct; 2 if correct and more than {margin_pct}% faster \
than eager PyTorch; 3 if also more than {margin_pct}% faster than torch.compile.

Answer format: {answer_format}"""

# the placeholders a template may use
FIELDS = ("code", "task_id", "name", "policy", "policy_rules", "hacks", "tolerance", "margin_pct", "answer_format")


def placeholders(template: str) -> list[str]:
    """The `{field}` names of a str.format template; raises ValueError on a malformed one."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]


def template_problem(system: str, user: str, policy: str) -> str | None:
    """None if the templates (empty: the built-in one) and the policy can render a prompt, else what is wrong."""
    if policy not in POLICIES:
        return f"prompt_policy must be one of {list(POLICIES)} (got {policy!r})"
    for key, text in (("prompt_system", system), ("prompt_user", user)):
        try:
            names = placeholders(text)
        except ValueError as e:
            return f"{key} is not a str.format template ({e}); write literal braces as {{{{ and }}}}"
        bad = sorted({n for n in names if n not in FIELDS})
        if bad:
            return f"{key} uses unknown placeholder(s) {bad}; known: {list(FIELDS)}"
    if "code" not in placeholders(system or DEFAULT_SYSTEM) + placeholders(user or DEFAULT_USER):
        return "a custom prompt must hold the task: put {code} in prompt_user or prompt_system"
    return None


def prompt_version(system: str = "", user: str = "", policy: str = "strict") -> str:
    """PROMPT_VERSION for the built-in templates (with the policy when not strict), else `custom-` and a hash."""
    if not system and not user:
        return PROMPT_VERSION if policy == "strict" else f"{PROMPT_VERSION}+{policy}"
    h = hashlib.sha256("\0".join((system, user, policy)).encode()).hexdigest()[:12]
    return f"custom-{h}"


def render(code: str, task_id: str | None = None, name: str | None = None, policy: str = "strict",
           system: str = "", user: str = "") -> list[dict[str, str]]:
    """The chat messages of one task: a system message, then a user message with the code, rules and format."""
    values = {"code": code.rstrip("\n"), "task_id": task_id or "", "name": name or "", "policy": policy,
              "policy_rules": POLICY_RULES[policy], "hacks": HACKS, "tolerance": f"{TOLERANCE:g}",
              "margin_pct": f"{round((SPEEDUP_MARGIN - 1) * 100):d}", "answer_format": ANSWER_FORMAT}
    messages = [{"role": "system", "content": (system or DEFAULT_SYSTEM).format(**values)},
                {"role": "user", "content": (user or DEFAULT_USER).format(**values)}]
    return [m for m in messages if m["content"].strip()]
