"""Publish a run as a Hub-ready dataset folder: parquet shards, audit tables, manifest, card and plots.

Layout of the folder (what `hub.push` uploads, and what `load_dataset(folder)` reads):

    data/train-00000-of-0000N.parquet   accepted tasks; `ops`, `data_source`, `code` first and typed as
                                        in CUDA-Agent-Ops-6K (strings), then `prompt` (chat messages for
                                        TRL and verl), typed metadata after them
    contamination/contamination.parquet every decontaminated task, its nearest KernelBench problem and scores
    rejections/rejections.parquet       every dropped task: the first stage that dropped it and why
    rejections/summary.parquet          the same, counted per stage and reason
    manifest.json                       versions, GPU, config, seeds, references, funnel counts, file hashes
    README.md + plots/*.png             the dataset card

The folder is built beside its destination under a temporary name and renamed when complete, so a
failure never leaves a half-written dataset where a reader (or a later push) would find it. The destination
must be new, empty or a folder publish wrote (every file listed in its manifest): publish replaces it whole,
so it refuses one holding anything else. A run whose stages are not all done is refused unless
`allow_incomplete`, and then the manifest and card say what was and was not done.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from filters.base import reason_kind
from pipeline.errors import OpsynthError
from pipeline.outputs import recheck
from pipeline.rundir.schema import (
    CONTAMINATION,
    PUBLISHED,
    PUBLISHED_CONTAMINATION,
    REJECTION_SUMMARY,
    REJECTIONS,
)
from pipeline.rundir.selection import first_rejection, stages_run, verdicts_by_task
from pipeline.rundir.stage_defs import CODE_STAGES, VERDICT_ORDER
from pipeline.rundir.store import RunDir

ROW_GROUP_ROWS = 1000  # ~2-5 MB of code per group: small enough to stream, large enough to compress


def _version(package: str) -> str:
    import importlib.metadata as md  # not `import torch`: seconds to learn one string

    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return "unknown"


def opsynth_version() -> str:
    return _version("opsynth")


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def prompt_settings(cfg: Any) -> dict[str, str]:
    """The publish section's prompt settings, as `opsynth.prompt.render` takes them."""
    p = cfg.publish
    return {"policy": p.prompt_policy, "system": p.prompt_system, "user": p.prompt_user}


def prompt_record(cfg: Any) -> dict[str, Any]:
    """What the manifest (and the card) say of the `prompt` column: its template version and policy."""
    from opsynth.prompt import prompt_version

    s = prompt_settings(cfg)
    return {"version": prompt_version(s["system"], s["user"], s["policy"]), "policy": s["policy"],
            "custom_system": bool(s["system"]), "custom_user": bool(s["user"])}


