"""Reference benchmarks (KernelBench) as fingerprint indexes: loading sources and building the index.

A reference is the Hub dataset `ScalingIntelligence/KernelBench` (all splits), a local parquet/jsonl
with a `code` column, a folder of `.py` files, or an index file built here. An index holds, per
problem, its name, level, AST fingerprint, traced operator signature (exact, and the ops its output depends
on, from which the core signature is derived at load time), input shapes, MinHash signature and text signature (transformers model ids and size
constants of problems that cannot be traced offline), plus the reference
version it came from; never the source text, so it can ship in data/reference/ and make
decontamination run offline and reproducibly.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from detectors.reference_index import BUILTIN, REFERENCE_DIR, is_index
from opsynth.errors import OpsynthError

# meta-device RNNs unroll every time step through the dispatcher (LSTM problems take 20-40 s alone, twice that
# on a busy 2-core host); an index is built once, so give them room
TRACE_TIMEOUT_S = 600.0
# a meta trace needs no tensor memory; code that makes real tensors anyway (a row of Ops-6K reached 8 GB) fails
# with an allocation error instead of taking the machine
TRACE_MEM_LIMIT_BYTES = 6 << 30

INDEX_SCHEMA = pa.schema([
    ("source", pa.string()),          # reference version, e.g. kernelbench_main@423217d9fda9
    ("key", pa.string()),             # level2/17_Conv2d_InstanceNorm_Divide
    ("level", pa.int64()),
    ("problem_id", pa.int64()),
    ("name", pa.string()),
    ("ast", pa.list_(pa.uint32())),   # hashed normalized AST tokens of the Model class and helpers
    ("minhash", pa.list_(pa.uint32())),
    ("ops", pa.list_(pa.string())),   # normalized ATen signature of forward, [] when not traced
    ("live_ops", pa.list_(pa.string())),  # normalized ops the output depends on (core_ops derives `core`), [] if unknown
    ("inputs", pa.string()),          # JSON list of the input shapes (null for non-tensors), "" when not traced
    ("op_status", pa.string()),       # traced | text-only: why
    ("text_sig", pa.list_(pa.string())),  # model:<transformers model id>, const:<size>; [] without model ids
    ("code_sha256", pa.string()),     # identifies the exact source without storing it
    ("fingerprint_version", pa.int32()),
])


# ---- reading raw references ---------------------------------------------------------------------
def _source_label(path: Path) -> tuple[str, str]:
    """(short label, description) from a SOURCE.md next to the file, else the file name and its hash."""
    desc = ""
    src = path.parent / "SOURCE.md" if path.is_file() else path / "SOURCE.md"
    if src.exists():
        for line in src.read_text().splitlines():
            if path.name in line:
                desc = " ".join(c.strip() for c in line.strip("|").split("|")[1:2])
                break
    commit = re.search(r"\b([0-9a-f]{40})\b", desc)
    if commit:
        return f"{path.stem}@{commit.group(1)[:12]}", desc
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.is_file() else "dir"
    return f"{path.stem}@{digest}", desc or str(path)


def _level_from(row: dict[str, Any], split: str | None = None) -> int | None:
    lv = row.get("level")
    if lv is not None:
        try:
            return int(str(lv).replace("level_", "").replace("level", ""))
        except ValueError:
            return None
    if split and re.search(r"(\d+)$", split):
        return int(re.search(r"(\d+)$", split).group(1))
    return None


def _rows_from_table(rows: list[dict[str, Any]], what: str, split: str | None = None) -> list[dict[str, Any]]:
    if rows and "code" not in rows[0]:
        raise OpsynthError(f"reference {what} has no `code` column (columns: {sorted(rows[0])}); "
                           "give a parquet/jsonl with the problems' source in `code`")
    out = []
    for i, r in enumerate(rows):
        name = r.get("name") or f"problem_{i}"
        out.append({"code": r.get("code") or "", "level": _level_from(r, split),
                    "problem_id": r.get("problem_id"), "name": str(name)})
    return out


def parquet_shards(folder: Path) -> list[Path]:
    """The parquet shards a folder holds: its own, else those of its data/ (the Hub layout)."""
    return sorted(folder.glob("*.parquet")) or sorted((folder / "data").glob("*.parquet"))


def read_code_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a parquet/jsonl file, of a folder's parquet shards in name order (a published dataset's folder
    reads its data/ shards: train-00000-of-00002.parquet, ...), or of a folder's `.py` files (`name` = file stem)."""
    try:
        shards = parquet_shards(path) if path.is_dir() else []
        if shards:
            return pa.concat_tables([pq.read_table(f) for f in shards], promote_options="default").to_pylist()
        if path.is_dir():
            files = sorted(path.rglob("*.py"))
            if not files:
                raise OpsynthError(f"folder {path} holds no .py files; give a folder of KernelBench-format modules")
            rows = []
            for f in files:
                level = re.search(r"level_?(\d+)", str(f.relative_to(path)))
                pid = re.match(r"(\d+)_", f.stem)
                rows.append({"code": f.read_text(errors="replace"), "name": f.stem,
                             "level": int(level.group(1)) if level else None,
                             "problem_id": int(pid.group(1)) if pid else None})
            return rows
        if path.suffix == ".parquet":
            return pq.read_table(path).to_pylist()
        if path.suffix in (".jsonl", ".json"):
            text = path.read_text()
            if path.suffix == ".json" and text.lstrip().startswith("["):
                return json.loads(text)
            return [json.loads(line) for line in text.splitlines() if line.strip()]
    except OpsynthError:
        raise
    except Exception as e:  # noqa: BLE001 - any unreadable file becomes one readable line
        raise OpsynthError(f"cannot read {path} ({type(e).__name__}: {str(e)[:200]}); "
                           "give a readable parquet, jsonl or folder of .py files") from None
    raise OpsynthError(f"{path} is not a parquet, jsonl or folder of .py files")


