"""`pods plan`: the planner's arithmetic against worked numbers, and the command on the
embedded model (offline, a few seconds)."""

import json

import pytest
import torch

from pods.check.plan import (
    Candidate,
    Costs,
    Line,
    default_candidates,
    expected_max,
    predict,
    recommend,
    signal_chance,
)
from pods.check.plan_measure import Sample
from pods.cli import main

# three prompts' sampled rewards (S = 4): one right of four; all the same; three values
REWARDS = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.5, 1.0, 1.0]])
COSTS = Costs(generate=Line(1.0, 0.1), score=0.01, update=Line(2.0, 0.5), sync=0.3)


def test_signal_chance_is_one_minus_the_chance_all_n_agree():
    # n = 2: 1 - 0.25^2 - 0.75^2 = 0.375; 0; 1 - 0.25^2 - 0.25^2 - 0.5^2 = 0.625
    torch.testing.assert_close(signal_chance(REWARDS, 2),
                               torch.tensor([0.375, 0.0, 0.625], dtype=torch.float64))
    # n = 1 never varies; larger n approaches 1 wherever two values were seen
    assert signal_chance(REWARDS, 1).abs().max() < 1e-12
    assert signal_chance(REWARDS, 64)[0] == pytest.approx(1 - 0.75 ** 64)


def test_a_step_costs_generation_always_and_an_update_when_some_group_has_signal():
    p = predict(COSTS, REWARDS, Candidate(P=2, n=2, m=1))
    assert p.share == pytest.approx(1 / 3)  # mean of 0.375, 0, 0.625
    sd = (((0.375 - 1 / 3) ** 2 + (1 / 3) ** 2 + (0.625 - 1 / 3) ** 2) / 2) ** 0.5
    assert p.share_error == pytest.approx(1.96 * sd / 3 ** 0.5)  # over the 3 prompts
    assert p.update_chance == pytest.approx(1 - (2 / 3) ** 2)  # some of 2 groups varies
    assert p.generate_s == pytest.approx(1 + 0.1 * 4 + 0.01 * 4)  # 4 rollouts
    assert p.update_s == pytest.approx(5 / 9 * (2 + 0.5 * 2 + 0.3))  # 2 kept rows
    assert p.step_s == pytest.approx(1.44 + 5 / 9 * 3.3)
    assert p.signal_per_s == pytest.approx(2 * (1 / 3) / (1.44 + 5 / 9 * 3.3))
    kl = Costs(COSTS.generate, COSTS.score, COSTS.update, COSTS.sync, always_update=True)
    assert predict(kl, REWARDS, Candidate(2, 2, 1)).update_chance == 1.0


def test_the_best_candidate_for_each_m():
    predictions = [predict(COSTS, REWARDS, Candidate.parse(text))
                   for text in ("1x4/4", "1x16/4", "1x64/4", "1x8/8", "2x8/8")]
    best = recommend(predictions)
    assert list(best) == [4, 8]
    for m, chosen in best.items():
        assert chosen.signal_per_s == max(p.signal_per_s for p in predictions
                                          if p.candidate.m == m)
    # worked: 1x16/4 generates 2.6 + 0.16 s, its share is 0.5*(1-.75^16-.25^16) + 0.5
    share = (1 - 0.75 ** 16 - 0.25 ** 16 + 1 - 2 * 0.25 ** 16 - 0.5 ** 16) / 3
    assert predictions[1].share == pytest.approx(share)


def test_an_update_costs_its_padded_tokens():
    """Rows are padded to the longest: E[max of 2 draws from (1, 2, 3)] = (1*1 + 2*3 +
    3*5) / 9 = 22/9, so 2 rows cost update(2 * 22/9)."""
    assert expected_max((3, 1, 2), 1) == pytest.approx(2.0)
    assert expected_max((3, 1, 2), 2) == pytest.approx(22 / 9)
    assert expected_max((5, 5), 7) == pytest.approx(5.0)
    costs = Costs(Line(0.5, 0.25), 0.0, Line(1.0, 0.1), 0.0, kept_lengths=(1, 2, 3))
    assert costs.update_seconds(2) == pytest.approx(1.0 + 0.1 * 2 * 22 / 9)


def test_lines_fit_timed_calls():
    line = Line.fit([2, 8, 8], [3.0, 6.0, 6.0])
    assert (line.intercept, line.slope) == pytest.approx((2.0, 0.5))
    assert Line.fit([4, 4], [1.0, 3.0]) == Line(0.0, 0.5)  # one size: through the origin
    with pytest.raises(ValueError, match="matching"):
        Line.fit([1, 2], [1.0])


def test_bad_candidates_and_samples_say_what_to_write():
    with pytest.raises(ValueError, match="PxN/M"):
        Candidate.parse("64/16")
    with pytest.raises(ValueError, match="1 <= m <= n"):
        Candidate.parse("1x4/8")
    with pytest.raises(ValueError, match="two or more different row counts"):
        Sample(rows=(4,))
    assert Candidate(1, 16, 4) in default_candidates(1, 16, 4)
    assert {str(c) for c in default_candidates(1, 16, 4)} >= {"1x4/4", "2x32/4", "1x16/4"}


def test_plan_on_the_embedded_model(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "--model", tiny_model_dir, "--recipe", "embedded", "--task",
                 "arithmetic", "--device", "cpu",
                 "--candidates", "1x8/2,2x8/4", "--prompts", "4", "--samples", "6",
                 "--rows", "1,3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| 2x8/4 |" in printed and "best for each m" in printed
    # the precision the planned run would train in (pods.models.precision)
    assert "precision: weights float32 (AdamW's master copy), update computes in float32" \
        in printed
    # the updates are timed in the layout the run would keep after its self-check
    assert "update layout: shared_prompt gives padded's log-probs" in printed
    saved = json.loads(out.read_text())
    rewards = torch.tensor(saved["rewards"])
    assert rewards.shape == (4, 6) and ((rewards >= 0) & (rewards <= 1)).all()
    first = saved["predictions"][0]
    assert first["step_s"] == pytest.approx(first["generate_s"] + first["update_s"])
    assert first["step_s"] > 0 and saved["costs"]["sync"] >= 0
