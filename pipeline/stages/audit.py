"""audit: import a foreign KernelBench-format dataset into a run directory so every stage can run on it.

Input: a parquet or jsonl file with a `code` column (and optionally `task_id`, `name`, `ops`,
`data_source`, ...), or a folder of `.py` files. Rows become tasks/ rows (TASKS schema, columns the
input lacks are None); a row that is not KernelBench format or fails the static check stays in tasks/
with an `import` verdict that drops it and says why, so the audit goes on and the report counts it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from pipeline.errors import OpsynthError
from pipeline.rundir.config import Config
from pipeline.rundir.schema import TASKS
from pipeline.rundir.store import RunDir

_LISTS = ("ops", "categories", "aten_ops")


def _as_list(v: Any) -> list[str] | None:
    """Ops-6K stores `ops` as a serialized list; accept a list, a JSON/Python literal, or nothing."""
    if v is None:
        return None
    if isinstance(v, list | tuple):
        return [str(x) for x in v]
    if isinstance(v, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                got = parse(v)
                if isinstance(got, list | tuple):
                    return [str(x) for x in got]
            except (ValueError, SyntaxError, TypeError):
                pass
        return [v]
    return None


def _task_row(r: dict[str, Any], task_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in TASKS:
        v = r.get(f.name)
        if f.name in _LISTS:
            v = _as_list(v)
        elif v is not None and f.type in ("int32", "int64"):
            try:
                v = int(v)
            except (TypeError, ValueError):
                v = None
        elif v is not None and str(f.type) == "string" and not isinstance(v, str):
            v = json.dumps(v) if isinstance(v, dict | list) else str(v)
        elif v is not None and str(f.type) == "bool":
            v = bool(v)
        elif v is not None and str(f.type) == "double":
            try:
                v = float(v)
            except (TypeError, ValueError):
                v = None
        out[f.name] = v
    out["task_id"] = task_id
    return out


def aten_ops_device(rows: list[dict[str, Any]]) -> str | None:
    """Where the `aten_ops` a dataset carries were recorded: "cuda" when a row that has them names a GPU in its
    `gpu` column (an opsynth release: the ops its forward ran on the GPU it was profiled on), else "cpu"; None
    when no row has them. The labels stage judges them against that device's pins: on a GPU, F.one_hot runs
    zeros + scatter_ and RMSNorm one fused kernel, which the CPU pins would call a wrong label."""
    traced = [r for r in rows if r.get("aten_ops") is not None and len(r["aten_ops"])]
    if not traced:
        return None
    gpu = any(str(r.get("gpu") or "cpu").strip().lower() not in ("cpu", "meta", "") for r in traced)
    return "cuda" if gpu else "cpu"


def check_source(path: str) -> None:
    """Fail before the run directory is made on an input that cannot be imported."""
    p = Path(path)
    if not p.exists():
        raise OpsynthError(f"{path} does not exist; give a parquet or jsonl file with a `code` column "
                           "or a folder of .py files")
    if p.is_file() and p.suffix not in (".parquet", ".jsonl", ".json"):
        raise OpsynthError(f"{path} is not a parquet, jsonl or folder of .py files")


def import_dataset(path: str, rd: RunDir, cfg: Config, order_seed: int | None = None,
                   source: dict[str, str] | None = None, sample: int | None = None) -> dict:
    """Read `path` into rd's tasks/ table and write `import` verdicts; returns counts. Each row keeps its position in
    the file (`source_row`); order_seed stores the rows in that seed's random order (a profile call that stops
    early has then measured a random sample); sample keeps only the first `sample` rows of that order (seed 0 when
    none is given), e.g. a re-check of a published dataset on a few hundred random rows. source: name, url, license
    and attribution of the dataset, which `opsynth publish` keeps in the card of the cleaned copy."""
    from filters.static_check import check_task_source
    from pipeline.rundir.reference import read_code_table

    if sample is not None and sample < 1:
        raise OpsynthError(f"--sample must be >= 1 (got {sample}); it is the number of random rows to import")
    t0 = time.time()
    check_source(path)
    p = Path(path)
    raw = read_code_table(p)
    if not raw:
        raise OpsynthError(f"{path} holds no rows; give a dataset with at least one task")
    if "code" not in raw[0]:
        raise OpsynthError(f"{path} has no `code` column (columns: {sorted(raw[0])}); "
                           "a KernelBench-format dataset keeps each task's module source in `code`")
    codes = [r.get("code") if isinstance(r.get("code"), str) else "" for r in raw]
    rows, seen = [], {}
    for pos, r in enumerate(raw):
        given = r.get("task_id")
        base = str(given) if given not in (None, "") else hashlib.sha256(codes[pos].encode()).hexdigest()[:16]
        # byte-identical rows (Ops-6K has 352) must stay separate rows so dedupe can count them
        k = seen.get(base, 0)
        seen[base] = k + 1
        rows.append({**_task_row(r, base if k == 0 else f"{base}-{k}"), "source_row": pos})
    source_rows = len(rows)  # the dataset's size when it was drawn from (a release may grow after a re-check)
    if sample is not None and order_seed is None:
        order_seed = 0
    if order_seed is not None:
        import random

        order = list(range(len(rows)))
        random.Random(order_seed).shuffle(order)  # the same order with or without a sample
        rows = [rows[i] for i in (order[:sample] if sample is not None else order)]
    # the static check parses each task: only the rows imported are checked
    verdicts = []
    for r in rows:
        why = check_task_source(codes[r["source_row"]])
        verdicts.append({"task_id": r["task_id"], "keep": why is None, "reason": why or ""})
    rd.replace_table("tasks", rows, TASKS)
    rd.write_verdicts("import", verdicts)
    rejected = sum(not v["keep"] for v in verdicts)
    counts = {"rows": len(rows), "rejected": rejected, "kept": len(rows) - rejected,
              "repeated_ids": sum(c - 1 for c in seen.values())}
    rd.update_manifest(audit_source={"path": str(p.resolve()), "rows": len(rows), "order_seed": order_seed,
                                     "sample": sample, "source_rows": source_rows,
                                     "aten_ops_device": aten_ops_device([raw[r["source_row"]] for r in rows]),
                                     **{k: v for k, v in (source or {}).items() if v}})
    rd.record_stage("import", time.time() - t0, **counts)
    return counts
