"""The dataset card (README.md): Hub YAML metadata matching the files, then how the data was made and how to use it.

The YAML header is built from the same Arrow schemas the parquet files are written with, so the
`dataset_info` features cannot drift from the files. Usage snippets name the repository as
REPO_PLACEHOLDER; `hub.push` substitutes the real id in the uploaded copy.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

from pipeline.rundir.stage_defs import PIPELINE_STAGES

REPO_PLACEHOLDER = "ORG/NAME"

# name -> (data_files path, arrow schema getter name in pipeline.outputs.publish)
CONFIGS = {
    "default": ("data/train-*", "PUBLISHED"),
    "contamination": ("contamination/contamination.parquet", "PUBLISHED_CONTAMINATION"),
    "rejections": ("rejections/rejections.parquet", "REJECTIONS"),
    "rejection_summary": ("rejections/summary.parquet", "REJECTION_SUMMARY"),
}


def size_category(n: int) -> str:
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")]
    return next((label for bound, label in bounds if n < bound), "1M<n<10M")


def _num_rows(manifest: dict[str, Any], config: str) -> int:
    if config == "default":
        return int(manifest["rows"])
    if config == "contamination":
        return int(manifest.get("contamination_rows", 0))
    if config == "rejections":
        return sum(r["count"] for r in manifest.get("rejections", []))
    if config == "rejection_summary":
        return len(manifest.get("rejections", []))
    raise KeyError(config)


def metadata(manifest: dict[str, Any], file_columns: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """The YAML metadata block as a dict (license, categories, configs, dataset_info); `file_columns`: config name
    -> the columns its files hold (a config left out, or None: every column of its schema)."""
    import pyarrow as pa
    from datasets import Features

    from pipeline.rundir import schema

    cfg = manifest["config"]
    configs, infos = [], []
    for name, (path, schema_name) in CONFIGS.items():
        entry: dict[str, Any] = {"config_name": name, "data_files": [{"split": "train", "path": path}]}
        n_bytes = int(manifest.get("arrow_bytes", {}).get(name, 0))
        splits = [{"name": "train", "num_bytes": n_bytes, "num_examples": _num_rows(manifest, name)}]
        held = int((manifest.get("splits") or {}).get("validation") or 0)
        if name == "default":
            entry["default"] = True
            if held:  # the held-out operator multisets (pipeline/outputs/provenance.py)
                entry["data_files"].append({"split": "validation", "path": "data/validation-*"})
                splits = [{**splits[0], "num_examples": int(manifest["splits"]["train"])},
                          {"name": "validation", "num_bytes": 0, "num_examples": held}]
        configs.append(entry)
        arrow = getattr(schema, schema_name)
        if name in (file_columns or {}):  # the files' own columns, in the schema's order
            arrow = pa.schema([f for f in arrow if f.name in file_columns[name]])
        features = Features.from_arrow_schema(arrow)._to_yaml_list()
        infos.append({"config_name": name, "features": features, "splits": splits, "dataset_size": n_bytes})
    return {
        "license": cfg["publish"]["license"],
        "pretty_name": cfg["publish"]["name"],
        "language": ["en"],
        "task_categories": ["text-generation"],
        "tags": ["code", "cuda", "triton", "gpu-kernels", "pytorch", "kernelbench", "synthetic"],
        "size_categories": [size_category(int(manifest["rows"]))],
        "configs": configs,
        "dataset_info": infos,
    }


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _glance(rows: list[dict[str, Any]]) -> list[str]:
    n = len(rows)
    eager = [r["eager_ms"] for r in rows if r.get("eager_ms")]
    speed = [r["compile_speedup"] for r in rows if r.get("compile_speedup")]
    ops = Counter(r["num_ops"] for r in rows)
    gpus = sorted({r["gpu"] for r in rows if r.get("gpu")})
    out = ["| | |", "|---|---|", f"| tasks | {n:,} |",
           "| operators per task | " + ", ".join(f"{k}: {100 * v / n:.1f}%" for k, v in sorted(ops.items())) + " |",
           f"| DAGs (branches, residuals, several inputs) | {100 * sum(bool(r.get('is_dag')) for r in rows) / n:.1f}% |",
           f"| distinct operators | {len({o for r in rows for o in r['ops_list']})} |",
           f"| measured on | {', '.join(gpus) or 'not profiled'} |",
           f"| median eager runtime | {_fmt(_median(eager))} ms |"]
    if speed:
        out.append(f"| torch.compile faster than eager | {100 * sum(s > 1 for s in speed) / len(speed):.1f}% of tasks "
                   f"(median speedup {_fmt(_median(speed))}x) |")
    return out


# reasons shown per stage in the card's rejection table; rarer ones are counted together in one row
REASONS_PER_STAGE = 8
_EXCEPTION = re.compile(r"^(compile failed|error|crashed|timeout|oom|early_reject): ([A-Za-z_][\w.]*)(?=:|$)")


def shown_kind(kind: str) -> str:
    """A reason kind as the card shows it: what went wrong, without measured quantities, object reprs or an
    exception's message (rejections/rejections.parquet keeps the full reason)."""
    if kind.startswith("early_reject: "):
        rest = kind.removeprefix("early_reject: ")
        what = ("peak memory over the cap" if "memory" in rest else "too slow" if ">" in rest else
                "too fast" if "<" in rest else rest.split(" N ")[0])
        return f"{what} (rejected early, by a quick run)"
    m = _EXCEPTION.match(kind)
    return f"{m.group(1)}: {m.group(2)}" if m else re.sub(r" N \w* ?[<>] N \w*", "", kind)