def _hub_rows(hub_id: str) -> tuple[list[dict[str, Any]], str]:
    datasets = __import__("pipeline.errors", fromlist=["require"]).require("datasets", "hub")
    try:
        dd = datasets.load_dataset(hub_id)
    except Exception as e:  # noqa: BLE001 - offline, unknown id, auth: one readable line
        raise OpsynthError(f"cannot load reference {hub_id!r} from the Hub ({type(e).__name__}: "
                           f"{str(e).splitlines()[0][:160] if str(e) else ''}); check the id and the network, "
                           "or pass a local parquet/jsonl/folder or `builtin`") from None
    rows: list[dict[str, Any]] = []
    revision = ""
    for split in sorted(dd):
        ds = dd[split]
        revision = revision or str(getattr(ds.info, "version", "") or "")
        rows += _rows_from_table(ds.to_list(), f"{hub_id}[{split}]", split)
    fp = hashlib.sha256("".join(r["code"] for r in rows).encode()).hexdigest()[:12]
    return rows, f"{hub_id}@{fp}"


def trace_many(codes: list[str], workers: int = 2, timeout_s: float = TRACE_TIMEOUT_S,
               glue: Any = "all") -> list[dict]:
    """trace_isolated over `workers` subprocesses at once (interleaved chunks, results in input order), with identity
    glue removed (`operators.identity_glue`; `glue=None` records every op); where meta fails, real CPU tensors at
    reduced sizes under the same caps."""
    from concurrent.futures import ThreadPoolExecutor

    from operators.identity_glue import RULES
    from operators.trace import SMALL, trace_isolated

    rules = list(RULES) if glue == "all" else glue

    if not codes:
        return []
    workers = max(1, min(workers, len(codes)))
    parts = [list(range(w, len(codes), workers)) for w in range(workers)]
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(lambda idx: trace_isolated([codes[i] for i in idx], timeout_s, devices=["meta", SMALL],
                                                           mem_limit_bytes=TRACE_MEM_LIMIT_BYTES, glue=rules), parts))
    out: list[dict] = [{}] * len(codes)
    for idx, res in zip(parts, results, strict=False):
        for i, r in zip(idx, res, strict=False):
            out[i] = r
    return out


