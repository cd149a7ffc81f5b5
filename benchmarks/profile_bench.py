"""Measure the profile stage itself on a GPU: throughput, the KernelBench-style serial loop it replaces,
timing agreement, repeatability, planted failures, multi-GPU scaling, and KernelBench levels 1-3 through
the profile and filter checks. Runs on the bare GPU image: torch, pyarrow and stdlib, plus this repo's
executor, harness, config and filters (all stdlib-only).

    python benchmarks/profile_bench.py --tasks .carry/bench_tasks.parquet --device cuda --workers 12 \
        --phases opsynth,kbloop,repeat,planted --out $OUT
    python benchmarks/profile_bench.py --kernelbench .carry/kernelbench_main.parquet --phases kernelbench --out $OUT
    python benchmarks/profile_bench.py --tasks ... --phases scaling --gpus 0,1 --out $OUT

Writes OUT/profile_<phase>.json (figures) and OUT/profile_<phase>_rows.jsonl (one measurement per task);
the summary table is printed last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from filters.base import decide, reason_kind  # noqa: E402
from filters.checks import CHECKS as FILTER_CHECKS  # noqa: E402
from filters.labels import labels_match  # noqa: E402
from pipeline.gpu.executors import make_executor  # noqa: E402
from pipeline.gpu.worker_settings import WorkerSettings  # noqa: E402
from pipeline.rundir.config import load_preset  # noqa: E402

# the filter stage's checks, labels aside (label truth is the sampler's business; measurements carry no `ops`)
CHECKS = tuple(c for c in FILTER_CHECKS if c is not labels_match)

PLANTED = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        {body}
def get_inputs():
    return [torch.rand(1024, 1024)]
def get_init_inputs():
    return []
'''
PLANTS = {
    "plant_segfault": ("import ctypes; ctypes.string_at(0)", "crashed"),
    "plant_hang": ("while True: pass", "timeout"),
    "plant_gpu_oom": ("return torch.empty(2**40, device=x.device)", "oom"),
    "plant_device_assert": ("return x.view(-1)[torch.tensor([2**40], device=x.device)] + x.sum()", "crashed"),
    "plant_raises": ("raise ValueError('planted')", "error"),
}
GOOD = PLANTED.replace("{body}", "return torch.tanh(x @ x) * 2")


def settings_for(preset: str, seed: int) -> tuple[WorkerSettings, object]:
    """The workers' settings exactly as `opsynth profile` builds them for the preset, with this seed."""
    cfg = load_preset(preset)
    return dataclasses.replace(WorkerSettings.from_config(cfg), seed=seed), cfg.filter


def fresh_caches(tag: str) -> dict:
    """Cold inductor and Triton caches, so no run profits from another's compiled kernels."""
    d = tempfile.mkdtemp(prefix=f"opsynth-cache-{tag}-")
    return {"TORCHINDUCTOR_CACHE_DIR": f"{d}/inductor", "TRITON_CACHE_DIR": f"{d}/triton"}


def run_executor(tasks: list[dict], device: str, workers: int, gpus: list[int] | None, settings: WorkerSettings,
                 env: dict) -> tuple[list[dict], dict]:
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        t0 = time.perf_counter()
        with make_executor("local", device=device, workers=workers, gpus=gpus, settings=settings) as ex:
            ready = ex.wait_ready()
            t1 = time.perf_counter()
            rows = list(ex.imap_unordered(tasks))
            t2 = time.perf_counter()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rows, {"startup_s": t1 - t0, "wall_s": t2 - t1, "workers_ready": ready}


def verdicts(rows: list[dict], fsec) -> tuple[int, Counter]:
    reasons: Counter = Counter()
    kept = 0
    for m in rows:
        keep, why = decide(m, CHECKS, fsec)
        kept += keep
        if not keep:
            reasons[reason_kind(why)] += 1
    return kept, reasons