def rejection_rows(summary: list[dict[str, Any]], per_stage: int = REASONS_PER_STAGE) -> tuple[list[tuple], bool]:
    """(stage, shown reason, tasks) for every stage in the summary, in its order, most common first; past
    `per_stage` reasons a stage's rarer ones make one row. True when some were grouped."""
    by_stage: dict[str, Counter] = {}
    for r in summary:
        by_stage.setdefault(r["stage"], Counter())[shown_kind(r["reason_kind"])] += r["count"]
    rows, grouped = [], False
    for stage, counts in by_stage.items():
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        shown, rest = (ranked, []) if len(ranked) <= per_stage else (ranked[: per_stage - 1], ranked[per_stage - 1:])
        rows += [(stage, k, n) for k, n in shown]
        if rest:
            grouped = True
            rows.append((stage, f"{len(rest)} rarer reasons", sum(n for _, n in rest)))
    return rows, grouped


def _funnel(manifest: dict[str, Any]) -> list[str]:
    out = ["| step | tasks |", "|---|---:|"]
    out += [f"| {s['step']} | {s['tasks']:,} |" for s in manifest["funnel"]]
    out.append(f"| **published** | **{manifest.get('sample_of') or manifest['rows']:,}** |")
    if manifest.get("rejections"):
        rows, grouped = rejection_rows(manifest["rejections"])
        note = (f"; per stage the {REASONS_PER_STAGE - 1} most common reasons are shown and the rarer ones counted "
                "together" if grouped else "")
        out += ["", f"Rejections by the first stage that dropped a task, every stage{note} (each task's full "
                "reason: `rejections/rejections.parquet`):", "", "| stage | reason | tasks |", "|---|---|---:|"]
        out += [f"| {stage} | {kind} | {n:,} |" for stage, kind, n in rows]
    return out


def _cost(manifest: dict[str, Any]) -> list[str]:
    """What building the release cost: GPU time of every profile call (their sum over the GPUs each used) and
    the CPU stages' wall time, per published task."""
    records = manifest.get("stage_records") or {}
    prof = records.get("profile")
    if not prof:
        return []
    calls = prof.get("calls") or [prof]
    gpu_s = sum((c.get("seconds") or 0) * (c.get("gpus") if c.get("gpus") is not None else 1) for c in calls
                if c.get("device") == "cuda")
    rows = manifest.get("sample_of") or manifest.get("rows") or 0
    sampled = next((s["tasks"] for s in manifest.get("funnel", []) if s["step"] == "sampled"), None)
    out = ["", "What it cost:", "", "| | |", "|---|---|"]
    if gpu_s:
        out.append(f"| profile (GPU) | {gpu_s / 3600:.2f} GPU-hours in {len(calls)} call(s) on "
                   f"{', '.join(g for g in manifest.get('gpu') or [] if g not in ('cpu', 'cuda')) or 'the GPU'}"
                   + (f"; {gpu_s / rows:.2f} GPU-s per published task" if rows else "") + " |")
    # `opsynth profile --set` / `--preset`: how those calls measured differs from config.toml (listed below)
    changed = settings_calls(calls)
    if changed:
        out.append(f"| profile settings | {sum(bool(c.get('settings')) for c in calls)} of {len(calls)} call(s) "
                   "changed some from `config.toml` (below; each call's: `stage_records.profile.calls` in "
                   "`manifest.json`) |")
    for stage in ("sample", "decontaminate", "filter", "dedupe"):
        r = records.get(stage)
        if r:
            total = r.get("seconds_all_calls", r.get("seconds"))
            out.append(f"| {stage} (CPU) | {total / 60:.1f} min wall |")
    if sampled and rows:
        out.append(f"| sampled -> published | {sampled:,} -> {rows:,} ({rows / sampled:.1%}) |")
    if changed:
        out += ["", "| profile setting | value | calls |", "|---|---|---:|"]
        out += [f"| `{k}` | {v} | {n} |" for (k, v), n in sorted(changed.items())]
    return out


