"""Dynamic sampling (pods.train.sampling): rounds of prompts until the groups carry signal,
the choice of groups with worked examples, and runs that draw until signal, stop at the
cap and resume exactly."""

import torch

from pods.rollout import Rollouts
from pods.runs.metrics import read_metrics
from pods.tasks.scoring import Scores
from pods.train import trainer as trainer_module
from pods.train.run import resume, train
from pods.train.sampling import Round, assemble, chosen_groups, enough, varied
from runs import config, weights


def test_chosen_groups_take_signal_first_in_the_order_drawn():
    # 2 rounds, 2 ranks, 2 groups each: rank 0 drew [no, yes | yes, no], rank 1 [no, no | no, yes]
    varies = torch.tensor([[[False, True], [False, False]],
                           [[True, False], [False, True]]])  # [R, W, G]
    assert chosen_groups(varies).tolist() == [[1, 2], [0, 3]]  # rank 1: its one and a fill,
    # in the order drawn
    one_round = torch.tensor([[[False, True, False], [True, False, True]]])  # [1, 2, 3]
    assert chosen_groups(one_round).tolist() == [[0, 1, 2], [0, 1, 2]]  # every group, in place
    assert not enough(varies)  # rank 1 holds one group with signal, needs two
    assert enough(torch.tensor([[[True, False], [True, True]], [[True, False], [False, False]]]))


def rollouts(tokens: list[int]) -> Rollouts:
    """One row per token: a 1-token prompt and a completion of ``token`` (width grows with it
    so that concatenation must pad)."""
    width = max(tokens)
    ids = torch.tensor([[t] * t + [0] * (width - t) for t in tokens])
    return Rollouts(torch.ones(len(tokens), 1, dtype=torch.long), torch.ones(len(tokens), 1,
                    dtype=torch.long), ids, (ids > 0).long(), [str(t) for t in tokens],
                    finished=torch.ones(len(tokens), dtype=torch.bool))


def test_assemble_takes_each_ranks_groups_from_every_round():
    """One rank (W=1), P=2, n=2, two rounds: round 0 group 0 flat, group 1 varied; round 1
    group 0 varied. The pool is [round 0 group 1, round 1 group 0], rows and rewards alike;
    the counts cover every round."""
    rewards = [torch.tensor([[1.0, 1.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [2.0, 2.0]])]
    tokens, errors = [[1, 2, 3, 4], [5, 6, 7, 8]], [0, 2]
    rounds = [Round(rollouts(toks), Scores(r, e, 0, 1), torch.ones(2, 2),
                    {"rewards": r, "lengths": r + 10})
              for toks, r, e in zip(tokens, rewards, errors, strict=True)]
    assert varied(rounds, world=1).tolist() == [[[False, True]], [[True, False]]]
    pool = assemble(rounds, rank=0, world=1)
    assert pool.gathered["rewards"].tolist() == [[0.0, 1.0], [1.0, 0.0]]
    assert pool.gathered["lengths"].tolist() == [[10.0, 11.0], [11.0, 10.0]]
    assert pool.rollouts.texts == ["3", "4", "5", "6"]
    assert pool.rollouts.completion_mask.sum(1).tolist() == [3, 4, 5, 6]  # padded, masked
    assert (pool.scores.reward_errors, pool.scores.truncated) == (2, 2)
    assert pool.lengths.shape == (4, 2)  # every round's, for the logs
    m = pool.metrics
    assert (m["rollout/rounds"], m["rollout/prompts_drawn"], m["rollout/signal_groups"]) == \
        (2, 4, 2)
    assert m["rollout/signal_frac"] == 0.5 and m["rollout/reward_mean"] == 1.0


def scored(pattern):
    """A Scorer.rewards whose k-th call returns flat rewards where ``pattern(k)`` is False
    and varied ones (0, 1, 0, 1, ...) where it is True; the calls are counted."""
    calls = []

    def rewards(self, texts, problems, n, finished=None):
        calls.append(len(problems))
        row = torch.arange(n) % 2 if pattern(len(calls)) else torch.ones(n)
        return Scores(row.float().expand(len(problems), n).clone(), 0, 0)

    return rewards, calls


def test_dynamic_sampling_draws_until_signal(tiny_model_dir, tmp_path, monkeypatch):
    """Every first round of a step is flat, every second varied: each step draws 2 rounds
    and trains on the second's groups."""
    rewards, calls = scored(lambda k: k % 2 == 0)
    monkeypatch.setattr(trainer_module.Scorer, "rewards", rewards)
    run = train(config(tiny_model_dir, tmp_path, dynamic_sampling=True))
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["rollout/rounds"] for r in steps] == [2, 2] and len(calls) == 4
    assert [r["rollout/prompts_drawn"] for r in steps] == [6, 6]  # 2 rounds of P = 3
    assert [r["rollout/signal_groups"] for r in steps] == [3, 3]
    assert [r["optim/skipped"] for r in steps] == [0, 0]
    assert all(r["select/zero_var_frac"] == 0 for r in steps)


def test_dynamic_sampling_stops_at_the_cap(tiny_model_dir, tmp_path, monkeypatch):
    """Rewards that never vary: max_sampling_rounds rounds, then the step trains on flat
    groups, i.e. not at all (no update), and says so."""
    rewards, calls = scored(lambda k: False)
    monkeypatch.setattr(trainer_module.Scorer, "rewards", rewards)
    run = train(config(tiny_model_dir, tmp_path, dynamic_sampling=True, max_sampling_rounds=3,
                       dtype="float32"))  # compared with the float32 start, also on a GPU
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["rollout/rounds"] for r in steps] == [3, 3] and len(calls) == 6
    assert [r["rollout/signal_groups"] for r in steps] == [0, 0]
    assert [r["optim/skipped"] for r in steps] == [1, 1]
    before, after = weights(tiny_model_dir), weights(run / "checkpoints" / "step_000002" / "model")
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_without_dynamic_sampling_a_step_is_one_round(tiny_model_dir, tmp_path, monkeypatch):
    rewards, calls = scored(lambda k: False)
    monkeypatch.setattr(trainer_module.Scorer, "rewards", rewards)
    run = train(config(tiny_model_dir, tmp_path))
    assert [r["rollout/rounds"] for r in read_metrics(run / "metrics.jsonl", "step")] == [1, 1]
    assert len(calls) == 2


def test_a_dynamic_run_resumes_exactly(tiny_model_dir, tmp_path):
    """The toy task's real rewards at a low temperature leave some groups flat, so steps draw
    more than one round; 2 steps then a resume to 5 = 5 steps straight."""
    fields = dict(dynamic_sampling=True, max_sampling_rounds=3, temperature=0.5, n=4)
    whole = train(config(tiny_model_dir, tmp_path, max_steps=5, run_name="whole", **fields))
    part = train(config(tiny_model_dir, tmp_path, max_steps=2, run_name="part", **fields))
    resume(part, {"max_steps": 5})
    records = [[(r["rollout/rounds"], r["rollout/reward_mean"], r["select/var_kept"])
                for r in read_metrics(run / "metrics.jsonl", "step")] for run in (whole, part)]
    assert records[0] == records[1] and len(records[0]) == 5
    assert any(rounds > 1 for rounds, *_ in records[0])  # dynamic sampling was exercised
    a = weights(whole / "checkpoints" / "step_000005" / "model")
    b = weights(part / "checkpoints" / "step_000005" / "model")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)
