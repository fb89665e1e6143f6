"""The native trainer's selection phase, the TRL adapter and the verl adapter select the same
rollouts and log the same ``select/`` metrics on one batch: all three call
``pods.core.selection.select``. The adapters' own selection code paths are called directly
(the full TRL trainer is tested in test_trl.py; verl's needs its own environment)."""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from pods.config import from_dict
from pods.core.rollout_inputs import completion_lengths, rule_inputs
from pods.core.selection import SelectionSpec, select
from pods.integrations.verl.select import RowBatch, select_rows
from pods.rollout import Rollouts
from pods.train.selection import rank_batch, selection_spec

P, N, M = 4, 6, 3
CORE_KEYS = {"select/reward_mean", "select/var_full", "select/var_kept",
             "select/zero_var_frac_full", "select/zero_var_frac", "select/kept",
             "select/groups_kept", "select/completion_len"}


def batch():
    """P groups of n rollouts: rewards with ties and a flat group, completion masks of
    different lengths."""
    g = torch.Generator().manual_seed(3)
    rewards = torch.randint(0, 3, (P, N), generator=g).float() / 2  # [P, n]
    rewards[1] = 1.0  # a group without variance
    lengths = torch.randint(1, 7, (P * N,), generator=g)  # [rows]
    mask = (torch.arange(8).unsqueeze(0) < lengths.unsqueeze(1)).long()  # [rows, 8]
    ids = torch.arange(P * N).unsqueeze(1)
    rollouts = Rollouts(ids, torch.ones_like(ids), mask * 5, mask,
                        [str(i) for i in range(P * N)], None)
    return rewards, rollouts


def trainer_phase(rewards, rollouts, rule):
    """What Trainer.step's select phase does, on one process."""
    config = from_dict({"prompts_per_step": P, "n": N, "m": M, "rule": rule})
    lengths = completion_lengths(rollouts.completion_mask).view(-1, N).float()  # [P, n]
    inputs = {name: value.view(-1, N) for name, value in
              rule_inputs(rule, **rollouts.sources()).items()}
    chosen = select(rewards, inputs, selection_spec(config.selection),
                    torch.Generator().manual_seed(0), lengths)
    kept = rank_batch(rollouts, chosen, 0, 1)
    return chosen.keep, {**chosen.metrics, **kept.metrics}


def trl_path(rewards, rollouts, rule):
    """PODSGRPOTrainer's _select and _log_selection, on a stand-in for the trainer."""
    pytest.importorskip("trl")
    from pods.integrations.trl import PODSGRPOTrainer

    trainer = SimpleNamespace(
        _pods_spec=SelectionSpec(m=M, rule=rule),  # as PODSGRPOTrainer.__init__ builds it
        _pods_generator=torch.Generator().manual_seed(0), num_generations=N,
        _metrics={"train": defaultdict(list)}, _logs={"advantages": []})
    inputs = {name: value.view(-1, N) for name, value in
              rule_inputs(rule, **rollouts.sources()).items()}
    lengths = rollouts.completion_mask.sum(-1).view(-1, N)  # as the adapter gathers them
    chosen = PODSGRPOTrainer._select(trainer, rewards, inputs, lengths)
    idx = chosen.columns()  # [P, m]
    PODSGRPOTrainer._log_selection(trainer, chosen, idx, torch.zeros(P, M))
    keep = torch.zeros(P, N, dtype=torch.bool).scatter(1, idx, True)
    return keep, {key: values[-1] for key, values in trainer._metrics["train"].items()}


def verl_path(rewards, rollouts, rule):
    """select_rows, as select_batch and the replay buffer call it (uids interleaved)."""
    order = torch.arange(P * N).view(P, N).T.flatten()  # rows of the groups interleaved
    uids = [f"u{int(row) // N}" for row in order]
    fields = {"response_mask": rollouts.completion_mask[order],
              "responses": rollouts.completion_ids[order]}
    from pods.integrations.verl.select import verl_inputs

    rows, metrics = select_rows(
        RowBatch(uids, rewards.flatten()[order], verl_inputs(rule, fields),
                 fields["response_mask"].sum(-1)),
        SelectionSpec(m=M, rule=rule), torch.Generator().manual_seed(0))
    keep = torch.zeros(P * N, dtype=torch.bool)
    keep[order[rows]] = True
    return keep.view(P, N), metrics


@pytest.mark.parametrize("rule", ["max_variance", "random", "shortest"])
def test_trainer_trl_and_verl_select_the_same_and_log_the_same(rule):
    rewards, rollouts = batch()
    (native, ours), (trl, theirs), (verl, verls) = (
        path(rewards, rollouts, rule) for path in (trainer_phase, trl_path, verl_path))
    assert native.sum() == P * M
    assert torch.equal(native, trl) and torch.equal(native, verl)
    assert set(ours) == CORE_KEYS | {"select/pad_rows"}  # the trainer's per-rank cut
    assert set(theirs) == CORE_KEYS
    assert set(verls) == CORE_KEYS | {"select/short_groups"}  # verl's groups kept whole
    assert {k: ours[k] for k in CORE_KEYS} == theirs == {k: verls[k] for k in CORE_KEYS}
    assert ours["select/zero_var_frac_full"] == 0.25  # the flat group, 1 of 4
    assert (ours["select/pad_rows"], verls["select/short_groups"]) == (0, 0)


def test_verl_groups_of_different_sizes_join_exactly():
    """The replay buffer's groups may differ in size (failed rollouts left out): one select
    per size, metrics over all groups as if selected at once. m = 3 of a: [0, 1, 1, 0] (every
    candidate has variance 2/9; the first, the 3 lowest ranks: columns 0, 3, 1), of the flat
    c: [1, 1, 1, 1] (columns 0, 1, 2), and b: [1, 0] kept whole, counted as short."""
    rows = ["a0", "b0", "a1", "c0", "a2", "c1", "b1", "a3", "c2", "c3"]  # interleaved
    reward = {"a": [0, 1, 1, 0], "b": [1, 0], "c": [1, 1, 1, 1]}
    length = {"a": [1, 2, 3, 4], "b": [2, 6], "c": [5, 5, 5, 5]}
    scores = torch.tensor([float(reward[r[0]][int(r[1])]) for r in rows])
    lengths = torch.tensor([length[r[0]][int(r[1])] for r in rows])
    batch = RowBatch([r[0] for r in rows], scores, {}, lengths)
    kept, metrics = select_rows(batch, SelectionSpec(m=3), short="keep")
    assert [rows[i] for i in kept] == ["a0", "a1", "a3", "b0", "b1", "c0", "c1", "c2"]
    assert metrics["select/kept"] == 8 and metrics["select/short_groups"] == 1
    assert metrics["select/reward_mean"] == pytest.approx(5 / 8)  # 0 1 0, 1 0, 1 1 1
    assert metrics["select/var_full"] == pytest.approx((0.25 + 0.25 + 0) / 3)
    # over the 3 groups, not a mean of the two calls' means ((2/9 + 0)/2 + 1/4)/2 = 13/72
    assert metrics["select/var_kept"] == pytest.approx((2 / 9 + 1 / 4 + 0) / 3)
    assert metrics["select/zero_var_frac"] == metrics["select/zero_var_frac_full"] == \
        pytest.approx(1 / 3)
    assert metrics["select/completion_len"] == pytest.approx((1 + 2 + 4 + 2 + 6 + 15) / 8)
    with pytest.raises(ValueError, match="uid 'b' has 2 rollouts, fewer than m=3"):
        select_rows(batch, SelectionSpec(m=3))