def settings_calls(calls: list[dict[str, Any]]) -> Counter:
    """(setting, value) -> number of profile calls that measured with it instead of config.toml's."""
    return Counter((k, str(v)) for c in calls for k, v in (c.get("settings") or {}).items())


def _reproduce(manifest: dict[str, Any], cfg: dict[str, Any]) -> str:
    """How to make the tasks again. A run that grew (`opsynth sample DIR --n N` on a run that held fewer) sampled
    its later indices with the code of the day it grew: a fresh run reproduces each step's tasks only with that
    step's code, so the card says so instead of promising one command."""
    cmd = f"`opsynth run --preset {cfg['name']} --seed {cfg['run']['seed']} --out runs/X`"
    growth = manifest.get("growth") or []
    if not growth:
        return f"Reproduce: {cmd} with the config and versions recorded in `manifest.json`."
    steps = " -> ".join(f"{n:,}" for n in [growth[0]["from"], *(g["to"] for g in growth)])
    return (f"Reproduce: the run grew in {len(growth)} step(s) (n {steps}, `growth` in `manifest.json`); tasks are "
            f"drawn per index from the run seed, so {cmd} at n = {growth[-1]['to']:,} gives the same tasks only "
            "where its sampler is the one of the step that drew them. The run directory the release was built from "
            "(tasks, measurements, verdicts) is the exact record.")


def dedupe_window(cfg: dict[str, Any]) -> tuple[float, float]:
    """The runtime window whose log-middle picks near-cluster representatives, by pipeline/stages/dedupe.py's rule:
    the filter's eager window, or the sampler's target window when the filter's starts at 0."""
    f, s = cfg["filter"], cfg["sample"]
    return (f["min_eager_ms"], f["max_eager_ms"]) if f["min_eager_ms"] > 0 else (s["target_min_ms"], s["target_max_ms"])


def representative_rule(cfg: dict[str, Any]) -> str:
    """What detectors/dedupe.py keeps of a near cluster, with this run's window."""
    from detectors.dedupe import RUNTIME_TIE_PCT, log_middle

    lo, hi = dedupe_window(cfg)
    return (f"each near cluster keeps the task whose predicted runtime (the sampler's cost model; the measured eager "
            f"time for a task without a prediction) is nearest the log-middle ({log_middle((lo, hi)):.3g} ms) of the "
            f"{lo:g}-{hi:g} ms window; runtimes within {RUNTIME_TIE_PCT}% of the nearest count as a tie, broken by "
            "the first task_id.")


def contamination_rule(cfg: dict[str, Any], columns: tuple[str, ...] | None = None) -> str:
    """When detectors/contamination.py calls a task contaminated, with this run's thresholds; `columns`: those the
    data files hold (None: every published column)."""
    d = cfg["decontaminate"]
    recorded = ("`kb_shared_computation` records this for the AST-nearest problem"
                if columns is None or "kb_shared_computation" in columns else "no column of this release records it")
    return (f"a task is dropped when its AST similarity to a problem is at least {d['ast_threshold']:g} and it shares "
            f"that problem's computation (its core ATen ops overlap; {recorded}, "
            "so a kept row may show a similarity above the threshold), when its traced "
            f"operator signature equals a problem's{'' if d.get('op_signature', True) else ' (off for this run)'}, "
            f"or when its MinHash Jaccard is at least {d['minhash_threshold']:g} with shared computation as well.")


