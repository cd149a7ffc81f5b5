"""Label rejections of a run, per operator family: does every normalization operator reach the published set in
proportion to how often it was sampled, and how many tasks did the label check drop (recorded by the filter
stage, and again with the pins as they are now, on the device each measurement came from)?

    python benchmarks/label_families.py RUN_DIR [--category normalization] [--out benchmarks/results/X.json]

Reads RUN_DIR/tasks, measurements, verdicts and dataset/data (the published rows; without them, tasks every
stage kept) with pyarrow only; prints one table per operator family and writes the figures as JSON. After
re-pinning, `opsynth filter RUN_DIR` re-decides the verdicts in seconds; then run this again.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.catalog import sampleable  # noqa: E402
from operators.labels import check_labels  # noqa: E402


def _rows(run: Path, table: str, columns: list[str]) -> list[dict]:
    files = sorted((run / table).glob("part-*.parquet")) if table != "dataset" else sorted(
        (run / "dataset" / "data").glob("*.parquet"))
    out: list[dict] = []
    for f in files:
        t = pq.read_table(f)
        out += t.select([c for c in columns if c in t.column_names]).to_pylist()
    return out


def family(name: str) -> str:
    """nn.BatchNorm2d, F.batch_norm -> batchnorm; nn.CrossMapLRN2d -> crossmaplrn; F.normalize -> normalize."""
    short = name.split(".", 1)[1]
    return re.sub(r"[123]d$", "", short).replace("_", "").lower()


def measure(run: Path, category: str) -> dict:
    tasks = {r["task_id"]: r for r in _rows(run, "tasks", ["task_id", "ops", "composer"])}
    meas = {r["task_id"]: r for r in _rows(run, "measurements", ["task_id", "status", "device", "gpu", "aten_ops"])}
    verdicts: dict[str, dict[str, tuple[bool, str]]] = defaultdict(dict)
    for v in _rows(run, "verdicts", ["task_id", "stage", "keep", "reason"]):
        verdicts[v["task_id"]][v["stage"]] = (v["keep"], v["reason"])
    published = {r["task_id"] for r in _rows(run, "dataset", ["task_id"])}
    if not (run / "dataset" / "data").is_dir():
        published = {t for t, vs in verdicts.items() if vs and all(k for k, _ in vs.values())}
    label_dropped = {t for t, vs in verdicts.items() if not vs.get("filter", (True, ""))[0]
                     and vs["filter"][1].startswith("label mismatch")}
    now_dropped: dict[str, list[str]] = {}
    for t, m in meas.items():
        ops = (tasks.get(t) or {}).get("ops")
        if m.get("status") == "ok" and ops and m.get("aten_ops"):
            bad = check_labels(list(ops), list(m["aten_ops"]), device=m.get("device") or "cpu")
            if bad:
                now_dropped[t] = bad
    devices = Counter((m.get("device") or "?", m.get("gpu") or "") for m in meas.values())
    names = [s.name for s in sampleable() if s.category == category] if category else []
    per_op = {}
    for name in names:
        with_op = [t for t, r in tasks.items() if name in (r.get("ops") or [])]
        per_op[name] = {
            "family": family(name), "sampled": len(with_op),
            "measured_ok": sum((meas.get(t) or {}).get("status") == "ok" for t in with_op),
            "label_dropped": sum(t in label_dropped for t in with_op),
            "label_dropped_now": sum(t in now_dropped for t in with_op),
            "published": sum(t in published for t in with_op),
        }
    share = len(published) / len(tasks) if tasks else 0.0
    for row in per_op.values():
        row["published_share"] = row["published"] / row["sampled"] if row["sampled"] else None
        row["vs_run"] = row["published_share"] / share if row["published_share"] is not None and share else None
    reasons = Counter(b.split(" (")[0] for bad in now_dropped.values() for b in bad)
    return {
        "run": str(run), "devices": [f"{d} {g}".strip() + f": {n}" for (d, g), n in devices.items()],
        "tasks": len(tasks), "measured": len(meas), "published": len(published), "published_share": share,
        "label_dropped": len(label_dropped),
        "label_dropped_template": sum((tasks.get(t) or {}).get("composer") == "template" for t in label_dropped),
        "label_dropped_now": len(now_dropped),
        "label_dropped_now_template": sum((tasks.get(t) or {}).get("composer") == "template" for t in now_dropped),
        "label_reasons_now": dict(reasons.most_common(10)), "category": category, "ops": per_op,
    }


def print_tables(r: dict) -> None:
    print(f"run {r['run']} ({', '.join(r['devices'])}): {r['tasks']} tasks, {r['published']} published "
          f"({r['published_share']:.1%})")
    print(f"label rejections: {r['label_dropped']} recorded by the filter ({r['label_dropped_template']} of "
          f"template tasks, false by construction); {r['label_dropped_now']} with the pins now "
          f"({r['label_dropped_now_template']} template)")
    for why, n in r["label_reasons_now"].items():
        print(f"  {n:5d}  {why}")
    by_family: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for name, row in r["ops"].items():
        by_family[row["family"]].append((name, row))
    head = f"| {'operator':28} | sampled | ok | label drop (filter / now) | published | share | vs run |"
    for fam, rows in by_family.items():
        print(f"\n{fam}\n{head}\n|{'-' * 30}|---------|----|---------------------------|-----------|-------|--------|")
        for name, x in rows:
            share = f"{x['published_share']:.0%}" if x["published_share"] is not None else "-"
            vs = f"{x['vs_run']:.2f}" if x["vs_run"] is not None else "-"
            print(f"| {name:28} | {x['sampled']:7d} | {x['measured_ok']:2d} | "
                  f"{x['label_dropped']:11d} / {x['label_dropped_now']:<11d} | {x['published']:9d} | {share:>5} | {vs:>6} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--category", default="normalization", help="catalog category whose operators get tables")
    ap.add_argument("--out", type=Path, default=None, help="JSON figures (default: benchmarks/results/"
                    "label_families_<run name>.json)")
    a = ap.parse_args()
    import torch

    r = measure(a.run, a.category)
    r.update(command=" ".join(sys.argv), machine=platform.platform(), torch_version=torch.__version__,
             git_commit=subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                       text=True).stdout.strip())
    print_tables(r)
    out = a.out or ROOT / "benchmarks" / "results" / f"label_families_{a.run.resolve().name}.json"
    out.write_text(json.dumps(r, indent=1) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