def load_tasks(path: str, n: int) -> list[dict]:
    cols = [c for c in ("task_id", "code", "flops", "bytes_moved", "ops", "predicted_peak_bytes") if c in pq.read_schema(path).names]
    return pq.read_table(path, columns=cols).to_pylist()[:n]


def machine(device: str) -> dict:
    import torch

    info = {"torch": torch.__version__, "python": platform.python_version(), "cpus": os.cpu_count(),
            "commit": os.environ.get("OPSYNTH_COMMIT", "unknown")}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus"] = torch.cuda.device_count()
        info["cuda"] = torch.version.cuda
    return info


def headline(name: str, figures: dict) -> list[dict]:
    """The figures docs/figures.md shows for a phase (python -m pipeline.outputs.figures reads them)."""
    m = figures.get("machine", {})
    common = {"command": "python " + str(figures.get("command", "benchmarks/profile_bench.py")),
              "hardware": f"{m.get('gpus', 1)}x {m.get('gpu', m.get('device', 'GPU'))} ({m.get('cpus')} host cores)",
              "torch": str(m.get("torch")), "commit": str(m.get("commit"))}
    if name == "opsynth" and figures.get("tasks_per_hour"):
        return [{"figure": f"profile stage throughput, {figures['tasks']} h200 tasks, {figures.get('workers_per_gpu')} workers",
                 "value": f"{figures['tasks_per_hour']:,.0f} tasks/h ({figures['gpu_s_per_task']:.3f} GPU-s per task)",
                 "target": None, **common}]
    if name == "kbloop" and figures.get("ratio_per_task"):
        rows = [{"figure": "profile stage vs a KernelBench-style serial loop, per task",
                 "value": f"{figures['ratio_per_task']:.1f}x faster", "target": None, **common}]
        ag = figures.get("agreement") or {}
        if ag.get("pairs"):
            rows.append({"figure": "eager timing agreement with KernelBench's eager mean",
                         "value": f"{ag['within_5pct']}/{ag['pairs']} within 5% (median {100 * ag['median_rel_diff']:.2f}%)",
                         "target": None, **common})
        return rows
    return []