def _recheck(manifest: dict[str, Any]) -> list[str]:
    """The independent re-check (pipeline/outputs/recheck.py): a fresh run re-profiled a random sample of published rows."""
    rc = manifest.get("recheck")
    if not rc:
        return []
    from pipeline.outputs.recheck import agreement_line

    src = rc.get("audit_source") or {}
    out = ["", "## Independent re-check", "",
           f"A fresh run re-profiled {rc['rows']:,} published rows drawn at random (seed {src.get('order_seed', 0)}) "
           f"{_drawn_from(src.get('source_rows'), manifest.get('sample_of') or manifest.get('rows'))}"
           f"on {rc.get('gpu') or rc.get('device')} (torch {rc.get('torch_version')}) with "
           "`opsynth audit FOLDER --sample N --stages profile,filter --device cuda` (FOLDER: this dataset's folder) and "
           "`opsynth recheck`:", "",
           f"- still accepted by the filter: {rc['accepted']:,} of {rc['rows']:,} ({rc['accepted_share']:.1%})",
           f"- {agreement_line(rc)}"]
    if rc.get("profile_seconds"):
        out.append(f"- the re-profile took {rc['profile_seconds']:.0f} s of GPU time (not counted above)")
    out += [f"- dropped {n}: {reason}" for reason, n in (rc.get("dropped") or {}).items()]
    return out


def _drawn_from(source_rows: int | None, rows: int | None) -> str:
    """Which release a re-check sampled: it may predate the rows published now."""
    if not source_rows:
        return "from the release as it was published when the re-check ran "
    if rows and source_rows != rows:
        return f"from the {source_rows:,} rows published then (the release has grown since) "
    return f"from the {source_rows:,} published rows "


def stages_done(manifest: dict[str, Any]) -> set[str]:
    """Stages done for every task (manifests before `stage_status` list the stages that left verdicts)."""
    status = manifest.get("stage_status")
    if status is None:
        return set(manifest.get("stages_run", [])) | {"sample", "profile"}
    return {s for s, v in status.items() if v == "done"}


def not_done(manifest: dict[str, Any]) -> dict[str, str]:
    """stage -> what it is instead of done ("not run", "partial (40 of 72 tasks)", "stale (...)")."""
    return {s: v for s, v in (manifest.get("stage_status") or {}).items() if v != "done"}


def _incomplete(manifest: dict[str, Any]) -> list[str]:
    missing = not_done(manifest)
    if not missing:
        return []
    said = []
    if any(v == "not run" for v in missing.values()):
        said.append("the columns of a stage that did not run are null, and the tasks it would have dropped are "
                    "still in")
    if any(v.startswith("partial") for v in missing.values()):
        # a task no verdict covers is not accepted: a growing run published midway leaves its newest tasks out
        said.append("the tasks a partial stage has not reached are left out (counted as sampled, not published)")
    if any(v.startswith("stale") for v in missing.values()):
        said.append("a stale stage's verdicts predate the data they judged")
    return ["", "**Incomplete release: published before every stage was done** ("
            + "; ".join(f"{s} {v}" for s, v in missing.items()) + "). "
            + "; ".join(said)[:1].upper() + "; ".join(said)[1:] + "; the steps below say which checks were applied."]


