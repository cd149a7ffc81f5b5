"""Small PNG plots for the dataset card: runtime, operators per task, category coverage, compile speedup.

Each plot is drawn only when the rows carry its data (a run that was never profiled has no runtimes),
so the card links exactly the files that exist.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

SIZE = (5.0, 3.0)
DPI = 100


def _figure():
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    return plt, fig, ax


def _save(plt, fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)


def _log_hist(ax, values: list[float], bins: int = 30) -> None:
    import numpy as np

    lo, hi = min(values), max(values)
    if hi <= lo:
        hi = lo * 1.1 if lo > 0 else 1.0
    ax.hist(values, bins=np.geomspace(lo, hi, bins), color="#4C72B0", edgecolor="white")
    ax.set_xscale("log")


def runtime(rows: list[dict[str, Any]], path: Path) -> bool:
    eager = [r["eager_ms"] for r in rows if r.get("eager_ms")]
    if not eager:
        return False
    plt, fig, ax = _figure()
    _log_hist(ax, eager)
    ax.set_xlabel("eager runtime (ms, log scale)")
    ax.set_ylabel("tasks")
    gpus = sorted({r["gpu"] for r in rows if r.get("gpu")})
    ax.set_title(f"Eager runtime on {', '.join(gpus) or 'the measuring device'}", fontsize=10)
    _save(plt, fig, path)
    return True


def ops_per_task(rows: list[dict[str, Any]], path: Path) -> bool:
    counts = Counter(r["num_ops"] for r in rows if r.get("num_ops") is not None)
    if not counts:
        return False
    plt, fig, ax = _figure()
    ks = list(range(min(counts), max(counts) + 1))
    dag = Counter(r["num_ops"] for r in rows if r.get("is_dag"))
    chain = [counts[k] - dag[k] for k in ks]
    ax.bar(ks, chain, color="#4C72B0", label="chain")
    ax.bar(ks, [dag[k] for k in ks], bottom=chain, color="#DD8452", label="DAG")
    ax.set_xticks(ks)
    ax.set_xlabel("operators per task")
    ax.set_ylabel("tasks")
    ax.legend(fontsize=8)
    ax.set_title("Operators per task", fontsize=10)
    _save(plt, fig, path)
    return True


def categories(rows: list[dict[str, Any]], path: Path) -> bool:
    counts = Counter(c for r in rows for c in set(r.get("categories") or []))
    if not counts:
        return False
    plt, fig, ax = _figure()
    items = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))
    ax.barh([k for k, _ in items], [v for _, v in items], color="#55A868")
    ax.set_xlabel("tasks containing the category")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title("Category coverage", fontsize=10)
    _save(plt, fig, path)
    return True


def compile_speedup(rows: list[dict[str, Any]], path: Path) -> bool:
    speedups = [r["compile_speedup"] for r in rows if r.get("compile_speedup")]
    if not speedups:
        return False
    plt, fig, ax = _figure()
    _log_hist(ax, speedups)
    ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_xlabel("eager / torch.compile runtime (log scale; > 1: compile faster)")
    ax.set_ylabel("tasks")
    ax.set_title("torch.compile speedup over eager", fontsize=10)
    _save(plt, fig, path)
    return True


PLOTS = {"runtime": (runtime, "Eager runtime distribution"),
         "ops_per_task": (ops_per_task, "Operators per task"),
         "categories": (categories, "Category coverage"),
         "compile_speedup": (compile_speedup, "torch.compile speedup")}


def render_all(rows: list[dict[str, Any]], folder: Path) -> dict[str, tuple[str, str]]:
    """Draw every plot that has data; returns name -> (path relative to the dataset folder, title)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (draw, title) in PLOTS.items():
        path = folder / f"{name}.png"
        if draw(rows, path):
            out[name] = (f"{folder.name}/{path.name}", title)
    return out
