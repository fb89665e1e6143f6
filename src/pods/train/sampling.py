"""The sampling phase of a step: rounds of prompts until enough groups carry signal.

One round draws P prompts, generates n rollouts of each (this rank: its P_r = P/W), scores
them and gathers the rewards [P, n] on every rank. Without dynamic sampling a step is one
round. With it (``dynamic_sampling``, DAPO's dynamic sampling: Yu et al. 2025, arXiv
2503.14476; verl's ``algorithm.filter_groups``), rounds go on until every rank holds P_r
groups whose n rewards vary, or ``max_sampling_rounds`` rounds were drawn: a group whose
rewards are all equal gets advantage 0 under every rule and scale, so it has nothing to
teach. Each rank then trains on its first P_r groups with signal in the order drawn, topped
up with groups without signal (in order) when the cap was reached, so the selection still
sees [P, n] and the update's size is unchanged. Generation is cheap next to the update
(PODS's premise): this spends more of it to buy updates that carry signal.

A group never leaves the rank that generated it, so each rank needs its own P_r groups with
signal; every rank decides from the same gathered rewards, so they agree. (Which groups a
rank keeps therefore depends on the number of ranks; a one-round step does not.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pods.rollout import Rollouts
from pods.tasks.scoring import Scores

INPUT = "input:"  # the prefix of a rule's inputs among a round's gathered tensors


@dataclass(frozen=True)
class Round:
    """One round of a step: this rank's rollouts and scores, and what every rank sees."""

    rollouts: Rollouts  # [P_r * n] this rank's, group by group
    scores: Scores  # this rank's rewards [P_r, n] and their counts
    lengths: Tensor  # [P_r, n] this rank's completion lengths
    gathered: dict[str, Tensor]  # over all ranks, [P, n] each: "rewards", "lengths" and
    # the rule's per-rollout inputs (pods.core.rollout_inputs), each under INPUT + its name


@dataclass(frozen=True)
class Pool:
    """The P groups a step selects from, assembled from its rounds."""

    rollouts: Rollouts  # [P_r * n] this rank's chosen groups
    gathered: dict[str, Tensor]  # [P, n] each, rank by rank, as ``Round.gathered``
    lengths: Tensor  # [R * P_r, n] this rank's completion lengths, every round (for logs)
    scores: Scores  # this rank's counts over every round
    metrics: dict[str, float]


def varied(rounds: list[Round], world: int) -> Tensor:
    """[R, W, P_r] bool: whether each drawn group's rewards vary (round, rank, group)."""
    rewards = torch.stack([r.gathered["rewards"] for r in rounds])  # [R, P, n]
    varies = rewards.amax(2) > rewards.amin(2)  # [R, P]
    return varies.view(len(rounds), world, -1)


def enough(varies: Tensor) -> bool:
    """Every rank holds P_r groups with signal; ``varies`` [R, W, P_r]."""
    return bool(varies.sum(dim=(0, 2)).min() >= varies.shape[2])


def chosen_groups(varies: Tensor) -> Tensor:
    """[R, W, P_r] -> [W, P_r]: for each rank, indices into its R * P_r drawn groups (round
    by round): its first P_r with signal, topped up with its first without, ascending (in
    the order drawn: one round keeps every group where it was, so a run without dynamic
    sampling is unchanged, down to the order of its sums)."""
    R, W, G = varies.shape
    flat = varies.permute(1, 0, 2).reshape(W, R * G)  # [W, R*G] rank's groups in draw order
    first = torch.argsort((~flat).int(), dim=1, stable=True)[:, :G]  # signal first
    return first.sort(dim=1).values


def assemble(rounds: list[Round], rank: int, world: int) -> Pool:
    """The step's P groups from its rounds (see the module docstring)."""
    R, varies = len(rounds), varied(rounds, world)
    chosen = chosen_groups(varies)  # [W, G]
    G = chosen.shape[1]
    gathered = {}
    for key in rounds[0].gathered:
        x = torch.stack([r.gathered[key] for r in rounds])  # [R, P, n]
        n = x.shape[2]
        per_rank = x.view(R, world, G, n).permute(1, 0, 2, 3).reshape(world, R * G, n)
        gathered[key] = per_rank.gather(1, chosen[:, :, None].expand(-1, -1, n)).reshape(-1, n)
    n = rounds[0].lengths.shape[1]
    rows = (chosen[rank][:, None] * n + torch.arange(n)).flatten()  # [G * n]
    mine = Rollouts.cat([r.rollouts for r in rounds]).select(rows)
    scores = [r.scores for r in rounds]
    total = Scores(torch.cat([s.rewards for s in scores]), sum(s.reward_errors for s in scores),
                   sum(s.grading_failures for s in scores), sum(s.truncated for s in scores))
    drawn = torch.stack([r.gathered["rewards"] for r in rounds])  # [R, P, n]
    kept_signal = varies.permute(1, 0, 2).reshape(world, R * G).gather(1, chosen)  # [W, G]
    metrics = {"rollout/reward_mean": drawn.mean().item(),  # the policy's, all rounds
               "rollout/rounds": R, "rollout/prompts_drawn": R * world * G,
               "rollout/signal_frac": varies.float().mean().item(),  # of the groups drawn
               "rollout/signal_groups": int(kept_signal.sum())}  # of the P trained on
    return Pool(mine, gathered, torch.cat([r.lengths for r in rounds]), total, metrics)