def _comparison(manifest: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    n = len(rows)
    stages = stages_done(manifest)
    cfg = manifest["config"]
    f = cfg["filter"]
    ops = Counter(r["num_ops"] for r in rows)
    depth = ", ".join(f"{k}: {100 * v / n:.1f}%" for k, v in sorted(ops.items()))
    gpus = ", ".join(manifest.get("gpu") or []) or "n/a"
    dag = 100 * sum(bool(r.get("is_dag")) for r in rows) / n
    yes_no = {True: "yes", False: "not run for this release"}
    return [
        "| | CUDA-Agent-Ops-6K | this dataset |",
        "|---|---|---|",
        f"| tasks | 6,000 | {n:,} |",
        "| columns | `ops`, `data_source`, `code` | the same three (same types), then typed metadata |",
        f"| graph shapes | chains only | chains and DAGs ({dag:.1f}% DAGs) |",
        f"| operators per task | 1: 3.4%, 2: 83.8%, 3: 7.6%, 4: 2.8%, 5: 1.2% | {depth} |",
        f"| runtime window | eager 1-100 ms on H20 (not published) | eager {f['min_eager_ms']:g}-{f['max_eager_ms']:g} ms "
        f"on {gpus}; eager and compile times in every row |",
        "| decontamination vs KernelBench | AST similarity > 0.9, levels 1-3 | "
        + ("AST similarity, traced operator signature and MinHash, every level; scores and nearest problem per row"
           if "decontaminate" in stages else "not run for this release") + " |",
        "| deduplication inside the dataset | none (352 byte-identical duplicates found by audits) | "
        + ("exact, structural (graph hash) and near duplicates (same operators doing the same thing)" if "dedupe" in stages
           else "not run for this release") + " |",
        f"| `ops` checked against the ATen ops that ran | no (550 mislabelled rows found by audits) | "
        f"{yes_no[bool(f.get('require_label_match')) and 'filter' in stages]} |",
        "| determinism, input sensitivity, degenerate outputs | partly (output checks) | "
        f"{yes_no['filter' in stages]}; flags per row |",
        "| alternative input shapes | no | `shape_variants` per row |",
        "| provenance | none | seed, opsynth/torch versions, config and file hashes in `manifest.json` |",
        f"| license | CC-BY-4.0 | {cfg['publish']['license'].upper()} |",
    ]


FLOPS_NOTE = [
    "`flops` counts one forward from the ATen ops traced on the meta device, every operator family included, as "
    "roofline analyses count them (arithmetic per element; a transcendental, a comparison or a max counts one):",
    "",
    "- matmul, convolution, attention: torch's `FlopCounterMode` formulas (2 per multiply-add); `mv`, `addbmm`, "
    "bilinear and `cdist` likewise",
    "- pointwise: 1 per output element (fused `addcmul`/`addcdiv`/`lerp`: 2); copies, casts, fills, selects, "
    "padding and indexing move data and count 0",
    "- reductions: 1 per input element (norms 2, var/std 4, logsumexp 4); softmax and log-softmax: 5 per element",
    "- layer/batch/group/instance norm: 6 per element, 8 with an affine weight and bias; scans: 1 per element "
    "(logcumsumexp 3)",
    "- pooling: the window's size per output element (adaptive: 1 per input element); interpolation: 3, 7, 15, 31 "
    "per output element for linear, bilinear, trilinear, bicubic (nearest 0); losses: 3-5 per input element",
    "",
    "`arithmetic_intensity` is `flops / bytes_moved`; `achieved_tflops` is `flops` over the eager time. A task "
    "that only moves data (a concatenation, a flip) has `flops` 0, so no `achieved_tflops`.",
]


def _usage() -> str:
    r = REPO_PLACEHOLDER
    return f"""```python
import json
import math

from datasets import load_dataset

ds = load_dataset("{r}", split="train")              # code written for Ops-6K works as is
row = ds[0]
ns = {{}}
exec(row["code"], ns)                                   # KernelBench's harness loads tasks this way
# sizes are for the GPU in `gpu` (often GiBs): for a small CPU run take the smallest of the task's sizes and its
# `shape_variants` (module-level constants that get_inputs and get_init_inputs read when called)
variants = json.loads(row["shape_variants"] or "[]")
sizes = {{k: ns.get(k, 1) for v in variants for k in v}}
ns.update(min([{{}}, *variants], key=lambda v: math.prod({{**sizes, **v}}.values())))
model = ns["Model"](*ns["get_init_inputs"]())
out = model(*ns["get_inputs"]())

# stream without downloading everything
for row in load_dataset("{r}", split="train", streaming=True).take(4):
    print(row["task_id"], row["ops"], row["eager_ms"])

# audit tables
contamination = load_dataset("{r}", "contamination", split="train")
rejections = load_dataset("{r}", "rejections", split="train")
```

```sql
-- DuckDB, straight from the Hub
SELECT data_source, count(*) AS tasks, median(eager_ms) AS eager_ms, median(compile_speedup) AS speedup
FROM 'hf://datasets/{r}/data/*.parquet' GROUP BY 1 ORDER BY 1;

SELECT kb_nearest, max(kb_ast_similarity) FROM 'hf://datasets/{r}/contamination/*.parquet'
GROUP BY 1 ORDER BY 2 DESC LIMIT 10;
```

```python
import polars as pl
df = pl.read_parquet("hf://datasets/{r}/data/*.parquet")
```"""


def _rl(manifest: dict[str, Any]) -> list[str]:
    """How to train on the `prompt` column with TRL and verl, and which template wrote it (none for a manifest
    written before the column existed)."""
    p = manifest.get("prompt")
    if not p:
        return []
    r = REPO_PLACEHOLDER
    custom = " (a custom template from the run's config: `publish.prompt_system` / `publish.prompt_user`)" \
        if p.get("custom_system") or p.get("custom_user") else ""
    allow = ", allow_torch=True" if p.get("policy") == "allow-torch" else ""
    return [
        "## Training with RL (TRL, verl)",
        "",
        f"Every row's `prompt` holds the task as chat messages (`role`, `content`): template `{p['version']}`{custom}, "
        f"policy `{p['policy']}`. They give the task's code, the rules the reward enforces (the policy, what counts "
        "as a hack, the tolerance, the reward levels) and the answer format: one fenced Python block defining "
        "`ModelNew`. TRL's `GRPOTrainer` and verl read the column as it is. The reward is opsynth's verifier "
        "(`opsynth verify`), through the adapters of `opsynth.rl`: an answer with no code "
        "block, two blocks or no `ModelNew` scores -1, each answer has a wall-clock budget, and a rollout batch is "
        "verified in parallel worker processes (and GPUs).",
        "",
        "```python",
        "from datasets import load_dataset",
        "from trl import GRPOConfig, GRPOTrainer",
        "from opsynth.rl import make_trl_reward",
        "",
        f'ds = load_dataset("{r}", split="train")',
        f"reward = make_trl_reward(device=\"cuda\", workers=8, gpus=[0, 1]{allow})  # extras: reward.last_extras",
        "trainer = GRPOTrainer(model=\"MODEL\", reward_funcs=reward, train_dataset=ds, args=GRPOConfig(...))",
        "",
        "# verl: rows in its parquet form, scored by verl_compute_score (reward_model.reward_manager=batch)",
        "from opsynth.rl import to_verl",
        'ds.map(to_verl, with_indices=True, remove_columns=ds.column_names).to_parquet("train.parquet")',
        "```",
        "",
    ]


def _type_name(t) -> str:
    import pyarrow as pa

    return f"list[{_type_name(t.value_type)}]" if pa.types.is_list(t) else str(t).replace("double", "float64")


def _composed(rows: list[dict[str, Any]]) -> str:
    n_llm = sum(r.get("composer") == "llm" for r in rows)
    if not n_llm:
        return ""
    return (f"; {n_llm:,} tasks written by the LLM, {len(rows) - n_llm:,} by the deterministic renderer where "
            "the LLM's module failed the checks")


def untimed_compile(cfg: dict[str, Any]) -> str:
    """What the card says of `compile_ms` when the run made none of torch.compile's choices by timing."""
    if (cfg.get("profile") or {}).get("compile_timed_choices", True):
        return ""
    return (" `torch.compile` made no choice by timing (reductions and scans in the config of inductor's deterministic "
            "mode, no autotuning benchmarks, no matmul padding): `compile_ms` and the compile verdict are the same in "
            "every run of a task, and `compile_ms` is that program's time, not the fastest autotuned one's.")


def _columns(columns: tuple[str, ...] | None = None) -> list[str]:
    from pipeline.rundir.schema import COLUMNS

    out = ["| column | type | meaning |", "|---|---|---|"]
    out += [f"| `{name}` | {_type_name(t)} | {doc} |" for name, (t, doc) in COLUMNS.items()
            if columns is None or name in columns]
    return out


def _source(manifest: dict[str, Any]) -> list[str]:
    """For an audited dataset: the source it was cleaned from, its attribution and license, kept with every copy."""
    src = manifest.get("audit_source")
    if not src:
        return []
    name = src.get("name") or "the audited dataset"
    link = f"[{name}]({src['url']})" if src.get("url") else name
    return ["## Source and attribution", "",
            f"**These rows are a cleaned subset of {link}** ({src.get('rows', '?'):,} rows audited by `opsynth audit`), "
            f"used under its license, {(src.get('license') or 'see the source').upper()}. "
            + (f"Attribution: {src['attribution']}. " if src.get("attribution") else "")
            + "The `code`, `ops` and `data_source` values are the source's, unchanged; opsynth added the metadata "
            "columns and removed the rows its stages dropped (reasons in `rejections/`).", ""]


def _numbered(built: dict[str, list[str]], order: tuple[str, ...]) -> list[str]:
    """The steps of every stage in `order`, numbered; a declared stage the card does not describe fails at once."""
    missing = [s for s in order if s not in built]
    if missing:
        raise KeyError(f"the card describes no step for stage(s) {missing}")
    return [f"{i}. {text}" for i, text in enumerate((t for s in order for t in built[s]), 1)]


SHORTCUT_KINDS = (("dead input", "a tensor input redrawn alone leaves the output within the tolerance"),
                  ("skippable operator", "an operator replaced by a constant or skipped leaves it within"),
                  ("fragile", "a move of every input by a few ulps (fragile_ulp_steps) or the float64 reference "
                               "moves it beyond"))


def shortcut_sections(manifest: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """"What changed" (tasks each shortcut check removed, from the rejection summary; docs/shortcuts.md) when the
    checks ran, the held-out split when there is one, and the difficulty signals of the published rows."""
    out: list[str] = []
    removed = {k: sum(r["count"] for r in manifest.get("rejections", []) if r["reason_kind"].startswith(k))
               for k, _ in SHORTCUT_KINDS}
    splits = manifest.get("splits") or {}
    if any(removed.values()) or splits.get("validation"):
        out += ["## What changed", ""]
        out += [f"- **{k}**: {removed[k]:,} tasks removed ({why} atol = rtol = 1e-2)" for k, why in SHORTCUT_KINDS]
        failed = sum(r["count"] for r in manifest.get("rejections", [])
                     if r["reason_kind"].startswith("shortcut checks failed"))
        if failed:
            out.append(f"- **shortcut checks failed**: {failed:,} tasks removed (the checks did not finish, for "
                       "example out of memory, so the task is unchecked)")
        # a row the checks measured carries what matters; one they never reached carries nulls and was kept
        checked = sum(1 for r in rows if any(r.get(c) is not None for c in
                                             ("inputs_that_matter", "ops_that_matter", "fragile_ulp_ratio")))
        if rows and any(removed.values()):
            out.append(f"- the shortcut checks measured {checked:,} of the {len(rows):,} rows published"
                       + ("" if checked == len(rows) else "; the others were kept unchecked (their columns are null)"))
        if splits.get("validation"):
            out.append(f"- a `validation` split of {splits['validation']:,} rows whose operator multisets never "
                       f"occur in `train` ({splits['train']:,} rows)")
        out.append("- `profile_call` names the profile call that measured each row, and `shortcut_call` the one that "
                   "ran its shortcut checks; their settings are in `manifest.json` under `profile_calls`")
        unnamed = sum(1 for r in rows if r.get("profile_call") is None)
        if unnamed:
            blind = [c for c in manifest.get("profile_calls") or [] if c.get("window") is None]
            own = not any(c.get("settings") for c in blind)
            says = ("all with the run's own settings" if own else "settings in `profile_calls`") if blind \
                else "no recorded call holds their time"
            out.append(f"- `profile_call` is null in {unnamed:,} rows: measured by calls the manifest records without "
                       f"their time ({', '.join(c['id'] for c in blind) or 'none'}; {says})")
        out.append("")
    n = len(rows)
    if n:
        roof = sum(1 for r in rows if (r.get("roofline_fraction") or 0) > 0.8)
        slow = sum(1 for r in rows if r.get("compile_speedup") is not None and r["compile_speedup"] < 1)
        out += ["## Difficulty signals", "",
                f"- `roofline_fraction` > 0.8 in {roof:,} rows ({100 * roof / n:.1f}%): eager is already near "
                "the device's roofline, little headroom for a faster kernel",
                f"- `compile_speedup` < 1 in {slow:,} rows ({100 * slow / n:.1f}%): `torch.compile` is slower than "
                "eager there", ""]
    return out


def render(manifest: dict[str, Any], rows: list[dict[str, Any]], plot_files: dict[str, tuple[str, str]],
           file_columns: dict[str, tuple[str, ...]] | None = None) -> str:
    """The full README.md text; `file_columns` (as in `metadata`): the columns an older release's files hold, so
    a card rendered again for it lists only those (None: every published column)."""
    import yaml

    columns = (file_columns or {}).get("default")

    cfg = manifest["config"]
    name = cfg["publish"]["name"]
    ran, missing = stages_done(manifest), not_done(manifest)

    def skipped(stage: str) -> str:
        if stage in ran:
            return ""
        return f" **({missing.get(stage, 'not run')} for this release)**"

    refs = ", ".join(manifest["reference"]["used"] or manifest["reference"]["configured"])
    # what each stage did, keyed by stage: numbered in the declared order (pipeline/rundir/stage_defs.py)
    built = {
        "sample": [
            "**sample**: operator graphs (chains and DAGs, "
            f"{cfg['sample']['min_ops']}-{cfg['sample']['max_ops']} operators) drawn from a catalog of PyTorch "
            "operators, shapes propagated on the meta device, sizes chosen for a target runtime." + skipped("sample"),
            f"**compose**: rendered as KernelBench-format modules (composer: `{cfg['sample']['composer']}`"
            f"{_composed(rows)}).",
        ],
        "decontaminate": [
            f"**decontaminate**: against KernelBench ({refs}); " + contamination_rule(cfg, columns) + " Before profiling, "
            "so a dropped task costs no GPU time." + skipped("decontaminate"),
        ],
        "profile": [
            "**profile**: every task run in isolated workers, eager and `torch.compile`; agreement, determinism, "
            "input sensitivity, degenerate outputs, runtimes, peak memory and the ATen ops that actually ran."
            + untimed_compile(cfg) + skipped("profile"),
        ],
        "filter": [
            f"**filter**: eager runtime {cfg['filter']['min_eager_ms']:g}-{cfg['filter']['max_eager_ms']:g} ms, "
            "compile must run and agree, deterministic, input-sensitive"
            # older manifests predate the check: their runs did not apply it
            + (", not fakeable by one fixed output (input draws differ beyond the verifier's "
               f"{cfg['filter']['compile_tolerance']:g} tolerance)"
               if cfg["filter"].get("min_input_sensitivity_ratio", 0) > 0 else "")
            + (", timings undisturbed by allocator retries" if cfg["filter"].get("require_undisturbed_timing") else "")
            + ", not degenerate, `ops` labels match the trace." + skipped("filter"),
        ],
        "dedupe": [
            "**dedupe**: exact (normalized code), structural (canonical graph hash at equal shapes), near duplicates "
            "only between tasks with the same operators: the same graph up to sizes and literal values, or code that "
            "is near-identical once the shared template is removed (Jaccard >= "
            f"{cfg.get('dedupe', {}).get('near_code_jaccard', 0.9):g}); " + representative_rule(cfg)
            + " A task is dropped only as a match of that task." + skipped("dedupe"),
        ],
    }
    header = yaml.safe_dump(metadata(manifest, file_columns), sort_keys=False, allow_unicode=True, width=1000)
    plots = [f"![{title}]({path})" for path, title in plot_files.values()]
    body = [
        f"# {name}",
        "",
        f"{manifest['rows']:,} GPU-kernel optimization tasks in the KernelBench format, built by "
        f"opsynth {manifest['opsynth_version']}. Each task is a small PyTorch "
        "program (`Model`, `get_inputs`, `get_init_inputs`) fusing sampled operators; a model being trained must "
        "write a faster CUDA or Triton kernel for it. The columns `ops`, `data_source` and `code` have the same "
        "names and types as in "
        "[CUDA-Agent-Ops-6K](https://huggingface.co/datasets/BytedTsinghua-SIA/CUDA-Agent-Ops-6K), so training "
        "code written for it runs unchanged; every row also carries measured runtimes, provenance, "
        "contamination scores against KernelBench and alternative input shapes.",
        *(["", f"**This folder is a sample: {manifest['rows']:,} of the {manifest['sample_of']:,} accepted tasks "
             "of the run below.**"] if manifest.get("sample_of") else []),
        *_incomplete(manifest),
        "",
        *_source(manifest),
        "## At a glance",
        "",
        *_glance(rows),
        "",
        "## How it was built",
        "",
        *_numbered(built, PIPELINE_STAGES),
        "",
        "Funnel of this release:",
        "",
        *_funnel(manifest),
        *_cost(manifest),
        *_recheck(manifest),
        "",
        _reproduce(manifest, cfg),
        "",
        "## Compared with CUDA-Agent-Ops-6K",
        "",
        *_comparison(manifest, rows),
        "",
        "## Usage",
        "",
        _usage(),
        "",
        *_rl(manifest),
        "## Plots",
        "",
        *(plots or ["No measurements in this release, so no plots."]),
        "",
        "## Columns",
        "",
        *_columns(columns),
        "",
        "### How `flops` is counted",
        "",
        *FLOPS_NOTE,
        "",
        "## Files",
        "",
        "- `data/train-*.parquet`: the tasks (zstd, small row groups for streaming)",
        "- `contamination/contamination.parquet`: every decontaminated task with its nearest KernelBench problem "
        "and scores; `published` says whether it is in `data/`",
        "- `rejections/rejections.parquet`, `rejections/summary.parquet`: why each dropped task was dropped",
        "- `manifest.json`: versions, devices, full config, seeds, references, funnel, file hashes",
        "",
        *shortcut_sections(manifest, rows),
        "## Limitations",
        "",
        "- Runtimes are specific to the device and software versions in `manifest.json`; re-measure before "
        "comparing across machines.",
        "- Synthetic tasks: operator combinations are sampled, not mined from real models.",
        "",
        "## License",
        "",
        f"{cfg['publish']['license'].upper()}. KernelBench (MIT) is used only as a decontamination reference; "
        "no KernelBench code is included.",
    ]
    return f"---\n{header}---\n\n" + "\n".join(body)
