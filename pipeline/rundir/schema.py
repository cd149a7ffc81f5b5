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
    ("source_row", pa.int64()),     # audited datasets: the row's position in the imported file
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
    # the one untimed eager run after the first (no L2 flush) that the early reject judges: recorded for every
    # task, so how far it strays from the median says how tight that factor may be
    ("quick_eager_ms", pa.float64()),
    # CPU time of this process's thread in that run before it waited for the GPU: launches and host-side work, but
    # also the allocator mapping new memory and launches waiting for queue space (on the H200 its median was 0.61 of
    # the timed eager median, calls 37-38), so it alone does not tell a task that times the host
    ("quick_host_ms", pa.float64()),
    # a quick run over 1.5x the window's bound is checked by one run holding the GPU alone: its ms
    ("eager_alone_ms", pa.float64()),
    ("compile_ok", pa.bool_()),
    ("compile_error", pa.string()),
    ("compile_cache_repaired", pa.bool_()),  # compiled once broken inductor cache binaries were out of the way
    ("graph_breaks", pa.int32()),
    ("compile_ms", pa.float64()),
    ("compile_iqr_ms", pa.float64()),
    ("compile_runs", pa.int32()),
    ("timing_alloc_retries", pa.int32()),
    # "" or why the worker did not time the task: the filter's verdict from the checks decided before timing
    # (profile.skip_timing_when_rejected); eager_ms and compile_ms are then null
    ("timing_skipped", pa.string()),
    ("compile_max_abs_err", pa.float64()),
    ("compile_max_rel_err", pa.float64()),
    ("compile_agrees_1e4", pa.bool_()),
    ("compile_agrees_1e2", pa.bool_()),
    ("deterministic", pa.bool_()),
    ("determinism_max_diff", pa.float64()),
    # measures.tensor_checks.checksum of draw 0's eager and compiled outputs: which side of a compile check moved
    # between two runs of the same task (benchmarks/pipeline_yield.py --repeat)
    ("eager_checksum", pa.float64()),
    ("compile_checksum", pa.float64()),
    # the same of the compiled graph's warm-up run on draw 0 (profile.warm_in_drain): a compiled graph whose bits
    # change from run to run in one worker differs from compile_checksum
    ("compile_rerun_checksum", pa.float64()),
    # pipeline.gpu.compiled_code: hashes of the output code inductor generated for the task (comma-joined, one per graph)
    # and how many benchmarks it timed while compiling and in the graph's first run (autotuning, pad_mm)
    ("compile_code", pa.string()),
    ("compile_benchmarks", pa.int32()),
    ("input_min_pairwise_diff", pa.float64()),
    # max over draws k >= 1 of max |out_k - out_0| / (tol + tol * |out_k|) at the verifier's tolerance:
    # < 1 means draw 0's output, returned for every input, passes the verifier on every draw
    ("input_sensitivity_ratio", pa.float64()),
    ("degenerate", pa.string()),    # "" or constant | zero | tiny | nonfinite | saturated
    ("output_numel", pa.int64()),
    ("peak_memory_bytes", pa.int64()),
    ("achieved_tflops", pa.float64()),
    ("achieved_tbps", pa.float64()),
    ("roofline_fraction", pa.float64()),  # roofline time / eager time: 1.0 means no headroom left
    ("aten_ops", STR_LIST),
    ("gpu_busy_s", pa.float64()),         # time this task held the device lock
    ("wall_s", pa.float64()),
    ("started_at", pa.float64()),  # when the worker took the task (Unix seconds): lines a run up with nvidia-smi
    # "" or why the first attempt was run again with the worker's whole cap: its reservation and its outcome
    # (an OOM, or the allocator retrying inside timed runs)
    ("reservation_retry", pa.string()),
    # where a worker's wall time went (GPU runs; not published): the worker's own CPU seconds, waits for the
    # device lock (of which waiting to time alone) and for the memory budget (of which growing back after
    # compiling), and the time it held the GPU alone for timed runs
    ("cpu_s", pa.float64()),
    ("lock_wait_s", pa.float64()),
    ("lock_wait_exclusive_s", pa.float64()),
    ("lock_gather_s", pa.float64()),
    ("budget_wait_s", pa.float64()),
    ("regrow_wait_s", pa.float64()),
    ("gpu_exclusive_s", pa.float64()),
    # of gpu_busy_s: the eager checks (setup, draws) and the first compiled run (Triton's autotuning of new
    # kernels happens there, and inductor's pad_mm benchmarks while it compiles); compile_wall_s: inductor
    # compiling (CPU work, without the lock but for those benchmarks)
    ("gpu_busy_eager_s", pa.float64()),
    ("gpu_busy_compile_s", pa.float64()),
    ("compile_wall_s", pa.float64()),
    # measures/shortcuts.py at the verifier's tolerance (profile.shortcut_checks): which kinds ran ("" none), and
    # per kind what it found before stopping at its first finding
    ("shortcut_checks", pa.string()),       # dead,skip,fragile: the kinds measured
    ("dead_inputs", STR_LIST),              # tensor inputs whose redraw alone leaves the output within tolerance
    ("inputs_that_matter", STR_LIST),       # tensor inputs whose redraw alone moves the output beyond tolerance
    ("min_input_redraw_ratio", pa.float64()),  # smallest such move as the verifier's ratio (< 1: within tolerance)
    ("skippable_ops", STR_LIST),            # operator calls (index:name) replaceable by a constant or skipped
    ("skippable_by", STR_LIST),             # per skippable operator: mean (a constant) | skipped (its input)
    ("ops_that_matter", STR_LIST),          # operator calls whose replacement moves the output beyond tolerance
    ("min_op_ratio", pa.float64()),         # smallest move of an operator's replacement as the verifier's ratio
    ("input_ratios", pa.string()),          # JSON {input: ratio of its redraw alone} for every input measured
    ("op_ratios", pa.string()),             # JSON {index:operator: ratio of its best replacement} for every one
    ("shortcut_screened", STR_LIST),        # inputs and operators taken from the pre-screen, not measured again
                                            # (profile.shortcut_screen_margin; null when off)
    ("fragile", pa.string()),               # "" or the honest rounding change that moves the output: one-ulp input
                                            # move (N-ulp with profile.shortcut_ulp_steps N) | float64 reference
    ("fragile_ulp_ratio", pa.float64()),    # largest move over the draws with every floating input moved
    ("fragile_ulp_steps", pa.int64()),      # the ulp check's input move in ulps (profile.shortcut_ulp_steps)
    ("fragile_f64_ratio", pa.float64()),    # largest distance of the float32 output from the float64 reference
    ("fragile_f64_error", pa.string()),     # why the float64 reference could not be computed (its ratio then null):
                                            # the forward's error, one line
    ("fragile_weights", pa.string()),       # fresh: each draw built the model with its own seeded weights (as verify
                                            # does) | one: one model for every draw | null: the check did not run
    ("gpu_busy_shortcut_s", pa.float64()),  # of gpu_busy_s: the shortcut checks
    ("gpu_busy_dead_s", pa.float64()),      # of gpu_busy_shortcut_s: the dead-input check
    ("gpu_busy_skip_s", pa.float64()),      # of gpu_busy_shortcut_s: the skippable-operator check
    ("gpu_busy_fragile_s", pa.float64()),   # of gpu_busy_shortcut_s: the fragility check
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
    ("kb_shared_computation", pa.bool_()),   # the task shares kb_ast_nearest's computation (the AST detector needs it)
    ("kb_op_signature_match", pa.bool_()),   # the traced program equals a problem's at some normalization, in order
    ("kb_op_signature_nearest", pa.string()),
    ("kb_op_normalization", pa.string()),    # exact | core | core + <op> | core - <op> (detectors/contamination.py)
    ("kb_op_multiset_match", pa.bool_()),    # same ops, any order (recorded, not a detector on its own)
    ("op_signature_source", pa.string()),    # aten_ops column | traced | text-only: why
    ("kb_minhash_jaccard", pa.float64()),
    ("kb_minhash_nearest", pa.string()),
    ("detectors_fired", STR_LIST),
    ("reference", pa.string()),
])

