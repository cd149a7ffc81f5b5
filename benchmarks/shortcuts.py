"""Shortcuts in released tasks: dead inputs, skippable operators and numerically fragile outputs (measures/shortcuts.py)
over random rows of a release.

    python benchmarks/shortcuts.py --device cpu --n 500 --seed 0 --max-minutes 10
    python benchmarks/shortcuts.py --device cuda --n 500 --seed 0
    python benchmarks/shortcuts.py --against benchmarks/results/shortcuts_cuda.json

On the CPU every row runs at the pre-screen's screened shapes (operators/prescreen.py, sample.prescreen_shortcuts =
record), so the counts are what the pre-screen catches. On cuda each row runs at its real sizes in a pool of GPU
processes while a pool of CPU processes pre-screens the same rows (the share of each kind the pre-screen caught is reported), and the
rows the checks keep are tried on 5 fresh draws (seeds no check used): every floating input one ulp up and the
float64 reference (rounding flips), and, in a pool of GPU processes, eager against torch.compile (compile flips), as
many rows as the time box allows. Prints a table and writes benchmarks/results/shortcuts_<device>.json (with its
"headline"). --against RESULT (a cuda run's shortcuts_cuda.json) screens the GPU-judged rows again on the CPU with the
fragility check alone, the input move one ulp and scaled to the real size (sample.prescreen_ulp_scale), and counts
the GPU-fragile rows each catches and the GPU-clean rows each flags (shortcuts_cpu_vs_gpu.json). --against-run RUN
screens, with the h200 preset's pre-screen, every release row that a shortcuts-only profile call measured in RUN's
shortcuts/, and counts per kind the profile stage's findings it catches and the clean rows it flags
(shortcuts_cpu_vs_profile.json). --fresh-weights RUN screens the same rows with the fragility check alone, once
with one model per task and once with each draw's own weights (profile.shortcut_fresh_weights), and counts the rows
each flags (shortcuts_fresh_weights.json). --scaled-flags N screens the first N sample rows with the fragility check
alone and counts the rows the scaled move flags and those measured again with the real move and let through as
smooth (shortcuts_scaled_flags.json). --sampler-screen N runs the h200 sample stage until N tasks are kept, the pre-screen in
drop mode, on two sides at once (one process each): before (the value-scale rule of operators/value_scale.py off,
the screen's exhaustive fragility check, its CPU budgets per draw of 1,000 and 4,000 ms) and as shipped; it reports per side the share of screened draws the screen
flags, by kind, and the stage's CPU seconds per kept task (shortcuts_sampler_screen.json; --records FILE keeps each draw's record for grouping the flagged ones by cause).
--sampler-coverage N counts the catalog operators N h200 draws hold, rule off and on (shortcuts_sampler_coverage.json)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RELEASE = ROOT / "data" / "releases" / "opsynth-ops-h200-v1"
KINDS = {"dead": "dead_inputs", "skip": "skippable_ops", "fragile": "fragile"}
FRAGILE_RATIOS = ("fragile_ulp_ratio", "fragile_f64_ratio")
GATES = (0.01, 0.03, 0.1, 0.3)  # screen fragility ratios below which the GPU's fragility check could be spared


def _rows(n: int, seed: int) -> list[dict]:
    import pyarrow.parquet as pq

    t = [r for p in sorted((RELEASE / "data").glob("train-*.parquet"))
         for r in pq.read_table(p, columns=["task_id", "code"]).to_pylist()]
    return random.Random(seed).sample(t, min(n, len(t)))


def _cpu(row: dict, cfg) -> dict:
    from operators.prescreen import prescreen

    res = prescreen(row, cfg)
    m = res.measurements
    return {"status": res.status, "scaled": res.scaled, **{k: m.get(c) for k, c in KINDS.items()},
            "cpu_ms": res.cpu_ms, **{c: m.get(c) for c in FRAGILE_RATIOS}}


FRESH = 10  # first seed offset of the fresh draws: the checks use draws 0-4


def _cpu_init() -> None:
    import torch

    torch.set_num_threads(1)


def _cuda_model(row: dict, seed: int, dev: str = "cuda"):
    import torch

    from operators.trace import load_module

    ns = load_module(row["code"], "bench")

    def draw(k):
        torch.manual_seed(seed + 1 + k)
        with torch.device(dev):
            return tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in ns["get_inputs"]())

    torch.manual_seed(seed)
    with torch.device(dev):
        model = ns["Model"](*ns["get_init_inputs"]()).to(dev)
    return model, draw


def _cuda(row: dict, cfg, dev: str = "cuda") -> dict:
    import torch

    from measures.shortcuts import fragility, measure
    from measures.tensor_checks import flatten

    t0 = time.perf_counter()
    with torch.no_grad():
        model, draw = _cuda_model(row, cfg.run.seed, dev)
        ref0 = flatten(model(*draw(0))).clone()
        m = measure(model, draw, ref0, cfg.filter.compile_tolerance, draws=5, stop_first=True)
        r = {"status": "ok", **{k: m.get(c) for k, c in KINDS.items()}}
        if not any(r[k] for k in KINDS):  # kept: the same honest roundings on 5 draws no check has seen
            f = fragility(model, lambda k: draw(FRESH + k), cfg.filter.compile_tolerance, draws=5)
            r["fresh_flip"] = f["fragile"]
    if dev == "cuda":
        torch.cuda.synchronize()
    r["gpu_s"] = time.perf_counter() - t0
    return r


def _compile_flips(row: dict, seed: int, tol: float, dev: str = "cuda") -> dict:
    """Eager against torch.compile on the 5 fresh draws: the largest verifier ratio (>= 1 is a flip)."""
    import os

    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch

    from measures.tensor_checks import flatten, tolerance_ratio

    try:
        with torch.no_grad():
            model, draw = _cuda_model(row, seed, dev)
            compiled = torch.compile(model)
            worst = 0.0
            for k in range(5):
                x = draw(FRESH + k)
                worst = max(worst, tolerance_ratio(flatten(compiled(*x)), flatten(model(*x)), tol))
        torch._dynamo.reset()
        return {"task_id": row["task_id"], "compile_ratio": worst}
    except Exception as e:  # noqa: BLE001 - a task that does not compile here says nothing about flips
        return {"task_id": row["task_id"], "compile_error": f"{type(e).__name__}: {e}"[:200]}


def _gpu_row(row: dict, cfg, dev: str) -> dict:
    try:
        return _cuda(row, cfg, dev)
    except Exception as e:  # noqa: BLE001 - a row that fails is counted, not fatal
        return {"status": f"error ({type(e).__name__}: {e})"[:200]}


def _pooled(a, cfg, rows: list[dict], dev: str, results: list, compiled: list) -> None:
    """The real-size checks in --gpu-workers processes, the pre-screen of the same rows in --cpu-workers, and eager
    against torch.compile for each kept row in --compile-workers, until the time box; work still running after
    --grace-s more is abandoned (a row not measured is not counted)."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    gpu_pool = ProcessPoolExecutor(a.gpu_workers, mp_context=ctx)
    cpu_pool = ProcessPoolExecutor(a.cpu_workers, mp_context=ctx, initializer=_cpu_init)
    comp_pool = ProcessPoolExecutor(a.compile_workers, mp_context=ctx)
    box = time.time() + 60 * (a.max_minutes or 1e6)
    gpu_jobs = {gpu_pool.submit(_gpu_row, row, cfg, dev): row for row in rows}
    cpu_jobs = {row["task_id"]: cpu_pool.submit(_cpu, row, cfg) for row in rows}
    by_id, compile_jobs, pending = {}, {}, set(gpu_jobs)
    while pending and time.time() < box:
        done, pending = wait(pending, timeout=max(0.1, box - time.time()), return_when=FIRST_COMPLETED)
        for f in done:
            row = gpu_jobs[f]
            g = f.result() if f.exception() is None else {"status": f"error ({f.exception()!r})"[:200]}
            by_id[row["task_id"]] = {"task_id": row["task_id"], "gpu": g}
            if g.get("status") == "ok" and not any(g.get(k) for k in KINDS):
                compile_jobs[row["task_id"]] = comp_pool.submit(_compile_flips, row, cfg.run.seed,
                                                                cfg.filter.compile_tolerance, dev)
    for f in pending:
        f.cancel()
    wait([cpu_jobs[t] for t in by_id] + list(compile_jobs.values()), timeout=a.grace_s)
    for row in rows:  # in sample order
        r = by_id.get(row["task_id"])
        if r is None:
            continue
        f = cpu_jobs[row["task_id"]]
        ok = f.done() and not f.cancelled() and f.exception() is None
        r["cpu"] = f.result() if ok else {"status": "not screened in time" if not f.done() else
                                          f"screen failed: {f.exception()!r}"[:200]}
        c = compile_jobs.get(row["task_id"])
        if c is not None and c.done() and not c.cancelled() and c.exception() is None:
            r["compile"] = c.result()
            compiled.append(r)
        results.append(r)
    for p in (gpu_pool, cpu_pool, comp_pool):
        for proc in list((getattr(p, "_processes", None) or {}).values()):
            proc.kill()
        p.shutdown(wait=False, cancel_futures=True)


