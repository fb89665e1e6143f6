"""Train a tiny model a few steps with PODSGRPOTrainer and record what reaches the loss.

Used in-process by test_trl.py, and as a script under a launcher for several processes:

    python -m torch.distributed.run --nproc_per_node 2 tests/integrations/trl_contract.py \\
        --model MODEL_DIR --out OUT_DIR

Each process writes OUT_DIR/rank{R}.json: per generation, the full batch TRL built (all n),
the rewards it gathered, the rows PODS kept, and each micro-batch ``_compute_loss`` saw.
"""

from __future__ import annotations

import argparse
import json
import zlib
from collections import Counter
from pathlib import Path

import torch
from datasets import Dataset
from trl import GRPOTrainer

from pods.core.advantages import group_advantages
from pods.core.downsample import downsample
from pods.integrations.trl import PODSGRPOConfig, PODSGRPOTrainer

PROMPTS = [f"{a:02d}+{b:02d}=" for a, b in [(7, 85), (12, 34), (50, 50), (99, 1), (3, 4),
                                            (61, 27), (45, 45), (8, 80)]]


def starts_low(completions, **kwargs):
    """1 when the completion starts with a digit below 5: an untrained model earns it
    about half the time, so groups have reward variance."""
    return [1.0 if c[:1] in "01234" else 0.0 for c in completions]


def is_short(completions, **kwargs):
    return [1.0 if len(c) < 3 else 0.0 for c in completions]


def coin(completions, **kwargs):
    """1 or 0 by a hash of the completion: variance in every group of distinct completions,
    whatever the model (a real model's text rarely starts with a digit)."""
    return [float(zlib.crc32(c.encode()) % 2) for c in completions]


def _rows(batch: dict) -> dict:
    """The JSON-able per-rollout content of a TRL batch dict."""
    return {"prompt_ids": batch["prompt_ids"].tolist(),
            "completion_ids": batch["completion_ids"].tolist(),
            "completion_mask": batch["completion_mask"].tolist(),
            "advantages": batch["advantages"].tolist(),
            "num_items_in_batch": float(batch["num_items_in_batch"])}


def run(model_dir: str, out_dir: str, *, n: int = 8, m: int = 4, per_device: int = 4,
        grad_accum: int = 2, steps: int = 2, rule="max_variance", scale: str = "group",
        reward_weights: list[float] | None = None, rewards: list | None = None,
        max_completion_length: int = 4, peft_config=None, **config) -> dict:
    """Train ``steps`` optimizer steps; return (and write to out_dir/rank{R}.json) the
    records of this process. ``config``: more PODSGRPOConfig fields (e.g. use_vllm);
    ``peft_config``: a peft LoraConfig, given to the trainer as TRL takes it."""
    records = {"full": [], "gathered": [], "local_rewards": [], "kept": [], "loss": []}
    funcs = rewards or ([starts_low] if reward_weights is None else [starts_low, is_short])

    def recorded(func):
        def reward(completions, **kwargs):  # called with this process's completions
            values = func(completions, **kwargs)
            records["local_rewards"].append([func.__name__, values])
            return values
        reward.__name__ = func.__name__
        return reward

    class Recorder(PODSGRPOTrainer):
        def _calculate_rewards(self, *args):
            rewards = super()._calculate_rewards(*args)  # [W*B, F] gathered
            records["gathered"].append(rewards.tolist())
            return rewards

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            records["kept"].append(_rows(output))
            return output

        def _compute_loss(self, model, inputs):
            records["loss"].append(_rows(inputs))
            return super()._compute_loss(model, inputs)

    stock = GRPOTrainer._generate_and_score_completions

    def full(self, inputs):  # TRL's batch of all n, before PODS cuts it
        output = stock(self, inputs)
        records["full"].append(_rows(output))
        return output

    args = PODSGRPOConfig(
        output_dir=out_dir, num_generations=n, pods_m=m, pods_rule=rule,
        per_device_train_batch_size=per_device, gradient_accumulation_steps=grad_accum,
        max_steps=steps, max_completion_length=max_completion_length, learning_rate=1e-2,
        scale_rewards=scale,
        reward_weights=reward_weights, logging_steps=1, report_to="none", use_cpu=True,
        save_strategy="no", seed=0, disable_tqdm=True, bf16=False, **config)
    dataset = Dataset.from_dict({"prompt": PROMPTS})
    trainer = Recorder(model=model_dir, reward_funcs=[recorded(f) for f in funcs], args=args,
                       train_dataset=dataset, peft_config=peft_config)
    before = {k: p.detach().clone() for k, p in trainer.model.named_parameters()}
    GRPOTrainer._generate_and_score_completions = full
    try:
        trainer.train()
    finally:
        GRPOTrainer._generate_and_score_completions = stock
    records["changed_names"] = [k for k, p in trainer.model.named_parameters()
                                if not torch.equal(p, before[k])]
    records["changed"] = bool(records["changed_names"])
    records["rank"] = trainer.accelerator.process_index
    records["world"] = trainer.accelerator.num_processes
    records["steps_per_generation"] = args.steps_per_generation
    records["metrics"] = trainer.state.log_history
    path = Path(out_dir) / f"rank{records['rank']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records))
    return records