DEDUPE = pa.schema([
    ("task_id", pa.string()),
    ("exact_cluster", pa.string()),          # first task_id of the same normalized code (null: unique)
    ("structural_cluster", pa.string()),     # first task_id of the same graph hash at equal shapes
    ("near_cluster", pa.string()),           # the near cluster's representative (the task kept for it)
    ("keep", pa.bool_()),
    ("reason", pa.string()),
    ("canonical_graph", pa.string()),        # graph hash up to sizes and literal values (ops and wiring only)
    ("near_evidence", pa.string()),          # dropped near duplicates: why they match the representative
    ("near_code_jaccard", pa.float64()),     # de-templated code Jaccard to the representative
    ("representative_reason", pa.string()),  # representatives: why this task was kept for its cluster
])

# Label findings of an audited dataset (pipeline/stages/labels.py): each kind apart, from a trace on the CPU side
LABELS = pa.schema([
    ("task_id", pa.string()),
    ("trace_device", pa.string()),  # meta | cpu (meta failed: data-dependent code) | "" (not traced)
    ("trace_error", pa.string()),   # why no trace: refused by the import check, failed on meta and cpu, out of memory
    ("finding", pa.string()),       # wrong label | missing label | cannot judge | labels true | not traced
    ("wrong_labels", STR_LIST),     # labelled operators whose ATen ops never ran
    ("missing_labels", STR_LIST),   # ATen ops that ran and no label explains (glue and arithmetic excluded)
    ("unknown_labels", STR_LIST),   # labelled operators opsynth holds no pins for: cannot judge
    ("unjudged_ops", STR_LIST),     # unexplained ATen ops an unknown label may explain
])