# ---- building an index -------------------------------------------------------------------------
def fingerprint_rows(rows: list[dict[str, Any]], source: str, trace: bool = True) -> pa.Table:
    """Index table for raw reference rows (code, level, problem_id, name); traces forward in a subprocess."""
    from detectors.contamination import FINGERPRINT_VERSION, fingerprints, normalize_ops
    from filters.static_check import REFERENCE_IMPORTS, check_task_source

    codes = [r["code"] for r in rows]
    status = []
    to_trace = []
    for i, c in enumerate(codes):
        why = check_task_source(c, REFERENCE_IMPORTS)
        if why:
            status.append(f"text-only: {why[:160]}")
        elif not trace:
            status.append("text-only: tracing disabled")
        else:
            status.append("traced")
            to_trace.append(i)
    ops: list[list[str] | None] = [None] * len(codes)
    live: list[list[str] | None] = [None] * len(codes)
    shapes: list[list | None] = [None] * len(codes)
    if to_trace:
        for i, res in zip(to_trace, trace_many([codes[i] for i in to_trace]), strict=False):
            if res.get("ok"):
                ops[i], live[i], shapes[i] = res["ops"], res.get("live_ops"), res.get("inputs")
            else:
                status[i] = f"text-only: trace failed: {res.get('error', '')[:160]}"
    fp = fingerprints(codes, ops, live, shapes)
    out = []
    for i, r in enumerate(rows):
        level = r.get("level")
        key = f"level{level}/{r['name']}" if level is not None else str(r["name"])
        out.append({"source": source, "key": key, "level": level, "problem_id": r.get("problem_id"),
                    "name": r["name"], "ast": fp["ast"][i].tolist(), "minhash": fp["minhash"][i].tolist(),
                    "ops": list(fp["ops"][i]), "live_ops": list(normalize_ops(live[i])) if live[i] else [],
                    "inputs": json.dumps(shapes[i]) if shapes[i] is not None else "",
                    "op_status": status[i], "text_sig": list(fp["text_sig"][i]),
                    "code_sha256": hashlib.sha256(codes[i].encode()).hexdigest(),
                    "fingerprint_version": FINGERPRINT_VERSION})
    return pa.Table.from_pylist(out, schema=INDEX_SCHEMA)


def _conform(table: pa.Table) -> pa.Table:
    """An index table in INDEX_SCHEMA; an index from before text signatures or core ops gets empty ones (and an old
    fingerprint_version, which `reference_matrix` refuses with a rebuild hint)."""
    for name in ("text_sig", "live_ops"):
        if name not in table.column_names:
            table = table.append_column(name, pa.array([[]] * table.num_rows, pa.list_(pa.string())))
    if "inputs" not in table.column_names:
        table = table.append_column("inputs", pa.array([""] * table.num_rows, pa.string()))
    meta = table.schema.metadata
    return table.select(INDEX_SCHEMA.names).cast(INDEX_SCHEMA).replace_schema_metadata(meta)


_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
_SPEC_HELP = ("give `builtin`, a parquet/jsonl with a `code` column, a folder of .py files, an index built by "
              "`opsynth reference build`, or a Hub id")


def check_spec(spec: str) -> None:
    """Fail now, before anything is written, on a reference that cannot be loaded later (a typo, a missing file);
    a Hub id is only checked for its form (the Hub is asked when decontaminate runs)."""
    if spec == "builtin" or spec.startswith("builtin:"):
        want = spec.partition(":")[2]
        if not sorted(REFERENCE_DIR.glob(f"kernelbench_{want or '*'}.index.parquet")):
            shipped = sorted(p.name.split(".")[0].removeprefix("kernelbench_") for p in
                             REFERENCE_DIR.glob("kernelbench_*.index.parquet"))
            raise OpsynthError(f"reference {spec!r}: no shipped index of that name; give `builtin` or one of "
                               + ", ".join(f"`builtin:{s}`" for s in shipped))
        return
    path = Path(spec)
    if path.exists():
        if path.is_file() and path.suffix not in (".parquet", ".jsonl", ".json"):
            raise OpsynthError(f"reference {spec!r} is not a parquet or jsonl file; {_SPEC_HELP}")
        return
    if _HUB_ID.fullmatch(spec) and not path.suffix and not spec.startswith("."):
        return
    raise OpsynthError(f"reference {spec!r} does not exist; {_SPEC_HELP}")


def _raw_rows(spec: str) -> tuple[list[dict[str, Any]], str, str]:
    """(rows, short label, description) of a raw reference spec (path or Hub id)."""
    path = Path(spec)
    if path.exists():
        label, desc = _source_label(path)
        return _rows_from_table(read_code_table(path), str(path)), label, desc
    if _HUB_ID.fullmatch(spec) and not path.suffix:
        rows, label = _hub_rows(spec)
        return rows, label, f"Hub dataset {spec}, all splits"
    raise OpsynthError(f"reference {spec!r} does not exist; {_SPEC_HELP}")