def write(out: Path, name: str, figures: dict, rows: list[dict] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    figures = {"headline": headline(name, figures), **figures}
    (out / f"profile_{name}.json").write_text(json.dumps(figures, indent=2, default=str))
    if rows is not None:
        with open(out / f"profile_{name}_rows.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r, default=str) + "\n")


def peak_calibration(tasks: list[dict], rows: list[dict]) -> dict:
    """Measured peak memory over the sampler's prediction, for tasks whose first forward ran on the GPU."""
    pred = {t["task_id"]: t.get("predicted_peak_bytes") for t in tasks}
    ratios = sorted(r["peak_memory_bytes"] / pred[r["task_id"]] for r in rows
                    if r.get("peak_memory_bytes") and pred.get(r["task_id"]))
    if not ratios:
        return {}
    q = statistics.quantiles(ratios, n=20, method="inclusive") if len(ratios) > 1 else ratios * 19
    return {"tasks": len(ratios), "p50": q[9], "p90": q[17], "p95": q[18], "max": ratios[-1],
            "share_over_1": sum(x > 1 for x in ratios) / len(ratios)}


def phase_opsynth(a, tasks, settings, fsec) -> tuple[dict, list[dict]]:
    gpus = first_gpu(a)
    rows, t = run_executor(tasks, a.device, a.workers, gpus, settings, fresh_caches("opsynth"))
    kept, reasons = verdicts(rows, fsec)
    n = len(rows)
    status = Counter(r["status"] for r in rows)
    busy = sum(r.get("gpu_busy_s") or 0 for r in rows)
    fig = {"tasks": n, "accepted": kept, "status": dict(status), "rejections": dict(reasons.most_common()),
           **t, "gpu_s_per_task": t["wall_s"] / n, "gpu_s_per_accepted": t["wall_s"] / max(kept, 1),
           "gpu_s_per_task_with_startup": (t["wall_s"] + t["startup_s"]) / n,
           "tasks_per_hour": n / t["wall_s"] * 3600, "lock_held_s_per_task": busy / n,
           "gpu_lock_utilisation": busy / t["wall_s"],
           # timed runs hold the GPU alone: their share of the wall is the hard floor of GPU-s per task
           "exclusive_s_per_task": sum(r.get("gpu_exclusive_s") or 0 for r in rows) / n,
           "exclusive_share_of_wall": sum(r.get("gpu_exclusive_s") or 0 for r in rows) / t["wall_s"],
           "peak_measured_over_predicted": peak_calibration(tasks, rows),
           "oom_after_retry": sum(r["status"] == "oom" for r in rows),
           "tasks_with_timing_alloc_retries": sum((r.get("timing_alloc_retries") or 0) > 0 for r in rows),
           # where a worker's time goes: CPU (mostly inductor), waiting for the GPU lock or the memory budget
           **{f"{k}_per_task": sum(r.get(k) or 0 for r in rows) / n
              for k in ("cpu_s", "lock_wait_s", "budget_wait_s", "regrow_wait_s", "wall_s")},
           "cpu_cores_busy": sum(r.get("cpu_s") or 0 for r in rows) / t["wall_s"],
           "lock_phases_mean_s": {k: statistics.fmean(r.get(k) or 0 for r in rows) for k in
                                  ("gpu_busy_setup_s", "gpu_busy_eager_s", "gpu_busy_compile_s", "gpu_busy_s")}}
    return fig, rows


def phase_kbloop(a, tasks, out: Path) -> tuple[dict, list[dict]]:
    path = out / "kbloop_rows.jsonl"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "kernelbench_loop.py"), a.tasks, str(path), "--device", a.device,
           "--n", str(a.kb_n), "--budget-s", str(a.kb_budget_s)]
    env = {**os.environ, **fresh_caches("kbloop"), "CUDA_VISIBLE_DEVICES": a.gpus.split(",")[0]}
    # timing agreement needs more tasks than the full loop has time for: KernelBench's eager timing alone
    ops = [json.loads(x) for x in (out / "profile_opsynth_rows.jsonl").read_text().splitlines()]
    ids = [r["task_id"] for r in ops if r.get("status") == "ok" and r.get("eager_ms")][: a.agree_n]
    epath = out / "kbloop_eager_rows.jsonl"
    subprocess.run([*cmd[:3], str(epath), "--device", a.device, "--n", str(len(ids)), "--ids", ",".join(ids),
                    "--eager-only", "--budget-s", str(a.agree_budget_s)], env=env, check=True)
    subprocess.run(cmd, env=env, check=True)
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    walls = [r["wall_s"] for r in rows]
    fig = {"tasks": len(rows), "s_per_task": statistics.fmean(walls) if walls else None,
           "status": dict(Counter(r["status"] for r in rows)),
           "correct_1e4": sum(bool(r.get("correct_1e4")) for r in rows)}
    eager = [json.loads(x) for x in epath.read_text().splitlines() if x.strip()]
    return fig, eager


def _agreement(pairs: list[tuple[float, float]]) -> dict:
    diffs = [abs(o - k) / k for o, k in pairs]
    return {"pairs": len(pairs), "within_5pct": sum(d <= 0.05 for d in diffs),
            "median_rel_diff": statistics.median(diffs) if diffs else None, "max_rel_diff": max(diffs, default=None)}