def _screen_fragile(item: tuple[dict, object]) -> dict:
    """The pre-screen on one row with the config given (the fragility check alone)."""
    from operators.prescreen import prescreen

    row, cfg = item
    res = prescreen(row, cfg)
    return {"status": res.status, "fragile": (res.measurements or {}).get("fragile") or ""}


def _screen_scaled(item: tuple[dict, object]) -> dict:
    """The pre-screen's fragility check alone on one row: its verdict and, where the scaled move flagged it and the
    real move was measured again, that ratio and the response's proportion to the move."""
    from operators.prescreen import prescreen

    row, cfg = item
    m = prescreen(row, cfg).measurements or {}
    return {"task_id": row["task_id"], "ok": "fragile" in m, "fragile": m.get("fragile") or "",
            "real": m.get("prescreen_real_move_ratio"), "proportion": m.get("prescreen_move_proportion")}


def scaled_flags_section(n: int, seed: int, workers: int) -> dict:
    """On the first n rows of the sample: the rows the scaled move flags fragile, and those the screen measures
    again with the real move and lets through as smooth (a response in proportion to the move)."""
    import multiprocessing as mp

    from pipeline.rundir.config import load_preset

    cfg = load_preset("h200")
    cfg = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prescreen_shortcuts="record"),
                              profile=dataclasses.replace(cfg.profile, shortcut_checks=("fragile",)))
    with mp.get_context("spawn").Pool(workers, initializer=_cpu_init) as pool:
        got = [g for g in pool.map(_screen_scaled, [(r, cfg) for r in _rows(500, seed)[:n]], chunksize=2) if g["ok"]]
    again = [g for g in got if g["real"] is not None]
    through = [g for g in again if not g["fragile"]]
    props = sorted(g["proportion"] for g in through)
    return {"screened": len(got), "flagged_scaled": sum(1 for g in got if g["fragile"]) + len(through),
            "measured_again": len(again), "let_through": [g["task_id"] for g in through],
            "let_through_proportion": [props[0], props[-1]] if props else None,
            "standing_proportions": {g["task_id"]: g["proportion"] for g in again if g["fragile"]}}


