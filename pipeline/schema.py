"""Arrow schemas of the run directory's tables; every table is keyed by `task_id`."""

import pyarrow as pa

STR_LIST = pa.list_(pa.string())

TASKS = pa.schema([
    ("task_id", pa.string()),       # content id: sha256 of the canonical graph + sizes, 16 hex chars
    ("name", pa.string()),          # KernelBench-style name, e.g. Conv2d_GroupNorm_GELU
    ("code", pa.string()),          # the KernelBench-format module
    ("ops", STR_LIST),              # catalog operator names in the task, e.g. ["nn.Conv2d", "F.gelu"]
    ("categories", STR_LIST),
    ("data_source", pa.string()),   # torch#k
    ("num_ops", pa.int32()),
    ("is_dag", pa.bool_()),
    ("graph", pa.string()),         # JSON node-link graph
    ("graph_hash", pa.string()),    # canonical graph hash (WL over op names and parameters) + shapes
    ("aten_ops", STR_LIST),         # ATen ops traced on the meta device, in execution order
    ("flops", pa.int64()),
    ("bytes_moved", pa.int64()),
    ("predicted_ms", pa.float64()),
    ("predicted_peak_bytes", pa.int64()),
    ("shape_variants", pa.string()),  # JSON list of {constant: value} alternative sizes
    ("composer", pa.string()),      # template | llm
    ("composer_note", pa.string()),
    ("seed", pa.int64()),
])

MEASUREMENTS = pa.schema([
    ("task_id", pa.string()),
    ("status", pa.string()),        # ok | error | timeout | crashed | oom | rejected_static | early_reject
    ("error", pa.string()),
    ("device", pa.string()),
    ("gpu", pa.string()),
    ("torch_version", pa.string()),
    ("tf32", pa.bool_()),
    ("eager_ms", pa.float64()),
    ("eager_iqr_ms", pa.float64()),
    ("eager_runs", pa.int32()),
    ("compile_ok", pa.bool_()),
    ("compile_error", pa.string()),
    ("graph_breaks", pa.int32()),
    ("compile_ms", pa.float64()),
    ("compile_iqr_ms", pa.float64()),
    ("compile_runs", pa.int32()),
    ("compile_max_abs_err", pa.float64()),
    ("compile_max_rel_err", pa.float64()),
    ("compile_agrees_1e4", pa.bool_()),
    ("compile_agrees_1e2", pa.bool_()),
    ("deterministic", pa.bool_()),
    ("determinism_max_diff", pa.float64()),
    ("input_min_pairwise_diff", pa.float64()),
    ("degenerate", pa.string()),    # "" or constant | zero | tiny | nonfinite | saturated
    ("output_numel", pa.int64()),
    ("peak_memory_bytes", pa.int64()),
    ("achieved_tflops", pa.float64()),
    ("achieved_tbps", pa.float64()),
    ("roofline_fraction", pa.float64()),  # roofline time / eager time: 1.0 means no headroom left
    ("aten_ops", STR_LIST),
    ("gpu_busy_s", pa.float64()),         # time this task held the device lock
    ("wall_s", pa.float64()),
])

VERDICTS = pa.schema([
    ("task_id", pa.string()),
    ("stage", pa.string()),         # filter | decontaminate | dedupe
    ("keep", pa.bool_()),
    ("reason", pa.string()),        # "" when kept
])

CONTAMINATION = pa.schema([
    ("task_id", pa.string()),
    ("contaminated", pa.bool_()),
    ("kb_nearest", pa.string()),    # e.g. level2/17_Conv2d_InstanceNorm_Divide
    ("kb_ast_similarity", pa.float64()),
    ("kb_ast_nearest", pa.string()),
    ("kb_op_signature_match", pa.bool_()),   # the whole normalized ATen signature equals a problem's, in order
    ("kb_op_signature_nearest", pa.string()),
    ("kb_op_multiset_match", pa.bool_()),    # same ops, any order (recorded, not a detector on its own)
    ("op_signature_source", pa.string()),    # aten_ops column | traced | text-only: why
    ("kb_minhash_jaccard", pa.float64()),
    ("kb_minhash_nearest", pa.string()),
    ("detectors_fired", STR_LIST),
    ("reference", pa.string()),
])

DEDUPE = pa.schema([
    ("task_id", pa.string()),
    ("exact_cluster", pa.string()),
    ("structural_cluster", pa.string()),
    ("near_cluster", pa.string()),
    ("keep", pa.bool_()),
    ("reason", pa.string()),
])

BY_TABLE = {"tasks": TASKS, "measurements": MEASUREMENTS, "verdicts": VERDICTS,
            "contamination": CONTAMINATION, "dedupe": DEDUPE}


def conform(rows: list[dict], schema: pa.Schema) -> list[dict]:
    """Fill missing columns with None so partial records fit the schema."""
    return [{name: r.get(name) for name in schema.names} for r in rows]
