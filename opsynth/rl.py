"""The reward where trainers already work: adapters from TRL's and verl's reward-function signatures to opsynth's
verifier (`verify_batch`), so a rollout batch is verified in parallel worker processes, across GPUs.

- `trl_reward` (or `make_trl_reward(...)` for other settings): TRL `GRPOTrainer`'s `reward_funcs` signature,
  `(prompts, completions, **columns) -> list[float]`. The task comes from the dataset's columns, which TRL passes
  as keyword lists (`code`, `task_id`, `shape_variants`, `eager_ms`, `peak_memory_bytes`); a completion is a string
  or a list of chat messages. Extras go to TRL's `log_extra`/`log_metric` where the trainer passes them, to
  `reward.last_extras`, and to an `on_extras` callback.
- `verl_compute_score`: verl's custom reward function, `(data_source, solution_str, ground_truth, extra_info)` ->
  a dict with "score" and the extras; called with `data_sources=`, `solution_strs=`, ... (verl's batch reward
  manager) it scores the whole batch at once and returns one dict per answer. `to_verl` makes verl's parquet rows
  from a published row (ground truth: the task's code; extra_info: its id, sizes and measurements).

Every answer gets a number, never an exception: no fenced code block, two blocks, an unterminated one, a block that
does not parse or defines no `ModelNew` score -1 with a `format:` reason; a verification over its wall-clock budget
(`budget_s`) is killed and scores -1 (`timeout:`), and the seconds a worker waits for a neighbour's timing do not
count against it (up to `lock_wait_grace_s`), so one hung candidate neither stalls the batch nor costs a neighbour its
reward. The frameworks are not imported; torch only when the device must be guessed. The prompt the answers reply to
is opsynth/prompt.py's (the dataset's `prompt` column)."""

# no `from __future__ import annotations`: verl loads this file by its path (custom_reward_function.path) as a module
# that older verl leaves out of sys.modules, where a dataclass with string annotations cannot be made
import ast
import dataclasses
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("opsynth.rl")

PYTHON_TAGS = ("", "python", "py", "python3")
SCORES = ("level", "speedup")
# the task columns of a published row that a verification reads
TASK_COLUMNS = ("task_id", "code", "shape_variants", "eager_ms", "compile_ms", "peak_memory_bytes")
# what every answer's extras hold, in this order (verl gathers each key over the batch, so every dict has them all)
EXTRA_KEYS = ("score", "reward_level", "correct", "format_ok", "timed_out", "speedup_eager", "speedup_compile",
              "hack", "reason", "wall_s", "task_id")


