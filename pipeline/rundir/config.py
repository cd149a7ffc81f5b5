"""Run configuration: frozen dataclasses read from TOML presets, validated at load, saved beside outputs.

A preset (data/presets/NAME.toml) or a user file gives every section; fields it leaves out keep the
defaults below. The resolved config is written to DIR/config.toml so every row can be traced back.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pipeline.errors import OpsynthError

PRESET_DIR = Path(__file__).resolve().parents[2] / "data" / "presets"


class ConfigError(OpsynthError):
    """A config or preset that cannot be used as written."""


@dataclass(frozen=True)
class RunSection:
    seed: int = 0
    n: int = 64  # tasks to sample
    device: str = "cpu"  # cpu | cuda
    workers: int = 2  # profile worker processes (per GPU on cuda)
    shard_size: int = 16  # tasks per shard: the unit of resumption


@dataclass(frozen=True)
class SampleSection:
    min_ops: int = 1
    max_ops: int = 6
    # weight of each operator count 1..max_ops; default puts >= 40% on 3+ operators
    depth_weights: tuple[float, ...] = (0.15, 0.25, 0.25, 0.15, 0.1, 0.1)
    dag_share: float = 0.3  # share of tasks that are DAGs (branches, residuals, several inputs)
    categories: tuple[str, ...] = ()  # empty: every category
    category_weights: dict[str, float] = field(default_factory=dict)  # missing: 1.0 (uniform)
    composer: str = "template"  # template | llm
    # reference indexes (`builtin`, `builtin:NAME`, an index parquet) whose problems' ATen op signatures a task
    # must not have: a draw that equals one is resampled, since decontaminate would drop it; [] turns it off
    avoid_reference: tuple[str, ...] = ("builtin",)
    # resample a draw whose operator graph, up to sizes and literal values, the run already holds: dedupe would
    # drop it as a near duplicate after the GPU measured it. Without it, about 5% of an h200 run's tasks are such draws
    avoid_near_duplicates: bool = False
    # sizing: target eager runtime window (log-uniform) on the target device
    target_min_ms: float = 1.5
    target_max_ms: float = 50.0
    max_peak_memory_gb: float = 8.0
    # share of max_peak_memory_gb a task's predicted peak may use: eager kernels hold buffers the meta
    # model does not see (cuDNN/cuBLAS workspaces, temporaries inside composite kernels). Tasks sized
    # right at the cap measure over it on the H200 (about one in five is early-rejected at a share of 1)
    peak_headroom: float = 0.75
    target_gpu: str = "H200"
    bandwidth_gbps: float = 4300.0  # measured copy bandwidth, GB/s
    tflops_fp32: float = 60.0  # fp32 without TF32
    tflops_bf16: float = 790.0
    launch_overhead_us: float = 5.0
    # CPU pre-screen of each draw's outputs (operators/prescreen.py) before any GPU time: "resample" redraws a
    # task it predicts input-insensitive, degenerate or fakeable; "record" keeps it and records the verdict
    # (DIR/prescreen/, to measure it against the GPU's); "off". Budget per task: predicted CPU ms for all
    # input draws (on one core) and peak MB; a task no scaled-down size fits gets no verdict.
    prescreen: str = "off"
    prescreen_ms: float = 100.0
    prescreen_mb: float = 256.0
    # a draw no size fits within prescreen_ms is screened again within this budget (0 or <= prescreen_ms: not);
    # only those draws pay it, where a larger prescreen_ms would grow every draw's screen towards it
    prescreen_retry_ms: float = 0.0
    # also run draw 0 in float64 and flag a task whose float32 output disagrees with it at the verifier's
    # tolerance ("numerically fragile": a compiled kernel that reorders arithmetic likely disagrees too)
    prescreen_fp64: bool = False
    # measures/shortcuts.py at the screened shapes: off | record (prescreen columns) | drop (a draw with a dead input,
    # a skippable operator or a fragile output is resampled, like the other pre-screen verdicts)
    prescreen_shortcuts: str = "off"
    # the fragility check's input move at the screened shapes, in ulps: the real element count over the screened one
    # (at most 4096), so the screen meets as many values near a step as the real size does at one ulp
    prescreen_ulp_scale: bool = False
    # operators/value_scale.py: draw another task where the catalog's value model (operators/value_model.py: each
    # operator's output range and magnitude from its inputs', carried through the graph) says an input or operator
    # cannot move the output past the verifier's tolerance (1e-2) or a rounding would flip it: a fixed output, a
    # dead or swamped input, a norm of ~N(0, 1) values, a default-alpha local response norm, a shift or sign
    # nothing downstream reads, a step on continuous values in their bulk, a hard limit past its bound, a pole or
    # domain edge at an input's exact zeros, renorm/prod/softmax by their widths;
    # and give a first normalization [0, 1) inputs rather than ~N(0, 1). The draw is made again before the
    # pre-screen runs, at the cost of a meta-device pass
    value_scale_rule: bool = False


@dataclass(frozen=True)
class ProfileSection:
    timeout_s: float = 120.0  # per task, wall clock, in the worker
    # on cpu: the address space a worker may map over what it maps once started (torch and the harness imported);
    # on cuda: the GPU memory fraction
    memory_limit_gb: float = 16.0
    compile: bool = True
    compile_backend: str = "inductor"
    warmup: int = 3
    min_runs: int = 5
    max_runs: int = 100
    iqr_target: float = 0.02  # stop timing when IQR / median is below this
    # also stop once the median is known this closely (the notch half-width 1.57 * IQR / sqrt(runs), relative):
    # a task whose runs spread wider than iqr_target otherwise runs max_runs times; 0: the IQR rule alone
    median_precision: float = 0.0
    input_draws: int = 3  # different input draws for the sensitivity check
    # measures/shortcuts.py on the real sizes after the eager draws: which kinds (dead, skip, fragile; empty: off),
    # on how many draws the fragility check runs, and whether each kind stops at its first finding
    shortcut_checks: tuple[str, ...] = ()
    shortcut_draws: int = 5
    shortcut_stop_first: bool = True
    # the fragility check's draws 1.. each bring fresh weights (seeded as the verifier's draws), not the one model
    # of the other checks: the verifier builds its model again on every draw
    shortcut_fresh_weights: bool = True
    # the fragility check's input move, in ulps of each element (each up or down at random). One is the smallest
    # rounding change, but a correct kernel that reorders a reduction moves its values by several: release task
    # 79c6cdbad6aa9222 (le(softmax(x), w), whose honest inductor candidate fails the verifier's draw 2) passes a
    # one-ulp move and fails a 16-ulp one at its real size with the verifier's draws (docs/shortcuts.md)
    shortcut_ulp_steps: int = 16
    # of those draws, the first this many also recompute the reference in float64, the dearest forward of the checks.
    # What it finds is float32 accumulation far from the exact value, a trait of the computation more than of one
    # draw: on the 31 release rows whose float64 check failed on the GPU (one model, one-ulp move), draw 0's float64
    # reference with the 16-ulp move on every draw drops every row that float64 on all 5 draws drops (CPU, real
    # sizes; docs/shortcuts.md)
    shortcut_f64_draws: int = 1
    # the float64 forward runs the batch in this many slices where the task's rows are computed apart (the float32
    # forward of the first slice's rows gives the whole batch's first output rows): the float64 reference is the
    # same, in a fraction of the memory, and such a task reserves one forward's need instead of twice it. 1: the
    # whole batch at once
    shortcut_f64_chunks: int = 4
    # > 0: the dead and skip kinds measure on the GPU only the inputs and operators whose pre-screen ratio (at the
    # screened shapes, sample.prescreen_shortcuts) is under this margin; the rest are taken as mattering from the
    # screen (shortcut_screened lists them). A task the screen gave no ratios, or whose operators the GPU numbers
    # otherwise, is measured in full. 0: every part on the GPU
    shortcut_screen_margin: float = 0.0
    # cheap: the checks in a few forwards (measures/cheap_shortcuts.py): the fragility check on draw 0 with the move
    # shortcut_move_scale times shortcut_ulp_steps and float64 once (a task with a step operator that passes also
    # runs the exhaustive draws); the skip check at the batch cut by 16, measuring at the real size only the
    # operators whose ratio there is under shortcut_skip_margin; dead inputs as in exhaustive. exhaustive: every
    # draw, input and operator at the real size
    shortcut_mode: str = "cheap"
    shortcut_move_scale: int = 10  # cheap mode: the fragility check's move on draw 0, in multiples of the real one
    # cheap mode: an operator whose skip ratio at the reduced batch is at least this is taken as mattering
    shortcut_skip_margin: float = 10.0
    # run only the shortcut checks on a run already measured (`opsynth profile DIR --set profile.shortcuts_only=true`): rows go to
    # shortcuts/, beside the stored measurements, which the filter joins by task_id
    shortcuts_only: bool = False
    # a quick eager run this far under the window skips the rest (it is never faster than the task); on the slow
    # side one over 1.5x the window's bound is checked by a run holding the GPU alone, over 1.5x too to skip. The
    # quick run shares the GPU: it reads a median 4.3x the task's time alone
    early_reject_factor: float = 10.0
    max_timing_s: float = 10.0  # bound on the timed loop of one task
    # pay each worker's one-time compile cost (inductor and Triton imports, first kernels) at startup, before its
    # first task; false: in its first task's compile, which holds no lock, while the other workers use the GPU
    warm_worker: bool = True
    # start workers as forks of one process that imported torch, Dynamo, inductor and the harness once
    # (pipeline/gpu/fork_server.py): ready in the time a CUDA context takes instead of a fresh interpreter's imports;
    # false: each worker is a fresh `python -m pipeline.gpu.harness`
    fork_workers: bool = True
    # the fork server (and a worker) imports Dynamo and inductor before the first task; false: a worker imports and
    # configures them at its first compile (with warm_worker off), so workers fork after torch alone. On one H200
    # from a cold machine false readies workers at 5.8 s against 16.0 s, but 20 workers importing inductor at once
    # hold back their first compiles as long: the GPU idles 20.5 GPU-s of the first 30 s against 22.0
    preload_compile: bool = True
    # where the installed torch ships no bytecode, workers read it from a cache folder of their own, which the
    # fork server fills first on every core (pipeline/gpu/bytecode.py); false: as installed. On the H200 image every
    # import compiled torch, Dynamo and inductor from source, 13.7 s of the fork server's start
    bytecode_cache: bool = True
    # hand each shard's tasks out longest expected first (pipeline/gpu/task_order.py: per-operator wall seconds of this
    # command's results so far), so the last tasks in flight when the command ends are short ones; false: as sharded
    longest_first: bool = True
    # with longest_first, the last this many shards a command starts are ordered as one: the run's last ones, or the
    # last ones --limit lets start, or with --max-minutes the ones that start in the time left at the pace shards
    # have started so far. Ordered shard by shard, a command ends with one long compile of its last shard running
    # alone (on one H200 a 27 s tail, the GPU 27% busy over the last 30 s; with 4: a 2.5 s tail, 89% busy), and one
    # cut by --max-minutes does the same at its last shard. A kill then loses up to that many shards in flight.
    # 1 or 0: shard by shard to the end
    longest_first_last_shards: int = 4
    # a task the eager checks already reject (determinism, input sensitivity, degenerate output, with the
    # filter's thresholds) is not compiled: compilation is most of a task's CPU cost
    skip_compile_when_rejected: bool = True
    # a task the checks before timing already reject (the eager checks, or the compiled graph failing or disagreeing,
    # at the filter's thresholds) is not timed: its row says why (timing_skipped) and has no runtimes, so a looser
    # filter later rejects it as not timed; false: all are timed. Its timed runs would hold the GPU alone and each
    # phase of them wait for a drain, for a task the filter throws away anyway (on one H200 about 8% of the tasks
    # that run and of the time held alone; benchmarks/pipeline_yield.py, rejected_before_timing; the h200 preset
    # turns it on)
    skip_timing_when_rejected: bool = False
    # a GPU task gives back the memory share it does not use while inductor compiles (CPU work) and queues for
    # it again before the compiled graph runs; off: it holds a whole forward's peak throughout
    shrink_while_compiling: bool = True
    # seconds a task waiting for GPU memory may be passed by later, smaller tasks that fit in the room left
    # (backfill; never a task growing back after compiling); 0: first come, first served
    backfill_s: float = 2.0
    # a timed run waiting for the GPU lock gets in between inductor's autotuning benchmarks of a compiled graph's
    # first run (the longest shared section); off: the first compiled run holds the shared lock throughout. Either
    # way every inductor benchmark runs under the lock (those it runs while compiling take it shared)
    yield_in_autotuning: bool = True
    # timed runs go in phases: while a worker waits to time, no new shared section starts until every worker
    # waiting to time has timed, so the drain of shared sections is paid once per phase, not once per task;
    # off: a shared section may start between two timed runs
    timing_phases: bool = True
    # seconds the first worker of a phase waits (shared work goes on) for others to come to time with it
    timing_gather_s: float = 0.0
    # with timing_phases: seconds a worker about to time may wait, the others' shared work going on, for the compiled
    # graphs' first runs in flight to end (no new one starts meanwhile) before it closes the gate; a first run is
    # mostly host work, and a drain behind one leaves the GPU idle. 0: the gate closes at once
    first_run_wait_s: float = 0.0
    # with timing_phases: a worker announces its timed runs from inside its last shared section and draws the timing
    # inputs and runs the warm-ups there, while the neighbours' sections drain (untimed work: it may overlap theirs);
    # the exclusive hold is then the timed runs alone. Off: the draw and one warm-up run per model inside it
    warm_in_drain: bool = False
    # inductor's benchmark of each autotuning config times at most this many ms (its default 25) after 10 L2-flush
    # warm-ups (its default 100); 0: inductor's own settings
    autotune_benchmark_ms: float = 0.0
    # inductor's triton.autotune_pointwise: each new pointwise kernel is compiled for two or more configs and they
    # are benchmarked in the compiled graph's first run (its default); false: its first config alone, one Triton
    # compile (CPU) and no benchmark (GPU) per pointwise kernel. Changes the compiled baseline only where the
    # configs differ: compare compile_ms on the same tasks (benchmarks/remeasure_copy.py) before turning it off
    autotune_pointwise: bool = True
    # a config of a new kernel whose first run in inductor's autotuning takes longer than this many ms is not
    # benchmarked further (that run's time is its result); 0: off. One config of a trapz over a transposed
    # 76x3x1030x1030 input held the GPU lock 84 s while every neighbour waited to time, a batch norm's 48 s
    autotune_config_cap_ms: float = 0.0
    # inductor makes some choices of a compiled graph by timing them on the GPU: which config of a reduction kernel
    # runs (autotuning) and whether a matmul's operands are padded (pad_mm). Timed beside neighbours' work, two runs
    # of the same task choose differently and compute other last bits: a comparison or rounding after them then flips
    # the compile verdict. False: nothing is timed: a reduction or scan runs the one config inductor's deterministic
    # mode keeps, any other kernel its first, and no operand is padded, so the program and its bits are the task's
    compile_timed_choices: bool = True
    # host cores kept for workers that hold the GPU: a worker runs on all of its cores while it holds the GPU lock
    # (launching kernels, timed runs) and on the others otherwise (compiling, building models), so a step that feeds
    # the GPU never waits behind a neighbour's compile for a core. Launch gaps inside timed runs are the tasks' own
    # (KernelBench counts them); a launch thread preempted by a compile makes them longer than on an idle host.
    # 0: every worker may run anywhere. Ignored (all cores) when the host has no more cores than this. On one H200
    # with 16 host cores and 20 workers, 2 kept cores move neither utilisation nor timings
    holder_cores: int = 0
    # on cuda, run the workers of a GPU as clients of a private MPS server (pipeline/gpu/mps.py): their untimed GPU work
    # runs side by side instead of in time slices; timed runs hold the GPU alone either way
    mps: bool = False
    # the memory a GPU task reserves (its hard allocator cap) over its peak: the sampler's prediction times
    # reserve_margin_predicted before the first forward, the measured peak beside the reference output times
    # reserve_margin_measured after it, plus reserve_slack_gb each. A task that outgrows its share runs again with
    # the worker's whole cap (a rerun, never a wrong result); larger margins let fewer tasks hold the GPU at once
    reserve_margin_predicted: float = 1.1
    reserve_margin_measured: float = 1.15
    reserve_slack_gb: float = 0.5
    # from the end of compiling on (the compiled graph's runs, its agreement check, the timed runs) the measured peak
    # beside the reference output times this instead; 0: reserve_margin_measured throughout. A compiled graph may
    # need more than the eager forward: of the release run's 707 tasks run again with the worker's cap, 495 ran
    # out while a graph ran, needing a median 1.21x (p90 1.40x) of that peak and output
    reserve_margin_compiled: float = 0.0
    # a task that outgrew its reservation runs again with this many times that reservation (at most the worker's
    # cap), and only if that is not enough either, with the worker's whole cap; 0: with the whole cap at once. Whole-cap
    # retries (26 GiB in the h200 preset) hold 11-13% of one H200's budget on average, while some worker waits for
    # memory over half the time; the need at a failure is almost never over 2x the outgrown share (p99 1.89x). At 2
    # on one H200, whole-cap attempts fall about tenfold (to ~4 per 1,000 tasks) and worker-seconds waiting for
    # memory by about 40%; the h200 preset sets 2
    retry_reserve_factor: float = 0.0


@dataclass(frozen=True)
class FilterSection:
    min_eager_ms: float = 1.0
    max_eager_ms: float = 100.0
    require_compile: bool = True
    compile_tolerance: float = 1e-2  # Ops-6K verifier; 1e-4 is recorded too
    require_deterministic: bool = True
    determinism_tolerance: float = 0.0  # 0: bitwise
    min_input_sensitivity: float = 1e-4
    # draws must stand this far apart at compile_tolerance (1: the verifier tells them apart; below, one fixed
    # output, whatever the inputs, passes it on every draw)
    min_input_sensitivity_ratio: float = 1.0
    # filters/shortcut_checks.py: drop tasks with a dead input, a skippable operator, a fragile output (measured
    # by profile.shortcut_checks; measurements without those columns keep)
    reject_shortcuts: bool = True
    reject_degenerate: bool = True
    max_peak_memory_gb: float = 8.0
    require_label_match: bool = True
    # drop a task whose timed runs saw allocator retries (timing_alloc_retries > 0): its runtimes are inflated
    require_undisturbed_timing: bool = True


@dataclass(frozen=True)
class DecontaminateSection:
    reference: tuple[str, ...] = ("builtin",)  # builtin | PATH | HUB_ID
    ast_threshold: float = 0.9
    minhash_threshold: float = 0.7
    op_signature: bool = True
    # a task that carries a reference problem's numbered name verbatim (an imported benchmark problem) is
    # contaminated whatever its code: KernelBench v0 and main share names for problems main later rewrote
    name_match: bool = True


@dataclass(frozen=True)
class DedupeSection:
    # read by no stage: configs that set it load, and benchmarks/dedupe_bench.py compares the near-duplicate rule
    # with a MinHash rule over the rendered code at this threshold. Such a rule drops distinct tasks that share only
    # the template, which is why dedupe compares operator graphs instead
    minhash_threshold: float = 0.7
    structural: bool = True
    # near duplicates with the same operators but another graph need this de-templated code Jaccard
    # (detectors/dedupe.py says why 0.9)
    near_code_jaccard: float = 0.9


@dataclass(frozen=True)
class PublishSection:
    name: str = "opsynth-ops"
    license: str = "cc-by-4.0"
    shard_rows: int = 5000
    # share of operator multisets held out as a `validation` split (pipeline/outputs/provenance.py); 0: train only
    validation_share: float = 0.0
    # the policy tier the `prompt` column's rules state (opsynth/prompt.py): strict or allow-torch. Pass the same to
    # the reward adapters (opsynth.rl); the manifest's `prompt` records it with the template's version
    prompt_policy: str = "strict"
    # a str.format template replacing the built-in system message of the `prompt` column ("": the built-in one). Its
    # placeholders are opsynth/prompt.py's FIELDS ({code}, {policy_rules}, {hacks}, ...); a custom template is
    # versioned `custom-HASH` in the manifest and card
    prompt_system: str = ""
    # a str.format template replacing the built-in user message ("": the built-in one, with the code, the rules and
    # the answer format); the prompt must hold {code} in one of the two messages
    prompt_user: str = ""


@dataclass(frozen=True)
class Config:
    name: str = "custom"
    run: RunSection = field(default_factory=RunSection)
    sample: SampleSection = field(default_factory=SampleSection)
    profile: ProfileSection = field(default_factory=ProfileSection)
    filter: FilterSection = field(default_factory=FilterSection)
    decontaminate: DecontaminateSection = field(default_factory=DecontaminateSection)
    dedupe: DedupeSection = field(default_factory=DedupeSection)
    publish: PublishSection = field(default_factory=PublishSection)

    def with_overrides(self, **run_fields: Any) -> Config:
        """Return a copy with `run` fields replaced (CLI flags); None values are ignored."""
        given = {k: v for k, v in run_fields.items() if v is not None}
        return replace(self, run=replace(self.run, **given)) if given else self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_toml(self) -> str:
        return _to_toml(self.to_dict())


def _check(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"config error in {where}: {msg}")


def validate(cfg: Config, where: str) -> Config:
    """Reject impossible settings at load, naming the field and the fix."""
    s, r, f = cfg.sample, cfg.run, cfg.filter
    _check(r.n >= 1, where, f"run.n must be >= 1 (got {r.n})")
    _check(r.device in ("cpu", "cuda"), where, f"run.device must be 'cpu' or 'cuda' (got {r.device!r})")
    _check(r.workers >= 1, where, f"run.workers must be >= 1 (got {r.workers})")
    _check(r.shard_size >= 1, where, f"run.shard_size must be >= 1 (got {r.shard_size})")
    _check(1 <= s.min_ops <= s.max_ops <= 6, where,
           f"sample.min_ops/max_ops must satisfy 1 <= min <= max <= 6 (got {s.min_ops}..{s.max_ops})")
    _check(len(s.depth_weights) >= s.max_ops, where,
           f"sample.depth_weights needs one weight per operator count up to max_ops={s.max_ops} "
           f"(got {len(s.depth_weights)})")
    allowed = s.depth_weights[s.min_ops - 1 : s.max_ops]
    _check(all(w >= 0 for w in s.depth_weights) and sum(allowed) > 0, where,
           f"sample.depth_weights must be >= 0 with some weight between min_ops and max_ops (got {s.depth_weights})")
    _check(0.0 <= s.dag_share <= 1.0, where, f"sample.dag_share must be in [0, 1] (got {s.dag_share})")
    _check(0 < s.target_min_ms < s.target_max_ms, where, "sample.target_min_ms must be > 0 and < target_max_ms")
    _check(0 < s.peak_headroom <= 1, where, f"sample.peak_headroom must be in (0, 1] (got {s.peak_headroom})")
    _check(all(isinstance(r, str) and r for r in s.avoid_reference), where,
           f"sample.avoid_reference must list reference index specs (builtin, builtin:NAME, PATH; got {s.avoid_reference!r})")
    _check(s.prescreen in ("off", "record", "resample"), where,
           f"sample.prescreen must be 'off', 'record' or 'resample' (got {s.prescreen!r})")
    _check(s.prescreen_shortcuts in ("off", "record", "drop"), where,
           f"sample.prescreen_shortcuts must be off, record or drop (got {s.prescreen_shortcuts!r})")
    _check(s.prescreen_ms > 0 and s.prescreen_mb > 0, where, "sample.prescreen_ms and prescreen_mb must be > 0")
    _check(s.prescreen_retry_ms >= 0, where, "sample.prescreen_retry_ms must be >= 0 (0: no second screen)")
    _check(s.composer in ("template", "llm"), where, f"sample.composer must be 'template' or 'llm' (got {s.composer!r})")
    validate_filter(f, where)
    validate_profile(cfg.profile, where)
    for key in ("ast_threshold", "minhash_threshold"):
        v = getattr(cfg.decontaminate, key)
        _check(0 < v <= 1, where, f"decontaminate.{key} must be in (0, 1] (got {v})")
    _check(0 < cfg.dedupe.near_code_jaccard <= 1, where,
           f"dedupe.near_code_jaccard must be in (0, 1] (got {cfg.dedupe.near_code_jaccard})")
    _check(len(cfg.decontaminate.reference) >= 1, where, "decontaminate.reference needs at least one entry")
    validate_publish(cfg.publish, where)
    if s.categories:
        from operators.catalog import CATEGORIES  # lazy: the catalog imports torch

        unknown = sorted(set(s.categories) - set(CATEGORIES))
        _check(not unknown, where, f"sample.categories has unknown {unknown}; known: {sorted(CATEGORIES)}")
    if s.categories or s.category_weights:  # operators owns this check: weights, empty pools, terminal-only pools
        from operators.catalog import sample_config_problem

        problem = sample_config_problem(tuple(s.categories), dict(s.category_weights), s.min_ops)
        _check(problem is None, where, problem or "")
    return cfg


def validate_profile(p: ProfileSection, where: str) -> ProfileSection:
    """The profile section's ranges: checked at config load and again where a worker rebuilds its settings."""
    _check(p.timeout_s > 0, where, f"profile.timeout_s must be > 0 (got {p.timeout_s})")
    _check(p.memory_limit_gb >= 0, where, f"profile.memory_limit_gb must be >= 0, 0 for no cap (got {p.memory_limit_gb})")
    _check(bool(p.compile_backend), where, "profile.compile_backend must name a torch.compile backend (inductor)")
    _check(p.warmup >= 0, where, f"profile.warmup must be >= 0 (got {p.warmup})")
    _check(p.min_runs >= 3, where, f"profile.min_runs must be >= 3 (a median needs a spread; got {p.min_runs})")
    _check(p.max_runs >= p.min_runs, where, f"profile.max_runs must be >= min_runs (got {p.max_runs} < {p.min_runs})")
    _check(p.iqr_target > 0, where, f"profile.iqr_target must be > 0 (got {p.iqr_target})")
    _check(p.input_draws >= 2, where, f"profile.input_draws must be >= 2 (got {p.input_draws})")
    _check(set(p.shortcut_checks) <= {"dead", "skip", "fragile"}, where,
           f"profile.shortcut_checks holds dead, skip, fragile only (got {list(p.shortcut_checks)})")
    _check(p.shortcut_draws >= 1, where, f"profile.shortcut_draws must be >= 1 (got {p.shortcut_draws})")
    _check(p.shortcut_f64_draws >= 1, where, f"profile.shortcut_f64_draws must be >= 1 (got {p.shortcut_f64_draws})")
    _check(p.shortcut_f64_chunks >= 1, where,
           f"profile.shortcut_f64_chunks must be >= 1, 1 for the whole batch at once (got {p.shortcut_f64_chunks})")
    _check(p.shortcut_ulp_steps >= 1, where, f"profile.shortcut_ulp_steps must be >= 1 (got {p.shortcut_ulp_steps})")
    _check(p.shortcut_mode in ("cheap", "exhaustive"), where,
           f"profile.shortcut_mode must be cheap or exhaustive (got {p.shortcut_mode!r})")
    _check(p.shortcut_move_scale >= 1, where, f"profile.shortcut_move_scale must be >= 1 (got {p.shortcut_move_scale})")
    _check(p.shortcut_skip_margin >= 1, where,
           f"profile.shortcut_skip_margin must be >= 1, a ratio past the tolerance (got {p.shortcut_skip_margin})")
    _check(p.shortcut_screen_margin == 0 or p.shortcut_screen_margin >= 1, where,
           f"profile.shortcut_screen_margin must be 0 (off) or >= 1, a ratio past the tolerance "
           f"(got {p.shortcut_screen_margin})")
    _check(p.early_reject_factor >= 1, where, f"profile.early_reject_factor must be >= 1 (got {p.early_reject_factor})")
    _check(p.max_timing_s > 0, where, f"profile.max_timing_s must be > 0 (got {p.max_timing_s})")
    _check(p.backfill_s >= 0, where, f"profile.backfill_s must be >= 0, 0 for first come, first served (got {p.backfill_s})")
    _check(p.autotune_config_cap_ms >= 0, where,
           f"profile.autotune_config_cap_ms must be >= 0, 0 for no cap (got {p.autotune_config_cap_ms})")
    _check(p.median_precision >= 0, where, f"profile.median_precision must be >= 0, 0 for the IQR rule alone (got {p.median_precision})")
    _check(p.autotune_benchmark_ms >= 0, where,
           f"profile.autotune_benchmark_ms must be >= 0, 0 for inductor's own (got {p.autotune_benchmark_ms})")
    for name in ("reserve_margin_predicted", "reserve_margin_measured"):
        _check(getattr(p, name) >= 1, where, f"profile.{name} must be >= 1, a reservation under the peak OOMs "
               f"(got {getattr(p, name)})")
    _check(p.reserve_slack_gb >= 0, where, f"profile.reserve_slack_gb must be >= 0 (got {p.reserve_slack_gb})")
    _check(p.reserve_margin_compiled == 0 or p.reserve_margin_compiled >= 1, where,
           f"profile.reserve_margin_compiled must be 0 (off) or >= 1 (got {p.reserve_margin_compiled})")
    _check(p.timing_gather_s >= 0, where, f"profile.timing_gather_s must be >= 0 seconds (got {p.timing_gather_s})")
    _check(p.retry_reserve_factor == 0 or p.retry_reserve_factor > 1, where,
           f"profile.retry_reserve_factor must be 0 (the whole cap) or > 1 (got {p.retry_reserve_factor})")
    _check(p.longest_first_last_shards >= 0, where,
           f"profile.longest_first_last_shards must be >= 0, 0 for shard by shard (got {p.longest_first_last_shards})")
    _check(p.holder_cores >= 0, where, f"profile.holder_cores must be >= 0, 0 for none kept (got {p.holder_cores})")
    _check(p.first_run_wait_s >= 0, where,
           f"profile.first_run_wait_s must be >= 0 seconds (got {p.first_run_wait_s}; 0: no wait)")
    return p