def build_index(sources: list[str], out: Path) -> Path:
    """Fingerprint every problem of `sources` into one index parquet at `out` (for `opsynth reference build`)."""
    tables, descs = [], []
    for spec in sources:
        if Path(spec).exists() and is_index(Path(spec)):
            tables.append(_conform(pq.read_table(spec)))
            descs.append(f"{spec} (prebuilt index)")
            continue
        rows, label, desc = _raw_rows(spec)
        tables.append(fingerprint_rows(rows, label))
        descs.append(f"{label}: {desc}")
    table = pa.concat_tables(tables)
    meta = {"opsynth.sources": json.dumps(descs), "opsynth.built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **{k: v.encode() for k, v in meta.items()}})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out, compression="zstd")
    return out


def load_index(spec: str, cache_dir: Path | None = None) -> pa.Table:
    """Fingerprint index of a reference: `builtin`, an index file, a raw path or a Hub id.

    Raw references are fingerprinted (and traced) on the fly; with `cache_dir` the result is kept there,
    keyed by the reference content, so a resumed or repeated run does not trace again.
    """
    if spec == "builtin" or spec.startswith("builtin:"):
        # `builtin`: every shipped index (KernelBench main and v0); `builtin:v0`: one of them
        want = spec.partition(":")[2]
        files = sorted(REFERENCE_DIR.glob(f"kernelbench_{want or '*'}.index.parquet"))
        if not files:
            raise OpsynthError(f"no shipped reference index matches {spec!r} in {REFERENCE_DIR}; rebuild it with "
                               "`opsynth reference build ../shared/reference/kernelbench/kernelbench_main.parquet "
                               f"--out {BUILTIN}`")
        return pa.concat_tables([_conform(pq.read_table(f)) for f in files])
    path = Path(spec)
    if path.exists() and path.is_file() and path.suffix == ".parquet":
        try:
            if is_index(path):
                return _conform(pq.read_table(path))
        except Exception as e:  # noqa: BLE001
            raise OpsynthError(f"cannot read reference {path} ({type(e).__name__}); give a readable parquet file") from None
    from detectors.contamination import FINGERPRINT_VERSION

    rows, label, _ = _raw_rows(spec)
    if cache_dir is not None:
        digest = hashlib.sha256("\x00".join(r["code"] for r in rows).encode()).hexdigest()[:16]
        safe = re.sub(r"[^\w.@-]", "_", label)
        cached = Path(cache_dir) / f"{safe}-{digest}.v{FINGERPRINT_VERSION}.index.parquet"
        if cached.exists():
            return _conform(pq.read_table(cached))
        table = fingerprint_rows(rows, label)
        cached.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, cached)
        return table
    return fingerprint_rows(rows, label)


def load_references(specs: list[str] | tuple[str, ...], cache_dir: Path | None = None) -> pa.Table:
    tables = [_conform(load_index(s, cache_dir)) for s in specs]
    return pa.concat_tables(tables)


def reference_matrix(index: pa.Table):
    """The index as a detectors.contamination.ReferenceMatrix."""
    import numpy as np

    from detectors.contamination import FINGERPRINT_VERSION, ReferenceMatrix, core_ops, shape_key

    d = index.to_pydict()
    old = sorted({v for v in d["fingerprint_version"] if v != FINGERPRINT_VERSION})
    if old:
        raise OpsynthError(f"reference index has fingerprint version {old}, this opsynth computes "
                           f"{FINGERPRINT_VERSION}; rebuild it with `opsynth reference build SOURCE --out PATH`")
    return ReferenceMatrix(d["key"], [np.asarray(a, dtype=np.uint32) for a in d["ast"]],
                           np.asarray(d["minhash"], dtype=np.uint32).reshape(len(d["key"]), -1),
                           [tuple(o or ()) for o in d["ops"]], [tuple(t or ()) for t in d["text_sig"]],
                           [core_ops(lv, live=True) if lv else core_ops(o) for lv, o in zip(d["live_ops"], d["ops"], strict=True)],
                           [shape_key(json.loads(s)) if s else "" for s in d["inputs"]], d["level"])