def against_section(path: Path, workers: int) -> dict:
    """How well the pre-screen's fragility verdict predicts the GPU's on the rows a cuda run judged (the
    `fragile_verdicts` of its shortcuts_cuda.json): GPU-fragile rows it catches and GPU-clean rows it flags, with the
    one-ulp move and with the move scaled."""
    import multiprocessing as mp

    import pyarrow.parquet as pq

    from pipeline.rundir.config import load_preset

    base = load_preset("h200")
    base = dataclasses.replace(base, sample=dataclasses.replace(base.sample, prescreen_shortcuts="record"),
                               profile=dataclasses.replace(base.profile, shortcut_checks=("fragile",)))
    gpu = {t: {"fragile": f} for t, f in json.loads(path.read_text())["fragile_verdicts"].items()}
    code = {r["task_id"]: r["code"] for p in sorted((RELEASE / "data").glob("train-*.parquet"))
            for r in pq.read_table(p, columns=["task_id", "code"]).to_pylist() if r["task_id"] in gpu}
    ids = sorted(gpu)
    out = {}
    with mp.get_context("spawn").Pool(workers, initializer=_cpu_init) as pool:
        for scale in (False, True):
            cfg = dataclasses.replace(base, sample=dataclasses.replace(base.sample, prescreen_ulp_scale=scale))
            got = pool.map(_screen_fragile, [({"task_id": t, "code": code[t]}, cfg) for t in ids], chunksize=4)
            ok = [(t, g) for t, g in zip(ids, got, strict=True) if g["status"] == "ok"]
            fr = [t for t, g in ok if gpu[t].get("fragile")]
            clean = [t for t, g in ok if not gpu[t].get("fragile")]
            flagged = {t for t, g in ok if g["fragile"]}
            out["scaled" if scale else "one ulp"] = {
                "screened": len(ok), "gpu_fragile": len(fr), "caught": sum(t in flagged for t in fr),
                "gpu_clean": len(clean), "false_alarms": sorted(t for t in clean if t in flagged)}
    return out


def _cpu_item(item: tuple[dict, object]) -> tuple[str, dict]:
    row, cfg = item
    try:
        return row["task_id"], _cpu(row, cfg)
    except Exception as e:  # noqa: BLE001 - a row the screen cannot run is counted, not fatal
        return row["task_id"], {"status": f"error ({type(e).__name__})"}


def _judged_by_profile(run: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """The release rows a shortcuts-only profile call measured in RUN (its shortcuts/ table): per task, what each kind
    found, the fragility ratios and seconds, and the kinds that ran; and their code (release rows only: a task
    dedupe dropped is not one)."""
    import pyarrow.parquet as pq

    from pipeline.rundir.store import RunDir

    gpu = {r["task_id"]: {**{k: bool(r.get(c)) for k, c in KINDS.items()}, **{c: r.get(c) for c in FRAGILE_RATIOS},
                          "fragile_s": r.get("gpu_busy_fragile_s") or 0.0, "ran": r["shortcut_checks"].split(",")}
           for r in RunDir(run).read_rows("shortcuts") if r["status"] == "ok" and r.get("shortcut_checks")}
    code = {r["task_id"]: r["code"] for p in sorted((RELEASE / "data").glob("train-*.parquet"))
            for r in pq.read_table(p, columns=["task_id", "code"]).to_pylist() if r["task_id"] in gpu}
    return gpu, code


def _screen_pool(fn, items: list, workers: int, max_minutes: float | None) -> dict[str, dict]:
    """fn over items in a pool of CPU processes until the time box: {task_id: result} of those finished."""
    import multiprocessing as mp

    box = time.time() + 60 * (max_minutes or 1e6)
    got: dict[str, dict] = {}
    pool = mp.get_context("spawn").Pool(workers, initializer=_cpu_init)
    try:
        for t, r in pool.imap_unordered(fn, items):
            got[t] = r
            if time.time() > box:
                break
    finally:
        pool.terminate()
    return got


def against_run_section(run: Path, workers: int, max_minutes: float | None) -> dict:
    """How well the pre-screen (the h200 preset's: all three kinds, the fragility move scaled to the real size)
    predicts the profile stage's own checks at real sizes: every release row a shortcuts-only profile call measured
    in RUN (its shortcuts/ table), screened on the CPU in a pool until the time box; per kind, the GPU's findings the
    screen catches and the GPU-clean rows it flags."""
    from pipeline.rundir.config import load_preset

    cfg = load_preset("h200")
    # the release's shortcuts-only calls built one model per task: the screen does too, to be compared with them
    cfg = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prescreen_shortcuts="record"),
                              profile=dataclasses.replace(cfg.profile, shortcut_checks=("dead", "skip", "fragile"),
                                                          shortcut_fresh_weights=False))
    gpu, code = _judged_by_profile(run)
    ids = sorted(code)
    cpu = _screen_pool(_cpu_item, [({"task_id": t, "code": code[t]}, cfg) for t in ids], workers, max_minutes)
    ok = [t for t in cpu if cpu[t].get("status") == "ok"]
    out: dict = {"gpu_rows": len(ids), "screened": len(cpu), "screened_ok": len(ok), "kinds": {}}
    for k in KINDS:  # each kind over the rows the profile stage ran it on (it stops a task at its first finding)
        found = [t for t in ok if k in gpu[t]["ran"] and gpu[t][k]]
        clean = [t for t in ok if k in gpu[t]["ran"] and not gpu[t][k]]
        out["kinds"][k] = {"gpu_found": len(found), "caught": sum(1 for t in found if cpu[t].get(k)),
                           "missed": sorted(t for t in found if not cpu[t].get(k))[:10], "gpu_clean": len(clean),
                           "false_alarms": sum(1 for t in clean if cpu[t].get(k))}
    anyg = [t for t in ok if any(gpu[t][k] for k in KINDS)]
    out["any"] = {"gpu_found": len(anyg), "caught": sum(1 for t in anyg if any(cpu[t].get(k) for k in KINDS))}
    # a gate on the screen's fragility ratio (the larger of its moves): rows under it would skip the GPU's fragility
    # check. Per gate: the GPU-fragile rows it would let through, and the share of the GPU's fragility seconds kept
    fr = [t for t in ok if "fragile" in gpu[t]["ran"]]
    scr = {t: max((cpu[t].get(c) or 0.0) for c in FRAGILE_RATIOS) for t in fr}
    total_s = sum(gpu[t]["fragile_s"] for t in fr) or 1.0
    out["fragility_gate"] = [{"gate": g, "missed": sorted(t for t in fr if gpu[t]["fragile"] and scr[t] < g),
                              "rows_checked": sum(1 for t in fr if scr[t] >= g),
                              "seconds_kept": sum(gpu[t]["fragile_s"] for t in fr if scr[t] >= g) / total_s}
                             for g in GATES]
    out["rows"] = [{"task_id": t, "gpu": gpu[t], "cpu": cpu[t]} for t in sorted(cpu)]
    return out