# The sampler's CPU pre-screen (operators/prescreen.py), one row per screened draw, written with the tasks shard
# of the index it was drawn for; not published. With sample.prescreen = "resample" the flagged draws are not in
# tasks/ (resampled: true); with "record" every task has its row, so the GPU's verdict can be compared.
PRESCREEN = pa.schema([
    ("task_id", pa.string()),
    ("name", pa.string()),
    ("code", pa.string()),
    ("graph", pa.string()),
    ("seed", pa.int64()),
    ("reason", pa.string()),        # the filter's reason it predicts ("" keeps the task)
    ("status", pa.string()),        # ok | over budget | error: ... (no verdict unless ok)
    ("resampled", pa.bool_()),      # the sampler drew another task in its place
    ("shapes", pa.string()),        # JSON {constant: value} the CPU ran
    ("scaled", pa.bool_()),         # smaller than the task's real constants
    ("predicted_ms", pa.float64()),  # CPU time the budget check predicted at those shapes
    ("cpu_ms", pa.float64()),       # CPU time the screen took (meta planning included)
    ("input_min_pairwise_diff", pa.float64()),
    ("input_sensitivity_ratio", pa.float64()),
    ("degenerate", pa.string()),
    ("output_numel", pa.int64()),
    # the same shortcut measurements at the screened shapes (sample.prescreen_shortcuts)
    ("shortcut_checks", pa.string()),
    ("dead_inputs", STR_LIST),
    ("skippable_ops", STR_LIST),
    ("min_input_redraw_ratio", pa.float64()),
    ("min_op_ratio", pa.float64()),
    ("input_ratios", pa.string()),
    ("op_ratios", pa.string()),
    ("fragile", pa.string()),
    ("prescreen_ulp_steps", pa.int64()),  # the fragility check's input move in ulps (sample.prescreen_ulp_scale)
    # a scaled move's flag measured again with the real move (profile.shortcut_ulp_steps): its ratio (null: not
    # measured again); a response in proportion to the move is a smooth output's, and that move's verdict stands
    ("prescreen_real_move_ratio", pa.float64()),
])

# `opsynth profile --shortcuts-only` over a run already measured: the shortcut columns of MEASUREMENTS, one row per
# task, written beside measurements/ (sharded the same way) and joined to it by task_id in the filter stage
SHORTCUT_COLUMNS = ("shortcut_checks", "dead_inputs", "inputs_that_matter", "min_input_redraw_ratio", "skippable_ops",
                    "skippable_by", "ops_that_matter", "min_op_ratio", "input_ratios", "op_ratios", "shortcut_screened", "fragile", "fragile_ulp_ratio",
                    "fragile_ulp_steps", "fragile_f64_ratio", "fragile_f64_error", "fragile_weights", "gpu_busy_shortcut_s", "gpu_busy_dead_s", "gpu_busy_skip_s",
                    "gpu_busy_fragile_s")