def check_contract(ranks: list[dict], n: int, m: int, rule="max_variance", scale="group",
                   weights=None, reward: str = "starts_low") -> None:
    """Assert, for every generation of every process, that the loss saw exactly the rows
    pods.core.downsample keeps from the gathered rewards, with group advantages over them."""
    world = len(ranks)
    for g in range(len(ranks[0]["full"])):
        gathered = torch.tensor(ranks[0]["gathered"][g])  # [W*B, F], the same on every rank
        w = torch.ones(gathered.shape[1]) if weights is None else torch.tensor(weights)
        rewards = (gathered * w).sum(1).view(-1, n)  # [P, n]
        lengths = torch.cat([torch.tensor(rec["full"][g]["completion_mask"]).sum(1)
                             for rec in ranks]).view(-1, n)  # [P, n] completion tokens
        idx = downsample(rewards, m, rule, lengths=lengths)  # [P, m]
        advantages = group_advantages(rewards.gather(1, idx), scale=scale)  # [P, m]
        kept_tokens = 0
        for rec in ranks:
            assert torch.equal(torch.tensor(rec["gathered"][g]), gathered)
            full, kept = rec["full"][g], rec["kept"][g]
            B = len(full["completion_ids"])
            P_local, first = B // n, rec["rank"] * (B // n)
            assert B == len(gathered) // world and B % n == 0
            # each group of n is one prompt, on this rank
            prompts = torch.tensor(full["prompt_ids"]).view(P_local, n, -1)
            assert (prompts == prompts[:, :1]).all()
            # this rank's rewards are its slice of the gathered ones
            local = [values for name, values in rec["local_rewards"] if name == reward][g]
            assert local == gathered[first * n : (first + P_local) * n, 0].tolist()
            rows = (torch.arange(P_local).unsqueeze(1) * n + idx[first : first + P_local])
            rows = rows.flatten()  # [P_local*m] of this rank's B
            for key in ("prompt_ids", "completion_ids", "completion_mask"):
                assert kept[key] == torch.tensor(full[key])[rows].tolist(), key
            torch.testing.assert_close(torch.tensor(kept["advantages"]),
                                       advantages[first : first + P_local].flatten())
            kept_tokens += torch.tensor(kept["completion_mask"]).sum().item()
            # the micro-batches of this generation are the kept rows, shuffled
            steps = rec["steps_per_generation"]
            micro = rec["loss"][g * steps : (g + 1) * steps]
            assert sum(len(batch["completion_ids"]) for batch in micro) == P_local * m
            seen = Counter(row for batch in micro for row in _row_keys(batch))
            assert seen == Counter(_row_keys(kept))
        # the loss normaliser counts the kept completion tokens of all ranks
        for rec in ranks:
            steps = rec["steps_per_generation"]
            for batch in [rec["kept"][g], *rec["loss"][g * steps : (g + 1) * steps]]:
                assert batch["num_items_in_batch"] == kept_tokens
    assert all(rec["changed"] for rec in ranks)


def _row_keys(batch: dict) -> list[tuple]:
    """One hashable (prompt, completion, advantage) per rollout of a recorded batch."""
    return [(tuple(p), tuple(c), round(a, 5)) for p, c, a in
            zip(batch["prompt_ids"], batch["completion_ids"], batch["advantages"], strict=True)]


def _sync_through_reload_weights() -> None:
    """TRL 1.16's colocate sync calls the vLLM model's ``load_weights`` one parameter at a
    time; on vLLM's CPU build that fails ("'Parameter' object has no attribute
    'weight_loader'"): the CPU backend repacks linear weights after loading into new
    Parameters without a loader. vLLM's own in-place reload (``reload_weights``, what
    pods.rollout.vllm uses) re-initialises the layers first; send TRL's weights through it."""
    from trl.generation.vllm_generation import VLLMGeneration

    def sync_weights(self):
        weights = list(self._iter_named_params())  # TRL's names, fixed for vLLM
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        self.llm.reset_prefix_cache()

    VLLMGeneration.sync_weights = sync_weights


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-device", type=int, default=4)
    parser.add_argument("--vllm-colocate", action="store_true",
                        help="generate with TRL's vLLM colocate mode")
    cli = parser.parse_args()
    vllm = {}
    if cli.vllm_colocate:
        vllm = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=64,
                    vllm_gpu_memory_utilization=0.3)
        _sync_through_reload_weights()
    run(cli.model, cli.out, per_device=cli.per_device, **vllm)
    import torch.distributed as dist

    if dist.is_initialized():  # leave the group before exit, as `pods` does (pods.cli)
        dist.destroy_process_group()
    from pods.runtime.distributed import leave

    leave(0)  # under torchrun: exit handlers, then no interpreter teardown