def _fresh_item(item: tuple[dict, object]) -> tuple[str, dict]:
    """One row's fragility verdict at screened shapes with one model (draw 0's weights) and with each draw's own."""
    row, cfg = item
    out = {}
    for fresh in (False, True):
        c = dataclasses.replace(cfg, profile=dataclasses.replace(cfg.profile, shortcut_fresh_weights=fresh))
        try:
            out["fresh" if fresh else "one"] = _screen_fragile((row, c))
        except Exception as e:  # noqa: BLE001 - a row the screen cannot run is counted, not fatal
            out["fresh" if fresh else "one"] = {"status": f"error ({type(e).__name__})", "fragile": ""}
    return row["task_id"], out


def fresh_weights_section(run: Path, workers: int, max_minutes: float | None) -> dict:
    """What building each draw's model with its own weights adds to the fragility check: the release rows whose
    fragility a shortcuts-only profile call in RUN judged (with one model per task), screened on the CPU with the
    fragility check alone, once with one model and once with each draw's own; per verdict of the GPU (fragile,
    clean), the rows each screen flags."""
    from pipeline.rundir.config import load_preset

    cfg = load_preset("h200")
    cfg = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prescreen_shortcuts="record"),
                              profile=dataclasses.replace(cfg.profile, shortcut_checks=("fragile",)))
    judged, code = _judged_by_profile(run)
    gpu = {t: j["fragile"] for t, j in judged.items() if "fragile" in j["ran"]}
    ids = sorted(t for t in code if t in gpu)
    cpu = _screen_pool(_fresh_item, [({"task_id": t, "code": code[t]}, cfg) for t in ids], workers, max_minutes)
    ok = [t for t in cpu if all(v["status"] == "ok" for v in cpu[t].values())]
    out: dict = {"gpu_rows": len(ids), "screened": len(cpu), "screened_ok": len(ok)}
    for verdict, rows in (("gpu_fragile", [t for t in ok if gpu[t]]), ("gpu_clean", [t for t in ok if not gpu[t]])):
        out[verdict] = {"rows": len(rows), **{f"flagged_{k}": sum(1 for t in rows if cpu[t][k]["fragile"])
                                              for k in ("one", "fresh")},
                        "fresh_only": sorted(t for t in rows if cpu[t]["fresh"]["fragile"] and not cpu[t]["one"]["fragile"])}
    return out


def _rule_key(why: str) -> str:
    """The group of a value-scale reason: a fixed output, a dead input, or the operator it names."""
    if why.startswith("the output"):
        return "fixed output"
    if why.startswith("input "):
        return "dead input"
    return why.split(" ")[0].rstrip(":")


def sampler_section(n: int, seed: int) -> dict:
    """What the value-scale rule (operators/value_scale.py) prevents: of n h200-preset draws sampled without it,
    how many it flags, by rule; with it on the sampler draws another in their place."""
    import json as _json

    import networkx as nx

    from operators.graph import execute
    from operators.sample import sample_tasks
    from operators.value_scale import cannot_matter
    from pipeline.rundir.config import load_preset

    cfg = dataclasses.replace(load_preset("h200").sample, prescreen="off", value_scale_rule=False)  # the preset has it on
    by_rule: dict[str, list[str]] = {}
    rows = sample_tasks(cfg, seed, range(n), set())
    for r in rows:
        g = nx.node_link_graph(_json.loads(r["graph"]), directed=True, edges="edges")
        why = cannot_matter(g, execute(g, g.graph["constants"], None)[1])
        if why:
            by_rule.setdefault(_rule_key(why), []).append(r["task_id"])
    after = sample_tasks(dataclasses.replace(cfg, value_scale_rule=True), seed, range(n), set())
    left = 0
    for r in after:
        g = nx.node_link_graph(_json.loads(r["graph"]), directed=True, edges="edges")
        left += bool(cannot_matter(g, execute(g, g.graph["constants"], None)[1]))
    return {"sampled": len(rows), "flagged": sum(map(len, by_rule.values())), "by_rule": by_rule,
            "flagged_with_rule": left, "sampled_with_rule": len(after)}


SCREEN_SIDES = ("before", "after")
# the screen's CPU budgets per draw before the sampler's screen was made cheaper (the h200 preset's then): the
# before side keeps them, so the two sides compare the stage as it was with the stage as shipped
BEFORE_SCREEN_MS = {"prescreen_ms": 1000.0, "prescreen_retry_ms": 4000.0}


def _screen_side(args: tuple[str, int, int]) -> dict:
    """One side of screen_section, in its own process (its CPU time is the sample stage's alone)."""
    from operators.prescreen import RECORDS_KEY, Screen
    from operators.sample import Stats, sample_tasks
    from pipeline.rundir.config import load_preset

    side, n, seed = args
    full = load_preset("h200")
    sample = dataclasses.replace(full.sample, prescreen="resample", prescreen_shortcuts="drop")
    profile = full.profile
    if side == "before":  # the sampler without the value-scale rule, the screen's exhaustive fragility check
        sample = dataclasses.replace(sample, value_scale_rule=False, **BEFORE_SCREEN_MS)
        profile = dataclasses.replace(profile, shortcut_mode="exhaustive")
    cfg = dataclasses.replace(full, sample=sample, profile=profile)
    screen, stats = Screen(cfg, "resample"), Stats()
    cpu = time.process_time()
    rows = sample_tasks(sample, seed, range(n), set(), stats, screen)
    cpu = time.process_time() - cpu
    recs = [r for row in rows for r in row.pop(RECORDS_KEY, [])]
    kinds = {"reason": [r for r in recs if r["reason"] and not (r["dead_inputs"] or r["skippable_ops"] or r["fragile"])],
             "dead": [r for r in recs if r["dead_inputs"]], "skip": [r for r in recs if r["skippable_ops"]],
             "fragile": [r for r in recs if r["fragile"]]}
    flagged = [r for r in recs if r["resampled"]]
    return {"side": side, "tasks": len(rows), "screened": len(recs), "judged": sum(r["status"] == "ok" for r in recs),
            "flagged": len(flagged), "by_kind": {k: len(v) for k, v in kinds.items()}, "cpu_s": cpu,
            "cpu_s_per_task": cpu / max(len(rows), 1), "screen_cpu_s": sum(r["cpu_ms"] for r in recs) / 1e3,
            "attempts": stats.attempts, "rejected": stats.rejected or {},
            "ops_drawn": sorted({o for row in rows for o in row["ops"]}),
            "records": [{k: r[k] for k in ("task_id", "reason", "status", "resampled", "dead_inputs", "skippable_ops",
                                           "fragile", "graph", "cpu_ms")} for r in recs]}


