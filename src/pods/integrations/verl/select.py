"""Selection on verl's objects: ``select_batch`` for DataProto batches, ``select_rows``
for the replay buffer, and the batch-size and version checks (see ``pods.integrations.verl``)."""


from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from pods.core.downsample import RULES, downsample
from pods.core.rollout_inputs import rule_inputs, rule_sources

TESTED = ("0.9",)  # verl minor versions this adapter is tested with
_checked: list[bool] = []  # the version warning is given once per process
# The completions' tensors the rules' inputs are computed from (pods.core.rollout_inputs),
# by their names in verl's batches and trajectories: [rows, T] each.
VERL_FIELDS = {"completion_ids": "responses", "completion_mask": "response_mask"}


def rule_fields(rule) -> list[str]:
    """The verl fields that ``rule``'s per-rollout inputs are computed from ([] for a rule of
    rewards alone); a ValueError for a rule whose inputs pods does not compute."""
    return [VERL_FIELDS[source] for source in rule_sources(rule)]


def verl_inputs(rule, fields: dict[str, Tensor]) -> dict[str, Tensor]:
    """The inputs ``rule`` needs, each [rows], from verl's fields ([rows, T] each)."""
    return rule_inputs(rule, **{source: fields[VERL_FIELDS[source]]
                                for source in rule_sources(rule)})


def check_verl_version() -> None:
    import verl

    version = getattr(verl, "__version__", "unknown")
    if ".".join(version.split(".")[:2]) not in TESTED:
        warnings.warn(f"pods.integrations.verl is tested with verl {', '.join(TESTED)}.x; "
                      f"verl {version} is installed. Its replay buffer internals may differ.",
                      stacklevel=2)
    _checked.append(True)


def group_rows(uids: Sequence) -> list[list[int]]:
    """Row indices of each uid, uids in order of first appearance, rows in order."""
    groups: dict = {}
    for row, uid in enumerate(uids):
        groups.setdefault(uid, []).append(row)
    return list(groups.values())


def select_rows(uids: Sequence, scores: Tensor, m: int, rule: str = "max_variance",
                generator: torch.Generator | None = None, lengths: Tensor | None = None,
                short: str = "raise", inputs: dict[str, Tensor] | None = None,
                ) -> tuple[Tensor, dict[str, float]]:
    """Indices of the kept rows (m per uid, each uid's rows contiguous and in original order)
    and the selection metrics. ``scores``: [rows] float; ``inputs``: the rule's per-rollout
    inputs, [rows] each (``verl_inputs``); ``lengths``: [rows] response tokens, for the
    ``select/completion_len`` metric. A group of fewer than m rows raises (``short="raise"``) or
    is kept whole (``"keep"``: the replay buffer, where verl leaves failed rollouts out of
    a group), counted in ``select/short_groups``."""
    if rule not in RULES and not callable(rule):
        raise ValueError(f"unknown rule {rule!r}; use one of {', '.join(sorted(RULES))}.")
    groups = group_rows(uids)
    small = [(uids[g[0]], len(g)) for g in groups if len(g) < m]
    if small and short == "raise":
        uid, size = small[0]
        raise ValueError(f"uid {uid!r} has {size} rollouts, fewer than m={m} to keep "
                         f"({len(small)} such group(s)); set m <= actor_rollout_ref.rollout.n "
                         f"and keep failed rollouts out of the batch.")
    kept_rows, full, kept, kept_lengths = [], [], [], []
    for size in sorted({len(g) for g in groups}):  # equal sizes: one batched call each
        same = [g for g in groups if len(g) == size]
        index = torch.tensor(same)  # [G, n]
        rewards = scores[index].float()  # [G, n]
        extra = {name: value[index] for name, value in (inputs or {}).items()}  # [G, n] each
        chosen = downsample(rewards, min(m, size), rule, generator=generator,
                            **extra)  # [G, m] (all of a short group)
        kept_rows += [(g[0], index[i, chosen[i]].tolist()) for i, g in enumerate(same)]
        full.append(rewards)
        kept.append(rewards.gather(1, chosen))
        if lengths is not None:
            kept_lengths.append(lengths[index].gather(1, chosen).flatten().float())
    rows = [row for _, chosen in sorted(kept_rows) for row in chosen]
    stats = selection_metrics(full, kept)
    stats["select/short_groups"] = len(small)
    if kept_lengths:
        stats["select/completion_len"] = float(torch.cat(kept_lengths).mean())
    return torch.tensor(rows, dtype=torch.long), stats