@dataclass(frozen=True)
class RewardSettings:
    """How the adapters verify. `device`: None picks cuda when torch sees a GPU, else cpu (or $OPSYNTH_RL_DEVICE).
    `allow_torch`: the allow-torch policy (match the policy the dataset's prompts state: its manifest's
    `prompt.policy`). `policy`, `allow`: the verifier's tier ("strict", "library" with the operators `allow` names,
    such as ("aten::cumsum",) or ("inductor-fallbacks",), or "torch"); None: strict, or torch with allow_torch.
    `precision`: "fp32" or "tf32" for the baselines and the candidate. `workers`: verifications at once (None: 2
    per GPU, 2 on the CPU); `gpus`: the GPUs they spread over. `budget_s`: one answer's wall-clock budget (worker
    start, build, checks, timing); `lock_wait_grace_s`: the seconds of waiting for a neighbour's timing that do not
    count against it (None: as many as budget_s). `rounds`,
    `draws`: the verifier's timed rounds and correctness draws. `score`: "level", the CUDA Agent reward (-1, 1, 2,
    3), or "speedup", the speedup over eager for a correct answer (-1 otherwise)."""

    device: str | None = None
    allow_torch: bool = False
    policy: str | None = None
    allow: tuple[str, ...] | None = None
    precision: str = "fp32"
    workers: int | None = None
    gpus: tuple[int, ...] | None = None
    budget_s: float = 300.0
    lock_wait_grace_s: float | None = None
    rounds: int = 10
    draws: int = 5
    score: str = "level"
    extensions_dir: str | None = None

    def __post_init__(self) -> None:
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {list(SCORES)} (got {self.score!r})")
        if not self.budget_s > 0:
            raise ValueError(f"budget_s must be > 0 (got {self.budget_s})")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1 (got {self.workers})")
        if self.gpus is not None:
            object.__setattr__(self, "gpus", tuple(int(g) for g in self.gpus))
        if isinstance(self.allow, str):
            object.__setattr__(self, "allow", (self.allow,))
        elif self.allow is not None:
            object.__setattr__(self, "allow", tuple(self.allow))
        from verify.api import PRECISIONS, resolve_policy

        resolve_policy(self.policy, self.allow, self.allow_torch)  # a contradiction is said here, not mid-training
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {list(PRECISIONS)} (got {self.precision!r})")

    @classmethod
    def of(cls, settings: "RewardSettings | None" = None, **kw: Any) -> "RewardSettings":
        """`settings` with `kw` replaced; a key that is no setting is dropped with a warning (a framework may pass
        keyword arguments of its own), never an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kw) - known)
        if unknown:
            log.warning("opsynth.rl: ignoring unknown reward settings %s; known: %s", unknown, sorted(known))
        given = {k: v for k, v in kw.items() if k in known}
        return dataclasses.replace(settings or cls(), **given)


# -- the answer ------------------------------------------------------------------------------------------------------

def answer_text(completion: Any) -> str | None:
    """The text of a completion: a string, or chat messages (TRL's conversational completions: the assistant
    messages' contents, joined; a content may be a list of {"type": "text", "text": ...} parts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, Sequence) or hasattr(completion, "tolist"):
        msgs = completion.tolist() if hasattr(completion, "tolist") else list(completion)
        parts = []
        for m in msgs:
            if not isinstance(m, dict) or m.get("role", "assistant") != "assistant":
                continue
            c = m.get("content")
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts += [p.get("text", "") for p in c if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(parts) if parts else None
    return None


def code_blocks(text: str) -> tuple[list[tuple[str, str]], bool]:
    """The fenced (```) blocks of `text` as (language tag, body), and whether a last one was left open. A fence is a
    line starting with three or more backticks; inside a block only a line of backticks alone closes it."""
    blocks, open_tag, body, fence = [], None, [], ""
    for line in text.splitlines():
        s = line.strip()
        if open_tag is None:
            if s.startswith("```"):
                fence = s[: len(s) - len(s.lstrip("`"))]
                rest = s[len(fence):].strip()
                open_tag, body = (rest.split()[0].lower() if rest else ""), []
        elif s.startswith(fence) and not s.strip("`"):
            blocks.append((open_tag, "\n".join(body) + "\n"))
            open_tag = None
        else:
            body.append(line)
    return blocks, open_tag is not None


def extract_candidate(text: str | None) -> tuple[str | None, str | None]:
    """(the candidate's code, None) from an answer, or (None, the `format:` reason it scores -1). A reasoning
    model's thoughts (up to the last `</think>`) are not part of the answer."""
    if not isinstance(text, str) or not text.strip():
        return None, "format: an empty answer"
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    blocks, left_open = code_blocks(text)
    if left_open:
        return None, ("format: an unterminated code block (the answer was cut off?)" if not blocks else
                      f"format: {len(blocks) + 1} code blocks, the last unterminated; one expected")
    if not blocks:
        return None, "format: no fenced code block; one ```python block defining ModelNew expected"
    if len(blocks) > 1:
        return None, f"format: {len(blocks)} code blocks; exactly one expected"
    tag, code = blocks[0]
    if tag not in PYTHON_TAGS:
        return None, f"format: the code block is tagged {tag!r}, not python"
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return None, f"format: the code block does not parse (line {e.lineno}: {e.msg})"
    except (ValueError, RecursionError) as e:
        return None, f"format: the code block does not parse ({type(e).__name__})"
    if "ModelNew" not in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}:
        return None, "format: the code block defines no top-level class ModelNew"
    return code, None


# -- the task --------------------------------------------------------------------------------------------------------

def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def task_of(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A verification's task from a published row's columns (None without `code`): `shape_variants` parsed from
    its JSON, the measurements kept where given (the GPU memory gate reads `peak_memory_bytes`)."""
    row = row or {}
    code = row.get("code")
    if not isinstance(code, str) or not code.strip():
        return None
    sv = row.get("shape_variants")
    if isinstance(sv, str):
        try:
            sv = json.loads(sv or "[]")
        except ValueError:
            sv = []
    sv = [dict(v) for v in (list(sv) if sv is not None and not isinstance(sv, str) else []) if isinstance(v, dict)]
    peak = _finite(row.get("peak_memory_bytes"))
    tid = row.get("task_id")
    return {"task_id": str(tid) if tid else hashlib.sha256(code.encode()).hexdigest()[:16], "code": code,
            "shape_variants": sv, "eager_ms": _finite(row.get("eager_ms")), "compile_ms": _finite(row.get("compile_ms")),
            "peak_memory_bytes": int(peak) if peak else None}


# -- scoring ---------------------------------------------------------------------------------------------------------

def _extras(task_id: str, reason: str, format_ok: bool = True, timed_out: bool = False) -> dict[str, Any]:
    """The extras of an answer that was not verified to be correct: -1 with its reason."""
    return {"score": -1.0, "reward_level": -1, "correct": False, "format_ok": format_ok, "timed_out": timed_out,
            "speedup_eager": 0.0, "speedup_compile": 0.0, "hack": "", "reason": reason, "wall_s": 0.0,
            "task_id": task_id}


def _reason(r: dict[str, Any]) -> str:
    if r.get("correct"):
        return ""
    if r.get("hack"):
        return str(r["hack"])
    err = r.get("error")
    if err:
        return f"timeout: {err}" if str(err).startswith("timed out") else f"error: {err}"[:500]
    if r.get("build_message"):
        return "build: " + str(r["build_message"]).strip().splitlines()[-1][:400]
    if r.get("failing_draw") is not None:
        return (f"incorrect: draw {r['failing_draw']} ({r.get('mismatch') or 'values'}, worst difference "
                f"{r.get('worst_diff')})")
    return "incorrect"


def _from_verify(r: dict[str, Any], s: RewardSettings) -> dict[str, Any]:
    correct = bool(r.get("correct"))
    se, sc = _finite(r.get("speedup_eager")), _finite(r.get("speedup_compile"))
    level = int(r.get("reward", -1))
    score = float(level) if s.score == "level" else (se if se is not None else 1.0) if correct else -1.0
    return {"score": score, "reward_level": level, "correct": correct, "format_ok": True,
            "timed_out": str(r.get("error") or "").startswith("timed out"), "speedup_eager": se or 0.0,
            "speedup_compile": sc or 0.0, "hack": str(r.get("hack") or ""), "reason": _reason(r),
            "wall_s": float(r.get("wall_s") or 0.0), "task_id": str(r.get("task_id") or "")}


def _device(s: RewardSettings) -> str:
    if s.device:
        return s.device
    if os.environ.get("OPSYNTH_RL_DEVICE"):
        return os.environ["OPSYNTH_RL_DEVICE"]
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _verify(pairs: list[tuple[dict, str]], s: RewardSettings) -> list[dict[str, Any]]:
    """verify_batch over the pairs with the settings; a verifier that fails gives each pair an `error:` result."""
    device = _device(s)
    per = 2 * max(1, len(s.gpus or ())) if device.startswith("cuda") else 2
    workers = min(len(pairs), s.workers or per)
    grace = s.budget_s if s.lock_wait_grace_s is None else s.lock_wait_grace_s
    try:
        from verify.api import verify_batch

        return verify_batch(pairs, workers=workers, gpus=list(s.gpus) if s.gpus else None, device=device,
                            allow_torch=s.allow_torch, policy=s.policy, allow=list(s.allow) if s.allow else None,
                            precision=s.precision, timeout_s=s.budget_s, lock_wait_grace_s=grace,
                            rounds=s.rounds, draws=s.draws, extensions_dir=s.extensions_dir)
    except Exception as e:  # noqa: BLE001 - training goes on; the reason says the verifier, not the answer, failed
        log.exception("opsynth.rl: the verifier failed on a batch of %d", len(pairs))
        return [{"task_id": t["task_id"], "reward": -1, "correct": False,
                 "error": f"the verifier failed: {type(e).__name__}: {e}"} for t, _ in pairs]


def score_batch(tasks: Sequence[dict[str, Any] | None], answers: Sequence[Any],
                settings: RewardSettings | None = None, **kw: Any) -> list[dict[str, Any]]:
    """One extras dict per answer (EXTRA_KEYS), in order: the answers that are well formed verified together in one
    `verify_batch`, the rest -1 with their `format:` reason. `tasks[i]`: `task_of(row)` (None: the row lacks its
    code, -1 with an `error:` reason)."""
    s = RewardSettings.of(settings, **kw)
    t0 = time.monotonic()
    out: list[dict[str, Any] | None] = [None] * len(answers)
    pairs, where = [], []
    for i, (task, answer) in enumerate(zip(tasks, answers, strict=True)):
        tid = (task or {}).get("task_id") or ""
        try:
            code, why = extract_candidate(answer_text(answer))
        except Exception as e:  # noqa: BLE001 - an answer never raises
            code, why = None, f"format: unreadable answer ({type(e).__name__})"
        if why:
            out[i] = _extras(tid, why, format_ok=False)
        elif task is None:
            out[i] = _extras(tid, "error: the row has no task code: keep the dataset's `code` column")
        else:
            pairs.append((task, code))
            where.append(i)
    if pairs:
        for i, r in zip(where, _verify(pairs, s), strict=True):
            out[i] = _from_verify(r, s)
    done = [o for o in out if o is not None]
    log.debug("opsynth.rl: %d answers scored in %.1f s", len(done), time.monotonic() - t0)
    return done


def summary(extras: list[dict[str, Any]]) -> dict[str, float]:
    """Batch metrics: the shares of correct, hacking, malformed and timed-out answers, the mean speedup over eager of
    the correct ones (when any), the mean score."""
    n = max(1, len(extras))
    out = {"correct": sum(e["correct"] for e in extras) / n, "hack": sum(bool(e["hack"]) for e in extras) / n,
           "format_error": sum(not e["format_ok"] for e in extras) / n,
           "timeout": sum(e["timed_out"] for e in extras) / n, "score": sum(e["score"] for e in extras) / n}
    ok = [e["speedup_eager"] for e in extras if e["correct"] and e["speedup_eager"]]
    if ok:
        out["speedup_eager_correct"] = sum(ok) / len(ok)
    return out


# -- TRL -------------------------------------------------------------------------------------------------------------

LOGGED_COLUMNS = ("reason", "speedup_eager", "speedup_compile", "reward_level", "wall_s")


class TrlReward:
    """A reward function for TRL's GRPOTrainer (`reward_funcs=`). Called as TRL calls it,
    `reward(prompts=..., completions=..., completion_ids=..., **columns)`, with `columns` the dataset's other
    columns as lists (one entry per completion). Returns one float per completion. The extras of the last call are
    in `last_extras`; TRL's `log_extra` (completions table: `opsynth/reason`, `opsynth/speedup_eager`, ...) and
    `log_metric` (`opsynth/correct`, `opsynth/hack`, ...) get them when the trainer passes those callables."""

    def __init__(self, settings: RewardSettings | None = None, on_extras: Callable[[list[dict]], Any] | None = None,
                 name: str = "opsynth_reward") -> None:
        self.settings = settings or RewardSettings()
        self.on_extras = on_extras
        self.__name__ = name  # TRL logs each reward function under its name
        self.last_extras: list[dict[str, Any]] = []

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float]:
        completions = list(completions or [])
        n = len(completions)
        try:
            rows = [{c: _column(kwargs, c, i) for c in TASK_COLUMNS} for i in range(n)]
            extras = score_batch([task_of(r) for r in rows], completions, self.settings)
        except Exception as e:  # noqa: BLE001 - a reward function that raises stops the training run
            log.exception("opsynth.rl: scoring failed")
            extras = [_extras("", f"error: the reward adapter failed: {type(e).__name__}: {e}") for _ in range(n)]
        self.last_extras = extras
        self._log(extras, kwargs)
        return [float(e["score"]) for e in extras]

    def _log(self, extras: list[dict[str, Any]], kwargs: dict[str, Any]) -> None:
        try:
            if callable(kwargs.get("log_extra")):
                for col in LOGGED_COLUMNS:
                    kwargs["log_extra"](f"opsynth/{col}", [e[col] for e in extras])
            if callable(kwargs.get("log_metric")):
                for k, v in summary(extras).items():
                    kwargs["log_metric"](f"opsynth/{k}", float(v))
            if self.on_extras is not None:
                self.on_extras(extras)
        except Exception:  # noqa: BLE001 - logging never stops training
            log.exception("opsynth.rl: logging the extras failed")


def _column(kwargs: dict[str, Any], name: str, i: int) -> Any:
    col = kwargs.get(name)
    try:
        return col[i] if col is not None and not isinstance(col, str) else col
    except (IndexError, TypeError, KeyError):
        return None


def make_trl_reward(settings: RewardSettings | None = None, on_extras: Callable[[list[dict]], Any] | None = None,
                    name: str = "opsynth_reward", **kw: Any) -> TrlReward:
    """A TRL reward function with these settings (RewardSettings' fields as keywords, e.g. device="cuda",
    workers=8, gpus=[0, 1], budget_s=300, allow_torch=True)."""
    return TrlReward(RewardSettings.of(settings, **kw), on_extras=on_extras, name=name)


trl_reward = TrlReward()  # the defaults: strict policy, cuda when torch sees a GPU, 300 s an answer


# -- verl ------------------------------------------------------------------------------------------------------------

def _verl_task(ground_truth: Any, extra_info: Any) -> dict[str, Any] | None:
    info = dict(extra_info) if isinstance(extra_info, dict) else {}
    if isinstance(ground_truth, dict):
        return task_of({**info, **ground_truth})
    return task_of({**info, "code": ground_truth})


def verl_compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
                       extra_info: Any = None, *, data_sources: Any = None, solution_strs: Any = None,
                       ground_truths: Any = None, extra_infos: Any = None, **settings: Any) -> Any:
    """verl's custom reward function. Per answer (verl's naive reward manager): a dict {"score": float, and the
    extras (EXTRA_KEYS)}. Per batch (`reward_model.reward_manager=batch`, which passes `data_sources`,
    `solution_strs`, `ground_truths`, `extra_infos`): one such dict per answer, the batch verified in parallel.
    `ground_truth` is the task's code (`to_verl` puts it in `reward_model.ground_truth`), or a row dict with
    `code`; `extra_info` brings `task_id`, `shape_variants`, `eager_ms`, `peak_memory_bytes`. `settings`:
    RewardSettings' fields (verl's `custom_reward_function.reward_kwargs`)."""
    try:
        s = RewardSettings.of(None, **settings)
    except (TypeError, ValueError) as e:
        log.error("opsynth.rl: bad reward settings (%s); using the defaults", e)
        s = RewardSettings()
    if solution_strs is not None:
        n = len(solution_strs)
        gts = list(ground_truths) if ground_truths is not None else [None] * n
        infos = list(extra_infos) if extra_infos is not None else [None] * n
        return _scored(gts, infos, list(solution_strs), s)
    return _scored([ground_truth], [extra_info], [solution_str], s)[0]


def _scored(gts: list, infos: list, answers: list, s: RewardSettings) -> list[dict[str, Any]]:
    try:
        tasks = [_verl_task(g, e) for g, e in zip(gts, infos, strict=True)]
        return score_batch(tasks, answers, s)
    except Exception as e:  # noqa: BLE001 - never an exception into the trainer
        log.exception("opsynth.rl: scoring failed")
        return [_extras("", f"error: the reward adapter failed: {type(e).__name__}: {e}") for _ in answers]


def to_verl(row: dict[str, Any], index: int | None = None, policy: str = "strict") -> dict[str, Any]:
    """A published row as verl's parquet row (`ds.map(to_verl, with_indices=True, remove_columns=ds.column_names)`):
    `data_source`, `prompt` (the row's own, or rendered for a dataset published before the column), `ability`,
    `reward_model` {"style": "rule", "ground_truth": code} and `extra_info` (index, task_id, sizes, measurements)."""
    prompt = row.get("prompt")
    if prompt is None or len(prompt) == 0:
        prompt = add_prompt(row, policy)["prompt"]
    info = {"index": index, "task_id": row.get("task_id"), "shape_variants": row.get("shape_variants") or "[]",
            "eager_ms": _finite(row.get("eager_ms")), "compile_ms": _finite(row.get("compile_ms")),
            "peak_memory_bytes": _finite(row.get("peak_memory_bytes"))}
    return {"data_source": row.get("data_source") or "opsynth", "prompt": list(prompt), "ability": "kernel",
            "reward_model": {"style": "rule", "ground_truth": row["code"]}, "extra_info": info}


def add_prompt(row: dict[str, Any], policy: str = "strict") -> dict[str, Any]:
    """{"prompt": the chat messages} for a row without a `prompt` column (a dataset published before it):
    `ds.map(add_prompt)`. The built-in template, as publish writes it."""
    from opsynth.prompt import render

    return {"prompt": render(row["code"], task_id=row.get("task_id"), name=row.get("name"), policy=policy)}
