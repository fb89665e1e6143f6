"""``pods.train.update.policy_update`` on a policy small enough to follow by hand.

``Bigram`` is a "model" whose next-token logits are one trainable vector theta [V] at every
position, so log pi(token) = log_softmax(theta)[token] and every gradient is worked out in
the comments. Plain SGD with lr 1 makes an optimizer step theta <- theta - grad."""

import math
from types import SimpleNamespace

import pytest
import torch

from pods.config import LossConfig, OptimConfig
from pods.core.loss import PolicyLoss, loss_normalizer
from pods.models.logprobs import completion_logprobs
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
                                                    if k in ("num_iterations",
                                                             "micro_batch_size",
                                                             "max_grad_norm")}})
    loss = LossConfig(**{k: v for k, v in fields.items()
                         if k in ("beta", "norm", "is_correction", "is_cap")})
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


def engine_said(ratios, mask):
    """Engine log-probs [B, T] that make exp(trainer - engine) = ``ratios`` where the
    trainer (theta = 0, V = 2) says log(1/2) for every token; 0 on padding."""
    return (math.log(0.5) - torch.tensor(ratios).log()) * torch.tensor(mask)


def test_the_gap_tail_is_reduced_over_micro_batches():
    """tests/core/test_correction's worked example through the update, one row per
    micro-batch: ratios 2.5, 0.6 | 1, 0.25, 1.5 on 5 tokens -> mean |d| 3.2189 / 5, max
    |d| log 4 (the second micro-batch's), k3 mean 1.4253 / 5, 2 of 5 outside [1/2, 2]."""
    mask = [[1, 1, 0], [1, 1, 1]]
    batch = rollouts([[0, 0, 0], [1, 1, 1]], mask)
    batch.logprobs = engine_said([[2.5, 0.6, 1.0], [1.0, 0.25, 1.5]], mask)
    stats = update(Bigram([0.0, 0.0]), batch, [1.0, -1.0], micro_batch_size=1)
    assert stats["rollout/logprob_gap"] == pytest.approx(3.2189 / 5, abs=1e-4)
    assert stats["rollout/logprob_gap_max"] == pytest.approx(math.log(4), abs=1e-5)
    assert stats["rollout/logprob_kl_k3"] == pytest.approx(1.4253 / 5, abs=1e-4)
    assert stats["rollout/ratio_outside_frac"] == pytest.approx(0.4)
    assert not any(k.startswith("loss/is_") for k in stats)  # no correction asked for


