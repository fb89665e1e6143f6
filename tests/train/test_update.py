"""``pods.train.update.policy_update`` on a policy small enough to follow by hand.

``Bigram`` is a "model" whose next-token logits are one trainable vector theta [V] at every
position, so log pi(token) = log_softmax(theta)[token] and every gradient is worked out in
the comments. Plain SGD with lr 1 makes an optimizer step theta <- theta - grad."""

import math
from types import SimpleNamespace

import pytest
import torch

from pods.config import LossConfig, OptimConfig
from pods.rollout import Rollouts
from pods.train.selection import KeptBatch
from pods.train.update import UpdateSpec, policy_update


class Bigram(torch.nn.Module):
    def __init__(self, theta):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor(theta, dtype=torch.float32))  # [V]

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0):
        B, L = input_ids.shape
        return SimpleNamespace(logits=self.theta.expand(B, logits_to_keep or L, -1))


def rollouts(tokens, mask):
    """One prompt token (0) per row; completions ``tokens`` [B, T] with ``mask`` [B, T]."""
    completion = torch.tensor(tokens)
    B = completion.shape[0]
    return Rollouts(torch.zeros(B, 1, dtype=torch.long), torch.ones(B, 1, dtype=torch.long),
                    completion, torch.tensor(mask), [""] * B)


def update(model, batch, advantages, ref=None, kept=None, **fields):
    """policy_update on ``batch`` with ``advantages``; ``kept`` (default: every row) is the
    count the normaliser divides by, as rank_batch gives it."""
    optim = OptimConfig(**{"max_grad_norm": 0.0, **{k: v for k, v in fields.items()
                                                    if k in ("num_iterations",)}})
    loss = LossConfig(**{k: v for k, v in fields.items() if k in ("beta", "norm")})
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    rows = KeptBatch(batch, torch.tensor(advantages), kept=len(advantages) if kept is None
                     else kept, pad_rows=0 if kept is None else len(advantages) - kept)
    return policy_update(model, ref, sgd, rows, UpdateSpec(optim, loss, 1.0, 4))


def test_padding_rows_add_nothing_and_the_normaliser_counts_kept_rows():
    """Rows 0 and 1 are kept (advantages +1, -1); row 2 is padding (mask 0), as
    ``rank_batch`` adds. Sequence normalisation divides by kept = 2, not by the 3 rows:
    loss = -(1/2) sum_i A_i * ratio_i = -(1 - 1)/2 = 0, and the gradient equals the
    unpadded batch's. theta = 0, V = 2: d log pi(0)/d theta = (1 - 1/2, -1/2) = (.5, -.5);
    row 0 (token 0, A=+1) and row 1 (token 1, A=-1) each push theta by (+.5, -.5) / 2."""
    padded = rollouts([[0], [1], [0]], [[1], [1], [0]])
    model = Bigram([0.0, 0.0])
    stats = update(model, padded, [1.0, -1.0, 0.0], kept=2)
    assert stats["loss/loss"] == pytest.approx(0.0)
    assert model.theta.tolist() == pytest.approx([0.5, -0.5])
    plain = Bigram([0.0, 0.0])
    update(plain, rollouts([[0], [1]], [[1], [1]]), [1.0, -1.0])
    assert plain.theta.tolist() == pytest.approx(model.theta.tolist())
    wrong = Bigram([0.0, 0.0])  # dividing by the 3 rows would shrink the step by 2/3
    update(wrong, padded, [1.0, -1.0, 0.0])
    assert wrong.theta.tolist() == pytest.approx([1 / 3, -1 / 3])


def test_token_normalisation_divides_by_the_kept_tokens():
    """norm token: sum of token losses / 3 tokens. Row 0 has 2 tokens (0, 0), A = +1; row 1
    one token (1) and a padded one, A = 0. grad theta = -(2 * (.5, -.5)) / 3."""
    model = Bigram([0.0, 0.0])
    update(model, rollouts([[0, 0], [1, 1]], [[1, 1], [1, 0]]), [1.0, 0.0], norm="token")
    assert model.theta.tolist() == pytest.approx([1 / 3, -1 / 3])


def test_the_second_iteration_uses_the_ratio_to_the_sampling_policy():
    """num_iterations 2, one rollout (token 0, A = +1), eps 0.2.
    Iteration 1: ratio 1, loss -1, theta (0, 0) -> (.5, -.5).
    Iteration 2: pi_new(0) = sigmoid(1) = 0.7311 against pi_old(0) = 0.5, so the ratio is
    exp(logp_new - logp_old) = 1.4621 (logged mean of the two: 1.2311); it is above
    1 + eps with A > 0, so the clipped branch is taken: loss -1.2, no gradient (theta
    stays), clip_frac 1 (mean of the two: 0.5). Mean loss (-1 - 1.2)/2 = -1.1."""
    model = Bigram([0.0, 0.0])
    stats = update(model, rollouts([[0]], [[1]]), [1.0], num_iterations=2)
    ratio = (1 / (1 + math.exp(-1.0))) / 0.5
    assert ratio == pytest.approx(1.4621, abs=1e-4)
    assert stats["loss/ratio_mean"] == pytest.approx((1 + ratio) / 2, rel=1e-5)
    assert stats["loss/loss"] == pytest.approx(-1.1, rel=1e-5)
    assert stats["loss/clip_frac"] == pytest.approx(0.5)
    assert model.theta.tolist() == pytest.approx([0.5, -0.5])


def test_the_kl_penalty_changes_the_update():
    """With beta > 0 the second iteration is pulled back towards the reference (theta = 0):
    the k3 gradient is 0 where the policies agree (iteration 1), and not after it. Here
    with advantage -1 so that the ratio stays inside the clip range, and the two runs must
    end apart by far more than float noise, the KL run nearer the reference."""
    batch = rollouts([[0]], [[1]])
    plain, kl = Bigram([0.0, 0.0]), Bigram([0.0, 0.0])
    ref = Bigram([0.0, 0.0]).requires_grad_(False)
    update(plain, batch, [-0.2], num_iterations=2)
    stats = update(kl, batch, [-0.2], ref=ref, num_iterations=2, beta=1.0)
    assert stats["loss/kl"] > 0
    gap = (plain.theta - kl.theta).abs().max().item()
    assert gap > 1e-3
    assert kl.theta.norm() < plain.theta.norm()  # the penalty pulls towards the reference


def test_the_logprob_gap_is_a_mean_over_kept_tokens():
    """The engine's sampled log-probs against the trainer's: theta = 0 gives log(1/2) for
    every token; the engine said log(1/2) + 0.1 and log(1/2) - 0.3 for the two kept rows,
    and something far off for the padding row, which must not count: (0.1 + 0.3) / 2."""
    batch = rollouts([[0], [1], [0]], [[1], [1], [0]])
    half = math.log(0.5)
    batch.logprobs = torch.tensor([[half + 0.1], [half - 0.3], [half + 5.0]])
    stats = update(Bigram([0.0, 0.0]), batch, [1.0, -1.0, 0.0], kept=2)
    assert stats["rollout/logprob_gap"] == pytest.approx(0.2, rel=1e-5)