def validate_filter(f: FilterSection, where: str) -> FilterSection:
    """The filter section's ranges: checked at config load and again where a worker rebuilds its settings."""
    from filters.determinism import AGREEMENT_COLUMNS  # stdlib only: the worker may import it

    _check(0 <= f.min_eager_ms < f.max_eager_ms, where, "filter.min_eager_ms must be >= 0 and < max_eager_ms")
    # the worker records compile agreement at these tolerances only; any other value would be measured at one
    # tolerance and judged at another
    _check(f.compile_tolerance in AGREEMENT_COLUMNS, where,
           f"filter.compile_tolerance must be one of {sorted(AGREEMENT_COLUMNS)}, the tolerances profile records "
           f"compile agreement at (got {f.compile_tolerance:g})")
    _check(f.determinism_tolerance >= 0, where, f"filter.determinism_tolerance must be >= 0 (got {f.determinism_tolerance})")
    _check(f.min_input_sensitivity >= 0, where, f"filter.min_input_sensitivity must be >= 0 (got {f.min_input_sensitivity})")
    _check(f.min_input_sensitivity_ratio >= 0, where,
           f"filter.min_input_sensitivity_ratio must be >= 0 (got {f.min_input_sensitivity_ratio})")
    _check(f.max_peak_memory_gb > 0, where, f"filter.max_peak_memory_gb must be > 0 (got {f.max_peak_memory_gb})")
    return f