@pytest.mark.parametrize("norm", ["sequence", "token", "constant"])
@pytest.mark.parametrize("micro", [None, 2])
def test_none_is_todays_loss_bit_for_bit(norm, micro):
    """is_correction none (the default), engine log-probs present: the update equals, bit
    for bit, the loss taken the way it was before corrections existed: PolicyLoss on [B]
    advantages and the completion mask, normalised by the kept rows / tokens."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 3, (5, 4), generator=g)
    mask = (torch.rand(5, 4, generator=g) > 0.3).long()
    mask[:, 0] = 1
    adv = torch.randn(5, generator=g)
    theta = torch.randn(3, generator=g).tolist()
    batch = rollouts(tokens.tolist(), mask.tolist())
    batch.logprobs = -torch.rand(5, 4, generator=g)  # the engine's, somewhat off
    model = Bigram(theta)
    stats = update(model, batch, adv.tolist(), norm=norm, micro_batch_size=micro)

    want = Bigram(theta)  # the same update, written out
    loss_fn = PolicyLoss(norm=norm)
    normalizer = loss_normalizer(norm, 5, mask.sum().item(), 4)
    total = 0.0
    for part in [slice(0, 5)] if micro is None else [slice(0, 2), slice(2, 4), slice(4, 5)]:
        logp = completion_logprobs(want, batch.prompt_ids[part], batch.prompt_mask[part],
                                   batch.completion_ids[part], batch.completion_mask[part], 1.0)
        loss, _ = loss_fn(logp, None, adv[part], batch.completion_mask[part].float(),
                          normalizer=normalizer)
        loss.backward()
        total += loss.item()
    torch.optim.SGD(want.parameters(), lr=1.0).step()
    assert torch.equal(model.theta, want.theta)
    assert stats["loss/loss"] == total


def test_token_truncate_weights_each_tokens_gradient():
    """sequence norm, one token per row: row 0 (token 0, A = +1) at ratio 2.5 gets weight
    min(2.5, 2) = 2; row 1 (token 1, A = -1) at ratio 0.5 gets 0.5. d log pi(0) / d theta
    = (.5, -.5), d log pi(1) = (-.5, .5): grad = -(2 (.5, -.5) - .5 (-.5, .5)) / 2 =
    (-.625, .625), so theta -> (.625, -.625) (no correction: (.5, -.5))."""
    batch = rollouts([[0], [1]], [[1], [1]])
    batch.logprobs = engine_said([[2.5], [0.5]], [[1], [1]])
    model = Bigram([0.0, 0.0])
    stats = update(model, batch, [1.0, -1.0], is_correction="token_truncate")
    assert model.theta.tolist() == pytest.approx([0.625, -0.625])
    assert stats["loss/is_weight_mean"] == pytest.approx(1.25)  # (2 + .5) / 2
    assert stats["loss/is_capped_frac"] == pytest.approx(0.5)
    assert stats["loss/is_masked_frac"] == 0.0


@pytest.mark.parametrize("micro", [None, 1])
def test_token_mask_drops_tokens_from_the_loss_and_the_token_normaliser(micro):
    """norm token, cap 2. Row 0 (A = +1): tokens 0, 0 at ratios 2.5 (dropped) and 0.8
    (weight .8); row 1 (A = -1): token 1 at ratio 1 and a padded one. Two tokens remain:
    grad = -(.8 (.5, -.5) - (-.5, .5)) / 2 = (-.45, .45), theta -> (.45, -.45); dividing by
    all 3 completion tokens would give (.3, -.3)."""
    mask = [[1, 1], [1, 0]]
    batch = rollouts([[0, 0], [1, 1]], mask)
    batch.logprobs = engine_said([[2.5, 0.8], [1.0, 1.0]], mask)
    model = Bigram([0.0, 0.0])
    stats = update(model, batch, [1.0, -1.0], norm="token", is_correction="token_mask",
                   micro_batch_size=micro)
    assert model.theta.tolist() == pytest.approx([0.45, -0.45])
    assert stats["loss/is_masked_frac"] == pytest.approx(1 / 3)
    assert stats["loss/is_weight_mean"] == pytest.approx(0.9)  # (.8 + 1) / 2


def test_sequence_mask_drops_sequences_from_the_sequence_normaliser():
    """norm sequence, cap 2. Row 0 (A = +1): tokens 0, 0 at ratios 2.5 and 0.6, product
    1.5: kept, weight 1.5; row 1 (A = -1): token 1 at 0.25: dropped; row 2 (A = -1): token
    1 at ratio 1: weight 1. Two sequences remain: grad = -(1.5 (.5, -.5) - (-.5, .5)) / 2
    = (-.625, .625); dividing by 3 sequences would give 2/3 of it."""
    mask = [[1, 1], [1, 0], [1, 0]]
    batch = rollouts([[0, 0], [1, 1], [1, 1]], mask)
    batch.logprobs = engine_said([[2.5, 0.6], [0.25, 1.0], [1.0, 1.0]], mask)
    model = Bigram([0.0, 0.0])
    stats = update(model, batch, [1.0, -1.0, -1.0], is_correction="sequence_mask")
    assert model.theta.tolist() == pytest.approx([0.625, -0.625])
    assert stats["loss/is_masked_frac"] == pytest.approx(1 / 4)  # 1 of 4 tokens


def test_a_correction_without_engine_logprobs_is_refused():
    with pytest.raises(ValueError, match="--is-correction none"):
        update(Bigram([0.0, 0.0]), rollouts([[0]], [[1]]), [1.0],
               is_correction="token_truncate")


class TwoRanks:
    """A Dist stand-in for the reductions: this rank's values and another rank's."""

    world = 2

    def __init__(self, other):
        self.other = other

    def reduce(self, values, op):
        combine = max if op == "max" else (lambda a, b: a + b)
        return {k: combine(v, self.other[k]) for k, v in values.items()}


def test_the_gap_and_the_correction_stats_reduce_over_ranks_as_one_batch():
    """Rank 0 holds 2 tokens with |d| 0.1, 0.3 (max .3), rank 1 three with |d| summing to
    0.5 (max .4): the mean is over the 5 tokens, not a mean of the ranks' means, and the
    max is the largest of all. The correction's shares likewise count tokens."""
    from pods.train.update_metrics import gap_metrics, is_metrics

    mine = {"abs": 0.4, "max": 0.3, "k3": 0.02, "outside": 0.0, "tokens": 2.0}
    other = {"abs": 0.5, "max": 0.4, "k3": 0.08, "outside": 1.0, "tokens": 3.0}
    stats = gap_metrics(mine, TwoRanks(other))
    assert stats == pytest.approx({"rollout/logprob_gap": 0.9 / 5, "rollout/logprob_gap_max": 0.4,
                                   "rollout/logprob_kl_k3": 0.1 / 5,
                                   "rollout/ratio_outside_frac": 1 / 5})
    mine = {"weight": 1.8, "kept": 2.0, "dropped": 0.0, "capped": 1.0}
    other = {"weight": 1.0, "kept": 1.0, "dropped": 2.0, "capped": 0.0}
    stats = is_metrics(mine, TwoRanks(other))
    assert stats == pytest.approx({"loss/is_weight_mean": 2.8 / 3, "loss/is_masked_frac": 2 / 5,
                                   "loss/is_capped_frac": 1 / 5})


