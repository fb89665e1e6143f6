"""PODS inside verl: keep m of the n rollouts of each prompt, before any log-prob or update pass.

Two entry points, both on verl's documented objects (tested with verl 0.9.1):

``select_batch(data, m, rule)``: for custom verl loops. ``data`` is a ``DataProto`` of the
P*n rollouts of a step, grouped by ``data.non_tensor_batch["uid"]``; a rollout's score is
``data.batch["token_level_scores"].sum(-1)`` unless ``scores=`` gives one per row; the length
rules read ``data.batch["response_mask"].sum(-1)``. Returns a
DataProto with exactly m rows per uid, each uid's rows contiguous and in their original
order, uids in order of first appearance.

``PODSReplayBuffer``: verl's V1 trainer replay buffer (``verl.trainer.ppo.v1``) with PODS
selection on the training partition. verl computes rewards in the agent loop, so the
buffer reads each sampled trajectory's ``rm_scores`` from TransferQueue, keeps m per group
and clears the dropped trajectories from storage; old and reference log-probs, advantages
and the update then see the kept rows only. Plug it in from verl's own config::

    trainer.v1.sampler.custom_sampler.path=pkg://pods.integrations.verl
    trainer.v1.sampler.custom_sampler.name=PODSReplayBuffer
    +trainer.v1.sampler.sampler_kwargs.pods_m=16
    +trainer.v1.sampler.sampler_kwargs.pods_rule=max_variance

Both select with ``pods.core.selection.select``, the native trainer's function, and put its
``select/`` metrics into verl's metric dict under the native trainer's keys
(``select/reward_mean``, ``select/var_full``, ``select/var_kept``,
``select/zero_var_frac_full``, ``select/zero_var_frac``, ``select/kept``,
``select/groups_kept``, and ``select/completion_len`` where the response masks are at hand:
``select_batch`` with a ``response_mask``, the buffer with a rule that reads it), plus verl's
own ``select/short_groups``. The buffer lives in ``pods.integrations.verl.buffer`` and is imported
from here on first use, so ``select_batch`` does not need TransferQueue.
"""

from __future__ import annotations

from pods.integrations.verl.select import (
    TESTED,
    RowBatch,
    check_batch_sizes,
    check_verl_version,
    group_rows,
    select_batch,
    select_rows,
)

__all__ = ["TESTED", "PODSReplayBuffer", "RowBatch", "check_batch_sizes", "check_verl_version",
           "group_rows", "select_batch", "select_rows"]


def __getattr__(name: str):
    """``PODSReplayBuffer`` is built on first use (it subclasses verl's V1 replay buffer,
    which needs TransferQueue), so ``select_batch`` needs verl alone."""
    if name == "PODSReplayBuffer":
        from pods.integrations.verl.buffer import PODSReplayBuffer

        return PODSReplayBuffer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