def phase_agree(ops_rows: list[dict], kb_rows: list[dict], n: int, solo_rows: list[dict] = ()) -> dict:
    """opsynth's eager median (from the shared opsynth run) vs KernelBench's eager mean on the same tasks;
    `solo` re-times the same tasks with one worker, which tells a neighbour's disturbance from a harness bias."""
    ops = {r["task_id"]: r for r in ops_rows if r.get("status") == "ok" and r.get("eager_ms")}
    solo = {r["task_id"]: r.get("eager_ms") for r in solo_rows}
    kb = [k for k in kb_rows if k.get("status") == "ok" and k["task_id"] in ops][:n]
    fig = _agreement([(ops[k["task_id"]]["eager_ms"], k["eager_mean_ms"]) for k in kb])
    fig["solo"] = _agreement([(solo[k["task_id"]], k["eager_mean_ms"]) for k in kb if solo.get(k["task_id"])])
    fig["rows"] = [{"task_id": k["task_id"], "opsynth_median_ms": ops[k["task_id"]]["eager_ms"],
                    "opsynth_solo_ms": solo.get(k["task_id"]), "kb_mean_ms": k["eager_mean_ms"],
                    "eager_runs": ops[k["task_id"]].get("eager_runs"),
                    "timing_alloc_retries": ops[k["task_id"]].get("timing_alloc_retries")} for k in kb]
    return fig


def phase_solo(a, ids: list[str], tasks: list[dict], settings: WorkerSettings) -> list[dict]:
    """The agreement tasks again through the same harness with one worker and no compile: no neighbours."""
    by_id = {t["task_id"]: t for t in tasks}
    gpus = first_gpu(a)
    rows, _ = run_executor([by_id[i] for i in ids if i in by_id], a.device, 1, gpus,
                           settings.with_profile(compile=False), {})
    return rows


def phase_repeat(a, ops_rows, tasks, settings) -> tuple[dict, list[dict]]:
    ok = [r for r in ops_rows if r.get("status") == "ok" and r.get("eager_ms")][: a.repeat_n]
    by_id = {t["task_id"]: t for t in tasks}
    gpus = first_gpu(a)
    again, t = run_executor([by_id[r["task_id"]] for r in ok], a.device, a.workers, gpus, settings, {})
    second = {r["task_id"]: r for r in again}
    diffs = [abs(second[r["task_id"]]["eager_ms"] - r["eager_ms"]) / r["eager_ms"] for r in ok
             if second.get(r["task_id"], {}).get("eager_ms")]
    cdiffs = [abs(second[r["task_id"]]["compile_ms"] - r["compile_ms"]) / r["compile_ms"] for r in ok
              if r.get("compile_ms") and second.get(r["task_id"], {}).get("compile_ms")]
    return {"tasks": len(diffs), "median_eager_rel_diff": statistics.median(diffs) if diffs else None,
            "p90_eager_rel_diff": sorted(diffs)[int(0.9 * (len(diffs) - 1))] if diffs else None,
            "median_compile_rel_diff": statistics.median(cdiffs) if cdiffs else None,
            "wall_s": t["wall_s"]}, again


def phase_planted(a, settings) -> tuple[dict, list[dict]]:
    tasks = [{"task_id": f"good{k}", "code": GOOD, "flops": 2 * 1024**3, "bytes_moved": 8 * 1024**2} for k in range(4)]
    tasks += [{"task_id": name, "code": PLANTED.replace("{body}", body), "flops": 0, "bytes_moved": 0}
              for name, (body, _) in PLANTS.items()]
    gpus = first_gpu(a)
    # compile off: the plants test isolation, and a cold first compile could outlast the short timeout
    s = dataclasses.replace(settings.with_profile(timeout_s=a.planted_timeout_s, compile=False),
                            filter=dataclasses.replace(settings.filter, min_eager_ms=0.0, max_eager_ms=1e9))
    rows, t = run_executor(tasks, a.device, 3, gpus, s, {})
    got = {r["task_id"]: r["status"] for r in rows}
    want = {f"good{k}": "ok" for k in range(4)} | {n: st for n, (_, st) in PLANTS.items()}
    if a.device == "cpu":  # an out-of-range index is a plain IndexError on the CPU
        want["plant_device_assert"] = "error"
    return {"expected": want, "got": got, "all_as_expected": got == want,
            "errors": {r["task_id"]: r["error"] for r in rows if r["status"] != "ok"}, **t}, rows