# the shortcuts-only call's own seconds per task, from the worker's measurement of it (column -> that measurement's
# key): where the call's throughput goes. They stay in shortcuts/: measurements/ keeps its own call's seconds
SHORTCUT_CALL_COLUMNS = {"call_wall_s": "wall_s", "call_cpu_s": "cpu_s", "call_gpu_busy_s": "gpu_busy_s",
                         "call_lock_wait_s": "lock_wait_s", "call_budget_wait_s": "budget_wait_s",
                         "call_gpu_setup_s": "gpu_busy_setup_s", "call_reserved_gib": "reserved_gib"}
SHORTCUTS = pa.schema([MEASUREMENTS.field("task_id"), MEASUREMENTS.field("status"), MEASUREMENTS.field("error"),
                       *(MEASUREMENTS.field(c) for c in SHORTCUT_COLUMNS),
                       *(pa.field(c, pa.float64()) for c in SHORTCUT_CALL_COLUMNS),
                       # when the worker took the task: the publish's shortcut_call (a shard written before this
                       # column is dated by its completion marker)
                       MEASUREMENTS.field("started_at")])

BY_TABLE = {"tasks": TASKS, "measurements": MEASUREMENTS, "verdicts": VERDICTS, "shortcuts": SHORTCUTS,
            "contamination": CONTAMINATION, "dedupe": DEDUPE, "prescreen": PRESCREEN, "labels": LABELS}


def conform(rows: list[dict], schema: pa.Schema) -> list[dict]:
    """Fill missing columns with None so partial records fit the schema."""
    return [{name: r.get(name) for name in schema.names} for r in rows]

# The published dataset (pipeline/outputs/publish.py writes it, pipeline/outputs/card.py documents it): column -> (type, doc)

# a chat prompt: the messages format of TRL's and verl's `prompt` column
CHAT = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))