def screen_section(n: int, seed: int, sides: tuple[str, ...] = SCREEN_SIDES) -> dict:
    """The sample stage as the h200 preset runs it (pre-screen in drop mode: a flagged draw is drawn again) until n
    tasks are kept, on two sides, each in its own process at once: `before`, the value-scale rule off and the
    screen's exhaustive fragility check; `after`, the preset as shipped (rule on, profile.shortcut_mode = "cheap").
    Per side: the share of screened draws the screen flags (an output check's reason, a dead input, a skippable
    operator or a fragile output, by kind; a screen stops at its first finding), and the stage's CPU seconds per
    kept task. Each side's records are returned for grouping by cause."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(len(sides)) as pool:
        got = pool.map(_screen_side, [(side, n, seed) for side in sides])
    return {r.pop("side"): r for r in got}


def _write_screen(a, torch) -> None:
    t0 = time.time()
    r = screen_section(a.sampler_screen, a.seed)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    cmd = f"python benchmarks/shortcuts.py --sampler-screen {a.sampler_screen} --seed {a.seed}"
    base = {"command": cmd, "hardware": "2-core CPU", "torch": torch.__version__, "commit": commit}
    before, after = r["before"], r["after"]

    def share(s):
        return f"{s['flagged']} of {s['screened']} ({100 * s['flagged'] / max(s['screened'], 1):.1f}%)"

    headline = [
        {"figure": "h200 draws the pre-screen flags, before (value-scale rule off, exhaustive fragility)",
         "value": share(before), "target": None, **base},
        {"figure": "h200 draws the pre-screen flags, as shipped", "value": share(after), "target": "<= 10%", **base},
        {"figure": "sample stage CPU-s per kept task (drop mode), before -> as shipped",
         "value": f"{before['cpu_s_per_task']:.2f} -> {after['cpu_s_per_task']:.2f} "
                  f"({after['cpu_s_per_task'] / before['cpu_s_per_task']:.2f}x)", "target": "<= 0.33x", **base},
        {"figure": "catalog operators drawn, before -> as shipped",
         "value": f"{len(before['ops_drawn'])} -> {len(after['ops_drawn'])}", "target": None, **base},
    ]
    print(f"{'':<8}{'tasks':>7}{'screened':>10}{'flagged':>9}{'share':>8}{'reason':>8}{'dead':>6}{'skip':>6}"
          f"{'fragile':>9}{'CPU-s/task':>12}")
    for side, s in (("before", before), ("after", after)):
        k = s["by_kind"]
        print(f"{side:<8}{s['tasks']:>7}{s['screened']:>10}{s['flagged']:>9}"
              f"{100 * s['flagged'] / max(s['screened'], 1):>7.1f}%{k['reason']:>8}{k['dead']:>6}{k['skip']:>6}"
              f"{k['fragile']:>9}{s['cpu_s_per_task']:>12.2f}")
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    out = Path(a.out) / "shortcuts_sampler_screen.json"
    summary = {side: {k: v for k, v in s.items() if k not in ("records", "ops_drawn")} for side, s in r.items()}
    out.write_text(json.dumps({"headline": headline, "sides": summary, "sample_size": a.sampler_screen,
                               "minutes": round((time.time() - t0) / 60, 1)}, indent=1) + "\n")
    if a.records:  # per-draw records for grouping flagged draws by cause (not committed)
        Path(a.records).write_text(json.dumps(r))
    print(f"wrote {out}")


def coverage_section(n: int, seed: int) -> dict:
    """Which catalog operators n h200 draws hold (no pre-screen), value-scale rule off and on."""
    import collections

    from operators.catalog import sampleable
    from operators.sample import Stats, sample_tasks
    from pipeline.rundir.config import load_preset

    base = dataclasses.replace(load_preset("h200").sample, prescreen="off")
    out: dict = {"catalog": len(sampleable())}
    for rule in (False, True):
        stats = Stats()
        rows = sample_tasks(dataclasses.replace(base, value_scale_rule=rule), seed, range(n), set(), stats)
        out["on" if rule else "off"] = {"counts": dict(collections.Counter(o for r in rows for o in r["ops"])),
                                        "attempts": stats.attempts, "rejected": stats.rejected or {}}
    return out


def _write_coverage(a, torch) -> None:
    r = coverage_section(a.sampler_coverage, a.seed)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    cmd = f"python benchmarks/shortcuts.py --sampler-coverage {a.sampler_coverage} --seed {a.seed}"
    base = {"command": cmd, "hardware": "2-core CPU", "torch": torch.__version__, "commit": commit}
    off, on = r["off"]["counts"], r["on"]["counts"]
    lost = sorted(o for o in off if o not in on)
    by_cat: dict = {}
    from operators.catalog import REGISTRY

    for side, counts in (("off", off), ("on", on)):
        for o, k in counts.items():
            by_cat.setdefault(REGISTRY[o].category, {"off": 0, "on": 0})[side] += k
    headline = [{"figure": f"catalog operators in {a.sampler_coverage} h200 draws, value-scale rule off -> on",
                 "value": f"{len(off)} -> {len(on)} of {r['catalog']}", "target": None, **base},
                {"figure": "operators drawn with the rule off and not with it on", "value": f"{len(lost)}: "
                 + ", ".join(f"{o} ({off[o]})" for o in sorted(lost, key=lambda o: -off[o])), "target": None, **base}]
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    print(f"{'category':<22}{'off':>6}{'on':>6}")
    for c, v in sorted(by_cat.items()):
        print(f"{c:<22}{v['off']:>6}{v['on']:>6}")
    out = Path(a.out) / "shortcuts_sampler_coverage.json"
    out.write_text(json.dumps({"headline": headline, "operator_uses_by_category": by_cat,
                               "rejected": {k: r[k]["rejected"] for k in ("off", "on")}}, indent=1) + "\n")
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=None)
    ap.add_argument("--gpu-workers", type=int, default=3, help="cuda: processes running the real-size checks")
    ap.add_argument("--cpu-workers", type=int, default=8, help="cuda: processes pre-screening beside the GPU")
    ap.add_argument("--compile-workers", type=int, default=4, help="cuda: GPU processes trying compile flips")
    ap.add_argument("--grace-s", type=float, default=60.0, help="cuda: wait this long for the pools after the time box")
    ap.add_argument("--real-device", default=None, help=argparse.SUPPRESS)  # cpu: try the cuda path without a GPU
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--sampler", type=int, default=0, help="only the sampler section: N h200 draws "
                    "(writes shortcuts_sampler.json)")
    ap.add_argument("--sampler-screen", type=int, default=0, help="only the sampler's screen section: N h200 draws "
                    "kept in drop mode, before (value-scale rule off, exhaustive fragility) and as shipped (writes shortcuts_sampler_screen.json)")
    ap.add_argument("--sampler-coverage", type=int, default=0, help="only the sampler's coverage section: the "
                    "catalog operators N h200 draws hold, value-scale rule off and on (shortcuts_sampler_coverage.json)")
    ap.add_argument("--records", default=None, help="--sampler-screen: also write each draw's record to this file")
    ap.add_argument("--against", default=None, help="only the CPU-vs-GPU section: the shortcuts_cuda.json of a cuda "
                    "run (writes shortcuts_cpu_vs_gpu.json)")
    ap.add_argument("--against-run", default=None, help="only the CPU-vs-profile section: a run directory whose "
                    "shortcuts/ a shortcuts-only profile call measured (writes shortcuts_cpu_vs_profile.json)")
    ap.add_argument("--fresh-weights", default=None, help="only the fresh-weights section: a run directory as for "
                    "--against-run (writes shortcuts_fresh_weights.json)")
    ap.add_argument("--scaled-flags", type=int, default=0, help="only the scaled-flags section: the first N rows "
                    "of the sample, the pre-screen's fragility check alone (writes shortcuts_scaled_flags.json)")
    ap.add_argument("--gpu-name", default=None, help="--against-run: the GPU that profile call ran on")
    ap.add_argument("--gpu-commit", default=None, help="--against-run: the commit that profile call ran")
    a = ap.parse_args()
    import torch

    if a.sampler:
        return _write_sampler(a, torch)
    if a.sampler_screen:
        return _write_screen(a, torch)
    if a.sampler_coverage:
        return _write_coverage(a, torch)
    if a.scaled_flags:
        return _write_scaled_flags(a, torch)
    if a.against:
        return _write_against(a, torch)
    if a.against_run:
        return _write_against_run(a, torch)
    if a.fresh_weights:
        return _write_fresh_weights(a, torch)

    from pipeline.rundir.config import load_preset

    cfg = load_preset("h200")
    cfg = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prescreen_shortcuts="record"),
                              profile=dataclasses.replace(cfg.profile, shortcut_checks=("dead", "skip", "fragile")))
    rows, t0, results = _rows(a.n, a.seed), time.time(), []
    dev = a.real_device or a.device
    compiled = []
    if a.device == "cuda":
        _pooled(a, cfg, rows, dev, results, compiled)
    else:
        for row in rows:
            if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
                break
            r = {"task_id": row["task_id"]}
            try:
                r["cpu"] = _cpu(row, cfg)
            except Exception as e:  # noqa: BLE001 - a row that fails is counted, not fatal
                r["error"] = f"{type(e).__name__}: {e}"[:200]
            results.append(r)
    side = "gpu" if a.device == "cuda" else "cpu"
    judged = [r for r in results if r.get(side, {}).get("status") == "ok"]
    counts = {k: [r["task_id"] for r in judged if r[side].get(k)] for k in KINDS}
    anyk = [r for r in judged if any(r[side].get(k) for k in KINDS)]
    screened = [r for r in judged if r.get("cpu", {}).get("status") == "ok"]
    caught = {k: (sum(1 for r in screened if r[side].get(k) and r["cpu"].get(k)),
                  sum(1 for r in screened if r[side].get(k))) for k in KINDS} if side == "gpu" else {}
    kept = [r for r in judged if not any(r[side].get(k) for k in KINDS)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    cmd = f"python benchmarks/shortcuts.py --device {a.device} --n {a.n} --seed {a.seed}" + (
        f" --max-minutes {a.max_minutes:g}" if a.max_minutes else "")
    hw = "2-core CPU (no GPU)" if dev == "cpu" else torch.cuda.get_device_name(0)
    where = "screened shapes (CPU pre-screen)" if side == "cpu" else "real sizes"
    n = len(judged)

    def fig(name, val, target=None):
        return {"figure": name, "value": val, "target": target, "command": cmd, "hardware": hw,
                "torch": torch.__version__, "commit": commit}

    headline = [fig(f"v1 rows judged at {where}", f"{n} of {len(results)} run ({len(rows)} drawn)")]
    for k, label in (("dead", "dead input"), ("skip", "skippable operator"), ("fragile", "numerically fragile output")):
        share = f"{len(counts[k])} ({100 * len(counts[k]) / max(n, 1):.1f}%)"
        headline.append(fig(f"v1 rows with a {label}, {where}", share + (f", e.g. {counts[k][0]}" if counts[k] else ""),
                            "0 after the change" if k != "fragile" else "<= 0.2% flips after the change"))
        if caught:
            hit, of = caught[k]
            headline.append(fig(f"share of {label} rows the CPU pre-screen catches",
                                f"{hit} of {of}" + (f" ({100 * hit / of:.0f}%)" if of else "")))
    headline.append(fig(f"v1 rows with any shortcut, {where}", f"{len(anyk)} ({100 * len(anyk) / max(n, 1):.1f}%)"))
    if side == "gpu":
        flips = [r["task_id"] for r in kept if r["gpu"].get("fresh_flip")]
        headline.append(fig("kept rows whose output leaves tolerance under an honest rounding on 5 fresh draws",
                            f"{len(flips)} of {len(kept)} ({100 * len(flips) / max(len(kept), 1):.1f}%)"
                            + (f", e.g. {flips[0]}" if flips else ""), "<= 0.2%"))
        ck = [r for r in compiled if r in kept and "compile_ratio" in r["compile"]]
        cflips = [r["task_id"] for r in ck if r["compile"]["compile_ratio"] >= 1]
        headline.append(fig("kept rows where eager and torch.compile disagree on 5 fresh draws",
                            f"{len(cflips)} of {len(ck)} compiled ({100 * len(cflips) / max(len(ck), 1):.1f}%)"
                            + (f", e.g. {cflips[0]}" if cflips else ""), "<= 0.2%"))
        gs = sorted(r["gpu"]["gpu_s"] for r in judged)
        if gs:
            headline.append(fig(f"seconds of the checks per row, real sizes, {a.gpu_workers} processes on one GPU "
                                "(median, p90)",
                                f"{gs[len(gs) // 2]:.3f}, {gs[int(0.9 * (len(gs) - 1))]:.3f}"))
    print(f"{'figure':<60} value")
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    out = Path(a.out) / f"shortcuts_{a.device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if side == "gpu":  # per-row results beside the record (not committed: benchmarks/results/*.jsonl)
        out.with_suffix(".rows.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in results))
    # the GPU's fragility verdict per judged row ("" when clean): what --against compares the CPU pre-screen with
    # and the dead inputs and skippable operators it found, what shortcut_gating.py holds the screen's ratios against
    verdicts = {"fragile_verdicts": {r["task_id"]: r[side].get("fragile") or "" for r in judged},
                "dead_verdicts": {r["task_id"]: r[side].get("dead") or [] for r in judged},
                "skip_verdicts": {r["task_id"]: r[side].get("skip") or [] for r in judged}} if side == "gpu" else {}
    out.write_text(json.dumps({"headline": headline, "examples": {k: v[:10] for k, v in counts.items()}, **verdicts,
                               "statuses": {s: sum(1 for r in results if r.get(side, {}).get("status", "error")
                                                   .split(" (")[0] == s) for s in
                                            {r.get(side, {}).get("status", "error").split(" (")[0] for r in results}},
                               "minutes": round((time.time() - t0) / 60, 1),
                               # the checks' settings (the h200 preset's): which checks these counts are of
                               "settings": {k: getattr(cfg.profile, k) for k in (
                                   "shortcut_draws", "shortcut_ulp_steps", "shortcut_f64_draws",
                                   "shortcut_fresh_weights", "shortcut_stop_first")}
                               | {"prescreen_ulp_scale": cfg.sample.prescreen_ulp_scale}}, indent=1) + "\n")
    print(f"wrote {out}")


def _write_sampler(a, torch) -> None:
    t0 = time.time()
    r = sampler_section(a.sampler, a.seed)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    cmd = f"python benchmarks/shortcuts.py --sampler {a.sampler} --seed {a.seed}"
    base = {"command": cmd, "hardware": "2-core CPU (no GPU)", "torch": torch.__version__, "commit": commit}
    ranked = sorted(r["by_rule"].items(), key=lambda kv: -len(kv[1]))
    rules = ", ".join(f"{k} {len(v)}" for k, v in ranked[:8]) or "none"
    if len(ranked) > 8:
        rules += f", {sum(len(v) for _, v in ranked[8:])} more over {len(ranked) - 8} other operators"
    headline = [{"figure": f"h200 draws the value-scale rule prevents (of {r['sampled']})",
                 "value": f"{r['flagged']} ({100 * r['flagged'] / max(r['sampled'], 1):.1f}%): {rules}",
                 "target": None, **base},
                {"figure": "h200 draws with the rule on that it would flag", "value": f"{r['flagged_with_rule']} of "
                 f"{r['sampled_with_rule']}", "target": "0", **base}]
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    out = Path(a.out) / "shortcuts_sampler.json"
    out.write_text(json.dumps({"headline": headline, "examples": {k: v[:5] for k, v in r["by_rule"].items()},
                               "minutes": round((time.time() - t0) / 60, 1)}, indent=1) + "\n")
    print(f"wrote {out}")


def _write_against(a, torch) -> None:
    t0 = time.time()
    r = against_section(Path(a.against), a.cpu_workers)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    cmd = f"python benchmarks/shortcuts.py --against {a.against} --cpu-workers {a.cpu_workers}"
    base = {"command": cmd, "hardware": "2-core CPU (no GPU)", "torch": torch.__version__, "commit": commit}
    headline = []
    for how, v in r.items():
        fa = len(v["false_alarms"])
        headline.append({"figure": f"GPU-fragile v1 rows the CPU pre-screen catches, {how} move", "value":
                         f"{v['caught']} of {v['gpu_fragile']} ({100 * v['caught'] / max(v['gpu_fragile'], 1):.0f}%); "
                         f"flags {fa} of {v['gpu_clean']} GPU-clean rows ({100 * fa / max(v['gpu_clean'], 1):.1f}%)",
                         "target": None, **base})
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    out = Path(a.out) / "shortcuts_cpu_vs_gpu.json"
    out.write_text(json.dumps({"headline": headline, **r, "minutes": round((time.time() - t0) / 60, 1)}, indent=1) + "\n")
    print(f"wrote {out}")


def _write_against_run(a, torch) -> None:
    t0 = time.time()
    r = against_run_section(Path(a.against_run), a.cpu_workers, a.max_minutes)
    # two machines made the figure: the GPU judged the rows (its call's commit), the CPU screened them
    base = {"command": _run_command("--against-run", a.against_run, a),
            "hardware": f"2-core CPU (no GPU) against {a.gpu_name or 'the GPU of the profile call'}",
            "torch": torch.__version__, "commit": f"{_commit()} (screen), {a.gpu_commit or '?'} (GPU)"}
    names = {"dead": "dead inputs", "skip": "skippable operators", "fragile": "fragile outputs"}
    headline = []
    for k, v in r["kinds"].items():
        headline.append({"figure": f"profile-found {names[k]} of release rows the CPU pre-screen catches",
                         "value": f"{v['caught']} of {v['gpu_found']} ({100 * v['caught'] / max(v['gpu_found'], 1):.0f}%); "
                         f"flags {v['false_alarms']} of {v['gpu_clean']} profile-clean rows "
                         f"({100 * v['false_alarms'] / max(v['gpu_clean'], 1):.1f}%); {r['screened_ok']} rows screened "
                         f"of {r['gpu_rows']}", "target": None, **base})
    a_ = r["any"]
    headline.append({"figure": "profile-found shortcuts (any kind) of release rows the CPU pre-screen catches",
                     "value": f"{a_['caught']} of {a_['gpu_found']} ({100 * a_['caught'] / max(a_['gpu_found'], 1):.0f}%)",
                     "target": None, **base})
    g0 = r["fragility_gate"][0]
    headline.append({"figure": "a gate on the screen's fragility ratio (GPU fragility check only at or above it)",
                     "value": f"at {g0['gate']:g}: lets {len(g0['missed'])} of {r['kinds']['fragile']['gpu_found']} "
                     f"profile-fragile rows through while sparing {100 * (1 - g0['seconds_kept']):.0f}% of the fragility "
                     f"seconds; so the GPU checks every row", "target": "0 let through", **base})
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    for g in r["fragility_gate"]:
        print(f"fragility gate {g['gate']:<5g} misses {len(g['missed']):3d} GPU-fragile rows, checks "
              f"{g['rows_checked']} of {r['screened_ok']} rows, keeps {100 * g['seconds_kept']:.0f}% of the seconds")
    out = Path(a.out) / "shortcuts_cpu_vs_profile.json"
    rows = r.pop("rows")  # per row, beside the record (not committed: benchmarks/results/*.jsonl)
    out.with_suffix(".rows.jsonl").write_text("".join(json.dumps(x, default=str) + "\n" for x in rows))
    out.write_text(json.dumps({"headline": headline, **r, "minutes": round((time.time() - t0) / 60, 1)}, indent=1)
                   + "\n")
    print(f"wrote {out}")


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()


def _run_command(flag: str, run: str, a) -> str:
    """The command line of a run-directory section, RUN relative to the checkout (else DIR: no machine paths)."""
    path = Path(run).resolve()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else "DIR"
    return (f"python benchmarks/shortcuts.py {flag} {shown} --cpu-workers {a.cpu_workers}"
            + (f" --max-minutes {a.max_minutes:g}" if a.max_minutes else ""))


def _write_fresh_weights(a, torch) -> None:
    t0 = time.time()
    r = fresh_weights_section(Path(a.fresh_weights), a.cpu_workers, a.max_minutes)
    base = {"command": _run_command("--fresh-weights", a.fresh_weights, a), "hardware": "2-core CPU (no GPU), "
            "screened shapes", "torch": torch.__version__, "commit": _commit()}
    c, f = r["gpu_clean"], r["gpu_fragile"]
    pct = lambda x, n: f"{100 * x / max(n, 1):.1f}%"  # noqa: E731
    headline = [{"figure": "GPU-clean v1 rows the fragility screen flags: one model / each draw's own weights",
                 "value": f"{c['flagged_one']} / {c['flagged_fresh']} of {c['rows']} "
                          f"({pct(c['flagged_one'], c['rows'])} / {pct(c['flagged_fresh'], c['rows'])})",
                 "target": None, **base},
                {"figure": "GPU-fragile v1 rows the fragility screen flags: one model / each draw's own weights",
                 "value": f"{f['flagged_one']} / {f['flagged_fresh']} of {f['rows']}", "target": None, **base}]
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    out = Path(a.out) / "shortcuts_fresh_weights.json"
    out.write_text(json.dumps({"headline": headline, **r, "minutes": round((time.time() - t0) / 60, 1)},
                              indent=1) + "\n")
    print(f"wrote {out}")


def _write_scaled_flags(a, torch) -> None:
    t0 = time.time()
    r = scaled_flags_section(a.scaled_flags, a.seed, a.cpu_workers)
    lo_hi = r["let_through_proportion"]
    headline = [{"figure": "v1 rows the pre-screen's scaled move flags fragile, and those it lets through as smooth",
                 "value": f"{r['flagged_scaled']} of {r['screened']} flagged; {r['measured_again']} measured again "
                          f"with the real move, {len(r['let_through'])} let through"
                          + (f" ({lo_hi[0]:.2f} to {lo_hi[1]:.2f} times in proportion)" if lo_hi else ""),
                 "target": None, "command": f"python benchmarks/shortcuts.py --scaled-flags {a.scaled_flags} "
                                            f"--seed {a.seed} --cpu-workers {a.cpu_workers}",
                 "hardware": "2-core CPU (no GPU), screened shapes", "torch": torch.__version__, "commit": _commit()}]
    print(f"{headline[0]['figure']}: {headline[0]['value']}")
    out = Path(a.out) / "shortcuts_scaled_flags.json"
    out.write_text(json.dumps({"headline": headline, **r, "minutes": round((time.time() - t0) / 60, 1)},
                              indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # pool processes abandoned after the grace period must not hold the interpreter's exit