def published_row(task: dict[str, Any], meas: dict[str, Any] | None, cont: dict[str, Any] | None,
                  version: str, prompt: dict[str, str] | None = None) -> dict[str, Any]:
    """One published row from a task's records; missing stages leave their columns null. `prompt`: the settings
    of its `prompt` column (`prompt_settings`; None: the built-in template, strict policy)."""
    from opsynth.prompt import render

    m, c = meas or {}, cont or {}
    eager, comp = _finite(m.get("eager_ms")), _finite(m.get("compile_ms"))
    flops, moved = task.get("flops"), task.get("bytes_moved")
    ops = list(task.get("ops") or [])
    return {
        "ops": json.dumps(ops),
        "data_source": task.get("data_source") or f"torch#{len(ops)}",
        "code": task["code"],
        "prompt": render(task["code"], task_id=task["task_id"], name=task.get("name"), **(prompt or {})),
        "task_id": task["task_id"],
        "name": task.get("name"),
        "ops_list": ops,
        "num_ops": task.get("num_ops") if task.get("num_ops") is not None else len(ops),
        "categories": task.get("categories"),
        "is_dag": task.get("is_dag"),
        "graph": task.get("graph"),
        "graph_hash": task.get("graph_hash"),
        # what ran on the device beats what the meta-device trace predicted
        "aten_ops": m.get("aten_ops") or task.get("aten_ops"),
        "eager_ms": eager,
        "eager_iqr_ms": _finite(m.get("eager_iqr_ms")),
        "compile_ms": comp,
        "compile_speedup": eager / comp if eager and comp else None,
        "compile_ok": m.get("compile_ok"),
        "compile_agrees_1e4": m.get("compile_agrees_1e4"),
        "compile_agrees_1e2": m.get("compile_agrees_1e2"),
        "deterministic": m.get("deterministic"),
        "input_sensitivity_ratio": _finite(m.get("input_sensitivity_ratio")),
        "inputs_that_matter": m.get("inputs_that_matter"),
        "ops_that_matter": m.get("ops_that_matter"),
        "fragile_ulp_ratio": _finite(m.get("fragile_ulp_ratio")),
        "fragile_ulp_steps": m.get("fragile_ulp_steps"),
        "fragile_f64_ratio": _finite(m.get("fragile_f64_ratio")),
        "fragile_weights": m.get("fragile_weights"),
        "flops": flops,
        "bytes_moved": moved,
        "arithmetic_intensity": flops / moved if flops is not None and moved else None,
        "peak_memory_bytes": m.get("peak_memory_bytes"),
        "achieved_tflops": _finite(m.get("achieved_tflops")),
        "achieved_tbps": _finite(m.get("achieved_tbps")),
        "roofline_fraction": _finite(m.get("roofline_fraction")),
        "gpu": m.get("gpu") or (m.get("device") if m else None),
        "torch_version": m.get("torch_version"),
        "tf32": m.get("tf32"),
        "kb_nearest": c.get("kb_nearest"),
        "kb_ast_similarity": _finite(c.get("kb_ast_similarity")),
        "kb_shared_computation": c.get("kb_shared_computation"),
        "kb_op_signature_match": c.get("kb_op_signature_match"),
        "kb_minhash_jaccard": _finite(c.get("kb_minhash_jaccard")),
        "shape_variants": task.get("shape_variants"),
        "composer": task.get("composer"),
        "seed": task.get("seed"),
        "opsynth_version": version,
    }


def _by_task(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["task_id"]: r for r in rows}  # a re-measured task: the last record wins


