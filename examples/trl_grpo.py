"""opsynth's reward in TRL: `opsynth.rl.trl_reward` is a GRPOTrainer reward function.

    python examples/trl_grpo.py                 # the demo dataset (make demo) or 2 tiny tasks; no TRL needed
    python examples/trl_grpo.py --train         # and one real GRPOTrainer step with a tiny model made here

Without --train a stub policy answers each task with fixed texts (honest, a hack, malformed) and the reward is
called exactly as GRPOTrainer calls it: `reward(prompts=, completions=, completion_ids=, **columns)`, the dataset's
other columns repeated once per generation, here with chat-message completions. On a GPU pass --device cuda (and
--strict, and have the policy write kernels). In a real run:

    from trl import GRPOConfig, GRPOTrainer
    from opsynth.rl import make_trl_reward
    trainer = GRPOTrainer(model=MODEL, reward_funcs=make_trl_reward(device="cuda", workers=8, gpus=[0, 1]),
                          train_dataset=load_dataset(DATASET, split="train"), args=GRPOConfig(...))
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tasks import load_tasks, stub_policy  # noqa: E402  (also puts the checkout on the path)

from opsynth.rl import RewardSettings, TrlReward, make_trl_reward  # noqa: E402


def rollout(rows: list[dict], answers_per_task: list[list[tuple[str, str]]]) -> dict[str, Any]:
    """What GRPOTrainer hands its reward functions for one batch: every column but `prompt` as a list, one entry per
    completion, the completions as chat messages."""
    kinds, prompts, completions, columns = [], [], [], {}
    for row, answers in zip(rows, answers_per_task, strict=True):
        for kind, text in answers:
            kinds.append(kind)
            prompts.append(row["prompt"])
            completions.append([{"role": "assistant", "content": text}])
            for k, v in row.items():
                if k != "prompt":
                    columns.setdefault(k, []).append(v)
    return {"kinds": kinds, "prompts": prompts, "completions": completions, "columns": columns}


def score_stub_batch(dataset: str | None, n_tasks: int, device: str, allow_torch: bool, workers: int,
                     budget_s: float) -> list[dict]:
    rows = list(load_tasks(dataset, n_tasks))
    batch = rollout(rows, [stub_policy(r) for r in rows])
    reward = make_trl_reward(device=device, allow_torch=allow_torch, workers=workers, budget_s=budget_s)
    logged: dict[str, list] = {}
    t0 = time.monotonic()
    scores = reward(prompts=batch["prompts"], completions=batch["completions"],
                    completion_ids=[[0]] * len(batch["completions"]), **batch["columns"],
                    log_extra=lambda col, vals: logged.__setitem__(col, vals), log_metric=lambda *a: None)
    wall = time.monotonic() - t0
    print(f"{len(scores)} answers to {len(rows)} tasks scored in {wall:.1f} s ({device})")
    print(f"{'task':<18} {'answer':<11} {'reward':>6} {'speedup':>8}  reason")
    for kind, s, e in zip(batch["kinds"], scores, reward.last_extras, strict=True):
        print(f"{e['task_id']:<18} {kind:<11} {s:>6.1f} {e['speedup_eager']:>8.2f}  {e['reason'][:70]}")
    return reward.last_extras


# -- one real GRPOTrainer step ---------------------------------------------------------------------------------------

def tiny_model(out: Path, answers: list[str]) -> tuple[Any, Any]:
    """A 2-layer GPT-2 and a word-level tokenizer whose vocabulary holds each answer as one token (the chat
    template's text is one unknown token): a completion of one token is one of the answers, whatever the random
    weights pick. Made here, nothing downloaded."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[EOS]": 1, "[UNK]": 2, **{a: i + 3 for i, a in enumerate(answers)}}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")), pad_token="[PAD]",
                                  eos_token="[EOS]", unk_token="[UNK]", clean_up_tokenization_spaces=False)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    cfg = GPT2Config(vocab_size=len(vocab), n_positions=16, n_embd=16, n_layer=2, n_head=2,
                     bos_token_id=1, eos_token_id=1, pad_token_id=0)
    import torch

    torch.manual_seed(0)  # the same tiny model every run
    model = GPT2LMHeadModel(cfg)
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    return model, tok


def grpo_step(out: Path, n_tasks: int = 2, budget_s: float = 120.0, dataset: str | None = None) -> dict[str, Any]:
    """One GRPOTrainer step on n_tasks tasks, 2 generations each, on the CPU, rewarded by opsynth's verifier
    (allow-torch policy). Returns the rewards, which answer each was, and what the trainer logged."""
    from trl import GRPOConfig, GRPOTrainer

    rows = list(load_tasks(dataset, n_tasks))
    # each task's honest answer and hack: the tiny model picks among all of them, whatever the prompt, so an answer
    # may be another task's (its ModelNew computes the other task: incorrect)
    owner = {text: (r["task_id"], kind) for r in rows for kind, text in stub_policy(r)[:2]}
    model, tok = tiny_model(out, list(owner))
    seen: dict[str, Any] = {"rewards": [], "kinds": [], "reasons": []}

    class Recording(TrlReward):  # trl_reward's logic, keeping what the step scored
        def __call__(self, prompts=None, completions=None, **kw):
            scores = super().__call__(prompts=prompts, completions=completions, **kw)
            for tid, c, e in zip(kw["task_id"], completions, self.last_extras, strict=True):
                text = c[0]["content"] if isinstance(c, list) else c
                of, kind = owner.get(text, (None, "other"))
                seen["kinds"].append(kind if of in (tid, None) else f"{kind} for another task")
                seen["reasons"].append(e["reason"])
            seen["rewards"] += scores
            return scores

    reward = Recording(RewardSettings(device="cpu", allow_torch=True, workers=2, budget_s=budget_s, rounds=2))
    ds = load_tasks(dataset, n_tasks).select_columns(["prompt", "code", "task_id", "shape_variants"])
    args = GRPOConfig(output_dir=str(out / "grpo"), per_device_train_batch_size=2 * n_tasks, num_generations=2,
                      max_completion_length=1, max_steps=1, learning_rate=1e-3, logging_steps=1, report_to=[],
                      use_cpu=True, bf16=False, save_strategy="no", seed=0, dataloader_num_workers=0,
                      generation_kwargs={"suppress_tokens": [0, 1, 2]})  # no special token: each completion an answer
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=reward, train_dataset=ds, args=args)
    trainer.train()
    logged = {k: v for h in trainer.state.log_history for k, v in h.items()}
    return {"rewards": seen["rewards"], "kinds": seen["kinds"], "reasons": seen["reasons"],
            "rewards_seen": len(seen["rewards"]), "logged": logged}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", help="a published dataset folder (default: runs/demo/dataset, else tiny tasks)")
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--strict", action="store_true", help="the strict policy (the stub's honest answer is then a hack)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--train", action="store_true", help="also one real GRPOTrainer step (needs trl)")
    a = ap.parse_args()
    score_stub_batch(a.dataset, a.tasks, a.device, not a.strict, a.workers, a.budget_s)
    if a.train:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            m = grpo_step(Path(d), a.tasks, a.budget_s, a.dataset)
        print("GRPOTrainer step:", {k: v for k, v in m["logged"].items() if k.startswith(("reward", "opsynth"))})
        for kind, r, why in zip(m["kinds"], m["rewards"], m["reasons"], strict=True):
            print(f"  {kind:<26} {r:>5.1f}  {why[:70]}")


if __name__ == "__main__":
    main()
