"""decontaminate: score every task against every KernelBench problem with the three detectors.

Writes DIR/contamination/ (one row per task in tasks/, every score kept) and the stage's verdicts:
a task is dropped when any detector fires, with the detectors and the nearest problem in the reason.
A run grown since its last call scores only its new tasks, when the references and the detector settings are
the ones the rows on disk were scored with (the manifest's `decontaminate_basis`).
The op signature compares what a task computes (traced in a subprocess with GPU calls stood in for, so
CUDA-graph and stream wrappers trace); `kb_op_normalization` says at which normalization it matched
(exact, core, core + or - one reduction). A task that fails to trace gets its own reason in
`op_signature_source` and is compared by text alone.
The op-signature detector also fires on a shared transformers model id (problems that load a Hugging Face
model cannot be traced offline); `op_signature_source` then starts with `text:` and names the ids.
Beside the detectors, a task that carries a reference problem's numbered name verbatim (an imported
benchmark problem, however rewritten) is flagged with `name` in `detectors_fired`.
"""

from __future__ import annotations

import re
import time

from pipeline.progress import Progress
from pipeline.rundir.config import Config
from pipeline.rundir.schema import CONTAMINATION
from pipeline.rundir.store import RunDir

BASIS_KEY = "decontaminate_basis"  # in the manifest: what the contamination table's rows were scored with


def task_signatures(rows: list[dict], workers: int = 2, timeout_s: float = 120.0,
                    detail: dict | None = None) -> tuple[list[list[str] | None], list[str]]:
    """(ATen ops, how they were obtained) per task: the tasks table's aten_ops, else a trace after the static check.

    A traced task's live ops and input shapes go into `detail` ('live_ops', 'shapes': lists parallel to rows).
    """
    from filters.static_check import check_task_source
    from pipeline.rundir.reference import trace_many

    ops: list[list[str] | None] = [None] * len(rows)
    live: list[list[str] | None] = [None] * len(rows)
    shapes: list[list | None] = [None] * len(rows)
    source = [""] * len(rows)
    todo = []
    for i, r in enumerate(rows):
        if r.get("aten_ops"):
            ops[i], source[i] = list(r["aten_ops"]), "aten_ops column"
            continue
        why = check_task_source(r.get("code") or "")
        if why:
            source[i] = f"text-only: {why[:160]}"
        else:
            todo.append(i)
    for i, res in zip(todo, trace_many([rows[i]["code"] for i in todo], workers, timeout_s), strict=False):
        if res.get("ok"):
            ops[i], source[i] = res["ops"], "traced"
            live[i], shapes[i] = res.get("live_ops"), res.get("inputs")
        else:
            source[i] = f"text-only: trace failed: {res.get('error', '')[:160]}"
    if detail is not None:
        detail.update(live_ops=live, shapes=shapes)
    return ops, source


def name_matches(names: list[str | None], index_names: list[str], index_keys: list[str]) -> list[str | None]:
    """Per task, the reference key whose problem name it carries verbatim (`27_Conv3d_HardSwish_GroupNorm_Mean`:
    a benchmark problem imported under its own name, however its code was changed); only numbered names
    count, so the sampler's names (operator chains, never numbered) cannot match."""
    by_name: dict[str, str] = {}
    for n, k in zip(index_names, index_keys, strict=True):
        if n and re.match(r"\d+_", n):
            by_name.setdefault(n.lower(), k)
    return [by_name.get((n or "").lower()) for n in names]


def _reason(row: dict) -> str:
    fired = "+".join(row["detectors_fired"])
    how = (" (text: model id)" if row["op_signature_source"].startswith("text:") else
           f" at {row['kb_op_normalization']}" if row.get("kb_op_normalization") else "")
    return (f"contaminated by {fired} (nearest {row['kb_nearest']}; ast {row['kb_ast_similarity']:.3f}, "
            f"minhash {row['kb_minhash_jaccard']:.3f}, op signature match {row['kb_op_signature_match']}{how})")


