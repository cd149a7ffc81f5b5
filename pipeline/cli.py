"""The `opsynth` command line: every stage on its own, and `run` for all of them in order.

Errors the user can fix are OpsynthError: they print as one line (what is wrong, and the fix) and
exit with status 2. Finished shards stay on disk whatever happens, so rerunning resumes. SIGINT and
SIGTERM stop the command the same way: workers stopped, no shard half-written, one line saying how far
the stage got, exit status 130.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from pipeline.errors import OpsynthError
from pipeline.rundir.config import Config, ConfigError, load_preset
from pipeline.rundir.stage_defs import AUDIT_STAGES, RUN_STAGES, VERDICT_SHARDS
from pipeline.rundir.store import RunDir

# `--help` lists the commands in the order a run uses them; a command not named here comes after, as registered
COMMAND_ORDER = ("run", "init", "sample", "decontaminate", "profile", "pack", "unpack", "filter", "dedupe", "publish", "report",
                 "recheck", "audit", "catalog", "reference")


class _StageOrder(typer.core.TyperGroup):
    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        return [n for n in COMMAND_ORDER if n in names] + [n for n in names if n not in COMMAND_ORDER]


def _plain_metavars() -> None:
    """`--help` shows what to type (DIR, FILE|FOLDER, N, a flag alone) rather than typer's type labels (`<path>`,
    `<bool>`) and its braces around required arguments (`{dir}`)."""
    from typer import core

    typed = getattr(core.TyperOption, "display_type_rich", None)
    if typed is None:  # a typer without these hooks (the GPU image's): its own labels, the commands unchanged
        return

    def option_metavar(self, ctx):
        if self.is_flag or self.metavar is not None:
            return None if self.is_flag else self.metavar
        shown = typed(self, ctx)
        return shown.strip("<>").replace("list[", "").replace("]", "").replace("str", "text").upper() if shown else shown

    core.TyperOption.display_type_rich = option_metavar
    core.TyperArgument.display_type_rich = lambda self, ctx: None  # an argument's name is its metavar
    core.TyperArgument._usage_display_name = lambda self: (
        (self.display_name_raw if self.required else f"[{self.display_name_raw}]") + ("..." if self.nargs != 1 else ""))


_plain_metavars()
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_StageOrder,
                  help="Build training datasets of GPU-kernel optimization tasks (KernelBench format).")
reference_app = typer.Typer(no_args_is_help=True, help="Build and inspect decontamination references.")
app.add_typer(reference_app, name="reference")

DirArg = Annotated[Path, typer.Argument(help="run directory", metavar="DIR")]
ExecutorOpt = Annotated[str, typer.Option(help="local (processes pinned to GPUs) or ray")]
GpusOpt = Annotated[str | None, typer.Option(help="GPU indices for the local executor, e.g. 0,1 (default: all visible)")]
RayOpt = Annotated[str | None, typer.Option(help="Ray cluster address for --executor ray (default: start a local one)")]
WorkersOpt = Annotated[int | None, typer.Option(help="worker processes (per GPU on cuda)")]
RefOpt = Annotated[list[str] | None, typer.Option("--reference", help="builtin | PATH | HUB_ID; repeat for several")]
PresetOpt = Annotated[str | None, typer.Option(help="preset name in data/presets (default: demo)")]
ConfigOpt = Annotated[Path | None, typer.Option(help="TOML config file instead of a preset")]
NOpt = Annotated[int | None, typer.Option(help="tasks to sample")]
SeedOpt = Annotated[int | None, typer.Option(help="sampling seed")]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu or cuda")]


def _say(msg: str) -> None:
    typer.echo(msg, err=True)


def _gpus(spec: str | None, device: str = "cuda") -> list[int] | None:
    if not spec:
        return None
    try:
        ids = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise OpsynthError(f"--gpus {spec!r} is not a list of GPU indices; write e.g. --gpus 0,1") from None
    if device != "cuda":
        raise OpsynthError(f"--gpus {spec} picks GPUs, and this run measures on the {device} (run.device); drop "
                           "--gpus, or make a cuda run (`--device cuda` at init or run)")
    return ids


def _open(path: Path, workers: int | None = None) -> tuple[RunDir, Config]:
    rd = RunDir(path)
    cfg = rd.load_config().with_overrides(workers=workers)
    return rd, cfg


def _resolve_config(preset: str | None, config: Path | None) -> Config:
    if preset and config:
        raise ConfigError("give either --preset NAME or --config FILE, not both")
    if config:
        from pipeline.rundir.config import load_file

        return load_file(config)
    return load_preset(preset or "demo")


def _llm_settings(composer: str | None, base_url: str | None, model: str | None):
    if composer != "llm":
        return None
    if not base_url or not model:
        raise OpsynthError("--composer llm needs --llm-base-url URL and --llm-model NAME")
    from pipeline.errors import require

    require("openai", "llm")
    from operators.llm_composer import LLMSettings

    return LLMSettings(base_url=base_url, model=model)


def _check_references(specs) -> None:
    from pipeline.rundir.reference import check_spec

    for spec in specs or ():
        check_spec(spec)


@contextlib.contextmanager
def _new_run_dir(rd: RunDir, cfg: Config) -> Iterator[None]:
    """rd.init(cfg) for the body; a directory this command created is removed again when the body fails before
    any shard is done, so a retry with corrected arguments is not refused as "made by a different config"."""
    existed, created = rd.path.exists(), not rd.config_path.exists()
    rd.init(cfg)
    try:
        yield
    except BaseException:
        if created and rd.last_write_time() == 0.0:
            if existed:  # the user's folder: take back only what init wrote
                rd.config_path.unlink(missing_ok=True)
                rd.manifest_path.unlink(missing_ok=True)
            else:
                shutil.rmtree(rd.path, ignore_errors=True)
        raise


_CURRENT: dict = {}  # the stage in progress and its run directory, for the interrupted line


def _run_steps(steps: dict, order: tuple[str, ...]) -> dict:
    """Each step of `order` (pipeline/rundir/stage_defs.py), in that order; {stage: what it returned}."""
    if set(steps) != set(order):  # a stage declared without a step here, or the reverse
        raise AssertionError(f"steps {sorted(steps)} do not match the declared stages {list(order)}")
    return {name: steps[name]() for name in order}


def _check_order(rd: RunDir, cfg: Config, name: str) -> None:
    """Every stage, one rule (pipeline/rundir/completeness.py): what it reads must be there and current."""
    from pipeline.rundir.completeness import order_refusal

    refusal = order_refusal(rd, cfg, name)
    if refusal:
        raise OpsynthError(refusal)


def _stage(name: str, fn, *args, **kwargs):
    rd = next((a for a in args if isinstance(a, RunDir)), None)
    cfg = next((a for a in args if isinstance(a, Config)), None)
    if rd is not None and cfg is not None:
        _check_order(rd, cfg, name)
    _CURRENT.update(stage=name, rd=rd)
    t0 = time.time()
    _say(f"[{name}] ...")
    out = fn(*args, **kwargs)
    _say(f"[{name}] done in {time.time() - t0:.1f}s: {json.dumps(out, default=str) if isinstance(out, dict) else out}")
    return out


@app.command()
def run(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    out: Annotated[Path | None, typer.Option(help="run directory (default: runs/<preset>)")] = None,
    n: NOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = None,
    workers: WorkersOpt = None,
    executor: ExecutorOpt = "local",
    gpus: GpusOpt = None,
    ray_address: RayOpt = None,
    reference: RefOpt = None,
    composer: Annotated[str | None, typer.Option(help="template (default) or llm")] = None,
    llm_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint for --composer llm")] = None,
    llm_model: Annotated[str | None, typer.Option(help="model name for --composer llm")] = None,
) -> None:
    """Run every stage: sample, decontaminate, profile (only what decontaminate kept), filter, dedupe, publish,
    report."""
    import dataclasses

    cfg = _resolve_config(preset, config).with_overrides(n=n, seed=seed, device=device, workers=workers)
    if reference:
        cfg = dataclasses.replace(cfg, decontaminate=dataclasses.replace(cfg.decontaminate, reference=tuple(reference)))
    if composer:
        cfg = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, composer=composer))
    from pipeline.rundir.config import validate

    validate(cfg, "command line")
    _check_references(cfg.decontaminate.reference)
    llm = _llm_settings(cfg.sample.composer, llm_base_url, llm_model)
    gpu_ids = _gpus(gpus, cfg.run.device)
    rd = RunDir(out or Path("runs") / cfg.name)
    if rd.config_path.exists():  # continuing a run: its `filter/publish --set` settings stay as the user set them
        given, cfg = cfg, rd.check_config(cfg)
        kept = [f"{sec}.{k}={v!r}" for sec in ("filter", "publish") for k, v in dataclasses.asdict(
            getattr(cfg, sec)).items() if getattr(getattr(given, sec), k) != v]
        if kept:
            _say(f"[run] {rd.path} keeps the settings `opsynth filter/publish --set` gave it: {', '.join(kept)} "
                 "(manifest.json filter_settings/publish_settings)")
    t0 = time.time()
    from pipeline.stages import filter as filter_stage
    from pipeline.stages import profile as profile_stage
    from pipeline.stages import sample as sample_stage

    def sample_step():
        with _new_run_dir(rd, cfg):
            return _stage("sample", sample_stage.run, rd, cfg, llm)

    def report_step():
        # the manifest's last change comes before the report's database, so `opsynth report DIR` reuses it
        rd.update_manifest(total_seconds=round(time.time() - t0, 2))
        return _report(rd, None)

    done = _run_steps({
        "sample": sample_step,
        "decontaminate": lambda: _decontaminate(rd, cfg, None),  # before the GPU: no GPU time for what it drops
        "profile": lambda: _stage("profile", profile_stage.run, rd, cfg, executor, gpu_ids, ray_address,
                                  skip_dropped=True),
        "filter": lambda: _stage("filter", filter_stage.run, rd, cfg),
        "dedupe": lambda: _dedupe(rd, cfg),
        "publish": lambda: _publish(rd, None),
        "report": report_step,
    }, RUN_STAGES)
    folder, summary = done["publish"], done["report"]
    typer.echo(summary.split("\n\n")[0])  # the funnel; `opsynth report DIR` prints the rest
    typer.echo(f"published {folder} in {time.time() - t0:.0f}s")


@app.command()
def init(
    dir: DirArg,
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    n: NOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Create a run directory (config.toml + manifest.json, nothing else) for running the stages one by one,
    on one machine or several."""
    from pipeline.rundir.config import validate

    cfg = validate(_resolve_config(preset, config).with_overrides(n=n, seed=seed, device=device, workers=workers),
                   "command line")
    rd = RunDir(dir)
    existed = rd.path.exists()
    if existed and not rd.config_path.exists() and (not rd.path.is_dir() or any(rd.path.iterdir())):
        raise OpsynthError(f"{dir} exists and is not a run directory; pass a new or empty directory")
    made = existed and rd.config_path.exists()
    try:
        rd.init(cfg)
    except BaseException:
        if not existed:  # a failed init leaves nothing behind
            import shutil

            shutil.rmtree(rd.path, ignore_errors=True)
        raise
    typer.echo(f"{dir}: {'already a run directory with this config' if made else 'initialised'} "
               f"({cfg.name}, n={cfg.run.n}, seed={cfg.run.seed}); next: opsynth sample {dir}")


