"""opsynth's reward in verl: `opsynth.rl.verl_compute_score` is a verl custom reward function.

    python examples/verl_reward.py              # the demo dataset (make demo) or 2 tiny tasks; no verl needed

It writes the tasks as verl's parquet rows (`opsynth.rl.to_verl`: `prompt`, `data_source`, `reward_model.ground_truth`
= the task's code, `extra_info`), reads them back as verl's dataset does, and scores a stub policy's fixed answers
the two ways verl calls a custom reward function: the batch reward manager's call with lists, verified in parallel,
and the naive manager's call per answer. In a real run:

    python -m verl.trainer.main_ppo data.train_files=train.parquet \\
        custom_reward_function.path=$(python -c "import opsynth.rl as m; print(m.__file__)") \\
        custom_reward_function.name=verl_compute_score reward_model.reward_manager=batch \\
        +custom_reward_function.reward_kwargs.device=cuda +custom_reward_function.reward_kwargs.workers=8 ...
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tasks import load_tasks, stub_policy  # noqa: E402  (also puts the checkout on the path)

from opsynth.rl import to_verl, verl_compute_score  # noqa: E402


def write_verl_parquet(dataset: str | None, n_tasks: int, out: Path) -> Path:
    ds = load_tasks(dataset, n_tasks)
    path = out / "train.parquet"
    ds.map(to_verl, with_indices=True, remove_columns=ds.column_names).to_parquet(str(path))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", help="a published dataset folder (default: runs/demo/dataset, else tiny tasks)")
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--strict", action="store_true", help="the strict policy (the stub's honest answer is then a hack)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=120.0)
    a = ap.parse_args()
    settings = {"device": a.device, "allow_torch": not a.strict, "workers": a.workers, "budget_s": a.budget_s}

    import pandas as pd

    with tempfile.TemporaryDirectory() as d:
        rows = pd.read_parquet(write_verl_parquet(a.dataset, a.tasks, Path(d))).to_dict("records")
    print(f"{len(rows)} verl rows; columns {list(rows[0])}; the prompt has {len(rows[0]['prompt'])} messages")
    kinds, sources, answers, truths, infos = [], [], [], [], []
    for row in rows:
        for kind, text in stub_policy({"code": row["reward_model"]["ground_truth"]}):
            kinds.append(kind)
            sources.append(row["data_source"])
            answers.append(text)
            truths.append(row["reward_model"]["ground_truth"])
            infos.append(row["extra_info"])

    t0 = time.monotonic()  # reward_model.reward_manager=batch: one call, the batch verified in parallel
    out = verl_compute_score(data_sources=sources, solution_strs=answers, ground_truths=truths, extra_infos=infos,
                             **settings)
    print(f"batch manager: {len(out)} answers scored in {time.monotonic() - t0:.1f} s ({a.device})")
    print(f"{'task':<18} {'answer':<11} {'score':>6} {'speedup':>8}  reason")
    for kind, o in zip(kinds, out, strict=True):
        print(f"{o['task_id']:<18} {kind:<11} {o['score']:>6.1f} {o['speedup_eager']:>8.2f}  {o['reason'][:70]}")

    t0 = time.monotonic()  # the naive manager: one call per answer (here the first task's honest one)
    one = verl_compute_score(sources[0], answers[0], truths[0], infos[0], **settings)
    print(f"naive manager, one answer: score {one['score']} in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