def run(rd: RunDir, cfg: Config, references: list[str] | None = None) -> dict:
    """Score the tasks of `rd` against `references` (default: the config's); returns counts."""
    from detectors.contamination import compare, fingerprints
    from pipeline.rundir.reference import load_references, reference_matrix

    t0 = time.time()
    dc = cfg.decontaminate
    specs = list(references or dc.reference)
    every = rd.read_rows("tasks", ["task_id", "code", "aten_ops", "name"])
    with Progress("decontaminate", total=len(every)) as bar:  # whole-table steps: the line names the step
        bar.phase(f"loading references {', '.join(specs)}")
        index = load_references(specs, cache_dir=rd.path / "reference")
        ref = reference_matrix(index)
        sources = index.column("source").to_pylist()
        # a task's scores depend on its code (its id), the references' contents and these settings: a grown run
        # scores only its new tasks when they are what the rows on disk were scored with
        basis = {"references": sorted(set(sources)), "ast_threshold": dc.ast_threshold,
                 "minhash_threshold": dc.minhash_threshold, "op_signature": dc.op_signature,
                 "name_match": dc.name_match}
        kept = ({r["task_id"]: r for r in rd.read_rows("contamination")}
                if rd.manifest().get(BASIS_KEY) == basis else {})
        tasks = [t for t in every if t["task_id"] not in kept]
        bar.phase("tracing the tasks without an ATen trace")
        detail: dict = {}
        ops, op_source = task_signatures(tasks, cfg.run.workers, cfg.profile.timeout_s, detail) if dc.op_signature else (
            [None] * len(tasks), ["op signature detector disabled"] * len(tasks))
        bar.phase("fingerprinting")
        fp = fingerprints([t["code"] or "" for t in tasks], ops, detail.get("live_ops"), detail.get("shapes"))
        bar.phase(f"comparing with {len(sources)} reference problems")
        scored = compare(fp, ref, dc.ast_threshold, dc.minhash_threshold, dc.op_signature)
    by_name = (name_matches([t.get("name") for t in tasks], index.column("name").to_pylist(),
                            index.column("key").to_pylist()) if dc.name_match else [None] * len(tasks))
    rows = []
    for t, s, src, named in zip(tasks, scored, op_source, by_name, strict=False):
        if named:
            if not s["contaminated"]:
                s["kb_nearest"] = named
            s["contaminated"], s["detectors_fired"] = True, [*s["detectors_fired"], "name"]
        i = s.pop("_nearest_index")
        via = s.pop("_op_signature_via")
        if via and via.startswith("text:"):  # matched by the transformers model ids, not by traced ops
            src = f"text: model id {via[len('text:'):]} ({src})"
        rows.append({"task_id": t["task_id"], **s, "op_signature_source": src,
                     "reference": sources[i] if i >= 0 else ",".join(dict.fromkeys(sources))})
    scored_now = {r["task_id"]: r for r in rows}
    rows = [kept.get(t["task_id"]) or scored_now[t["task_id"]] for t in every]
    rd.update_manifest(**{BASIS_KEY: None})  # until the table below is written: a killed call leaves no basis
    rd.replace_table("contamination", rows, CONTAMINATION)
    rd.write_verdicts("decontaminate", [{"task_id": r["task_id"], "keep": not r["contaminated"],
                                         "reason": _reason(r) if r["contaminated"] else ""} for r in rows])
    by_detector = {d: sum(d in r["detectors_fired"] for r in rows) for d in ("ast", "op_signature", "minhash", "name")}
    counts = {"tasks": len(rows), "contaminated": sum(r["contaminated"] for r in rows), "by_detector": by_detector,
              "references": sorted(set(sources)), "reference_problems": len(sources),
              "scored_now": len(scored_now),
              # "text-only: ..." or, matched by a model id, "text: model id X (text-only: ...)"
              "text_only_tasks": sum("text-only" in r["op_signature_source"] for r in rows),
              "text_signature_matches": sum(r["op_signature_source"].startswith("text:") for r in rows),
              "by_op_normalization": {k: sum(r.get("kb_op_normalization") == k for r in rows)
                                      for k in sorted({r["kb_op_normalization"] for r in rows if r.get("kb_op_normalization")})}}
    rd.record_stage("decontaminate", time.time() - t0, **counts)
    rd.update_manifest(**{BASIS_KEY: basis})
    return counts