@app.command()
def sample(
    dir: DirArg,
    add: Annotated[int | None, typer.Option(help="grow the run by N tasks (run.n += N) and sample only those")] = None,
    n: Annotated[int | None, typer.Option("--n", help="grow the run to N tasks in all (rerun with the same N, "
                                          "it grows once)")] = None,
    llm_base_url: Annotated[str | None, typer.Option(help="endpoint when the config's composer is llm")] = None,
    llm_model: Annotated[str | None, typer.Option(help="model when the config's composer is llm")] = None,
) -> None:
    """Sample and render tasks into DIR/tasks/ (the config in DIR decides how many and how); with --add or --n,
    grow the run first: tasks, measurements and verdicts already there stay as they are."""
    from pipeline.stages import sample as sample_stage

    rd, cfg = _open(dir)
    if add is not None and n is not None:
        raise OpsynthError("give either --add N or --n TOTAL, not both")
    if add is not None and add < 1:
        raise OpsynthError(f"--add must be >= 1 (got {add}); it is the number of tasks to add")
    target = cfg.run.n + add if add is not None else n
    if target is not None:
        old, new = rd.grow(target)
        rd, cfg = _open(dir)
        _say(f"[sample] run.n {old} -> {new} (config.toml); if interrupted, resume with `opsynth sample {dir}`; "
             f"then decontaminate, profile, filter, dedupe and publish pick up the new tasks")
    _stage("sample", sample_stage.run, rd, cfg, _llm_settings(cfg.sample.composer, llm_base_url, llm_model))