def first_gpu(a) -> list[int] | None:
    """The one GPU of the single-GPU phases (the first of --gpus), or None on the CPU."""
    return [int(g) for g in a.gpus.split(",")][:1] if a.device == "cuda" else None


def pin_cpus(a, n_gpus: int) -> None:
    """Give the executor --cpus-per-gpu cores per GPU (workers inherit it), so a 1-GPU run on a bigger
    box has the CPU of the one-GPU machine and scaling keeps CPU per GPU constant."""
    if a.cpus_per_gpu and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(min(os.cpu_count() or 1, a.cpus_per_gpu * n_gpus)))


def phase_scaling(a, tasks, settings, out_dir: Path) -> dict:
    gpus = [int(g) for g in a.gpus.split(",")]
    out = {}
    one = out_dir / "profile_opsynth.json"
    if one.exists():  # the opsynth phase of this call is the 1-GPU run
        f = json.loads(one.read_text())
        out["1_gpu"] = {k: f[k] for k in ("wall_s", "startup_s", "tasks_per_hour", "status")}
    for k in ([1] if "1_gpu" not in out else []) + [len(gpus)]:
        pin_cpus(a, k)
        rows, t = run_executor(tasks, a.device, a.workers, gpus[:k], settings, fresh_caches(f"scale{k}"))
        out[f"{k}_gpu"] = {**t, "tasks_per_hour": len(rows) / t["wall_s"] * 3600,
                           "status": dict(Counter(r["status"] for r in rows))}
    out["speedup"] = out[f"{len(gpus)}_gpu"]["tasks_per_hour"] / out["1_gpu"]["tasks_per_hour"]
    return out


