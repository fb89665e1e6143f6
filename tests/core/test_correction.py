"""``pods.core.correction`` on worked numbers: the gap's tail and the importance weights.

Two sequences: the first has 2 completion tokens and a padded one, the second 3. The
trainer's log-probs are log(1/2) everywhere; the engine's are chosen so that the per-token
ratios exp(trainer - engine) are

    row 0: 2.5, 0.6, (padding)       product 1.5
    row 1: 1.0, 0.25, 1.5            product 0.375
"""

import math

import pytest
import torch

from pods.core.correction import CORRECTIONS, drops_tokens, gap_sums, is_weights

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
RATIOS = torch.tensor([[2.5, 0.6, 1.0], [1.0, 0.25, 1.5]])
TRAINER = torch.full((2, 3), math.log(0.5))  # [B, T]
ENGINE = TRAINER - RATIOS.log()  # [B, T] so that exp(trainer - engine) = RATIOS
ENGINE[0, 2] = 7.0  # padding: whatever the engine wrote there must not count


@pytest.mark.parametrize("mode, cap, weight, keep, capped", [
    # TIS per token: min(ratio, 2); the 2.5 is cut to 2
    ("token_truncate", 2.0, [[2.0, 0.6, 0], [1.0, 0.25, 1.5]], MASK.tolist(),
     [[1, 0, 0], [0, 0, 0]]),
    # MIS per token: the ratio where it is in [1/2, 2]; 2.5 and 0.25 are dropped
    ("token_mask", 2.0, [[0, 0.6, 0], [1.0, 0, 1.5]], [[0, 1, 0], [1, 0, 1]],
     [[0, 0, 0], [0, 0, 0]]),
    # per sequence, the product of its ratios: 1.5 and 0.375, both under the cap
    ("sequence_truncate", 2.0, [[1.5, 1.5, 0], [0.375] * 3], MASK.tolist(),
     [[0, 0, 0], [0, 0, 0]]),
    # ... with cap 1.25 the first sequence's 1.5 is cut to 1.25 on each of its tokens
    ("sequence_truncate", 1.25, [[1.25, 1.25, 0], [0.375] * 3], MASK.tolist(),
     [[1, 1, 0], [0, 0, 0]]),
    # 0.375 < 1/2: the whole second sequence is dropped, the first weighted by 1.5
    ("sequence_mask", 2.0, [[1.5, 1.5, 0], [0, 0, 0]], [[1, 1, 0], [0, 0, 0]],
     [[0, 0, 0], [0, 0, 0]]),
    # none: weight 1, every completion token kept
    ("none", 2.0, MASK.tolist(), MASK.tolist(), [[0, 0, 0], [0, 0, 0]]),
])
def test_worked_weights(mode, cap, weight, keep, capped):
    w = is_weights(TRAINER, ENGINE, MASK, mode, cap)
    torch.testing.assert_close(w.weight, torch.tensor(weight), rtol=1e-5, atol=1e-6)
    assert w.keep.tolist() == keep and w.capped.tolist() == capped
    assert drops_tokens(mode) == (keep != MASK.tolist())


def test_the_sums_count_what_was_dropped_and_capped():
    """token_mask: kept 0.6, 1.0, 1.5 (mean weight 3.1 / 3), dropped 2 of 5 tokens."""
    sums = is_weights(TRAINER, ENGINE, MASK, "token_mask", 2.0).sums(MASK)
    assert sums == pytest.approx({"weight": 3.1, "kept": 3.0, "dropped": 2.0, "capped": 0.0})
    sums = is_weights(TRAINER, ENGINE, MASK, "token_truncate", 2.0).sums(MASK)
    assert sums == pytest.approx({"weight": 2 + 0.6 + 1 + 0.25 + 1.5, "kept": 5.0,
                                  "dropped": 0.0, "capped": 1.0})


def test_weights_carry_no_gradient_and_a_long_sequence_does_not_overflow():
    logp = TRAINER.clone().requires_grad_()
    assert not is_weights(logp, ENGINE, MASK, "token_truncate", 2.0).weight.requires_grad
    far = torch.full((1, 400), math.log(0.5))
    engine = far - 0.5  # ratio e^0.5 per token: the product e^200 is inf in float32
    w = is_weights(far, engine, torch.ones(1, 400), "sequence_truncate", 2.0)
    assert torch.all(w.weight == 2.0)
    w = is_weights(far, engine, torch.ones(1, 400), "sequence_mask", 2.0)
    assert torch.all(w.weight == 0) and torch.all(w.keep == 0)  # not nan


def test_bad_modes_and_caps_say_what_to_use():
    with pytest.raises(ValueError, match="token_truncate"):
        is_weights(TRAINER, ENGINE, MASK, "tis", 2.0)
    with pytest.raises(ValueError, match="> 1"):
        is_weights(TRAINER, ENGINE, MASK, "token_mask", 1.0)
    assert CORRECTIONS[0] == "none"


def test_the_gap_tail_on_worked_numbers():
    """d = trainer - engine = log(ratio) on the 5 completion tokens:
    |d| = .9163, .5108, 0, 1.3863, .4055 -> sum 3.2189, max 1.3863 (the 0.25);
    k3 = r - log r - 1 = .5837, .1108, 0, .6363, .0945 -> sum 1.4253;
    outside [1/2, 2]: 2.5 and 0.25 -> 2 tokens. Padding (engine 7.0) adds nothing."""
    sums = gap_sums(TRAINER, ENGINE, MASK)
    assert sums["abs"] == pytest.approx(3.2189, abs=1e-4)
    assert sums["max"] == pytest.approx(math.log(4), abs=1e-5)
    assert sums["k3"] == pytest.approx(1.4253, abs=1e-4)
    assert sums["outside"] == 2.0 and sums["tokens"] == 5.0


def test_k3_is_the_kl_from_the_engine_to_the_trainer():
    """Tokens drawn from pi_engine, d = log pi_trainer - log pi_engine: the mean of
    exp(d) - d - 1 is KL(pi_engine || pi_trainer), not the reverse."""
    engine, trainer = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.5, 0.3, 0.2])
    draws = torch.multinomial(engine, 200_000, replacement=True,
                              generator=torch.Generator().manual_seed(0)).view(1, -1)
    sums = gap_sums(trainer.log()[draws], engine.log()[draws], torch.ones_like(draws))
    forward = (engine * (engine / trainer).log()).sum().item()  # 0.0851
    backward = (trainer * (trainer / engine).log()).sum().item()  # 0.0920
    assert sums["k3"] / sums["tokens"] == pytest.approx(forward, abs=2e-3)
    assert abs(sums["k3"] / sums["tokens"] - backward) > 5e-3


def test_k3_of_a_float32_sized_gap_is_not_rounding_noise():
    """d ~ 1e-6 (the hf engine in float32): exp(d) - d - 1 ~ d^2 / 2 ~ 5e-13, far below
    float32's resolution at 1 (1.2e-7), where "exp(d) - d - 1" gives noise, even < 0."""
    d = torch.tensor([[1e-6, -3e-7, 2e-5]])
    sums = gap_sums(d, torch.zeros(1, 3), torch.ones(1, 3))
    want = (d.double() ** 2 / 2).sum().item()  # 2.0005e-10
    assert sums["k3"] == pytest.approx(want, rel=1e-3)