@app.command()
def profile(dir: DirArg, workers: WorkersOpt = None, executor: ExecutorOpt = "local", gpus: GpusOpt = None,
            ray_address: RayOpt = None,
            all_tasks: Annotated[bool, typer.Option("--all", help="also tasks decontaminate already dropped")] = False,
            max_minutes: Annotated[float | None, typer.Option(help="start no shard after M minutes; the shards "
                                                              "started finish, a rerun continues")] = None,
            limit: Annotated[int | None, typer.Option(help="start no shard once K tasks were handed to workers "
                                                      "in this call (whole shards: K rounds up)")] = None,
            set_: Annotated[list[str] | None, typer.Option(
                "--set", metavar="profile.KEY=VALUE",
                help="profile.KEY=VALUE for this call only (TOML value; repeat for several), recorded "
                              "in the manifest's entry for the call, e.g. --set profile.median_precision=0.015")] = None,
            preset: Annotated[str | None, typer.Option(
                metavar="NAME", help="use this preset's profile settings for this call (data/presets/NAME.toml; "
                                     "--set goes over them), recorded as --set is, e.g. --preset h200")] = None,
            ) -> None:
    """Measure the tasks in isolated worker processes into DIR/measurements/ (not those already dropped)."""
    from pipeline.rundir.config import preset_profile_settings, with_profile_settings
    from pipeline.stages import profile as profile_stage

    budget = profile_stage.Budget(max_seconds=None if max_minutes is None else max_minutes * 60, limit=limit)
    if max_minutes is not None and max_minutes <= 0:
        raise OpsynthError(f"--max-minutes must be > 0 (got {max_minutes})")
    if limit is not None and limit < 1:
        raise OpsynthError(f"--limit must be >= 1 (got {limit})")
    rd, cfg = _open(dir, workers)
    base = preset_profile_settings(cfg, preset) if preset else None
    cfg, settings = with_profile_settings(cfg, set_ or [], f"{dir}/config.toml with --set", base)
    out = _stage("profile", profile_stage.run, rd, cfg, executor, _gpus(gpus, cfg.run.device), ray_address,
                 skip_dropped=not all_tasks, budget=budget, settings=settings)
    if out["stopped"]:
        typer.echo(f"stopped after {out['minutes']:g} min: {out['with_measurements']} of {out['tasks']} tasks "
                   f"measured; rerun to continue")


