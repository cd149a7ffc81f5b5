"""Shortcuts in released tasks: dead inputs, skippable operators and numerically fragile outputs (filters/shortcuts.py)
over random rows of a release.

    python benchmarks/shortcuts.py --device cpu --n 500 --seed 0 --max-minutes 10
    python benchmarks/shortcuts.py --device cuda --n 500 --seed 0

On the CPU every row runs at the pre-screen's screened shapes (operators/prescreen.py, sample.prescreen_shortcuts =
record), so the counts are what the pre-screen catches; on cuda each row runs at its real sizes and also on the CPU
pre-screen, and the share of each kind the pre-screen caught is reported. Prints a table and writes
benchmarks/results/shortcuts_<device>.json (with its "headline")."""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RELEASE = ROOT / "data" / "releases" / "opsynth-ops-h200-v1"
KINDS = {"dead": "dead_inputs", "skip": "skippable_ops", "fragile": "fragile"}


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
            "cpu_ms": res.cpu_ms}


def _cuda(row: dict, cfg) -> dict:
    import torch

    from filters.shortcuts import measure
    from filters.tensor_checks import flatten
    from operators.trace import load_module

    ns = load_module(row["code"], "bench")
    seed = cfg.run.seed

    def draw(k):
        torch.manual_seed(seed + 1 + k)
        with torch.device("cuda"):
            return tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in ns["get_inputs"]())

    t0 = time.perf_counter()
    with torch.no_grad():
        torch.manual_seed(seed)
        with torch.device("cuda"):
            model = ns["Model"](*ns["get_init_inputs"]()).cuda()
        ref0 = flatten(model(*draw(0))).clone()
        m = measure(model, draw, ref0, cfg.filter.compile_tolerance, draws=5, stop_first=True)
    torch.cuda.synchronize()
    return {"status": "ok", **{k: m.get(c) for k, c in KINDS.items()}, "gpu_s": time.perf_counter() - t0}


def sampler_section(n: int, seed: int) -> dict:
    """What the value-scale rule (operators/value_scale.py) prevents: of n h200-preset draws sampled without it,
    how many it flags, by rule; with it on the sampler draws another in their place."""
    import json as _json

    import networkx as nx

    from operators.graph import execute
    from operators.sample import sample_tasks
    from operators.value_scale import cannot_matter
    from pipeline.rundir.config import load_preset

    cfg = dataclasses.replace(load_preset("h200").sample, prescreen="off")
    by_rule: dict[str, list[str]] = {}
    rows = sample_tasks(cfg, seed, range(n), set())
    for r in rows:
        g = nx.node_link_graph(_json.loads(r["graph"]), directed=True, edges="edges")
        why = cannot_matter(g, execute(g, g.graph["constants"], None)[1])
        if why:
            by_rule.setdefault(why.split(" ")[0], []).append(r["task_id"])
    after = sample_tasks(dataclasses.replace(cfg, value_scale_rule=True), seed, range(n), set())
    left = 0
    for r in after:
        g = nx.node_link_graph(_json.loads(r["graph"]), directed=True, edges="edges")
        left += bool(cannot_matter(g, execute(g, g.graph["constants"], None)[1]))
    return {"sampled": len(rows), "flagged": sum(map(len, by_rule.values())), "by_rule": by_rule,
            "flagged_with_rule": left, "sampled_with_rule": len(after)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--sampler", type=int, default=0, help="only the sampler section: N h200 draws "
                    "(writes shortcuts_sampler.json)")
    a = ap.parse_args()
    import torch

    if a.sampler:
        return _write_sampler(a, torch)

    from pipeline.rundir.config import load_preset

    cfg = load_preset("h200")
    cfg = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prescreen_shortcuts="record"),
                              profile=dataclasses.replace(cfg.profile, shortcut_checks=("dead", "skip", "fragile")))
    rows, t0, results = _rows(a.n, a.seed), time.time(), []
    for row in rows:
        if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
            break
        r = {"task_id": row["task_id"]}
        try:
            r["cpu"] = _cpu(row, cfg)
            if a.device == "cuda":
                r["gpu"] = _cuda(row, cfg)
        except Exception as e:  # noqa: BLE001 - a row that fails is counted, not fatal
            r["error"] = f"{type(e).__name__}: {e}"[:200]
        results.append(r)
    side = "gpu" if a.device == "cuda" else "cpu"
    judged = [r for r in results if r.get(side, {}).get("status") == "ok"]
    counts = {k: [r["task_id"] for r in judged if r[side].get(k)] for k in KINDS}
    anyk = [r for r in judged if any(r[side].get(k) for k in KINDS)]
    caught = {k: (sum(1 for r in judged if r[side].get(k) and r["cpu"].get(k)) / len(counts[k]) if counts[k] else None)
              for k in KINDS} if side == "gpu" else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    cmd = f"python benchmarks/shortcuts.py --device {a.device} --n {a.n} --seed {a.seed}" + (
        f" --max-minutes {a.max_minutes:g}" if a.max_minutes else "")
    hw = "2-core CPU (no GPU)" if a.device == "cpu" else torch.cuda.get_device_name(0)
    where = "screened shapes (CPU pre-screen)" if side == "cpu" else "real sizes"
    n = len(judged)

    def fig(name, val, target=None):
        return {"figure": name, "value": val, "target": target, "command": cmd, "hardware": hw,
                "torch": torch.__version__, "commit": commit}

    headline = [fig(f"v1 rows judged at {where}", f"{n} of {len(results)} run ({len(rows)} drawn)")]
    for k, label in (("dead", "dead input"), ("skip", "skippable operator"), ("fragile", "numerically fragile")):
        share = f"{len(counts[k])} ({100 * len(counts[k]) / max(n, 1):.1f}%)"
        headline.append(fig(f"v1 rows with a {label}, {where}", share + (f", e.g. {counts[k][0]}" if counts[k] else ""),
                            "0 after the change" if k != "fragile" else "<= 0.2% flips after the change"))
        if caught:
            headline.append(fig(f"share of {label} rows the CPU pre-screen catches",
                                "n/a" if caught[k] is None else f"{100 * caught[k]:.0f}%"))
    headline.append(fig(f"v1 rows with any shortcut, {where}", f"{len(anyk)} ({100 * len(anyk) / max(n, 1):.1f}%)"))
    print(f"{'figure':<60} value")
    for h in headline:
        print(f"{h['figure']:<60} {h['value']}")
    out = Path(a.out) / f"shortcuts_{a.device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"headline": headline, "examples": {k: v[:10] for k, v in counts.items()},
                               "statuses": {s: sum(1 for r in results if r.get(side, {}).get("status", "error")
                                                   .split(" (")[0] == s) for s in
                                            {r.get(side, {}).get("status", "error").split(" (")[0] for r in results}},
                               "minutes": round((time.time() - t0) / 60, 1)}, indent=1) + "\n")
    print(f"wrote {out}")


def _write_sampler(a, torch) -> None:
    t0 = time.time()
    r = sampler_section(a.sampler, a.seed)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    cmd = f"python benchmarks/shortcuts.py --sampler {a.sampler} --seed {a.seed}"
    base = {"command": cmd, "hardware": "2-core CPU (no GPU)", "torch": torch.__version__, "commit": commit}
    rules = ", ".join(f"{k} {len(v)}" for k, v in r["by_rule"].items()) or "none"
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


if __name__ == "__main__":
    main()