def phase_kernelbench(a, settings, fsec) -> tuple[dict, list[dict]]:
    rows = pq.read_table(a.kernelbench).to_pylist()
    tasks = [{"task_id": f"level{r['level']}/{r['name']}", "code": r["code"], "flops": 0, "bytes_moved": 0}
             for r in rows if int(r["level"]) in (1, 2, 3)]
    gpus = first_gpu(a)
    deadline = time.monotonic() + a.kb_budget_s

    def feed():
        for t in tasks:
            if time.monotonic() > deadline:
                return
            yield t

    res, t = run_executor(feed(), a.device, a.workers, gpus, settings, fresh_caches("kernelbench"))
    per_level: dict = {}
    for m in res:
        keep, why = decide(m, CHECKS, fsec)
        m["keep"], m["reason"] = keep, why
        lvl = m["task_id"].split("/")[0]
        d = per_level.setdefault(lvl, {"profiled": 0, "kept": 0, "reasons": Counter()})
        d["profiled"] += 1
        d["kept"] += keep
        if not keep:
            d["reasons"][reason_kind(why)] += 1
    for d in per_level.values():
        d["reasons"] = dict(d["reasons"].most_common())
    return {"problems": len(tasks), "profiled": len(res), **t, "per_level": per_level,
            "rejected": {m["task_id"]: m["reason"] for m in res if not m["keep"]}}, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default=".carry/bench_tasks.parquet")
    ap.add_argument("--kernelbench", default=".carry/kernelbench_main.parquet")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--phases", default="opsynth,kbloop,repeat,planted")
    ap.add_argument("--kb-n", type=int, default=40)
    ap.add_argument("--kb-budget-s", type=float, default=150.0)
    ap.add_argument("--agree-n", type=int, default=30)
    ap.add_argument("--agree-budget-s", type=float, default=150.0, help="time for KernelBench's eager timing")
    ap.add_argument("--repeat-n", type=int, default=50)
    ap.add_argument("--planted-timeout-s", type=float, default=15.0)
    ap.add_argument("--cpus-per-gpu", type=int, default=0, help="pin the executor to this many cores per GPU")
    ap.add_argument("--timeout-s", type=float, default=0.0, help="override the preset's per-task timeout")
    ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args()
    out = Path(a.out)
    phases = a.phases.split(",")
    settings, fsec = settings_for(a.preset, a.seed)
    if a.timeout_s:
        settings = settings.with_profile(timeout_s=a.timeout_s)
    head = {"command": " ".join(sys.argv), "machine": machine(a.device), "workers_per_gpu": a.workers,
            "preset": a.preset}
    table = []
    if "planted" in phases:
        fig, rows = phase_planted(a, settings)
        write(out, "planted", {**head, **fig}, rows)
        table.append(f"planted failures as expected: {fig['all_as_expected']}  {fig['got']}")
    if any(p in phases for p in ("opsynth", "kbloop", "repeat", "scaling")):
        tasks = load_tasks(a.tasks, a.n)
    if "opsynth" in phases:
        pin_cpus(a, 1)
        fig, ops_rows = phase_opsynth(a, tasks, settings, fsec)
        write(out, "opsynth", {**head, **fig}, ops_rows)
        table.append(f"opsynth: {fig['tasks']} tasks in {fig['wall_s']:.1f}s (+{fig['startup_s']:.1f}s startup), "
                     f"accepted {fig['accepted']}, {fig['gpu_s_per_task']:.3f} GPU-s/task, "
                     f"{fig['gpu_s_per_accepted']:.3f} GPU-s/accepted, {fig['tasks_per_hour']:.0f} tasks/h, "
                     f"lock held {fig['lock_held_s_per_task']:.3f} s/task; status {fig['status']}; "
                     f"rejections {fig['rejections']}")
    if "scaling" in phases:
        fig = phase_scaling(a, tasks, settings, out)
        write(out, "scaling", {**head, **fig})
        table.append(f"scaling: {json.dumps(fig)}")
    if "kbloop" in phases:
        kfig, kb_rows = phase_kbloop(a, tasks, out)
        ops_fig = json.loads((out / "profile_opsynth.json").read_text())
        kfig["ratio_per_task"] = kfig["s_per_task"] / ops_fig["gpu_s_per_task"] if kfig["s_per_task"] else None
        ops_rows = [json.loads(x) for x in (out / "profile_opsynth_rows.jsonl").read_text().splitlines()]
        solo = phase_solo(a, [k["task_id"] for k in kb_rows if k.get("status") == "ok"][: a.agree_n], tasks, settings)
        kfig["agreement"] = phase_agree(ops_rows, kb_rows, a.agree_n, solo)
        write(out, "kbloop", {**head, **kfig})
        ag = kfig["agreement"]
        table.append(f"kernelbench loop: {kfig['tasks']} tasks, {kfig['s_per_task']:.2f} s/task; "
                     f"opsynth is {kfig['ratio_per_task']:.1f}x faster per task")
        table.append(f"timing agreement: {ag['within_5pct']}/{ag['pairs']} within 5%, median diff "
                     f"{ag['median_rel_diff']}, max {ag['max_rel_diff']}; one worker alone: "
                     f"{ag['solo']['within_5pct']}/{ag['solo']['pairs']}, median {ag['solo']['median_rel_diff']}")
    if "repeat" in phases:
        ops_rows = [json.loads(x) for x in (out / "profile_opsynth_rows.jsonl").read_text().splitlines()]
        fig, rows = phase_repeat(a, ops_rows, tasks, settings)
        write(out, "repeat", {**head, **fig}, rows)
        table.append(f"repeatability: {fig['tasks']} tasks, median eager run-to-run diff "
                     f"{fig['median_eager_rel_diff']}, p90 {fig['p90_eager_rel_diff']}")
    if "kernelbench" in phases:
        fig, rows = phase_kernelbench(a, settings, fsec)
        write(out, "kernelbench", {**head, **fig}, rows)
        table.append(f"kernelbench L1-3: {fig['profiled']}/{fig['problems']} profiled in {fig['wall_s']:.0f}s; "
                     + "; ".join(f"{k}: kept {v['kept']}/{v['profiled']} {v['reasons']}"
                                 for k, v in sorted(fig["per_level"].items())))
    print("\n".join(table))


if __name__ == "__main__":
    main()
