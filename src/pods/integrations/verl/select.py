"""Selection on verl's objects: ``select_batch`` for DataProto batches, ``select_rows``
for the replay buffer, and the batch-size and version checks (see ``pods.integrations.verl``).

Both select with ``pods.core.selection.select``, the native trainer's function, so the kept
rollouts and the ``select/`` metrics are the native trainer's. verl's rows come as a flat
list grouped by uid, and a replay buffer's groups may differ in size (failed rollouts left
out), so ``select_rows`` calls ``select`` once per group size and joins the groups'
statistics (``GroupStats.cat``) into exact metrics over all of them. verl computes its own
advantages on the kept rows; ``select``'s go unused. Nothing here imports verl but
``check_verl_version``, so this module runs (and is tested) without it."""


from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from pods.core.rollout_inputs import rule_inputs, rule_sources
from pods.core.selection import GroupStats, SelectionSpec, select

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


@dataclass(frozen=True)
class RowBatch:
    """verl's rollouts to select from, one entry per row, each group's rows under one uid."""

    uids: Sequence  # [rows] the group (prompt) of each row
    scores: Tensor  # [rows] float rewards
    inputs: dict[str, Tensor] = field(default_factory=dict)  # the rule's, [rows] each
    lengths: Tensor | None = None  # [rows] response tokens, for select/completion_len


def select_rows(batch: RowBatch, spec: SelectionSpec, generator: torch.Generator | None = None,
                short: str = "raise") -> tuple[Tensor, dict[str, float]]:
    """Indices of the kept rows (``spec.m`` per uid, each uid's rows contiguous and in
    original order, uids in order of first appearance) and the ``select/`` metrics. A group
    of fewer than m rows raises (``short="raise"``) or is kept whole (``"keep"``: the replay
    buffer, where verl leaves failed rollouts out of a group), counted in
    ``select/short_groups``."""
    groups = group_rows(batch.uids)
    small = [(batch.uids[g[0]], len(g)) for g in groups if len(g) < spec.m]
    if small and short == "raise":
        uid, size = small[0]
        raise ValueError(f"uid {uid!r} has {size} rollouts, fewer than m={spec.m} to keep "
                         f"({len(small)} such group(s)); set m <= actor_rollout_ref.rollout.n "
                         f"and keep failed rollouts out of the batch.")
    kept_rows, stats = [], []
    for size in sorted({len(g) for g in groups}):  # equal sizes: one select each
        same = [g for g in groups if len(g) == size]
        index = torch.tensor(same)  # [G, size]
        lengths = None if batch.lengths is None else batch.lengths[index]  # [G, size]
        chosen = select(batch.scores[index].float(),
                        {name: value[index] for name, value in batch.inputs.items()},
                        dataclasses.replace(spec, m=min(spec.m, size)),  # a short group: all
                        generator, lengths)
        kept_rows += [(g[0], index[i][chosen.keep[i]].tolist()) for i, g in enumerate(same)]
        stats.append(chosen.stats)
    rows = [row for _, chosen in sorted(kept_rows) for row in chosen]
    metrics = {**GroupStats.cat(stats).metrics(), "select/short_groups": len(small)}
    return torch.tensor(rows, dtype=torch.long), metrics


def select_batch(data, m: int, rule: str = "max_variance", scores: Tensor | None = None,
                 generator: torch.Generator | None = None, metrics: dict | None = None):
    """The DataProto of the m kept rollouts of each uid (see the module docstring); the
    selection metrics are added to ``metrics`` if given."""
    spec = SelectionSpec(m=m, rule=rule)  # a rule that is not one says what to use
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
    rows, stats = select_rows(RowBatch(list(uids), scores.detach().cpu(), inputs, lengths),
                              spec, generator)
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
