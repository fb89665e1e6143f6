"""PODS for TRL: a ``GRPOTrainer`` that generates n rollouts per prompt and trains on m.

Swap two names in a TRL GRPO script:

    from pods.integrations.trl import PODSGRPOConfig, PODSGRPOTrainer

    args = PODSGRPOConfig(output_dir="out", num_generations=64, pods_m=16,
                          pods_rule="max_variance", per_device_train_batch_size=16, ...)
    trainer = PODSGRPOTrainer(model="Qwen/Qwen2.5-3B-Instruct", reward_funcs=my_reward,
                              args=args, train_dataset=dataset)
    trainer.train()

Each step TRL generates ``num_generations`` = n completions per prompt and scores them; the
rewards gathered over all processes go through the native trainer's selection,
``pods.core.selection.select`` ([P, n] -> m kept columns [P, m], and the ``select/`` metrics
under the native trainer's keys). The advantages stay TRL's own, not ``select``'s: computed
over the kept m as TRL computes them over n (``scale_rewards``, ``multi_objective_aggregation``,
unbiased std, eps 1e-4, NaN-aware). Every per-rollout tensor TRL hands to the loss is cut to
the kept rows, ``num_items_in_batch`` recounted over them. ``pods_m=None`` (or n) is stock
GRPO. Evaluation is left to TRL unchanged (all n).

Supported TRL versions: 1.16 (tested: 1.16.0 with transformers 5.23, torch 2.13 CPU; 1.15.0
cannot train GRPO on a torch without Triton, stock trainer included). The adapter relies on
TRL 1.x internals (``_calculate_rewards`` returning the gathered [P*n, num_funcs] rewards,
the output dict of ``_generate_and_score_completions``); other versions get a warning at
import.

Batch sizes: ``per_device_train_batch_size`` counts KEPT rollouts, the rows one
forward/backward pass sees (the memory knob, unchanged when you go from GRPO n=16 to PODS
n=64, m=16). Each process then generates ``per_device_train_batch_size * n/m *
steps_per_generation`` rollouts per generation: ``generation_batch_size`` (which, when set,
counts generated rollouts) is n/m times what TRL would derive. Each process must hold whole
groups, so ``per_device_train_batch_size * steps_per_generation`` must be a multiple of m (and
``per_device_train_batch_size * n`` of m); ``PODSGRPOConfig`` says what to change if not.
Not yet run on a GPU: in vLLM colocate mode TRL caps vLLM's concurrent sequences at
``per_device_train_batch_size * tensor_parallel_size * steps_per_generation``, which now
counts kept rollouts, so vLLM may generate the n/m times larger batch in several waves.

Forward passes that still run on all n: TRL computes these in
``_generate_and_score_completions`` before the rewards exist, so they cannot be cut:
  - ``old_per_token_logps`` when ``gradient_accumulation_steps`` is not a multiple of
    ``steps_per_generation * num_iterations`` (e.g. ``num_iterations > 1``, or
    ``steps_per_generation > gradient_accumulation_steps``);
  - ``old_per_token_logps`` whenever vLLM is used with ``vllm_importance_sampling_correction``
    (TRL's default for vLLM);
  - ``ref_per_token_logps`` when ``beta > 0``.
Each is a no-grad forward over all n rollouts. A forward costs about a third of a
forward+backward, so with n=64, m=16 one such pass costs ~64/(3*16) = 1.3x the PODS update
itself (two passes, 2.7x). Avoid them with ``beta=0`` (TRL's default),
``num_iterations=1`` and ``steps_per_generation`` equal to ``gradient_accumulation_steps``
(the default), and, with vLLM, ``vllm_importance_sampling_correction=False`` if the
sampling mismatch is acceptable. pods' own trainer selects before any of these passes.
"""

from __future__ import annotations

import math

import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanstd, split_pixel_values_by_grid, unsplit_pixel_values_by_grid

from pods.core.rollout_inputs import rule_inputs, rule_sources
from pods.core.selection import Selection, SelectionSpec, select
from pods.integrations.trl_config import SUPPORTED_TRL, PODSGRPOConfig

__all__ = ["SUPPORTED_TRL", "PODSGRPOConfig", "PODSGRPOTrainer"]

EPS = 1e-4  # TRL's advantage epsilon