@pytest.mark.parametrize("mode", ["none", "token_truncate"])
def test_no_metric_is_read_between_the_micro_batches(monkeypatch, mode):
    """Reading a tensor's value (``.item()``, ``float()``) makes the host wait for the GPU;
    between one micro-batch's backward and the next one's forward that leaves the GPU idle.
    Every metric of the parts is read after the last backward: no read falls between two
    forward passes (on a CPU the reads are recorded, not timed)."""
    events = []
    for name in ("item", "__float__"):
        original = getattr(torch.Tensor, name)

        def read(self, _original=original):
            events.append("read")
            return _original(self)
        monkeypatch.setattr(torch.Tensor, name, read)

    class Logged(Bigram):
        def forward(self, *args, **kwargs):
            events.append("forward")
            return super().forward(*args, **kwargs)

    mask = [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    batch = rollouts([[0, 0, 0], [1, 1, 1], [0, 1, 0]], mask)
    batch.logprobs = engine_said([[2.5, 0.6, 1.0], [1.0, 0.25, 1.5], [0.5, 1.0, 1.0]], mask)
    stats = update(Logged([0.0, 0.0]), batch, [1.0, -1.0, 0.5], micro_batch_size=1,
                   is_correction=mode)
    first, last = events.index("forward"), len(events) - events[::-1].index("forward")
    assert events.count("forward") == 3 and "read" not in events[first:last]
    assert stats["rollout/logprob_gap"] > 0 and "loss/loss" in stats


@pytest.mark.parametrize("max_grad_norm", [1.0, 0.0])
def test_a_non_finite_gradient_skips_the_step_and_says_so(max_grad_norm):
    """One NaN in a gradient would make AdamW's weights NaN (and SplitAdamW's bf16 ones
    whatever the NaN's pattern becomes): the step is skipped, with a warning and
    ``optim/nonfinite_grad``; with clipping off too. A finite step has no such key."""
    batch = rollouts([[0], [1]], [[1], [1]])
    model = Bigram([0.0, 0.0])
    model.theta.register_hook(lambda grad: grad * float("nan"))
    with pytest.warns(RuntimeWarning, match="optimizer step skipped .* norm is nan"):
        stats = update(model, batch, [1.0, -1.0], max_grad_norm=max_grad_norm,
                       num_iterations=2)
    assert stats["optim/nonfinite_grad"] == 2.0  # both iterations' steps
    assert model.theta.tolist() == [0.0, 0.0] and model.theta.grad is None
    finite = Bigram([0.0, 0.0])
    assert "optim/nonfinite_grad" not in update(finite, batch, [1.0, -1.0])
    assert finite.theta.tolist() != [0.0, 0.0]
