"""verify_bench: the verifier measured by section.

- hack: every route of the hack suite (verify/suite.py) on this device; caught = reward -1 with the route's reason.
- corpus: honest candidates (the suite's C++ twins, and the candidates listed in corpus JSONL files: inductor's C++
  for demo tasks on the CPU, the CUDA kernels, the hand-written Triton kernels and inductor's Triton for release
  tasks on the GPU) verified twice, each under the policy tier its line names (`"policy": "library", "allow":
  [...]` for an inductor candidate that calls fallback operators; strict otherwise): penalized count and
  reward-level repeatability, per tier.
- eager_vs_release: verify's eager median vs the release's eager_ms on N release tasks (GPU only: ratio stats).
- throughput: verifications per hour, verify-batch with W workers vs a serial loop over the same pairs.
- kept: the stored corpus figures counted again over the pairs whose task the dataset's shortcut checks keep
  (--task-checks: a result of benchmarks/corpus_task_checks.py); needs --update and the corpus's --corpus files.
- fallback: --n-fallback random release tasks that use an inductor fallback operator the strict policy refuses; each
  task's own reference as the candidate (`class ModelNew(Model)`), verified with every other operator it calls
  allowed: refused = reward -1 for PyTorch compute, and how many refusals name the fallback itself. The first
  --n-fallback-control of them again with the fallbacks allowed too (the candidate is otherwise correct). Also
  counts the release's fallback tasks with an honest strict candidate in the --corpus files.

    python benchmarks/verify_bench.py --device cpu --sections hack,corpus,throughput --n-honest 2 \
        --corpus benchmarks/verify_cpu/pairs.jsonl
    python benchmarks/verify_bench.py --device cuda --corpus benchmarks/verify_cuda/pairs.jsonl \
        --corpus benchmarks/verify_triton/pairs.jsonl --corpus benchmarks/verify_inductor/pairs.jsonl \
        --ext-dir DIR --out OUT
Writes benchmarks/results/verify_bench_<cpu|gpu>.json (with "headline"; the GPU named in it)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verify.api import verify, verify_batch  # noqa: E402
from verify.suite import HONEST, HONEST_CUMSUM, ROUTES, TASK, TASK_OF, TASKS, prebuild  # noqa: E402
from verify.timing import BOUNDARY  # noqa: E402

RELEASE = ROOT / "data/releases/opsynth-ops-h200-v1"


def _prebuild(ext_dir: str) -> None:
    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
    prebuild()


def hack(device: str, task: str, ext_dir: str, workers: int = 1) -> dict:
    """Every route, `workers` at a time, on its task (verify.suite.TASK_OF; `task` is the Linear -> relu one's file);
    their timed rounds take turns on one lock file, as verify_batch's do."""
    from concurrent.futures import ThreadPoolExecutor

    rows: dict = {}
    run = {route: v for route, v in ROUTES.items() if not (v[3] == "cuda" and device != "cuda")}
    for route in ROUTES.keys() - run.keys():
        rows[route] = {"skipped": "CUDA-only route"}
    lock = str(Path(tempfile.mkdtemp()) / "device.lock")
    files = {name: str(Path(task).parent / f"{name}.py") for name in TASKS}
    for name, code in TASKS.items():
        Path(files[name]).write_text(code)

    def one(item):
        route, (src, why, off, _) = item
        return route, why, verify(files[TASK_OF[route]], src, device=device, off=off, rounds=2,
                                  extensions_dir=ext_dir, timing_lock=lock)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        for route, why, r in pool.map(one, run.items()):
            ok = r["reward"] == -1 and (why in (r["hack"] or "") if why else not r["correct"])
            rows[route] = {"caught": ok, "reward": r["reward"], "hack": r["hack"]}
            print(f"  {route:34s} {'caught' if ok else 'SLIPPED'}  {r['hack'] or r.get('error') or ''}"[:150])
    judged = [v for v in rows.values() if "caught" in v]
    return {"routes": rows, "caught": sum(v["caught"] for v in judged), "run": len(judged)}


def _fallback_hits() -> list[dict]:
    """Every release row whose measured ATen ops include an inductor fallback that strict refuses, each with
    `fallbacks` (those ops) and `others` (the other ops strict refuses, and copies)."""
    import pyarrow.dataset as ds

    from verify.policy import MOVES, Policy, inductor_fallbacks

    fb, strict = inductor_fallbacks(), Policy()
    rows = ds.dataset(sorted(str(f) for f in (RELEASE / "data").glob("*.parquet"))).to_table(
        columns=["task_id", "aten_ops"]).to_pylist()
    hits = []
    for r in rows:
        ops = {"aten::" + o.split(".")[1] for o in r["aten_ops"] or [] if o.count(".") >= 1}
        refused = {o for o in ops if not strict.allows(o)}
        if refused & fb:
            # dtype casts too: the release's op lists do not record every cast a forward makes
            hits.append({"task_id": r["task_id"], "fallbacks": sorted(refused & fb),
                         "others": sorted((refused - fb) | {f"aten::{m}" for m in MOVES})})
    return hits


REFUSED = ("PyTorch compute in forward", "PyTorch kernels launched in forward")  # the compute guard's reasons


def fallback(args: argparse.Namespace) -> dict:
    """The strict policy on real release tasks that use fallback operators (see the module's docstring). Refused: reward
    -1 for PyTorch compute; fallback named: the refusal names an inductor fallback (a fused fast path such as
    `_native_multi_head_attention` is named instead where the reference takes one). --fallback-rows FILE keeps each
    task's row as it lands and a later call skips the tasks it holds; --fallback-minutes stops starting tasks (negative:
    the figures from FILE alone)."""
    import random
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from verify.policy import inductor_fallbacks
    from verify.task import load_task

    fb = inductor_fallbacks()
    hits = _fallback_hits()  # the release read once
    sample = random.Random(args.seed).sample(hits, min(args.n_fallback, len(hits)))
    lock = str(Path(tempfile.mkdtemp()) / "device.lock")
    # the CPU dispatches some fallbacks under other names (SDPA's CPU kernel): a CPU run allows the others loosely
    cpu_names = {"aten::_scaled_dot_product_flash_attention_for_cpu"} if args.device == "cpu" else set()
    stored = {}
    if args.fallback_rows and Path(args.fallback_rows).is_file():
        stored = {r["task_id"]: r for r in map(json.loads, Path(args.fallback_rows).read_text().splitlines()) if r}
    minutes = args.fallback_minutes
    if minutes is not None and minutes < 0:  # a report from the rows file alone: its tasks are the sample
        by_id = {h["task_id"]: h for h in hits}
        sample = [by_id.get(t, {"task_id": t, "fallbacks": [], "others": []}) for t in stored]
    box = time.monotonic() + 60 * (minutes if minutes is not None else 1e6)
    write = threading.Lock()
    commit = _commit(args)

    def judge(row: dict) -> dict:
        """A row's verdicts, judged once where it was measured (the fallback registry is torch's own)."""
        hack = row.get("hack") or ""
        row.setdefault("refused", row["reward"] == -1 and any(w in hack for w in REFUSED))
        row.setdefault("fallback_named", row["refused"] and any(op in hack for op in fb | cpu_names))
        return row

    def one(item: tuple[int, dict]) -> dict | None:
        i, t = item
        if t["task_id"] in stored:
            return judge({**stored[t["task_id"]], "fallbacks": t["fallbacks"]})
        if time.monotonic() > box:
            return None
        task = load_task(f"{RELEASE}:{t['task_id']}")
        cand = task["code"] + "\n\nclass ModelNew(Model):\n    pass\n"
        control = i < args.n_fallback_control
        allow = t["others"]
        kw = dict(device=args.device, draws=1, rounds=1, timing_lock=lock, timeout_s=args.fallback_timeout_s,
                  compile=False)
        r = verify(task, cand, policy="library" if allow else "strict", allow=allow or None, **kw)
        row = {"task_id": t["task_id"], "fallbacks": t["fallbacks"], "reward": r["reward"], "hack": r["hack"],
               "error": r.get("error"), "commit": commit}
        if control:  # the same candidate with the fallbacks allowed: refused only for them, otherwise correct
            allow_fb = t["others"] + t["fallbacks"] + sorted(cpu_names)
            c = verify(task, cand, policy="library", allow=allow_fb, **kw)
            row["control"] = {"reward": c["reward"], "correct": c["correct"], "hack": c["hack"],
                              "library_calls": c.get("library_calls"), "error": c.get("error"),
                              "stderr_tail": (c.get("stderr_tail") or "")[-600:]}
        judge(row)
        if args.fallback_rows:
            with write, open(args.fallback_rows, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
        print(f"  {t['task_id']} {'refused' if row['refused'] else 'PAID'} {(r['hack'] or r.get('error') or '')[:90]}"
              + (f" | control reward {row['control']['reward']} {row['control']['error'] or ''}"[:200]
                 if control else ""), flush=True)
        return row

    with ThreadPoolExecutor(max(1, args.workers)) as pool:
        rows = [r for r in pool.map(one, list(enumerate(sample))) if r is not None]
    # the corpus files' honest strict candidates, by release task id
    strict_tasks = {t.rsplit(":", 1)[-1] for t, _, _, pol in _pairs(args, "") if pol["policy"] == "strict"}
    ctl = [r["control"] for r in rows if "control" in r]
    by_op: dict = {}
    for r in rows:
        for op in r["fallbacks"]:
            by_op.setdefault(op, {"tasks": 0, "refused": 0, "fallback_named": 0})
            by_op[op]["tasks"] += 1
            by_op[op]["refused"] += r["refused"]
            by_op[op]["fallback_named"] += r["fallback_named"]
    every = {h["task_id"] for h in hits}
    return {"release_tasks_with_fallback": len(hits), "asked": args.n_fallback, "sampled": len(rows),
            "refused": sum(r["refused"] for r in rows), "fallback_named": sum(r["fallback_named"] for r in rows),
            "paid": [r for r in rows if not r["refused"]],
            "named_instead": sorted({(r["hack"] or "").rsplit(": ", 1)[-1] for r in rows
                                     if r["refused"] and not r["fallback_named"]}),
            "by_fallback": by_op,
            "control": {"run": len(ctl), "correct": sum(1 for c in ctl if c["correct"]),
                        "not_correct": [r for r in rows if "control" in r and not r["control"]["correct"]]},
            "with_honest_strict_candidate": sorted(strict_tasks & {r["task_id"] for r in rows}),
            "release_fallback_tasks_with_honest_strict_candidate": sorted(strict_tasks & every),
            "rows": rows}


def _pairs(args: argparse.Namespace, task: str) -> list[tuple[str, str, bool, dict]]:
    """(task, candidate, trusted, policy): the suite's honest twins (Linear -> relu, and relu(cumsum) with its own
    scan) --n-honest times each (default 4 without --corpus, 0 with), then every --corpus file's lines; a line of
    kind "inductor" is generated code (trusted: it skips the static check only), hand-written kernels are not. The
    policy is the line's (`policy`, `allow`), strict where it names none."""
    n_twin = args.n_honest if args.n_honest is not None else (0 if args.corpus else 4)
    strict = {"policy": "strict"}
    cumsum = str(Path(task).parent / "cumsum_relu.py")
    twins = [(task, HONEST, False, strict), (cumsum, HONEST_CUMSUM, False, strict)]
    return [p for _ in range(n_twin) for p in twins] + [
        (d["task"], d["candidate"], d.get("kind") == "inductor",
         {"policy": d.get("policy", "strict"), **({"allow": d["allow"]} if d.get("allow") else {})})
        for f in args.corpus or [] for d in map(json.loads, Path(f).read_text().splitlines()) if d]


def _batch(pairs: list[tuple[str, str, bool, dict]], args: argparse.Namespace, ext_dir: str,
           on_result=None) -> list[dict]:
    """verify_batch over the pairs, grouped by trust (the trusted ones with the static check off) and policy;
    results in input order. `on_result(i, result)` hears each as it lands (i: the index in `pairs`)."""
    out: dict[int, dict] = {}
    groups = dict.fromkeys((p[2], json.dumps(p[3], sort_keys=True)) for p in pairs)
    for trusted, pol in groups:
        idx = [i for i, p in enumerate(pairs) if p[2] == trusted and json.dumps(p[3], sort_keys=True) == pol]
        hear = (lambda j, r, idx=idx: on_result(idx[j], r)) if on_result else None
        got = verify_batch([pairs[i][:2] for i in idx], workers=args.workers, device=args.device,
                           extensions_dir=ext_dir, off=("static",) if trusted else (), on_result=hear,
                           **json.loads(pol))
        out.update(zip(idx, got, strict=True))
    return [out[i] for i in range(len(pairs))]


def _keys(todo: list[tuple[str, str, bool]]) -> list[tuple[str, str, int]]:
    """(task, candidate, n): the pair's n-th listing, so rows kept by a call given other corpus files still match."""
    seen: dict = {}
    out = []
    for t, c, *_ in todo:
        seen[(t, c)] = seen.get((t, c), -1) + 1
        out.append((t, c, seen[(t, c)]))
    return out


def _stored_rows(path: str | None) -> dict[tuple[str, str, int], dict]:
    """(task, candidate, n) -> its row of a --corpus-rows file: the first and second pass ("a", "b") and, for rows
    that name it, the commit they were verified at."""
    if not path or not Path(path).is_file():
        return {}
    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    return {(r["task"], r["candidate"], r["n"]): r for r in rows}


def _commit(args: argparse.Namespace) -> str:
    return args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                         cwd=ROOT).stdout.strip()


def _spread(xs: list[float]) -> dict | None:
    return {"median": statistics.median(xs), "max": max(xs), "n": len(xs)} if xs else None


def corpus(args: argparse.Namespace, task: str, ext_dir: str) -> dict:
    """Each pair verified twice in one batch (the timed rounds still take turns on the device lock), chunk by chunk
    (W pairs, their first passes before their second); a --corpus-minutes box that ends the section early leaves every pair it finished
    verified twice, and the figures cover those. --corpus-rows FILE keeps each pair's two results as soon as both
    are in; a later call given the same file verifies only the pairs it lacks, and the figures cover every pair in
    it (throughput: this call's chunks only). A negative box computes the figures from the file alone."""
    todo = _pairs(args, task)
    stored = _stored_rows(args.corpus_rows)
    done = {k: (r["a"], r["b"]) for k, r in stored.items()}
    commit = _commit(args)
    box = time.monotonic() + 60 * (args.corpus_minutes if args.corpus_minutes is not None else 1e6)
    step = max(1, args.workers)
    new, batch_s = [], 0.0
    keys = _keys(todo)
    at = {k: i for i, k in enumerate(keys)}
    left = [k for k in keys if k not in done]
    for j in range(0, len(left), step):
        if time.monotonic() > box:
            break
        chunk = left[j: j + step]
        half: dict = {}

        def hear(i: int, r: dict, chunk=chunk, half=half) -> None:
            k = chunk[i % len(chunk)]
            half.setdefault(k, {})[i // len(chunk)] = r
            if len(half[k]) == 2:
                done[k] = (half[k][0], half[k][1])
                new.append(k)
                if args.corpus_rows:
                    with open(args.corpus_rows, "a") as f:
                        f.write(json.dumps({"task": k[0], "candidate": k[1], "n": k[2], "a": half[k][0],
                                            "b": half[k][1], "commit": commit}, default=str) + "\n")

        t0 = time.monotonic()
        # the chunk's first passes, then its second: a second pass starts after its first has filled the compile
        # caches (inductor's, Triton's), as a training run's repeated rollouts of a task would find them
        _batch([todo[at[k]] for _ in (0, 1) for k in chunk], args, ext_dir, on_result=hear)
        batch_s += time.monotonic() - t0
    reached = [k for k in keys if k in done]
    pairs = [todo[at[k]] for k in reached]
    a = [done[k][0] for k in reached]
    b = [done[k][1] for k in reached]
    pen = sum(1 for r in a + b if r["reward"] < 1)
    # a level may differ where a speedup lies within 1% of the 5% boundary
    near = lambda r: any(x is not None and abs(x / BOUNDARY - 1) < 0.01  # noqa: E731
                         for x in (r["speedup_eager"], r["speedup_compile"]))
    same = sum(1 for x, y in zip(a, b, strict=True) if x["reward"] == y["reward"] or near(x) or near(y))
    bad = [{"task": t, "candidate": c, "policy": x.get("policy"), "rewards": [x["reward"], y["reward"]],
            "hack": x["hack"] or y["hack"], "error": x.get("error") or y.get("error"), "worst_diff": x.get("worst_diff"),
            "stderr_tail": x.get("stderr_tail") or y.get("stderr_tail")}
           for (t, c, *_), x, y in zip(pairs, a, b, strict=True) if min(x["reward"], y["reward"]) < 1]
    # per policy tier (the tier each pair was verified under): the strict corpus and the library corpus apart
    tiers = {}
    for tier in dict.fromkeys(r.get("policy") or "strict" for r in a):
        ix = [i for i, r in enumerate(a) if (r.get("policy") or "strict") == tier]
        tiers[tier] = {"pairs": len(ix), "verified": 2 * len(ix),
                       "penalized": sum(1 for i in ix for r in (a[i], b[i]) if r["reward"] < 1),
                       "same_level": sum(1 for i in ix if a[i]["reward"] == b[i]["reward"] or near(a[i]) or near(b[i])),
                       "library_calls": sorted({c for i in ix for c in a[i].get("library_calls") or []})}
    walls = [r["wall_s"] for r in a + b if r.get("wall_s")]
    phases = {k: [r["phase_s"][k] for r in a + b if k in (r.get("phase_s") or {})]
              for k in ("load", "draws", "warmup", "timing")}
    fresh = set(new)
    at_commit = [commit if k in fresh else stored[k].get("commit") or "not recorded" for k in reached]
    return {"pairs": len(pairs), "listed": len(todo), "penalized": pen, "tiers": tiers,
            "pairs_by_commit": {c: at_commit.count(c) for c in dict.fromkeys(at_commit)}, "verified": 2 * len(pairs), "same_level": same,
            "levels": [r["reward"] for r in a], "penalized_pairs": bad,
            "wall_s_median": statistics.median(walls) if walls else None,
            # GPU memory a verification held at most, over the task's measured forward peak (verify_batch reserves
            # MEMORY_FACTOR times the latter)
            "gpu_peak_over_task_peak": _spread([r["gpu_peak_bytes"] / r["task_peak_bytes"] for r in a + b
                                                if r.get("gpu_peak_bytes") and r.get("task_peak_bytes")]),
            "phase_s_median": {k: statistics.median(v) for k, v in phases.items() if v},
            "batch_s": batch_s, "batch_pairs": 2 * len(new),
            "batch_per_hour": 3600 * 2 * len(new) / batch_s if batch_s else None, "workers": args.workers}


def kept(args: argparse.Namespace, task: str, stored: dict) -> dict:
    """The stored corpus section's penalized count over the pairs whose task the shortcut checks keep: a correct
    kernel that rounds differently fails a task the checks drop (a fragile one) at random, whatever the verifier
    does. Every listed pair must have been reached, so the pairs are the --corpus files' lines."""
    c = stored.get("corpus")
    if not c or c["pairs"] != c["listed"] or c["listed"] != len(_pairs(args, task)):
        raise SystemExit("kept: needs --update over a corpus section that reached every pair of these --corpus files")
    checks = [r for f in args.task_checks or [] for r in json.loads(Path(f).read_text())["rows"]]
    out = {r["task_id"]: r["dropped_by"] for r in checks if r.get("dropped_by")}
    seen = {r["task_id"] for r in checks if not r.get("error")}
    tid = lambda t: t.rsplit(":", 1)[-1]  # noqa: E731
    pairs = [t for t, *_ in _pairs(args, task)]
    unchecked = sorted({tid(t) for t in pairs} - seen)
    if unchecked:
        raise SystemExit(f"kept: the --task-checks files lack {len(unchecked)} corpus task(s), e.g. {unchecked[0]}")
    on_kept = [t for t in pairs if tid(t) not in out]
    pen = sum(1 for b in c["penalized_pairs"] if tid(b["task"]) not in out for r in b["rewards"] if r < 1)
    return {"pairs": len(on_kept), "verified": 2 * len(on_kept), "penalized": pen,
            "dropped": {t: out[t] for t in sorted({tid(t) for t in pairs} & set(out))},
            "task_checks": [Path(f).name for f in args.task_checks or []]}


def _baseline(path: str | None, n: int) -> tuple[list[dict], str]:
    """(task_id, eager_ms) of the first n release rows, and what the eager_ms are: the release's own (measured on
    an H200), or, with --eager-baseline, the profile stage's measurements of those tasks made again on this GPU
    (benchmarks/remeasure_copy.py, then `opsynth profile`), so a GPU other than the release's can be compared."""
    import pyarrow.dataset as ds

    rel = ds.dataset(str(RELEASE / "data")).to_table(columns=["task_id", "eager_ms"]).to_pylist()
    if not path:
        return rel[:n], "the release's eager_ms (its profile stage, NVIDIA H200)"
    import pyarrow.parquet as pq

    # a shard of rows the profile stage dropped before timing holds no eager_ms column at all
    got = {r["task_id"]: r["eager_ms"] for f in sorted(Path(path).glob("*.parquet"))
           if "eager_ms" in pq.read_schema(f).names
           for r in pq.read_table(f, columns=["task_id", "eager_ms"]).to_pylist() if r["eager_ms"]}
    return [{"task_id": r["task_id"], "eager_ms": got[r["task_id"]]} for r in rel if r["task_id"] in got][:n], \
        f"the profile stage's eager_ms measured again on this GPU ({path})"


EAGER_TIMEOUT_S = 240.0  # one eager twin at most: a stuck one costs the section this, not the call
EAGER_MEMORY_FACTOR = 4  # the twin's reservation over the task's forward peak (see eager_vs_release)


def eager_vs_release(args: argparse.Namespace) -> dict:
    """In chunks of 2W tasks until --n-release or the --max-minutes box (negative: no new tasks, the figures from
    --eager-rows alone). With --eager-rows FILE each task's result is appended as it lands, and a later call
    verifies only the tasks the file lacks: the figures cover every task of the first --n-release in it."""
    rows, baseline = _baseline(args.eager_baseline, args.n_release)
    path = Path(args.eager_rows) if args.eager_rows else None
    done = {}
    if path and path.is_file():
        done = {r["task_id"]: r for r in map(json.loads, path.read_text().splitlines()) if r}
    todo = [r for r in rows if r["task_id"] not in done]
    box = time.monotonic() + 60 * (args.max_minutes if args.max_minutes is not None else 1e6)
    step = 2 * max(1, args.workers)
    for i in range(0, len(todo), step):
        if time.monotonic() > box:
            break
        chunk = todo[i: i + step]

        def keep(j: int, r: dict, chunk=chunk) -> None:
            e = (r.get("times_ms") or {}).get("eager", {})
            done[chunk[j]["task_id"]] = row = {
                "task_id": chunk[j]["task_id"], "eager_ms": e.get("median"), "eager_iqr_ms": e.get("iqr"),
                "baseline_eager_ms": chunk[j]["eager_ms"],
                "runs": e.get("runs"), "wall_s": r.get("wall_s"), "gpu_peak_bytes": r.get("gpu_peak_bytes"),
                "task_peak_bytes": r.get("task_peak_bytes"), "retried_alone": r.get("retried_alone"),
                "error": r.get("error"), "hack": r.get("hack"), "stderr_tail": r.get("stderr_tail")}
            print(json.dumps({k: row[k] for k in ("task_id", "eager_ms", "wall_s", "error")}, default=str)[:300],
                  flush=True)
            if path:
                with path.open("a") as f:
                    f.write(json.dumps(row, default=str) + "\n")

        # the workers draw and check side by side; their timed rounds take turns on the device (verify_batch's lock).
        # Only the eager time is compared, and the twin is the task itself: one draw, no shape variants and no
        # float64 reference, so the section spends the GPU on timing, which runs as in every verification. It holds
        # the inputs twice, the outputs of three forwards and two models: EAGER_MEMORY_FACTOR x the task's peak is
        # its reservation, the allocator cap 2.5x that (each row's gpu_peak_bytes says what it held)
        verify_batch([_eager_twin(f"{RELEASE}:{row['task_id']}") for row in chunk], workers=args.workers,
                     device=args.device, allow_torch=True, compile=False, draws=1, off=("precision",),
                     memory_factor=EAGER_MEMORY_FACTOR, timeout_s=EAGER_TIMEOUT_S, on_result=keep)
    # a row keeps the baseline it was compared with: a later call's baseline, measured again, does not move it
    base = {r["task_id"]: done.get(r["task_id"], {}).get("baseline_eager_ms") or r["eager_ms"] for r in rows}
    got = [done[t] for t in base if t in done]
    ratios = [r["eager_ms"] / base[r["task_id"]] for r in got if r.get("eager_ms")]
    failed = [r for r in got if not r.get("eager_ms")]
    dev = sorted(abs(x - 1) for x in ratios)
    held = [r["gpu_peak_bytes"] / r["task_peak_bytes"] for r in got if r.get("gpu_peak_bytes") and r.get("task_peak_bytes")]
    return {"tasks": len(ratios), "listed": len(rows), "baseline": baseline,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "p90_abs_dev": dev[int(0.9 * (len(dev) - 1))] if dev else None, "failed": len(failed),
            "failed_examples": failed[:5], "retried_alone": sum(1 for r in got if r.get("retried_alone")),
            "gpu_peak_over_task_peak": _spread(held)}


def _eager_twin(task: str) -> tuple[dict, str]:
    """The task without its shape variants (only its timing is compared), and its own Model as ModelNew: under
    --allow-torch that is correct by construction, so only time counts."""
    from verify.task import load_task

    t = load_task(task)
    return {**t, "shape_variants": []}, t["code"] + "\n\nclass ModelNew(Model):\n    pass\n"


def throughput(args: argparse.Namespace, task: str, ext_dir: str, done: dict) -> dict:
    """Batch rate: the corpus section's chunks when it ran in this call (every pair twice: its first pass finds
    cold compile caches, its second the caches the first filled), else one batch over the pairs. Serial rate:
    --n-serial pairs, each verified twice in a row the same way, one verification at a time, same machine. Pairs no
    --corpus-rows row holds yet are taken first, spread evenly over the listing, so a serial first pass meets cold
    caches as the batch's did; `serial_cold` says how many did."""
    pairs = _pairs(args, task)
    if "corpus" in done and done["corpus"]["batch_pairs"]:
        batch_n, batch_s = done["corpus"]["batch_pairs"], done["corpus"]["batch_s"]
    else:
        t0 = time.monotonic()
        _batch(pairs, args, ext_dir)
        batch_n, batch_s = len(pairs), time.monotonic() - t0
    rows = _stored_rows(args.corpus_rows)
    keyed = list(zip(pairs, _keys(pairs), strict=True))
    cold = [p for p, k in keyed if k not in rows]
    warm = [p for p, k in keyed if k in rows]
    n = args.n_serial or len(pairs)
    spread = lambda xs: xs[:: max(1, len(xs) // n)]  # noqa: E731 - the corpus files' kinds in proportion
    serial = (spread(cold) + spread(warm))[:n]
    t0 = time.monotonic()
    for tk, c, trusted, pol in serial:
        for _ in (0, 1):
            verify(tk, c, device=args.device, extensions_dir=ext_dir, off=("static",) if trusted else (), **pol)
    serial_s = time.monotonic() - t0
    return {"pairs": batch_n, "serial_pairs": len(serial), "serial_cold": sum(1 for p in serial if p in cold),
            "workers": args.workers, "batch_per_hour": 3600 * batch_n / batch_s,
            "serial_per_hour": 3600 * 2 * len(serial) / serial_s}


def headline(res: dict) -> list[dict]:
    """One row per figure, each with the command, hardware, torch and commit of the section that measured it."""
    head = []
    by = lambda s: res[s].get("measured_by", {})  # noqa: E731
    if "hack" in res:
        h = res["hack"]
        head.append({"figure": "hack routes caught", "value": f"{h['caught']}/{h['run']}", "target": "100%",
                     **by("hack")})
    if "corpus" in res:
        c = res["corpus"]
        head.append({"figure": "honest candidates penalized", "value": f"{c['penalized']} of {c['verified']}",
                     "target": "0", **by("corpus")})
        head.append({"figure": "reward-level repeatability, 2 runs", "value": f"{c['same_level']}/{c['pairs']}",
                     "target": ">= 99%", **by("corpus")})
        for tier, x in (c.get("tiers") or {}).items():
            lib = f"; library calls {', '.join(x['library_calls'])}" if x.get("library_calls") else ""
            head.append({"figure": f"honest candidates penalized, {tier} policy",
                         "value": f"{x['penalized']} of {x['verified']} ({x['pairs']} pairs, repeatability "
                                  f"{x['same_level']}/{x['pairs']}{lib})", "target": "0", **by("corpus")})
    if "kept" in res:
        k = res["kept"]
        head.append({"figure": "honest candidates penalized, on tasks the shortcut checks keep",
                     "value": f"{k['penalized']} of {k['verified']} ({k['pairs']} pairs; {len(k['dropped'])} corpus "
                     f"tasks dropped by {', '.join(k['task_checks'])})", "target": "0", **by("kept")})
    if "fallback" in res:
        f = res["fallback"]
        ctl = f["control"]
        head.append({"figure": "release tasks with a fallback operator: the strict policy refuses the task's own "
                     "reference with its other operators allowed",
                     "value": f"{f['refused']} of {f['sampled']} refused, {f['fallback_named']} naming the fallback"
                     + (f" (the rest: {', '.join(f['named_instead'])})" if f["named_instead"] else "")
                     + (f"; with the fallbacks allowed too, {ctl['correct']} of {ctl['run']} correct" if ctl["run"]
                        else "") + f"; {f['release_tasks_with_fallback']} release tasks use one, "
                     f"{len(f['release_fallback_tasks_with_honest_strict_candidate'])} have an honest strict "
                     "candidate in the corpus", "target": "all refused", **by("fallback")})
    if "eager_vs_release" in res and res["eager_vs_release"]["tasks"]:
        e = res["eager_vs_release"]
        head.append({"figure": "verify eager / release eager_ms", "value": f"median {e['median_ratio']:.4f}, "
                     f"p90 |ratio-1| {e['p90_abs_dev']:.3f} ({e['tasks']} tasks; against "
                     f"{e.get('baseline') or 'the release'})", "target": "2% / 10%",
                     **by("eager_vs_release")})
    if "throughput" in res:
        t = res["throughput"]
        head.append({"figure": "verifications per hour", "value": f"batch {t['batch_per_hour']:.0f} "
                     f"({t['workers']} workers) vs serial {t['serial_per_hour']:.0f}", "target": None,
                     **by("throughput")})
    return head


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sections", default="hack,corpus,eager_vs_release,throughput")
    ap.add_argument("--corpus", action="append", help="JSONL of {task, candidate[, kind]} honest pairs (GPU corpus); "
                    "repeatable")
    ap.add_argument("--n-honest", type=int, default=None, help="the suite's honest twin this many times in the corpus "
                    "(default 4 without --corpus, 0 with)")
    ap.add_argument("--n-release", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--eager-baseline", help="eager_vs_release: measurements (parquet files) of the first release "
                    "tasks made again by the profile stage on this GPU, instead of the release's own eager_ms")
    ap.add_argument("--max-minutes", type=float, default=None, help="eager_vs_release: stop starting chunks after this "
                    "(negative: the figures from --eager-rows alone)")
    ap.add_argument("--eager-rows", default=None, help="eager_vs_release: JSONL of each task's result, appended as "
                    "it lands and read back to skip the tasks done (resume across calls)")
    ap.add_argument("--corpus-rows", default=None, help="corpus: JSONL of each pair's two results, appended as "
                    "chunks end and read back to skip the pairs done (resume across calls)")
    ap.add_argument("--corpus-minutes", type=float, default=None, help="corpus: stop starting chunks after this")
    ap.add_argument("--task-checks", action="append", help="kept: a corpus_task_checks.py result; repeatable")
    ap.add_argument("--n-fallback", type=int, default=200, help="fallback: release tasks sampled")
    ap.add_argument("--n-fallback-control", type=int, default=20, help="fallback: of those, verified again with the "
                    "fallbacks allowed")
    ap.add_argument("--fallback-timeout-s", type=float, default=300.0)
    ap.add_argument("--fallback-rows", default=None, help="fallback: JSONL of each task's row, appended as it lands "
                    "and read back to skip the tasks done (resume across calls)")
    ap.add_argument("--fallback-minutes", type=float, default=None, help="fallback: stop starting tasks after this "
                    "(negative: the figures from --fallback-rows alone)")
    ap.add_argument("--hardware", default=None, help="the hardware to name (a report from rows files measured "
                    "elsewhere)")
    ap.add_argument("--torch", default=None, help="the torch version to name (with --hardware)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-serial", type=int, default=0, help="throughput: pairs in the serial loop (0: all)")
    ap.add_argument("--ext-dir", help="torch extensions directory (default: a fresh one); "
                    "benchmarks/verify_cuda/prebuild.py fills it ahead")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results"))
    ap.add_argument("--commit", help="the commit measured (default: git rev-parse of this checkout)")
    ap.add_argument("--update", action="store_true", help="keep the sections of an existing result file that this "
                    "call does not run (each section names the command, hardware and commit that measured it)")
    args = ap.parse_args()
    secs = args.sections.split(",")
    import torch

    work = Path(tempfile.mkdtemp())
    task = str(work / "linear_relu.py")
    Path(task).write_text(TASK)
    ext_dir = str(Path(args.ext_dir).resolve()) if args.ext_dir else str(work / "ext")
    Path(work / "cumsum_relu.py").write_text(TASKS["cumsum_relu"])
    if "hack" in secs or any(p[1] in (HONEST, HONEST_CUMSUM) for p in _pairs(args, task)):  # the suite's extensions
        _prebuild(ext_dir)
    res: dict = {}
    out = Path(args.out) / ("verify_bench_cpu.json" if args.device == "cpu" else "verify_bench_gpu.json")
    stored = json.loads(out.read_text()) if args.update and out.is_file() else {}
    for s in secs:
        print(f"[{s}]")
        t0 = time.monotonic()
        if s == "hack":
            res[s] = hack(args.device, task, ext_dir, args.workers)
        elif s == "corpus":
            res[s] = corpus(args, task, ext_dir)
        elif s == "eager_vs_release":
            res[s] = eager_vs_release(args)
        elif s == "throughput":
            res[s] = throughput(args, task, ext_dir, res)
        elif s == "kept":
            res[s] = kept(args, task, stored)
        elif s == "fallback":
            res[s] = fallback(args)
        res[s]["section_s"] = round(time.monotonic() - t0, 1)
        print(json.dumps({k: v for k, v in res[s].items() if k != "routes"}))
    commit = _commit(args)
    hw = args.hardware or ("2-core CPU (no GPU)" if args.device == "cpu" else
                           torch.cuda.get_device_name() if set(res) - {"kept"} else None)
    # no machine paths in a committed result: the checkout's own paths relative, an outside --out named OUT
    argv = [a.replace(str(ROOT) + "/", "") for a in sys.argv[1:]]
    argv = ["OUT" if a == args.out and not a.startswith(str(ROOT)) and Path(a).is_absolute() else a for a in argv]
    cmd = "python benchmarks/verify_bench.py " + " ".join(argv)
    for s in res:
        res[s]["measured_by"] = {"command": cmd, "hardware": hw, "torch": args.torch or torch.__version__,
                                 "commit": commit}
    if "kept" in res:  # a recount: the verifications are the corpus section's, on its hardware and commit
        res["kept"]["measured_by"] = {**(res.get("corpus") or stored["corpus"])["measured_by"], "command": cmd,
                                      "verified_by": (res.get("corpus") or stored["corpus"])["measured_by"]["command"]}
    if args.update:  # the GPU is named inside the file, by each section
        res = {**{k: v for k, v in stored.items() if k != "headline"}, **res}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"headline": headline(res), **res}, indent=1, default=str) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