@app.command()
def pack(dir: DirArg, out: Annotated[Path, typer.Argument(help="new folder for the packed run", metavar="OUT")]) -> None:
    """Copy what `opsynth profile` reads of DIR into OUT (the code, not the graphs), for a GPU box that takes a small
    upload; bring its profile calls back with `opsynth unpack OUT DIR`."""
    from pipeline.rundir.pack import pack as pack_run

    r = pack_run(dir, out)
    shards = ", ".join(f"{t} {n}" for t, n in r["shards"].items() if n)
    typer.echo(f"packed {dir} -> {out}: {r['bytes'] / 2**20:.1f} MiB ({shards} shards)")


@app.command()
def unpack(packed: Annotated[Path, typer.Argument(help="a folder `opsynth pack` wrote and profile ran on",
                                                  metavar="PACKED")], dir: DirArg) -> None:
    """Bring the measurement and shortcut shards and the profile calls of PACKED into the run DIR it was packed
    from (shards DIR has done already stay as they are, except shortcut shards PACKED measured again since)."""
    from pipeline.rundir.pack import unpack as unpack_run

    r = unpack_run(packed, dir)
    typer.echo(f"unpacked {packed} -> {dir}: " + ", ".join(f"{t} {n} shards" for t, n in r["shards"].items())
               + f", shortcut shards measured again {r['measured_again']}, {r['profile_calls']} profile call(s)")


@app.command("filter")
def filter_cmd(
    dir: DirArg,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", metavar="filter.KEY=VALUE",
        help="change a threshold for the run (TOML value; repeat for several): written to DIR/config.toml, logged "
             "in the manifest's filter_settings, e.g. --set filter.min_eager_ms=2")] = None,
) -> None:
    """Apply the config's thresholds to the measurements (re-runs in seconds; measurements are not touched)."""
    from pipeline.stages import filter as filter_stage

    rd, cfg = _open(dir)
    _check_order(rd, cfg, "filter")  # before config.toml changes: a run without measurements has nothing to re-judge
    cfg = rd.set_filter(set_) if set_ else cfg
    _stage("filter", filter_stage.run, rd, cfg)
    if set_ and rd.is_done("verdicts", VERDICT_SHARDS["dedupe"]):
        _say(f"[filter] next: `opsynth dedupe {dir}`, then `opsynth publish {dir}` (dedupe judges what filter kept)")


def _decontaminate(rd: RunDir, cfg: Config, reference: list[str] | None):
    from pipeline.stages import decontaminate as stage

    return _stage("decontaminate", stage.run, rd, cfg, reference)


def _dedupe(rd: RunDir, cfg: Config):
    from pipeline.stages import dedupe as stage

    return _stage("dedupe", stage.run, rd, cfg)