def selection_metrics(full: list[Tensor], kept: list[Tensor]) -> dict[str, float]:
    """The native trainer's select/ metrics over groups of possibly several sizes."""
    def mean_var(groups: list[Tensor]) -> float:
        return float(torch.cat([g.var(dim=1, correction=0) for g in groups]).mean())

    def zero_var(groups: list[Tensor]) -> float:
        return float(torch.cat([g.amax(1) == g.amin(1) for g in groups]).float().mean())

    return {"select/var_full": mean_var(full), "select/var_kept": mean_var(kept),
            "select/zero_var_frac_full": zero_var(full), "select/zero_var_frac": zero_var(kept),
            "select/reward_mean": float(torch.cat([k.flatten() for k in kept]).mean()),
            "select/kept": sum(k.numel() for k in kept)}


def select_batch(data, m: int, rule: str = "max_variance", scores: Tensor | None = None,
                 generator: torch.Generator | None = None, metrics: dict | None = None):
    """The DataProto of the m kept rollouts of each uid (see the module docstring); the
    selection metrics are added to ``metrics`` if given."""
    if not _checked:
        check_verl_version()
    uids = data.non_tensor_batch["uid"]
    if scores is None:
        scores = data.batch["token_level_scores"].sum(-1)
    if len(scores) != len(data):
        raise ValueError(f"scores has {len(scores)} rows, the batch {len(data)}.")
    held, fields = set(data.batch.keys()), rule_fields(rule)
    missing = [name for name in fields if name not in held]
    if missing:
        raise ValueError(f"rule {rule!r} reads each rollout's {', '.join(missing)}, which this "
                         f"batch does not hold; add it, or use a rule of rewards alone such as "
                         f"max_variance.")
    inputs = verl_inputs(rule, {name: data.batch[name].cpu() for name in fields})
    lengths = data.batch["response_mask"].sum(-1).cpu() if "response_mask" in held else None
    rows, stats = select_rows(list(uids), scores.detach().cpu(), m, rule, generator, lengths,
                              inputs=inputs)
    if metrics is not None:
        metrics.update(stats)
    return data.select_idxs(rows.numpy().astype(np.int64))


def check_batch_sizes(train_batch_size: int, n: int, m: int, ppo_mini_batch_size: int,
                      world_size: int = 1) -> None:
    """Refuse sizes that would make verl pad the kept batch with no-op rows: verl counts a
    mini-batch as ``ppo_mini_batch_size * rollout.n`` rows, while PODS leaves
    ``train_batch_size * m`` rows, which must split into whole mini-batches and ranks."""
    rows, per_mini = train_batch_size * m, ppo_mini_batch_size * n
    if rows % per_mini or rows % world_size or per_mini % world_size:
        raise ValueError(
            f"PODS keeps train_batch_size*m = {train_batch_size}*{m} = {rows} rows, which verl "
            f"splits into mini-batches of ppo_mini_batch_size*rollout.n = "
            f"{ppo_mini_batch_size}*{n} = {per_mini} rows over {world_size} rank(s); that "
            f"leaves padding rows. Choose ppo_mini_batch_size so that ppo_mini_batch_size*n "
            f"divides train_batch_size*m (e.g. ppo_mini_batch_size = "
            f"{max(1, train_batch_size * m // n)}) and both are multiples of the world size.")
