"""How close the CPU pre-screen comes to the GPU's dead inputs and skippable operators: the screen's ratio (at its
screened shapes, every input and operator measured) for each input and operator the GPU found within tolerance at
the real sizes, and for every input and operator of the rows the GPU keeps. If every GPU finding has a screened
ratio under a margin M, the GPU needs to re-check only the parts the screen puts under M; the share of parts under
M on the rows the GPU keeps is then what the GPU still measures.

    python benchmarks/shortcut_gating.py --against benchmarks/results/shortcuts_cuda.json --clean 80 --workers 2
Writes benchmarks/results/shortcut_gating.json (with "headline")."""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RELEASE = ROOT / "data" / "releases" / "opsynth-ops-h200-v1"
MARGINS = (1.0, 2.0, 5.0, 10.0, 100.0)
MARGIN = 10.0  # the margin the headline reports


def _init() -> None:
    import torch

    torch.set_num_threads(1)


def _screen(args: tuple[dict, object]) -> dict:
    """The pre-screen of one row with the dead and skip kinds, every part measured: its ratio maps."""
    from operators.prescreen import prescreen

    row, cfg = args
    try:
        res = prescreen(row, cfg)
    except Exception as e:  # noqa: BLE001 - a row the screen cannot run is counted as unscreened
        return {"status": f"error ({type(e).__name__})"}
    m = res.measurements
    return {"status": res.status, "inputs": json.loads(m.get("input_ratios") or "{}"),
            "ops": json.loads(m.get("op_ratios") or "{}")}


def gating(found: dict[str, list[str]], screened: dict[str, dict], key: str, clean: list[str]) -> dict:
    """Per margin: GPU findings whose screened ratio is under it (recall) and the share of the kept rows' parts
    under it (what the GPU still measures). A finding the screen did not measure (no screen, another op order)
    counts as missed; its row is re-checked in full under any gate."""
    out: dict = {}
    pos = [(t, part) for t, parts in found.items() if t in screened for part in parts[:1]]
    parts = [r for t in clean if t in screened for r in screened[t][key].values()]
    for m in MARGINS:
        hit = [(t, p) for t, p in pos if screened[t][key].get(p, float("inf")) < m]
        out[f"{m:g}"] = {"found": len(pos), "under": len(hit), "missed": sorted(t for t, p in pos if (t, p) not in hit),
                         "unscreened": sorted(t for t, p in pos if p not in screened[t][key]),
                         "kept_parts": len(parts), "kept_parts_under": sum(r < m for r in parts)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default=str(ROOT / "benchmarks/results/shortcuts_cuda.json"))
    ap.add_argument("--clean", type=int, default=80, help="GPU-clean rows screened for the cost side")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results"))
    a = ap.parse_args()
    import pyarrow.parquet as pq
    import torch

    from pipeline.rundir.config import load_preset

    t0 = time.time()
    gpu = json.loads(Path(a.against).read_text())
    dead, skip = gpu["dead_verdicts"], gpu["skip_verdicts"]
    fragile = gpu["fragile_verdicts"]
    clean_all = sorted(t for t in dead if not dead[t] and not skip[t] and not fragile[t])
    clean = random.Random(a.seed).sample(clean_all, min(a.clean, len(clean_all)))
    ids = sorted({t for t in dead if dead[t] or skip[t]} | set(clean))
    code = {r["task_id"]: r["code"] for p in sorted((RELEASE / "data").glob("train-*.parquet"))
            for r in pq.read_table(p, columns=["task_id", "code"]).to_pylist() if r["task_id"] in set(ids)}
    base = load_preset("h200")
    cfg = dataclasses.replace(base, sample=dataclasses.replace(base.sample, prescreen_shortcuts="record"),
                              profile=dataclasses.replace(base.profile, shortcut_checks=("dead", "skip"),
                                                          shortcut_stop_first=False))
    with mp.get_context("spawn").Pool(a.workers, initializer=_init) as pool:
        got = pool.map(_screen, [({"task_id": t, "code": code[t]}, cfg) for t in ids], chunksize=2)
    screened = {t: g for t, g in zip(ids, got, strict=True) if g["status"] == "ok"}
    res = {"rows": len(ids), "screened": len(screened), "clean_rows": len(clean),
           "dead": gating({t: v for t, v in dead.items() if v}, screened, "inputs", clean),
           "skip": gating({t: v for t, v in skip.items() if v}, screened, "ops", clean)}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    base_fig = {"command": f"python benchmarks/shortcut_gating.py --clean {a.clean} --workers {a.workers}",
                "hardware": "2-core CPU (no GPU)", "torch": torch.__version__, "commit": commit}
    head = []
    print(f"{'kind':6s} {'margin':>6s} {'GPU findings under it':>22s} {'kept rows parts under it':>26s}")
    for kind, label in (("dead", "dead inputs"), ("skip", "skippable operators")):
        for m, g in res[kind].items():
            print(f"{kind:6s} {m:>6s} {g['under']:>10d} of {g['found']:<9d} {g['kept_parts_under']:>12d} of "
                  f"{g['kept_parts']:<9d}")
        g = res[kind][f"{MARGIN:g}"]
        missed = [t for t in g["missed"] if t not in g["unscreened"]]
        head.append({"figure": f"GPU-found {label} of v1 rows under the screen's ratio margin {MARGIN:g}",
                     "value": f"{g['under']} of {g['found']} ({len(g['unscreened'])} the screen gave no ratio, "
                              f"measured in full; missed {len(missed)}" + (f", e.g. {missed[0]}" if missed else "")
                              + f"); {g['kept_parts_under']} of {g['kept_parts']} parts of GPU-kept rows under it",
                     "target": "every finding under it or measured in full", **base_fig})
    res["minutes"] = round((time.time() - t0) / 60, 1)
    out = Path(a.out) / "shortcut_gating.json"
    out.write_text(json.dumps({"headline": head, **res}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