def _publish(rd: RunDir, to: Path | None, allow_incomplete: bool = False) -> Path:
    from pipeline.outputs.publish import publish as do_publish
    from pipeline.outputs.publish import unfinished_refusal
    from pipeline.rundir.completeness import stage_status

    if not allow_incomplete and (why := unfinished_refusal(rd, stage_status(rd, rd.load_config()))):
        raise OpsynthError(why)  # before the stage's first line, as every stage refuses
    return _stage("publish", do_publish, rd, to, allow_incomplete=allow_incomplete)


def _report(rd: RunDir, sql: str | None, db: Path | None = None, full: bool = False) -> str:
    from pipeline.outputs import report

    def build_or_reuse() -> str:
        path, built = report.ensure(rd, db)
        return f"{path}" + ("" if built else " (reused: the run has not changed since it was built)")

    _stage("report", build_or_reuse)
    return report.query(rd, sql, db, current=True) if sql else report.canned(rd, db, full=full, current=True)


@app.command()
def decontaminate(dir: DirArg, reference: RefOpt = None) -> None:
    """Compare every task with KernelBench (AST, operator signature, MinHash) into DIR/contamination/."""
    _check_references(reference)
    rd, cfg = _open(dir)
    _decontaminate(rd, cfg, reference)


@app.command()
def dedupe(dir: DirArg) -> None:
    """Find exact, structural and near duplicates among the kept tasks into DIR/dedupe/."""
    rd, cfg = _open(dir)
    _dedupe(rd, cfg)


@app.command()
def publish(
    dir: DirArg,
    to: Annotated[Path | None, typer.Option(help="output folder (default: DIR/dataset)")] = None,
    repo_id: Annotated[str | None, typer.Option(help="push to this Hub dataset repo, ORG/NAME")] = None,
    private: Annotated[bool, typer.Option("--private", help="create the Hub repo as private")] = False,
    revision: Annotated[str | None, typer.Option(help="branch to push to")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be uploaded, upload nothing")] = False,
    allow_incomplete: Annotated[bool, typer.Option(
        "--allow-incomplete", help="publish although some stages are not done (the card says which)")] = False,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", metavar="publish.KEY=VALUE",
        help="change a publish setting for the run (TOML value; repeat for several): written to DIR/config.toml, "
             "logged in the manifest's publish_settings, e.g. --set publish.validation_share=0.02")] = None,
) -> None:
    """Write the Hub-ready dataset folder (into a new, empty or previously published folder); with --repo-id, push
    it in one commit. A run whose stages are not all done is refused unless --allow-incomplete."""
    rd, _ = _open(dir)
    if set_:
        rd.set_publish(set_)
    if repo_id:
        from pipeline.outputs.hub import validate_repo_id

        validate_repo_id(repo_id)  # fail before the (slow) folder build
    folder = _publish(rd, to, allow_incomplete)
    typer.echo(str(folder))
    if repo_id:
        from pipeline.outputs.hub import push

        typer.echo(push(folder, repo_id, private=private, revision=revision, dry_run=dry_run))


@app.command()
def recheck(
    dir: DirArg,
    audit_dir: Annotated[Path, typer.Argument(metavar="AUDIT_DIR", help="the run `opsynth audit FOLDER --sample N --stages "
                                                   "profile,filter --device cuda --out AUDIT_DIR` made")],
    published: Annotated[Path | None, typer.Option(help="the folder DIR was published to (default: DIR's parent, "
                                                        "where a release keeps its run/)")] = None,
) -> None:
    """Set a fresh re-profile of published rows beside what DIR published: accepted share and eager-time agreement,
    kept in DIR/recheck.json for the card of DIR's next publish."""
    from pipeline.outputs import recheck as rc

    rd = RunDir(dir)
    rd.load_config()
    audit = RunDir(audit_dir)
    audit.load_config()
    summary = rc.summarize(rc.published_eager(published or Path(dir).resolve().parent), audit)
    path = rc.write(rd, summary)
    typer.echo(f"re-check of {summary['rows']} published rows on {summary['gpu'] or summary['device']}: "
               f"{summary['accepted']} accepted ({summary['accepted_share']:.1%}); {rc.agreement_line(summary)} "
               f"-> {path}")
    for reason, n in summary["dropped"].items():
        typer.echo(f"  dropped {n}: {reason}")