def _two_argument_rule(rule):
    """A config's callable rule(rewards, m, **inputs) as pods.core.downsample calls rules
    (with a generator), keeping the inputs it ``needs``."""
    def called(rewards, m, generator, **inputs):
        return rule(rewards, m, **inputs)

    called.needs = tuple(getattr(rule, "needs", ()))
    called.__name__ = getattr(rule, "__name__", "custom")
    return called


class PODSGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that trains on m of the n rollouts of each prompt (see the module
    docstring). Takes the same arguments, with ``args`` a ``PODSGRPOConfig``."""

    def __init__(self, model, reward_funcs=None, args: PODSGRPOConfig | None = None, **kwargs):
        if args is None:
            args = PODSGRPOConfig()
        if not isinstance(args, PODSGRPOConfig):
            raise TypeError(f"PODSGRPOTrainer needs args=PODSGRPOConfig(...) (with pods_m), got "
                            f"{type(args).__name__}; PODSGRPOConfig takes every GRPOConfig "
                            f"field.")
        super().__init__(model, reward_funcs, args=args, **kwargs)
        self.pods_m = args.pods_m or args.num_generations
        rule = args.pods_rule
        self._pods_rule = _two_argument_rule(rule) if callable(rule) else rule
        # Every process selects every group from the same gathered rewards; one seed keeps
        # random rules identical across processes. (select's advantages go unused: TRL's own.)
        self._pods_spec = SelectionSpec(m=self.pods_m, rule=self._pods_rule)
        self._pods_generator = torch.Generator().manual_seed(args.seed)
        self._pods_rewards_per_func: torch.Tensor | None = None

    def get_train_dataloader(self):
        # TRL loads `_train_batch_size * steps_per_generation` rows per generation; generate
        # n/m times the kept rows that the micro-batches will see.
        kept = self._train_batch_size
        self._train_batch_size = kept * self.num_generations // self.pods_m
        try:
            return super().get_train_dataloader()
        finally:
            self._train_batch_size = kept

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions,
                                                      completion_ids_list)
        self._pods_rewards_per_func = rewards_per_func  # [W*B, F] over all W processes
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)  # B = len(inputs) local rows
        rewards_per_func, self._pods_rewards_per_func = self._pods_rewards_per_func, None
        n, m, B = self.num_generations, self.pods_m, len(inputs)
        if not self.model.training or m == n:
            return output
        _check_whole_groups(inputs, n, rewards_per_func.shape[0], self.accelerator.num_processes)
        P_local, F = B // n, rewards_per_func.shape[1]
        grouped = rewards_per_func.view(-1, n, F)  # [P, n, F], P groups over all processes
        weights = self.reward_weights.to(grouped.device)  # [F]
        unscorable = grouped.isnan().all(dim=2)  # [P, n] every reward function returned None
        rewards = (grouped * weights).nansum(dim=2).masked_fill(unscorable, math.nan)  # [P, n]
        sources = {name: output[name] for name in rule_sources(self._pods_rule)}  # [B, T] each
        inputs = {name: self.accelerator.gather(value).view(-1, n)  # [P, n] each
                  for name, value in rule_inputs(self._pods_rule, **sources).items()}
        lengths = self.accelerator.gather(output["completion_mask"].sum(-1)).view(-1, n)
        chosen = self._select(rewards, inputs, lengths)  # keep [P, n], the select/ metrics
        idx = chosen.columns().to(rewards.device)  # [P, m] kept columns, ascending
        kept_per_func = grouped.gather(1, idx.unsqueeze(2).expand(-1, -1, F))  # [P, m, F]
        advantages = self._kept_advantages(kept_per_func, unscorable.gather(1, idx))  # [P, m]
        first = self.accelerator.process_index * P_local  # this process's groups
        local_idx = idx[first : first + P_local]  # [P_local, m]
        rows = (torch.arange(P_local, device=idx.device).unsqueeze(1) * n + local_idx).flatten()
        output = _take_rows(output, rows, B)  # each per-rollout entry [B, ...] -> [P_local*m, ...]
        output["advantages"] = advantages[first : first + P_local].flatten()  # [P_local*m]
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1)  # [P_local*m, T]
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        self._log_selection(chosen, idx, advantages)
        return output

    def _select(self, rewards: torch.Tensor, inputs: dict[str, torch.Tensor],
                lengths: torch.Tensor) -> Selection:
        """``pods.core.selection.select`` on the [P, n] rewards (the rule's per-rollout
        inputs and the completion lengths [P, n] each). Unscorable (NaN) rewards count as
        their group's mean, in the choice and the metrics, so they add no variance; all-NaN
        groups count as 0."""
        mean = rewards.nanmean(dim=1, keepdim=True).nan_to_num(0.0)  # [P, 1]
        filled = torch.where(rewards.isnan(), mean, rewards).cpu()  # [P, n]
        return select(filled, {name: value.cpu() for name, value in inputs.items()},
                      self._pods_spec, self._pods_generator, lengths.cpu())

    def _kept_advantages(self, kept: torch.Tensor, unscorable: torch.Tensor) -> torch.Tensor:
        """TRL's advantages computed over the kept [P, m, F] rewards instead of [P, n, F];
        NaN-aware as TRL is (unscorable rollouts get advantage 0). Returns [P, m]."""
        weights = self.reward_weights.to(kept.device)  # [F]
        if self.multi_objective_aggregation == "normalize_then_sum":
            # each reward function normalised within the group, then one batch-wide scale
            per_func = (kept - kept.nanmean(dim=1, keepdim=True)) / (
                nanstd(kept, dim=1, keepdim=True) + EPS)  # [P, m, F]
            rewards = (per_func * weights).nansum(dim=2).masked_fill(unscorable, math.nan)
            advantages = (rewards - rewards.nanmean()) / (nanstd(rewards) + EPS)  # [P, m]
        else:  # sum_then_normalize (TRL's default)
            rewards = (kept * weights).nansum(dim=2).masked_fill(unscorable, math.nan)  # [P, m]
            advantages = rewards - rewards.nanmean(dim=1, keepdim=True)  # centred per group
            if self.scale_rewards == "group":
                advantages = advantages / (nanstd(rewards, dim=1, keepdim=True) + EPS)
            elif self.scale_rewards == "batch":
                advantages = advantages / (nanstd(rewards) + EPS)
        return advantages.nan_to_num(0.0)

    def _log_selection(self, chosen: Selection, idx: torch.Tensor,
                       advantages: torch.Tensor) -> None:
        """The ``select/`` metrics, as the native trainer logs them, beside TRL's reward
        metrics over all n; and the completions table's advantages: the trained ones
        ([P, m] at the kept columns ``idx``), NaN where dropped."""
        for key, value in chosen.metrics.items():
            self._metrics["train"][key].append(value)
        logged = self._logs["advantages"]  # the last P*n entries are this batch's, from TRL
        full = torch.full((idx.shape[0], self.num_generations), math.nan)  # [P, n]
        full.scatter_(1, idx.cpu(), advantages.float().cpu())
        for _ in range(min(full.numel(), len(logged))):
            logged.pop()
        logged.extend(full.flatten().tolist())


def _check_whole_groups(inputs: list[dict], n: int, total_rows: int, processes: int) -> None:
    """This process's B rows are whole groups of n rollouts of one prompt each."""
    B = len(inputs)
    whole = B % n == 0 and total_rows == B * processes and all(
        inputs[i].get("prompt") == inputs[i - i % n].get("prompt") for i in range(B))
    if not whole:
        raise RuntimeError(
            f"PODS needs each process to hold whole groups of num_generations={n} rollouts "
            f"of one prompt; this process got {B} rows ({total_rows} over {processes} "
            f"processes) that do not split into such groups. Use the batch sizes "
            f"PODSGRPOConfig checks, and TRL's own sampler (no custom data loader).")


def _take_rows(batch: dict, rows: torch.Tensor, B: int) -> dict:
    """Every per-rollout entry of TRL's batch dict cut to ``rows``; scalars kept as they
    are. Image fields are first split into one entry per rollout, as TRL does to shuffle."""
    batch = split_pixel_values_by_grid(batch)
    cut = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 or isinstance(value, list):
            if len(value) != B:
                raise RuntimeError(f"cannot down-sample TRL's batch entry {key!r}: its leading "
                                   f"size {len(value)} is not the {B} rollouts of the batch.")
            value = (value[rows.to(value.device)] if isinstance(value, torch.Tensor)
                     else [value[i] for i in rows.tolist()])
        cut[key] = value
    return unsplit_pixel_values_by_grid(cut)