def validate_publish(p: PublishSection, where: str) -> PublishSection:
    """The publish section's ranges and prompt templates: checked at config load and for `--set publish.KEY=VALUE`."""
    from opsynth.prompt import template_problem

    _check(0.0 <= p.validation_share < 0.5, where,
           f"[publish] validation_share must be in [0, 0.5) (got {p.validation_share}); e.g. 0.02")
    _check(p.shard_rows > 0, where, f"[publish] shard_rows must be positive (got {p.shard_rows})")
    problem = template_problem(p.prompt_system, p.prompt_user, p.prompt_policy)
    _check(problem is None, where, f"[publish] {problem}")
    return p


def grown(cfg: Config, n: int, where: str) -> Config:
    """`cfg` with run.n raised to `n`: the one change an existing run directory accepts, since task i depends
    only on (seed, i) and the tasks before it, so the first run.n tasks stay what they were."""
    _check(n >= cfg.run.n, where, f"run.n can only grow (it is {cfg.run.n}, asked for {n}); "
           "a smaller run needs a new run directory")
    return validate(cfg.with_overrides(n=n), where)


def parse_settings(pairs: list[str], section: str, where: str, example: str) -> dict[str, Any]:
    """`--set SECTION.KEY=VALUE` pairs (VALUE in TOML syntax) as {KEY: value}; another section, a missing `=` or a
    value TOML cannot read is refused in one line naming the pair and the fix. Keys and types are checked by
    `build_section`, as in a config file."""
    given: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        sect, dot, name = key.strip().partition(".")
        _check(bool(eq) and sect == section and bool(dot) and bool(name), where,
               f"--set takes {section}.KEY=VALUE (got {pair!r}); e.g. --set {example}")
        try:
            given[name.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            raise ConfigError(f"config error in {where}: --set {pair!r}: {value.strip()!r} is not a TOML value "
                              "(numbers as 0.015, booleans as true, strings quoted)") from None
    return given


def with_profile_settings(cfg: Config, pairs: list[str], where: str,
                          base: dict[str, Any] | None = None) -> tuple[Config, dict[str, Any]]:
    """`cfg` with profile settings replaced for one profile call (`--set profile.KEY=VALUE`, VALUE in TOML syntax),
    and the settings given. `base`: settings applied first (a preset's profile section, `--preset`), the pairs
    over them. Only the profile section, how tasks are measured, changes per call: sample and decontaminate decide
    what a run's tasks are, and filter thresholds change for the whole run (`with_filter_settings`)."""
    given = {**(base or {}), **parse_settings(pairs, "profile", where, "profile.median_precision=0.015")}
    if not given:
        return cfg, {}
    profile = validate_profile(build_section(ProfileSection, {**dataclasses.asdict(cfg.profile), **given}, where,
                                             "profile"), where)
    return replace(cfg, profile=profile), given


def preset_profile_settings(cfg: Config, preset: str) -> dict[str, Any]:
    """The profile settings of preset `preset` that differ from `cfg`'s (`opsynth profile DIR --preset NAME`): what a
    call measuring an existing run with that preset's settings changes, as `--set profile.KEY=VALUE` pairs would."""
    chosen = load_preset(preset).profile
    return {k: v for k, v in dataclasses.asdict(chosen).items() if getattr(cfg.profile, k) != v}


def with_filter_settings(cfg: Config, pairs: list[str], where: str) -> tuple[Config, dict[str, Any]]:
    """`cfg` with filter thresholds replaced (`opsynth filter DIR --set filter.KEY=VALUE`), and the settings given.
    Checked exactly as the [filter] table of a config file: unknown keys, wrong types and impossible ranges are
    refused. The thresholds judge measurements only, so a measured run is re-judged without measuring again."""
    given = parse_settings(pairs, "filter", where, "filter.min_eager_ms=2")
    if not given:
        return cfg, {}
    f = validate_filter(build_section(FilterSection, {**dataclasses.asdict(cfg.filter), **given}, where, "filter"),
                        where)
    return replace(cfg, filter=f), given


def with_publish_settings(cfg: Config, pairs: list[str], where: str) -> tuple[Config, dict[str, Any]]:
    """`cfg` with publish settings replaced (`opsynth publish DIR --set publish.KEY=VALUE`), and the settings given;
    checked as the [publish] table of a config file. What is published changes, never what was measured."""
    given = parse_settings(pairs, "publish", where, "publish.validation_share=0.02")
    if not given:
        return cfg, {}
    pub = validate_publish(build_section(PublishSection, {**dataclasses.asdict(cfg.publish), **given}, where,
                                         "publish"), where)
    return replace(cfg, publish=pub), given


def build_section(cls: type, data: dict[str, Any], where: str, section: str) -> Any:
    """One section's dataclass from its TOML table: unknown keys and mistyped values are refused."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    _check(not unknown, where, f"unknown key(s) {unknown} in [{section}]; known: {sorted(known)}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        default = getattr(cls(), key)
        if isinstance(default, tuple):
            _check(isinstance(value, list | tuple), where, f"[{section}] {key} must be a list")
            value = tuple(value)
        elif isinstance(default, bool):
            _check(isinstance(value, bool), where, f"[{section}] {key} must be true or false")
        elif isinstance(default, float):
            _check(isinstance(value, int | float) and not isinstance(value, bool), where,
                   f"[{section}] {key} must be a number (got {value!r})")
            value = float(value)
        elif isinstance(default, int):
            _check(isinstance(value, int) and not isinstance(value, bool), where,
                   f"[{section}] {key} must be an integer (got {value!r})")
        elif isinstance(default, str):
            _check(isinstance(value, str), where, f"[{section}] {key} must be a string (got {value!r})")
        elif isinstance(default, dict):
            _check(isinstance(value, dict), where, f"[{section}] {key} must be a table")
        kwargs[key] = value
    return cls(**kwargs)


def from_dict(data: dict[str, Any], where: str) -> Config:
    sections = {f.name: f for f in fields(Config) if f.name != "name"}
    unknown = sorted(set(data) - set(sections) - {"name"})
    _check(not unknown, where, f"unknown section(s) {unknown}; known: {sorted(sections)}")
    kwargs: dict[str, Any] = {"name": str(data.get("name", "custom"))}
    for name, f in sections.items():
        raw = data.get(name, {})
        _check(isinstance(raw, dict), where, f"[{name}] must be a table")
        kwargs[name] = build_section(f.default_factory, raw, where, name)  # type: ignore[arg-type]
    return validate(Config(**kwargs), where)


def load_file(path: str | Path) -> Config:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; pass an existing TOML file or --preset NAME")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {p} is not valid TOML ({e}); fix the syntax at that line") from None
    return from_dict(data, str(p))


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_preset(name: str) -> Config:
    p = PRESET_DIR / f"{name}.toml"
    if not p.is_file():
        raise ConfigError(f"unknown preset {name!r}; choose one of {presets()} or pass --config FILE")
    return load_file(p)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):  # a basic string: backslashes, quotes and control characters (a template's newlines) escaped
        body = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        return '"' + "".join(c if ord(c) >= 0x20 and c != "\x7f" else f"\\u{ord(c):04x}" for c in body) + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v)} to TOML")


def _toml_key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else _toml_value(k)


def _to_toml(d: dict[str, Any]) -> str:
    lines = [f"{k} = {_toml_value(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(f"\n[{k}]")
            lines += [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"