def funnel(rd: RunDir, tasks: list[dict[str, Any]], measurements: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Tasks left after each step, in `opsynth run`'s order: sampled, the code-only stages (import check,
    decontaminate), profiled ok among the tasks still in, then filter and dedupe."""
    verdicts = verdicts_by_task(rd)
    ran: list[str] = []

    def left() -> list[str]:
        return [t["task_id"] for t in tasks if all(verdicts.get(t["task_id"], {}).get(s, (False, ""))[0] for s in ran)]

    out = [{"step": "sampled", "tasks": len(tasks)}]
    to_profile = measurements is not None
    for stage in [*stages_run(rd), None]:  # None: the end, where profiling goes if only code stages ran
        if to_profile and stage not in CODE_STAGES:
            ok = {k for k, r in _by_task(measurements or []).items() if r.get("status") == "ok"}
            out.append({"step": "profiled (ran ok)", "tasks": sum(t in ok for t in left())})
            to_profile = False
        if stage is None:
            break
        ran.append(stage)
        out.append({"step": f"kept after {stage}", "tasks": len(left())})
    return out


def _write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # content-defined pages let the Hub's Xet storage dedupe unchanged rows when a new release is pushed
    pq.write_table(table, path, compression="zstd", row_group_size=ROW_GROUP_ROWS, write_page_index=True,
                   use_content_defined_chunking=True)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unfinished_refusal(rd: RunDir, status: dict[str, str]) -> str:
    """The one line refusing to publish a run whose stages (`completeness.stage_status`) are not all done ("" when
    they are)."""
    from pipeline.rundir.completeness import unfinished

    if not unfinished(status):
        return ""
    first = next(s for s, v in status.items() if v != "done")
    return (f"{rd.path} is not finished ({'; '.join(unfinished(status))}); run `opsynth {first} {rd.path}` and the "
            "stages after it (`opsynth run` with the same arguments resumes), or pass --allow-incomplete to publish "
            "it as it is, with the card saying what was not done")


def _gather(rd: RunDir, limit: int | None = None, allow_incomplete: bool = False) -> dict[str, Any]:
    """Everything the folder is made of, read once; raises on a run that cannot be published."""
    from pipeline.rundir.completeness import stage_status

    cfg = rd.load_config()
    tasks = rd.read_rows("tasks")
    if not tasks:
        raise OpsynthError(f"{rd.path} has no tasks/ table; run `opsynth sample {rd.path}` first")
    status = stage_status(rd, cfg)
    if not allow_incomplete and (why := unfinished_refusal(rd, status)):
        raise OpsynthError(why)
    if rd.read_table("verdicts") is None:
        raise OpsynthError(f"{rd.path} has no verdicts yet (nothing filtered); run `opsynth filter {rd.path}` first")
    cont_t = rd.read_table("contamination")
    measurements = rd.measurement_rows() if rd.done_shards("measurements") else None
    contamination = cont_t.to_pylist() if cont_t is not None else None
    verdicts = verdicts_by_task(rd)
    stages = stages_run(rd)
    accepted = [t for t in tasks if all(verdicts.get(t["task_id"], {}).get(s, (False, ""))[0] for s in stages)]
    if not accepted:
        raise OpsynthError(f"{rd.path}: no task was accepted by {', '.join(stages)}; nothing to publish "
                           f"(see the rejection reasons with `opsynth report {rd.path}`)")
    from pipeline.outputs.provenance import profile_calls

    return {"cfg": cfg, "tasks": tasks, "accepted": accepted[:limit] if limit else accepted,
            "calls": profile_calls(rd.manifest()),
            "done_at": _done_at(rd, measurements or []),
            "accepted_total": len(accepted), "measurements": measurements, "contamination": contamination,
            "stages": stages, "status": status}


def _done_at(rd: RunDir, measurements: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(table, task_id) -> its shard's completion time, read only for a table whose rows lack started_at (shards
    written before that column): what dates them to a profile call."""
    undated = {"measurements": any(m.get("started_at") is None for m in measurements),
               "shortcuts": any(m.get("shortcuts_table") and m.get("shortcut_started_at") is None for m in measurements)}
    return {(tb, t): at for tb, need in undated.items() if need for t, at in rd.task_done_times(tb).items()}


def build_rows(rd: RunDir) -> list[dict[str, Any]]:
    """The published rows of a run (accepted tasks joined with their measurements and contamination)."""
    g = _gather(rd)
    return _rows(g)


def _rows(g: dict[str, Any]) -> list[dict[str, Any]]:
    meas = _by_task(g["measurements"] or [])
    cont = _by_task(g["contamination"] or [])
    from pipeline.outputs.provenance import call_of

    version = opsynth_version()
    prompt = prompt_settings(g["cfg"])
    rows = [published_row(t, meas.get(t["task_id"]), cont.get(t["task_id"]), version, prompt) for t in g["accepted"]]
    calls = g.get("calls") or []
    # a row from a shard written before its table recorded started_at is dated by the shard's completion marker
    done_at = g.get("done_at") or {}
    for r in rows:  # provenance: the call whose settings measured the row, and the one that ran its shortcut checks
        m, tid = meas.get(r["task_id"]) or {}, r["task_id"]
        r["profile_call"] = call_of(m.get("started_at") or done_at.get(("measurements", tid)), calls)
        if m.get("shortcuts_table"):  # a shortcuts-only call's
            r["shortcut_call"] = call_of(m.get("shortcut_started_at") or done_at.get(("shortcuts", tid)), calls)
        else:
            r["shortcut_call"] = r["profile_call"] if m.get("shortcut_checks") else None
    return rows