@app.command()
def report(dir: DirArg,
           sql: Annotated[str | None, typer.Option(metavar="QUERY", help="run this SQL on the report database; "
                                                   "cells are printed whole")] = None,
           db: Annotated[Path | None, typer.Option(metavar="FILE", help="the report database to build or reuse "
                                                   "(default: one per run directory in the user's cache folder, "
                                                   "$OPSYNTH_CACHE_DIR or ~/.cache/opsynth/report/)")] = None,
           full: Annotated[bool, typer.Option("--full", help="canned reports: every row, whole cells (default: 25 "
                                              "rows each, cells cut at 70 characters)")] = False,
           verdicts: Annotated[Path | None, typer.Option(metavar="FILE", help="also write the per-row verdict "
                                                         "table (parquet) here")] = None,
           ) -> None:
    """Print the canned reports of DIR (or an ad-hoc --sql query) from its DuckDB database, built once and reused
    until the run changes; nothing is written into DIR."""
    rd = RunDir(dir)
    rd.load_config()
    if verdicts is not None:
        from pipeline.outputs.audit_export import write

        typer.echo(f"verdict table: {write(rd, verdicts)}")
    typer.echo(_report(rd, sql, db, full))


@app.command()
def catalog(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    with_torch: Annotated[bool, typer.Option("--torch", help="per category, how many entries torch's own tests "
                                             "cover (OpInfo, ModuleInfo, either)")] = False,
    with_coverage: Annotated[bool, typer.Option("--coverage", help="list torch op_db operators the catalog lacks")] = False,
) -> None:
    """List the operator catalog with counts per category (torch metadata pinned in operators/torch_meta.json)."""
    from operators import torch_meta
    from operators.catalog import catalog_summary

    summary = catalog_summary()
    matches = torch_meta.category_matches() if with_torch else None
    cover = torch_meta.coverage() if with_coverage else None
    if as_json:
        extra = {k: v for k, v in (("torch", matches), ("coverage", cover)) if v is not None}
        typer.echo(json.dumps({**summary, **extra}, indent=2))
        return
    typer.echo(f"{summary['total']} operators in {len(summary['by_category'])} categories")
    if matches is None:
        for cat, names in sorted(summary["by_category"].items()):
            typer.echo(f"  {cat:<22} {len(names):>4}  {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}")
    else:
        typer.echo(f"  {'category':<22} {'entries':>7} {'OpInfo':>7} {'ModuleInfo':>10} {'either':>7}"
                   f"   (torch {torch_meta.meta()['torch_version']}; re-pin: {torch_meta.REPIN})")
        rows = sorted(matches.items()) + [("total", {k: sum(r[k] for r in matches.values())
                                                     for k in ("entries", "opinfo", "moduleinfo", "either")})]
        for cat, r in rows:
            typer.echo(f"  {cat:<22} {r['entries']:>7} {r['opinfo']:>7} {r['moduleinfo']:>10} {r['either']:>7}")
    if cover is not None:
        typer.echo(f"torch {cover['torch_version']} op_db: the catalog matches {cover['covered']} of {cover['universe']} "
                   f"operators that take float32 on the CPU and draw no random numbers; {len(cover['missing'])} missing:")
        typer.echo(textwrap.fill(", ".join(cover["missing"]), width=110, initial_indent="  ", subsequent_indent="  "))