# column -> (arrow type, description); order is the published column order
COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "ops": (pa.string(), "operator names as a JSON list string, exactly as in CUDA-Agent-Ops-6K"),
    "data_source": (pa.string(), "`torch#k`: k fused torch operators (Ops-6K convention)"),
    "code": (pa.string(), "the KernelBench-format module (Model, get_inputs, get_init_inputs)"),
    "prompt": (CHAT, "the task as chat messages (role, content) that TRL and verl read: the code, the rules the "
               "reward enforces (policy, hacks, tolerance) and the answer format (opsynth/prompt.py; its version "
               "is the manifest's `prompt.version`)"),
    "task_id": (pa.string(), "content id: sha256 of the canonical graph and sizes (16 hex chars)"),
    "name": (pa.string(), "KernelBench-style name, e.g. Conv2d_GroupNorm_GELU"),
    "ops_list": (STR_LIST, "`ops` as a list"),
    "num_ops": (pa.int32(), "number of operators in the graph"),
    "categories": (STR_LIST, "catalog categories of the operators"),
    "is_dag": (pa.bool_(), "true for graphs with branches, residuals or several inputs"),
    "graph": (pa.string(), "the operator graph, JSON node-link"),
    "graph_hash": (pa.string(), "canonical graph hash at these sizes (structural dedupe key)"),
    "aten_ops": (STR_LIST, "ATen ops that actually ran in forward, in order"),
    "eager_ms": (pa.float64(), "median eager runtime, ms"),
    "eager_iqr_ms": (pa.float64(), "interquartile range of the eager runtime, ms"),
    "compile_ms": (pa.float64(), "median torch.compile runtime, ms"),
    "compile_speedup": (pa.float64(), "eager_ms / compile_ms (> 1: compile is faster)"),
    "compile_ok": (pa.bool_(), "torch.compile ran"),
    "compile_agrees_1e4": (pa.bool_(), "compile output matches eager at atol=rtol=1e-4"),
    "compile_agrees_1e2": (pa.bool_(), "compile output matches eager at atol=rtol=1e-2 (Ops-6K verifier)"),
    "deterministic": (pa.bool_(), "two runs on the same input agree"),
    "input_sensitivity_ratio": (pa.float64(), "how far outputs for different inputs stand apart at the verifier's "
                                "tolerance (max |out_k - out_0| / (tol + tol*|out_k|)); < 1: one fixed output passes"),
    "inputs_that_matter": (STR_LIST, "tensor inputs whose redraw alone moves the output beyond the verifier's "
                           "tolerance at the real sizes (null: the shortcut checks did not run on the row)"),
    "ops_that_matter": (STR_LIST, "operator calls (index:name) whose output replaced by a constant or skipped moves "
                        "the output beyond the tolerance (null: not measured)"),
    "fragile_ulp_ratio": (pa.float64(), "largest verifier ratio of the output under a move of every floating input "
                          "by fragile_ulp_steps ulps (each element up or down at random), over the check's draws (< 1 passes: the headroom an honest "
                          "rounding has)"),
    "fragile_ulp_steps": (pa.int64(), "the ulps every floating input moved in the fragility check (null: not "
                          "measured)"),
    "fragile_f64_ratio": (pa.float64(), "largest verifier ratio of the float32 output against a float64 reference, "
                          "over the check's draws (< 1 passes)"),
    "fragile_weights": (pa.string(), "how the fragility check drew the weights: fresh (each draw builds the model "
                        "with its own seeded weights, as `opsynth verify` does), one (one model for every draw), "
                        "null (not measured)"),
    "flops": (pa.int64(), "floating-point operations of one forward, every operator family counted (cost model; "
              "how: the card's FLOPs section)"),
    "bytes_moved": (pa.int64(), "bytes read and written by one forward (cost model)"),
    "arithmetic_intensity": (pa.float64(), "flops / bytes_moved"),
    "peak_memory_bytes": (pa.int64(), "peak memory measured during forward"),
    "achieved_tflops": (pa.float64(), "flops / eager time, TFLOP/s"),
    "achieved_tbps": (pa.float64(), "bytes_moved / eager time, TB/s"),
    "roofline_fraction": (pa.float64(), "roofline time / eager time on this device (1.0: no headroom left)"),
    "gpu": (pa.string(), "device the runtimes were measured on"),
    "torch_version": (pa.string(), "torch version of the measurement"),
    "tf32": (pa.bool_(), "TF32 matmuls/convolutions were enabled while timing"),
    "kb_nearest": (pa.string(), "nearest KernelBench problem (level/name)"),
    "kb_ast_similarity": (pa.float64(), "AST similarity to the nearest KernelBench problem (Ops-6K dropped > 0.9)"),
    "kb_shared_computation": (pa.bool_(), "the task shares the AST-nearest problem's computation (core ATen ops "
                              "overlap); AST similarity drops a task only with this true; null where not recorded"),
    "kb_op_signature_match": (pa.bool_(), "same traced operator sequence as a KernelBench problem"),
    "kb_minhash_jaccard": (pa.float64(), "MinHash Jaccard estimate to the nearest KernelBench problem"),
    "shape_variants": (pa.string(), "JSON list of alternative sizes {CONSTANT: value} the task also runs on"),
    "composer": (pa.string(), "template (deterministic renderer) or llm"),
    "seed": (pa.int64(), "sampling seed of this task"),
    "opsynth_version": (pa.string(), "opsynth version that built the row"),
    "profile_call": (pa.string(), "id of the profile call that measured the row (p00, p01...); its settings are "
                     "in the manifest's profile_calls"),
    "shortcut_call": (pa.string(), "id of the profile call that ran the row's shortcut checks: profile_call, or a "
                      "later shortcuts-only call (profile.shortcuts_only); null where they did not run"),
}
PUBLISHED = pa.schema([(name, t) for name, (t, _) in COLUMNS.items()])

REJECTIONS = pa.schema([("task_id", pa.string()), ("name", pa.string()), ("stage", pa.string()),
                        ("reason_kind", pa.string()), ("reason", pa.string())])
REJECTION_SUMMARY = pa.schema([("stage", pa.string()), ("reason_kind", pa.string()), ("count", pa.int64())])
PUBLISHED_CONTAMINATION = CONTAMINATION.append(pa.field("published", pa.bool_()))