def _write_folder(rd: RunDir, g: dict[str, Any], tmp: Path) -> dict[str, Any]:
    from pipeline.outputs import card, plots

    cfg = g["cfg"]
    from pipeline.outputs.provenance import validation_ids

    rows = _rows(g)
    held = validation_ids(rows, cfg.publish.validation_share)
    train = [r for r in rows if r["task_id"] not in held]
    table = pa.Table.from_pylist(train, schema=PUBLISHED)
    n_shards = max(1, math.ceil(len(train) / cfg.publish.shard_rows))
    per = math.ceil(len(train) / n_shards)
    for i in range(n_shards):
        _write_parquet(table.slice(i * per, per), tmp / "data" / f"train-{i:05d}-of-{n_shards:05d}.parquet")
    if held:  # whole operator multisets never in train: generalization to unseen fusions
        val = pa.Table.from_pylist([r for r in rows if r["task_id"] in held], schema=PUBLISHED)
        _write_parquet(val, tmp / "data" / "validation-00000-of-00001.parquet")

    accepted_ids = {t["task_id"] for t in g["accepted"]}
    cont_rows = [{**{k: r.get(k) for k in CONTAMINATION.names}, "published": r["task_id"] in accepted_ids}
                 for r in (g["contamination"] or [])]
    cont_table = pa.Table.from_pylist(cont_rows, schema=PUBLISHED_CONTAMINATION)
    _write_parquet(cont_table, tmp / "contamination" / "contamination.parquet")

    first = first_rejection(rd)
    rej = [{"task_id": t["task_id"], "name": t.get("name"), "stage": first[t["task_id"]][0],
            "reason_kind": reason_kind(first[t["task_id"]][1]), "reason": first[t["task_id"]][1]}
           for t in g["tasks"] if t["task_id"] in first]
    rej.sort(key=lambda r: (VERDICT_ORDER.index(r["stage"]), r["reason_kind"], r["task_id"]))
    rej_table = pa.Table.from_pylist(rej, schema=REJECTIONS)
    _write_parquet(rej_table, tmp / "rejections" / "rejections.parquet")
    counts: dict[tuple[str, str], int] = {}
    for r in rej:
        counts[(r["stage"], r["reason_kind"])] = counts.get((r["stage"], r["reason_kind"]), 0) + 1
    summary = [{"stage": s, "reason_kind": k, "count": c} for (s, k), c in counts.items()]
    summary.sort(key=lambda r: (VERDICT_ORDER.index(r["stage"]), -r["count"], r["reason_kind"]))
    summary_table = pa.Table.from_pylist(summary, schema=REJECTION_SUMMARY)
    _write_parquet(summary_table, tmp / "rejections" / "summary.parquet")

    manifest = _manifest(rd, g, rows, summary)
    manifest["contamination_rows"] = len(cont_rows)
    manifest["splits"] = {"train": len(train), "validation": len(held)}
    manifest["profile_calls"] = g.get("calls") or []
    # the card's dataset_info states each config's size in Arrow bytes, as the Hub's own cards do
    manifest["arrow_bytes"] = {"default": table.nbytes, "contamination": cont_table.nbytes,
                               "rejections": rej_table.nbytes, "rejection_summary": summary_table.nbytes}
    plot_files = plots.render_all(rows, tmp / "plots")
    files = {}
    for p in sorted(tmp.rglob("*")):
        if p.is_file():
            files[p.relative_to(tmp).as_posix()] = {"bytes": p.stat().st_size, "sha256": _sha256(p)}
    manifest["files"] = files
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    (tmp / "README.md").write_text(card.render(manifest, rows, plot_files))
    return manifest