@app.command()
def audit(
    file: Annotated[Path, typer.Argument(metavar="FILE|FOLDER", help="parquet/jsonl with a `code` column, a folder of parquet shards (a "
                                                  "published dataset's folder reads its data/), or a folder of .py files")],
    out: Annotated[Path, typer.Option(help="run directory to create")],
    stages: Annotated[str, typer.Option(metavar="STAGE,...", help=f"comma-separated, run in this order: {','.join(AUDIT_STAGES)}")
                      ] = "labels,decontaminate,dedupe",
    check_labels: Annotated[bool, typer.Option("--check-labels", help="drop rows with a wrong or missing label (default: report only)")] = False,
    order_seed: Annotated[int | None, typer.Option(help="store the rows in this seed's random order, so a time-boxed "
                                                   "`opsynth profile` measures a random sample")] = None,
    sample: Annotated[int | None, typer.Option(help="import only N random rows (seeded by --order-seed, else 0), "
                                               "e.g. to re-check a published dataset")] = None,
    source_name: Annotated[str | None, typer.Option(help="the dataset's name, for the published card")] = None,
    source_url: Annotated[str | None, typer.Option(help="where the dataset lives (e.g. its Hub page)")] = None,
    source_license: Annotated[str | None, typer.Option(help="the dataset's license, kept in the card")] = None,
    attribution: Annotated[str | None, typer.Option(help="who made the dataset (authors, paper), kept in the card")] = None,
    preset: Annotated[str | None, typer.Option(help="preset for thresholds (default: demo)")] = None,
    config: ConfigOpt = None,
    reference: RefOpt = None,
    device: Annotated[str | None, typer.Option(help="cpu or cuda for --stages profile")] = None,
    workers: WorkersOpt = None,
    executor: ExecutorOpt = "local",
    gpus: GpusOpt = None,
) -> None:
    """Import any KernelBench-format dataset into a run directory and run the chosen stages on it."""
    import dataclasses

    from pipeline.stages import audit as audit_stage

    chosen = [s.strip() for s in stages.split(",") if s.strip()]
    bad = [s for s in chosen if s not in AUDIT_STAGES]
    if bad:
        raise OpsynthError(f"unknown stage(s) {bad} in --stages; choose from {','.join(AUDIT_STAGES)}")
    cfg = _resolve_config(preset, config).with_overrides(device=device, workers=workers)
    gpu_ids = _gpus(gpus, cfg.run.device) if "profile" in chosen else None
    # foreign labels are reported by kind; they reject only when the user asks for label checking
    cfg = dataclasses.replace(cfg, name=f"audit-{Path(file).stem}",
                              filter=dataclasses.replace(cfg.filter, require_label_match=check_labels))
    audit_stage.check_source(str(file))
    if "decontaminate" in chosen:
        _check_references(reference or cfg.decontaminate.reference)
    rd = RunDir(out)
    source = {"name": source_name, "url": source_url, "license": source_license, "attribution": attribution}
    with _new_run_dir(rd, cfg):
        _stage("import", audit_stage.import_dataset, str(file), rd, cfg, order_seed, source, sample)
    from pipeline.stages import filter as filter_stage
    from pipeline.stages import labels as labels_stage
    from pipeline.stages import profile as profile_stage

    steps = {
        "labels": lambda: _stage("labels", labels_stage.run, rd, cfg),
        "decontaminate": lambda: _decontaminate(rd, cfg, reference),
        "profile": lambda: _stage("profile", profile_stage.run, rd, cfg, executor, gpu_ids,
                                  skip_dropped=True),
        "filter": lambda: _stage("filter", filter_stage.run, rd, cfg),
        "dedupe": lambda: _dedupe(rd, cfg),
    }
    if set(steps) != set(AUDIT_STAGES):  # a stage declared for audits without a step here, or the reverse
        raise AssertionError(f"audit steps {sorted(steps)} do not match the declared stages {list(AUDIT_STAGES)}")
    order = tuple(s for s in AUDIT_STAGES if s in chosen)
    _run_steps({s: steps[s] for s in order}, order)
    import importlib.util

    if importlib.util.find_spec("duckdb") is None:
        # a GPU box with only torch: the stages' work is on disk, the report is for the box with the extras
        typer.echo(f"report skipped: duckdb is not installed here; run `opsynth report {out}` where it is "
                   "(pip install 'opsynth[report]')")
        return
    typer.echo(_report(rd, None))


PolicyOpt = Annotated[str | None, typer.Option(help="strict (default: own kernels plus GEMM/conv libraries), library "
                                                  "(strict plus the --allow operators) or torch (anything)")]
AllowOpt = Annotated[list[str] | None, typer.Option("--allow", help="library tier: an ATen operator the candidate may "
                                                    "call (aten::cumsum) or a named set (inductor-fallbacks, sdpa); "
                                                    "repeatable; implies --policy library")]
AllowTorchOpt = Annotated[bool, typer.Option("--allow-torch", help="alias of --policy torch")]
PrecisionOpt = Annotated[str, typer.Option(help="fp32 (default: TF32 off everywhere) or tf32 (eager, torch.compile "
                                                "and the candidate with TF32 matmuls and convolutions)")]


@app.command("verify")
def verify_cmd(
    task: Annotated[str, typer.Argument(metavar="TASK", help="KernelBench file, or DATASET_DIR:TASK_ID")],
    candidate: Annotated[Path, typer.Argument(metavar="CANDIDATE", help="file defining ModelNew")],
    device: Annotated[str, typer.Option(help="cuda, cuda:N or cpu")] = "cuda",
    policy: PolicyOpt = None,
    allow: AllowOpt = None,
    allow_torch: AllowTorchOpt = False,
    precision: PrecisionOpt = "fp32",
) -> None:
    """Check a candidate kernel against a task and print its reward as one JSON object (docs/verify.md)."""
    from verify.api import verify

    if not candidate.is_file():
        raise OpsynthError(f"{candidate}: no such file; pass a .py file that defines ModelNew")
    typer.echo(json.dumps(verify(task, candidate, device=device, policy=policy, allow=allow, allow_torch=allow_torch,
                                 precision=precision), default=str))


