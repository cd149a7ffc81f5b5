"""LLM composer: ask an OpenAI-compatible endpoint to write a natural KernelBench module for a sampled graph.

The model's answer is untrusted. It is accepted only when it passes the static check, keeps the
graph's sizes, traces in an isolated subprocess, and executes the same ATen ops as the deterministic
template; otherwise the row keeps its template code and `composer_note` says why. Responses are
cached on disk by prompt, so a rerun (or a resumed run) sends no request twice.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filters.static_check import check_task_source
from opsynth.errors import require


@dataclass(frozen=True)
class LLMSettings:
    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 4
    max_retries: int = 3
    timeout_s: float = 60.0
    budget: int = 1000  # most HTTP requests (retries included) one call may send
    temperature: float = 0.2
    retry_base_s: float = 1.0  # backoff: base, 2*base, 4*base, ...
    trace_timeout_s: float = 30.0


SYSTEM = ("You write PyTorch programs in the KernelBench task format. Reply with exactly one ```python code "
          "block containing the complete module, and nothing else.")

RULES = """Rules:
- Imports: only `import torch`, `import torch.nn as nn`, `import torch.nn.functional as F` and `import math`.
- `class Model(nn.Module)`: `__init__` takes exactly the arguments that get_init_inputs() returns and creates
  the parameterized operators (the nn.* ones) with the graph's parameters; `forward` takes the tensors that
  get_inputs() returns and applies the graph's operators in its order. Use each operator as named (nn.X as a
  module built in __init__, F.x / torch.x as calls in forward) and add no other computation.
- Keep the module-level size constants with exactly the names and values given, and keep get_inputs() and
  get_init_inputs() as given: inputs are freshly drawn random tensors on every call.
- A one-line docstring on Model saying what it computes is welcome; no prints, no tests, no __main__ block.
- No file, network, process or environment access of any kind."""

# ATen ops that only change views, layout or copies: a different but equivalent spelling may add or drop them
_LAYOUT_OPS = frozenset({
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten.t", "aten.transpose", "aten.permute", "aten.expand",
    "aten.unsqueeze", "aten.squeeze", "aten.contiguous", "aten.clone", "aten.copy_", "aten.alias", "aten.flatten",
    "aten.as_strided", "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.detach", "aten._to_copy",
})


def size_constants(code: str) -> dict[str, Any]:
    """Module-level NAME = literal assignments (the task's sizes)."""
    out: dict[str, Any] = {}
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def _function_source(code: str, name: str) -> str:
    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(code, node) or ""
    return ""


def _describe(row: dict[str, Any]) -> str:
    # sizes and input functions go in their own prompt sections, so the graph is described without them
    try:
        return _describe_node_link(json.loads(row["graph"]))
    except (KeyError, TypeError, ValueError):  # an unknown graph layout: give the model the raw graph
        return f"operators in order: {', '.join(row.get('ops') or [])}\ngraph (JSON node-link): {row.get('graph')}"


def _describe_node_link(g: dict[str, Any]) -> str:
    """The sampler's node-link graph as lines a model reads easily: inputs, operators in order, output."""
    lines = ["inputs:"]
    nodes = g["nodes"]
    for n in nodes:
        if n.get("kind") == "input":
            lines.append(f"- {n['id']}: {n.get('dtype', 'float32')} tensor of shape [{', '.join(map(str, n['shape_expr']))}]"
                         f", drawn as {n['expr']}")
    lines.append("operators, in this order:")
    for n in nodes:
        if n.get("kind") == "op":
            how = f"module {n['init']} called as {n['call']}" if n.get("init") else n["call"]
            lines.append(f"- {n['id']} = {n['op']}: {how} -> shape {list(n['shape'])}")
    lines.append(f"output: {g['graph']['output']}")
    return "\n".join(lines)


def build_prompt(row: dict[str, Any]) -> str:
    """The user message for one sampled row: graph, sizes, the fixed input functions and the format rules."""
    code = row["code"]
    sizes = "\n".join(f"{k} = {v!r}" for k, v in size_constants(code).items())
    return "\n\n".join([
        f"Write a KernelBench-format PyTorch module for the operator graph {row.get('name') or 'task'} "
        f"({row.get('num_ops') or len(row.get('ops') or [])} operators, {'DAG' if row.get('is_dag') else 'chain'}).",
        f"Graph:\n{_describe(row)}",
        f"Size constants (module level, exactly these):\n{sizes}",
        "Input functions (copy them unchanged):\n" + _function_source(code, "get_inputs") + "\n\n"
        + _function_source(code, "get_init_inputs"),
        RULES,
    ])


def extract_code(text: str) -> str | None:
    """The first fenced python block, or the whole answer when it is bare code."""
    if not isinstance(text, str):
        return None
    blocks = re.findall(r"```(?:python|py)?[ \t]*\n(.*?)```", text, flags=re.DOTALL)
    if blocks:
        return max(blocks, key=len).strip() + "\n"
    return text.strip() + "\n" if "class Model" in text else None


def significant_ops(aten_ops: list[str]) -> Counter:
    return Counter(op for op in aten_ops if op not in _LAYOUT_OPS)


def _ops_mismatch(want: list[str], got: list[str]) -> str | None:
    w, g = significant_ops(want), significant_ops(got)
    if w == g:
        return None
    missing, extra = sorted((w - g).elements()), sorted((g - w).elements())
    parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"extra {', '.join(extra)}"] if extra else [])
    return "traced ops differ from the graph: " + "; ".join(parts)


