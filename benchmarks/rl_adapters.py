"""One rollout batch through each reward adapter of opsynth.rl: 8 answers (2 tasks x an honest rewrite, a hack, an
answer with no code block, one with two) scored as TRL's GRPOTrainer calls `trl_reward`, as verl's batch reward
manager calls `verl_compute_score`, and as verl's naive manager does (one call per answer, for comparison), with
the wall time of each and every answer's score and reason.

    python benchmarks/rl_adapters.py                       # CPU: writes benchmarks/results/rl_adapters_cpu.json
    python benchmarks/rl_adapters.py --device cuda --workers 4

The tasks are the demo dataset's first two (runs/demo/dataset, `make demo`), or two tiny ones made on the fly. The
stub policy's honest answer is a plain-PyTorch rewrite, so the batch runs under the allow-torch policy; everything
else (the hack checks, the timing) is the verifier's as in training. Timings on a shared 2-core CPU are rough.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from _tasks import load_tasks, stub_policy  # noqa: E402  (also puts the checkout on the path)

from opsynth.rl import make_trl_reward, to_verl, verl_compute_score  # noqa: E402


def batch(dataset: str | None, n_tasks: int) -> tuple[list[dict], list[str], list[str], list[int]]:
    rows = list(load_tasks(dataset, n_tasks))
    kinds, answers, owners = [], [], []
    for i, row in enumerate(rows):
        for kind, text in stub_policy(row):
            kinds.append(kind)
            answers.append(text)
            owners.append(i)
    return rows, kinds, answers, owners


def run(a: argparse.Namespace) -> dict:
    rows, kinds, answers, owners = batch(a.dataset, a.tasks)
    settings = {"device": a.device, "allow_torch": True, "workers": a.workers, "budget_s": a.budget_s}
    out: dict[str, dict] = {}

    # TRL: every column but `prompt`, one entry per completion; completions as chat messages
    columns: dict[str, list] = {}
    for i in owners:
        for k, v in rows[i].items():
            if k != "prompt":
                columns.setdefault(k, []).append(v)
    reward = make_trl_reward(**settings)
    t0 = time.monotonic()
    scores = reward(prompts=[rows[i]["prompt"] for i in owners],
                    completions=[[{"role": "assistant", "content": t}] for t in answers],
                    completion_ids=[[0]] * len(answers), **columns)
    out["trl_reward"] = {"wall_s": time.monotonic() - t0, "extras": reward.last_extras, "scores": scores}

    # verl: its parquet rows (to_verl), the batch reward manager's call
    vrows = [to_verl(r, i) for i, r in enumerate(rows)]
    t0 = time.monotonic()
    res = verl_compute_score(data_sources=[vrows[i]["data_source"] for i in owners], solution_strs=answers,
                             ground_truths=[vrows[i]["reward_model"]["ground_truth"] for i in owners],
                             extra_infos=[vrows[i]["extra_info"] for i in owners], **settings)
    out["verl_compute_score (batch manager)"] = {"wall_s": time.monotonic() - t0, "extras": res,
                                                  "scores": [r["score"] for r in res]}
    if not a.no_naive:  # verl's naive manager: one call per answer, one after another
        t0 = time.monotonic()
        res = [verl_compute_score(vrows[i]["data_source"], t, vrows[i]["reward_model"]["ground_truth"],
                                  vrows[i]["extra_info"], **settings) for i, t in zip(owners, answers, strict=True)]
        out["verl_compute_score (naive manager)"] = {"wall_s": time.monotonic() - t0, "extras": res,
                                                      "scores": [r["score"] for r in res]}
    return {"rows": rows, "kinds": kinds, "results": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dataset", help="a published dataset folder (default: runs/demo/dataset, else tiny tasks)")
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--no-naive", action="store_true", help="skip verl's one-call-per-answer comparison")
    ap.add_argument("--out", help="result file (default: benchmarks/results/rl_adapters_{cpu,gpu}.json)")
    ap.add_argument("--commit", help="the commit measured (default: git rev-parse of this checkout)")
    a = ap.parse_args()
    import torch

    got = run(a)
    gpu = a.device.startswith("cuda")
    hw = torch.cuda.get_device_name() if gpu else "2-core CPU (no GPU)"
    commit = a.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=ROOT).stdout.strip()
    command = " ".join(["python benchmarks/rl_adapters.py", *sys.argv[1:]])
    n = len(got["kinds"])
    verified = sum(e["format_ok"] for e in next(iter(got["results"].values()))["extras"])
    where = "GPU" if gpu else "CPU"
    print(f"{n} answers ({verified} verified, {n - verified} malformed) to {len(got['rows'])} tasks on {hw}, "
          f"{a.workers} workers, allow-torch policy")
    print(f"{'adapter':<36} {'wall s':>7}  scores")
    headline, detail = [], {}
    for name, r in got["results"].items():
        print(f"{name:<36} {r['wall_s']:>7.1f}  {r['scores']}")
        headline.append({"figure": f"RL reward adapter {name}: one rollout batch of {n} answers ({verified} verified, "
                                   f"{n - verified} malformed), {where}",
                         "value": f"{r['wall_s']:.1f} s wall, "
                                  + ("one call per answer, one after another" if "naive" in name
                                     else f"{a.workers} workers") + f"; scores {r['scores']}",
                         "target": None, "command": command, "hardware": hw, "torch": torch.__version__,
                         "commit": commit})
        detail[name] = {"wall_s": round(r["wall_s"], 2),
                        "answers": [{"task_id": e["task_id"], "answer": k, "score": e["score"],
                                     "speedup_eager": round(e["speedup_eager"], 3), "reason": e["reason"],
                                     "verify_wall_s": round(e["wall_s"], 2)}
                                    for k, e in zip(got["kinds"], r["extras"], strict=True)]}
    print(f"\n{'task':<18} {'answer':<11} {'score':>6} {'speedup':>8}  reason (trl_reward)")
    for row in detail["trl_reward"]["answers"]:
        print(f"{row['task_id']:<18} {row['answer']:<11} {row['score']:>6.1f} {row['speedup_eager']:>8.2f}  "
              f"{row['reason'][:70]}")
    out = Path(a.out) if a.out else ROOT / "benchmarks" / "results" / f"rl_adapters_{'gpu' if gpu else 'cpu'}.json"
    settings = {"device": a.device, "workers": a.workers, "budget_s": a.budget_s, "policy": "allow-torch",
                "tasks": [r["task_id"] for r in got["rows"]],
                "dataset": a.dataset or ("runs/demo/dataset" if (ROOT / "runs/demo/dataset/data").is_dir()
                                         else "tiny tasks made on the fly")}
    out.parent.mkdir(parents=True, exist_ok=True)
    # the figures page (docs/figures.md) lists these rows
    out.write_text(json.dumps({"headline": headline, "settings": settings, "adapters": detail}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