@app.command("verify-batch")
def verify_batch_cmd(
    pairs: Annotated[Path, typer.Argument(metavar="PAIRS", help="JSONL file of {\"task\": ..., \"candidate\": ...} lines")],
    out: Annotated[Path, typer.Option(help="results parquet to write (joinable on task_id)")],
    device: Annotated[str, typer.Option(help="cuda or cpu")] = "cuda",
    workers: WorkersOpt = None,
    policy: PolicyOpt = None,
    allow: AllowOpt = None,
    allow_torch: AllowTorchOpt = False,
    precision: PrecisionOpt = "fp32",
    gpus: Annotated[str | None, typer.Option(help="GPUs to spread the workers over, e.g. 0,1 (one timing lock each)")]
    = None,
    executor: Annotated[str, typer.Option(help="local (this machine's GPUs) or ray (one actor per GPU of a Ray "
                                                "cluster, --workers each)")] = "local",
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address for --executor ray (default: a "
                                                         "local cluster)")] = None,
) -> None:
    """Verify many (task, candidate) pairs; write a parquet table and print a summary."""
    from verify.batch import parse_gpus, run_pairs_file

    typer.echo(run_pairs_file(pairs, out, device=device, workers=workers or 2, allow_torch=allow_torch, say=_say,
                              gpus=parse_gpus(gpus), executor=executor, ray_address=ray_address, policy=policy,
                              allow=allow, precision=precision))


@reference_app.command("build")
def reference_build(
    sources: Annotated[list[str], typer.Argument(metavar="SOURCE", help="Hub id, parquet/jsonl with `code`, or folder of .py")],
    out: Annotated[Path, typer.Option(help="index file to write (parquet)")],
) -> None:
    """Turn references into a fingerprint index (no source text) for offline decontamination."""
    from pipeline.rundir.reference import build_index

    typer.echo(str(_stage("reference build", build_index, sources, out)))


def _on_signal(signum, frame) -> None:
    # the first signal stops the command; the cleanup that follows (stopping workers, removing temporary
    # files) must not be cut short by a second Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        rv = app(standalone_mode=False)
        if rv == 130:  # typer turns KeyboardInterrupt (ours from _on_signal, or a worker's) into a silent return 130
            _interrupted()
    except OpsynthError as e:
        typer.echo(f"opsynth: error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted()
    except Exception as e:  # typer's vendored click: usage errors show themselves; Abort is Ctrl-C
        if type(e).__name__ == "Abort":
            _interrupted()
        if not hasattr(e, "show"):
            raise
        e.show()
        sys.exit(getattr(e, "exit_code", 2))
    sys.exit(rv if isinstance(rv, int) else 0)


def _progress_line() -> str:
    """How far the interrupted stage got, from what is on disk: "interrupted during profile: 40 of 72 tasks done"."""
    stage, rd = _CURRENT.get("stage"), _CURRENT.get("rd")
    if not stage:
        return "interrupted"
    if rd is not None and not rd.config_path.exists():
        return f"interrupted during {stage}, before anything was kept"
    try:
        if rd is not None and stage in ("sample", "profile"):
            table = "tasks" if stage == "sample" else "measurements"
            done = sum(1 for _ in rd.read_rows(table, ["task_id"]))
            total = rd.load_config().run.n if stage == "sample" else sum(1 for _ in rd.read_rows("tasks", ["task_id"]))
            line = f"interrupted during {stage}: {done} of {total} tasks kept"
            import importlib

            lost = importlib.import_module(f"pipeline.stages.{stage}").UNWRITTEN.get(str(rd.path), 0)
            if lost:  # done into a shard that was not finished: not on disk, and the rerun does them again
                verb = "sampled" if stage == "sample" else "measured"
                line += (f" (whole shards); the {lost} task{'s' if lost != 1 else ''} {verb} since, in an "
                         f"unfinished shard, will be {verb} again")
            return line
    except Exception:  # noqa: BLE001 - the line must come out whatever the directory holds
        pass
    return f"interrupted during {stage} (it starts over)"


def _interrupted() -> None:
    typer.echo(f"opsynth: {_progress_line()}; rerun the same command to continue", err=True)
    sys.exit(130)


if __name__ == "__main__":
    main()
