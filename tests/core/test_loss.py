import math

import pytest
import torch

from pods.core.loss import PolicyLoss, policy_loss

# Two sequences: the first has 2 completion tokens, the second 3.
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
ADV = torch.tensor([1.0, -2.0])


def logp_at(ratio: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp with grad, old_logp) whose ratio exp(logp - old) is ``ratio`` everywhere."""
    old = torch.full((2, 3), -1.0)
    logp = (old + torch.log(torch.as_tensor(ratio)).expand(2, 3)).clone().requires_grad_()
    return logp, old


@pytest.mark.parametrize("norm, normalizer, expected", [
    # token losses at ratio 1 are -A: seq 0 -> -1 on 2 tokens, seq 1 -> +2 on 3 tokens
    ("sequence", None, (-1.0 + 2.0) / 2),  # per-sequence means -1, +2, mean over 2 seqs
    ("token", None, (-2.0 + 6.0) / 5),  # token sum 4 over 5 completion tokens
    ("constant", None, (-2.0 + 6.0) / 6),  # token sum 4 over B * T = 2 * 3
    ("constant", 2 * 512, (-2.0 + 6.0) / 1024),  # Dr. GRPO: sequences x budget of 512
])
def test_worked_losses_at_ratio_one(norm, normalizer, expected):
    logp, _ = logp_at(1.0)
    loss, stats = PolicyLoss(norm=norm)(logp, None, ADV, MASK, normalizer=normalizer)
    assert loss.item() == pytest.approx(expected)
    assert stats.ratio_mean.item() == pytest.approx(1.0)
    assert stats.clip_frac.item() == 0.0 and stats.kl.item() == 0.0


def test_ratio_one_gradient_is_reinforce():
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 6, generator=g) * 3).requires_grad_()
    mask = (torch.rand(4, 6, generator=g) > 0.3).float()
    mask[:, 0] = 1
    adv = torch.randn(4, generator=g)
    loss, _ = policy_loss(logp, logp.detach(), adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    # REINFORCE: -(1/B) sum_i A_i * mean_t logp_it
    reinforce = -((adv[:, None] * logp * mask).sum(1) / mask.sum(1)).mean()
    (want,) = torch.autograd.grad(reinforce, logp)
    torch.testing.assert_close(grad, want)


def test_clipping_above_and_below():
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 3)
    # ratio 1.5 > 1.2: A > 0 is clipped (token loss -1.2, no gradient); A < 0 is not
    # (min(1.5 * -1, 1.2 * -1) = -1.5, token loss +1.5)
    logp, old = logp_at(1.5)
    loss, stats = PolicyLoss(eps=0.2)(logp, old, adv, mask)
    assert loss.item() == pytest.approx((-1.2 + 1.5) / 2)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.all(grad[0] == 0) and torch.all(grad[1] != 0)
    assert stats.clip_frac.item() == 0.5 and stats.clip_high.item() == 0.5
    assert stats.clip_low.item() == 0.0
    # ratio 0.5 < 0.8: A < 0 is clipped (token loss -0.8 * -1 = 0.8); A > 0 is not (-0.5)
    logp, old = logp_at(0.5)
    loss, stats = PolicyLoss(eps=0.2)(logp, old, adv, mask)
    assert loss.item() == pytest.approx((-0.5 + 0.8) / 2)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.all(grad[0] != 0) and torch.all(grad[1] == 0)
    assert stats.clip_low.item() == 0.5 and stats.clip_high.item() == 0.0


def test_clip_higher():
    # ratio 1.25 with A > 0: clipped at eps=0.2, not with DAPO's eps_high=0.28
    logp, old = logp_at(1.25)
    adv, mask = torch.tensor([1.0, 1.0]), torch.ones(2, 3)
    loss, stats = PolicyLoss(eps=0.2)(logp, old, adv, mask)
    assert loss.item() == pytest.approx(-1.2) and stats.clip_frac.item() == 1.0
    loss, stats = PolicyLoss(eps=0.2, eps_high=0.28)(logp, old, adv, mask)
    assert loss.item() == pytest.approx(-1.25) and stats.clip_frac.item() == 0.0


def test_k3_kl_term():
    logp, _ = logp_at(1.0)
    adv, mask = torch.zeros(2), torch.ones(2, 3)
    # q = ref - logp = log 2: exp(q) - q - 1 = 2 - 0.693147 - 1 = 0.306853 per token
    ref = logp.detach() + math.log(2.0)
    loss, stats = PolicyLoss(beta=0.1)(logp, None, adv, mask, ref_logp=ref)
    kl = 1.0 - math.log(2.0)
    assert stats.kl.item() == pytest.approx(kl)
    assert loss.item() == pytest.approx(0.1 * kl)
    # reference equal to the policy: no penalty
    _, stats = PolicyLoss(beta=0.1)(logp, None, adv, mask, ref_logp=logp.detach())
    assert stats.kl.item() == 0.0


@pytest.mark.parametrize("norm", ["sequence", "token", "constant"])
def test_micro_batches_add_up_to_full_batch(norm):
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(8, 5, generator=g)
    old = logp + 0.1 * torch.randn(8, 5, generator=g)
    adv = torch.randn(8, generator=g)
    mask = (torch.rand(8, 5, generator=g) > 0.4).float()
    loss_fn = PolicyLoss(norm=norm)
    full, _ = loss_fn(logp, old, adv, mask)
    normalizer = {"sequence": 8, "token": mask.sum().item(), "constant": 8 * 5}[norm]
    parts = [loss_fn(logp[i:i + 3], old[i:i + 3], adv[i:i + 3], mask[i:i + 3],
                     normalizer=normalizer)[0] for i in range(0, 8, 3)]
    torch.testing.assert_close(sum(parts), full)


def test_per_token_advantages_weight_each_tokens_clipped_term():
    """advantages [B, T]: A expanded per token is the [B] loss bit for bit; A_i * w_t (an
    importance weight, pods.core.correction) scales token t's clipped term by w_t. Ratio
    1.5 (eps 0.2), A = (1, -1): token losses -1.2 (clipped) and +1.5; weights 2 on the
    first token of each row, 1 elsewhere: row means (-1.2 (2 + 1 + 1) / 3,
    1.5 (2 + 1 + 1) / 3), sequence mean (-1.6 + 2) / 2 = 0.2."""
    logp, old = logp_at(1.5)
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3)
    plain, _ = policy_loss(logp, old, adv, mask)
    expanded, _ = policy_loss(logp, old, adv.unsqueeze(1).expand(2, 3), mask)
    assert torch.equal(plain, expanded)
    weights = torch.tensor([[2.0, 1.0, 1.0], [2.0, 1.0, 1.0]])
    loss, stats = policy_loss(logp, old, adv.unsqueeze(1) * weights, mask)
    assert loss.item() == pytest.approx(0.2)
    assert stats.clip_high.item() == pytest.approx(0.5)  # the A > 0 row, as with [B]


def test_stats_are_detached_and_loggable():
    logp, old = logp_at(1.1)
    _, stats = policy_loss(logp, old, ADV, MASK)
    assert not stats.ratio_mean.requires_grad
    floats = stats.as_floats()
    assert set(floats) == {"loss/clip_frac", "loss/clip_low", "loss/clip_high",
                           "loss/ratio_mean", "loss/kl"}
    assert floats["loss/ratio_mean"] == pytest.approx(1.1)


@pytest.mark.parametrize("settings, tensors, message", [
    ({}, dict(advantages=torch.zeros(3)), r"advantages must have shape \[B\] = \[2\]"),
    ({}, dict(advantages=torch.zeros(2, 4)), r"or \[B, T\] = \[2, 3\] \(one per token\)"),
    ({}, dict(mask=torch.ones(2, 4)), "mask must have the shape of logp"),
    ({}, dict(ref_logp=torch.zeros(3, 3)), "ref_logp must have the shape of logp"),
    (dict(beta=0.1), {}, "needs ref_logp"),
])
def test_tensor_errors(settings, tensors, message):
    args = dict(logp=torch.zeros(2, 3), old_logp=None, advantages=torch.zeros(2),
                mask=torch.ones(2, 3))
    args.update(tensors)
    with pytest.raises(ValueError, match=message):
        PolicyLoss(**settings)(**args)


@pytest.mark.parametrize("settings, message", [
    (dict(norm="seq"), "unknown loss normalisation 'seq'; use one of sequence, token, constant"),
    (dict(beta=-1.0), "beta"),
    (dict(eps=0.0), "positive"),
    (dict(eps_high=-0.1), "positive"),
])
def test_settings_are_checked_when_made(settings, message):
    with pytest.raises(ValueError, match=message):
        PolicyLoss(**settings)


def test_policy_loss_is_the_default_loss():
    assert policy_loss == PolicyLoss(eps=0.2, eps_high=None, beta=0.0, norm="sequence")
