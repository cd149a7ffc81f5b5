"""verify-batch: (task, candidate) pairs from a JSONL file through `verify_batch`, one parquet row per pair
(joinable on task_id), and a short table of rewards."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from pathlib import Path

from opsynth.errors import OpsynthError
from verify.api import verify_batch

COLUMNS = ("task_id", "candidate", "correct", "reward", "hack", "error", "build_message", "worst_diff",
           "failing_draw", "speedup_eager", "speedup_compile", "wall_s", "gpu", "timing_lock_wait_s",
           "check_lock_wait_s", "policy", "precision", "library_calls")


def read_pairs(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            pairs.append((d["task"], d["candidate"]))
        except (ValueError, KeyError, TypeError):
            raise OpsynthError(f"{path}:{n}: not a {{\"task\": ..., \"candidate\": ...}} JSON line") from None
    return pairs


def rows_table(rows: list[dict], candidates: list[str]):
    import pyarrow as pa

    cols = {c: [r.get(c) for r in rows] for c in COLUMNS if c != "candidate"}
    cols["candidate"] = candidates
    for k in ("candidate_ms", "eager_ms", "compile_ms"):
        src = k.split("_")[0]
        cols[k] = [(r.get("times_ms") or {}).get(src, {}).get("median") for r in rows]
    cols["json"] = [json.dumps(r, default=str) for r in rows]
    cols["library_calls"] = [list(v or []) for v in cols["library_calls"]]
    return pa.table({k: pa.array([None if v is None else (str(v) if k in ("hack", "error", "build_message") else v)
                                  for v in vals], type=pa.list_(pa.string()) if k == "library_calls" else None)
                     for k, vals in cols.items()})


def parse_gpus(text: str | None) -> list[int] | None:
    """`--gpus 0,1` -> [0, 1]; None or empty -> None."""
    if not text:
        return None
    try:
        return [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise OpsynthError(f"--gpus {text!r}: not a comma-separated list of GPU indices, e.g. --gpus 0,1") from None


def run_pairs_file(pairs_file: Path, out: Path, device: str, workers: int, allow_torch: bool,
                   say: Callable[[str], None], gpus: list[int] | None = None, executor: str = "local",
                   ray_address: str | None = None, policy: str | None = None, allow: list[str] | None = None,
                   precision: str = "fp32") -> str:
    """executor "local": this machine's GPUs (`gpus`); "ray": one actor per GPU of a Ray cluster, `workers` each.
    `policy`, `allow`, `precision`: as `verify` takes them, for every pair."""
    import pyarrow.parquet as pq

    from verify.api import PRECISIONS, check_device, resolve_policy

    pol = resolve_policy(policy, allow, allow_torch)  # a bad tier, operator or device: one line, before any pair
    if precision not in PRECISIONS:
        raise OpsynthError(f"--precision {precision!r}: choose fp32 or tf32")
    if executor == "local":
        check_device(device, tuple(gpus or ()))
    pairs = read_pairs(pairs_file)
    if executor == "ray":
        from verify.ray_batch import verify_batch_ray

        heard: list[int] = []

        def hear(i: int, _: dict) -> None:
            heard.append(i)
            say(f"verify-batch: {len(heard)}/{len(pairs)}")

        rows = verify_batch_ray(pairs, workers=workers, ray_address=ray_address, device=device, policy=pol,
                                precision=precision, on_result=hear)
    elif executor == "local":
        rows = verify_batch(pairs, workers=workers, device=device, policy=pol, precision=precision, gpus=gpus,
                            progress=lambda n, total: say(f"verify-batch: {n}/{total}"))
    else:
        raise OpsynthError(f"--executor {executor!r}: choose local or ray")
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows_table(rows, [str(c) for _, c in pairs]), out)
    levels = collections.Counter(r["reward"] for r in rows)
    hacks = sum(1 for r in rows if r.get("hack"))
    lib = sum(1 for r in rows if r.get("library_calls"))
    return (f"{len(rows)} pairs ({pol.tier} policy, {precision}) -> {out}\nreward  count\n" + "\n".join(f"{k:>6}  {levels[k]}" for k in (-1, 1, 2, 3))
            + f"\nhacks caught: {hacks}" + (f"\npairs with library calls: {lib}" if pol.tier == "library" else ""))