def _manifest(rd: RunDir, g: dict[str, Any], rows: list[dict[str, Any]],
              summary: list[dict[str, Any]]) -> dict[str, Any]:
    cfg = g["cfg"]
    run_manifest = rd.manifest()
    meas = g["measurements"] or []
    seeds = sorted({r["seed"] for r in rows if r.get("seed") is not None})
    refs = sorted({r.get("reference") for r in (g["contamination"] or []) if r.get("reference")})

    return {
        "name": cfg.publish.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "opsynth_version": opsynth_version(),
        "torch_version": sorted({r["torch_version"] for r in meas if r.get("torch_version")}) or [_version("torch")],
        "gpu": sorted({r.get("gpu") or r.get("device") for r in meas if r.get("gpu") or r.get("device")}),
        # the host's name stays private; platform and package versions are what reproduce a row
        "host": {k: v for k, v in (run_manifest.get("host") or {}).items() if k != "hostname"},
        "config": cfg.to_dict(),
        "seeds": {"run_seed": cfg.run.seed, "task_seeds": [seeds[0], seeds[-1]] if seeds else None},
        "reference": {"configured": list(cfg.decontaminate.reference), "used": refs},
        "stages_run": g["stages"],
        "stage_status": g["status"],
        "funnel": funnel(rd, g["tasks"], g["measurements"]),
        "rejections": summary,
        "rows": len(rows),
        # the `prompt` column's template version and policy (opsynth/prompt.py; the reward adapters: opsynth.rl)
        "prompt": prompt_record(cfg),
        "sample_of": g["accepted_total"] if g["accepted_total"] != len(rows) else None,
        "stage_records": run_manifest.get("stages", {}),
        # a run that grew: each step's n and time (later indices were sampled with that day's code)
        "growth": run_manifest.get("growth") or None,
        # an audited dataset: where its rows came from, under which license (the card keeps the attribution)
        "audit_source": {k: v for k, v in (run_manifest.get("audit_source") or {}).items() if k != "path"} or None,
        # a re-profile of a random sample of what an earlier publish of this run put out (opsynth recheck)
        "recheck": recheck.read(rd),
    }


def _run_inside(out: Path, run_dir: Path | None) -> str | None:
    """The run directory's path inside `out` (a release keeps its run state beside what it publishes), or None."""
    if run_dir is None:
        return None
    try:
        inside = run_dir.resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        return None
    return inside if inside != "." else None


def check_destination(out: Path, run_dir: Path | None = None) -> None:
    """Refuse a destination publish would destroy something in: it must be new, empty, or hold only the files a
    previous publish wrote (those its manifest lists, the manifest and the card) and the run directory being
    published, if it lives inside (it is carried over untouched)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise OpsynthError(f"{out} exists and is not a folder; pass another --to OUTDIR")
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir())
    if not present:
        return
    written: set[str] = set()
    try:
        written = set(json.loads((out / "manifest.json").read_text()).get("files", {})) | {"manifest.json", "README.md"}
    except (OSError, ValueError, AttributeError):
        pass
    inside = _run_inside(out, run_dir)
    foreign = [p for p in present if p not in written and not (inside and p.startswith(inside + "/"))]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        what = "was not written by publish" if not written else "holds files publish did not write"
        raise OpsynthError(f"{out} {what} ({shown}) and publishing replaces the whole folder; "
                           "pass a new or empty --to OUTDIR, or move those files away")


def publish(rd: RunDir, out_dir: Path | None = None, limit: int | None = None,
            allow_incomplete: bool = False) -> Path:
    """Write the Hub-ready folder (default rd.path / "dataset") atomically and return its path.

    `limit` keeps only the first accepted tasks (a small sample of a release, e.g. data/sample/);
    `allow_incomplete` publishes a run whose stages are not all done (the card says which).
    """
    out = Path(out_dir) if out_dir is not None else rd.path / "dataset"
    check_destination(out, rd.path)
    inside = _run_inside(out, rd.path)
    t0 = time.time()
    g = _gather(rd, limit, allow_incomplete)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        manifest = _write_folder(rd, g, tmp)
        if inside:  # the run state moves into the new folder before the swap, and back if anything fails
            (tmp / inside).parent.mkdir(parents=True, exist_ok=True)
            os.replace(out / inside, tmp / inside)
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        if inside and (tmp / inside).exists() and not (out / inside).exists():
            os.replace(tmp / inside, out / inside)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    rd.record_stage("publish", time.time() - t0, rows=manifest["rows"], folder=str(out))
    return out