def _sizes_mismatch(template: str, candidate: str) -> str | None:
    want, got = size_constants(template), size_constants(candidate)
    wrong = [f"{k}={got.get(k)!r} (wanted {v!r})" for k, v in want.items() if got.get(k) != v]
    return "sizes differ from the graph: " + ", ".join(wrong[:4]) if wrong else None


class _Client:
    """Chat requests with retries, a shared request budget and an on-disk cache keyed by the prompt."""

    def __init__(self, settings: LLMSettings, cache_dir: Path) -> None:
        openai = require("openai", "llm")
        self.openai = openai
        self.s = settings
        self.key = os.environ.get(settings.api_key_env) or ""
        # a local server (vLLM, llama.cpp) needs no key, but the client insists on one
        self.client = openai.OpenAI(base_url=settings.base_url, api_key=self.key or "not-needed",
                                    timeout=settings.timeout_s, max_retries=0)
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.sent = 0

    def _cache_path(self, prompt: str) -> Path:
        key = json.dumps([self.s.model, self.s.temperature, SYSTEM, prompt])
        return self.cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()}.json"

    def _take_budget(self) -> bool:
        with self.lock:
            if self.sent >= self.s.budget:
                return False
            self.sent += 1
            return True

    def _scrub(self, text: str) -> str:
        text = " ".join(str(text).split())[:200]
        return text.replace(self.key, "***") if self.key else text

    def ask(self, prompt: str) -> tuple[str | None, str]:
        """(answer text, "") or (None, why no answer)."""
        path = self._cache_path(prompt)
        if path.exists():
            return json.loads(path.read_text())["content"], ""
        o = self.openai
        transient = (o.APITimeoutError, o.APIConnectionError, o.RateLimitError, o.InternalServerError)
        why = ""
        for attempt in range(self.s.max_retries + 1):
            if not self._take_budget():
                return None, f"LLM request budget of {self.s.budget} spent"
            try:
                resp = self.client.chat.completions.create(
                    model=self.s.model, temperature=self.s.temperature,
                    messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}])
                content = resp.choices[0].message.content if resp.choices else None
            except transient as e:
                kind = "timed out" if isinstance(e, o.APITimeoutError) else type(e).__name__
                why = f"LLM endpoint {kind} after {attempt + 1} attempt(s)"
                if attempt < self.s.max_retries:
                    time.sleep(self.s.retry_base_s * 2**attempt)
                continue
            except o.APIError as e:  # 4xx and malformed bodies: retrying will not help
                return None, self._scrub(f"LLM endpoint error: {type(e).__name__}: {e}")
            except Exception as e:  # noqa: BLE001 - a broken response must not stop the batch
                return None, self._scrub(f"LLM endpoint returned an unreadable response: {type(e).__name__}")
            if not isinstance(content, str) or not content.strip():
                return None, "LLM endpoint returned an empty answer"
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
            tmp.write_text(json.dumps({"model": self.s.model, "content": content}))
            os.replace(tmp, path)
            return content, ""
        return None, why


def compose_rows(rows: list[dict[str, Any]], settings: LLMSettings, cache_dir: Path) -> list[dict[str, Any]]:
    """Rows with LLM-written `code` where it checks out (composer="llm"), else the template and the reason."""
    from operators.trace import trace_isolated

    if not rows:
        return []
    client = _Client(settings, cache_dir)
    prompts = [build_prompt(r) for r in rows]
    with ThreadPoolExecutor(max_workers=max(1, settings.concurrency)) as pool:
        answers = list(pool.map(client.ask, prompts))

    notes: list[str] = [""] * len(rows)
    candidates: dict[int, str] = {}
    for i, (row, (text, why)) in enumerate(zip(rows, answers, strict=True)):
        if text is None:
            notes[i] = why
            continue
        code = extract_code(text)
        reason = "LLM answer has no python code block" if code is None else check_task_source(code)
        reason = reason or _sizes_mismatch(row["code"], code)  # type: ignore[arg-type]
        if reason:
            notes[i] = f"static check: {reason}" if not reason.startswith(("LLM", "sizes")) else reason
        else:
            candidates[i] = code  # type: ignore[assignment]

    # the trusted templates are traced too when the sampler left aten_ops empty
    need_template = [i for i in candidates if not rows[i].get("aten_ops")]
    order = list(candidates)
    traced = trace_isolated([candidates[i] for i in order] + [rows[i]["code"] for i in need_template],
                            timeout_s=settings.trace_timeout_s)
    template_ops = {i: traced[len(order) + k] for k, i in enumerate(need_template)}
    accepted: dict[int, str] = {}
    for k, i in enumerate(order):
        res = traced[k]
        if not res.get("ok"):
            notes[i] = f"trace failed: {res.get('error', 'unknown error')}"[:200]
            continue
        want = rows[i].get("aten_ops") or template_ops[i].get("ops") or []
        reason = _ops_mismatch(want, res["ops"]) or _label_mismatch(rows[i], res["ops"])
        if reason:
            notes[i] = reason[:200]
        else:
            accepted[i] = candidates[i]

    out = []
    for i, row in enumerate(rows):
        new = dict(row)
        if i in accepted:
            new.update(code=accepted[i], composer="llm", composer_note="", aten_ops=row.get("aten_ops")
                       or template_ops[i].get("ops"))
        else:
            new.update(composer="template", composer_note=" ".join(notes[i].split()) or "LLM answer rejected")
        out.append(new)
    return out


def _label_mismatch(row: dict[str, Any], aten_ops: list[str]) -> str | None:
    try:
        from operators.labels import check_labels
    except ImportError:
        return None
    bad = check_labels(row.get("ops") or [], aten_ops)
    return f"ops labels do not match the trace: {'; '.join(bad)}" if bad else None
