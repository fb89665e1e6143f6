"""The optimizer: torch's AdamW on float32 weights; on bfloat16 weights, SplitAdamW, whose
float32 master (the weight plus its low 16 bits) follows float32 AdamW bit for bit."""

import pytest
import torch

from pods.train.optimizer import SplitAdamW, join, lost_updates_warning, make_optimizer, split

LR = 1e-6  # the paper-scale RL learning rates that bf16 weights round away


def _weights(shape=(256, 64), scale=0.05) -> torch.Tensor:
    return (torch.randn(shape, generator=torch.Generator().manual_seed(0)) * scale).bfloat16()


def _grads(shape, steps):
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):  # a drift (0.5) under noise, as gradients of one objective
        yield (torch.randn(shape, generator=gen) + 0.5).bfloat16()


def test_split_and_join_are_exact_and_the_upper_half_is_the_nearest_bf16():
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(2)) * \
        torch.logspace(-30, 30, 200_000)
    x = torch.cat([x, torch.tensor([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 3e38, -3e38])])
    upper, low = split(x)
    assert upper.dtype == torch.bfloat16 and low.dtype == torch.int16
    assert torch.equal(join(upper, low).view(torch.int32), x.view(torch.int32))  # bit for bit
    nearest = x.bfloat16()  # round to nearest even; split rounds ties away from zero
    differ = upper.view(torch.int16) != nearest.view(torch.int16)
    assert differ.sum() <= 10  # only exact ties (here: a few of 200,000)
    ties = (x.view(torch.int32) & 0xFFFF) == 0x8000
    assert bool(ties[differ].all())


def test_the_master_follows_float32_adamw_bit_for_bit_where_plain_bf16_stays_put():
    w0, steps = _weights(), 300
    split_p = torch.nn.Parameter(w0.clone())
    plain_p = torch.nn.Parameter(w0.clone())
    exact_p = torch.nn.Parameter(w0.float())
    opts = [SplitAdamW([split_p], lr=LR, weight_decay=0.01),
            torch.optim.AdamW([plain_p], lr=LR, weight_decay=0.01),
            torch.optim.AdamW([exact_p], lr=LR, weight_decay=0.01, foreach=False)]
    for g in _grads(w0.shape, steps):
        split_p.grad, plain_p.grad, exact_p.grad = g.clone(), g.clone(), g.float()
        for o in opts:
            o.step()
    master = join(split_p.detach(), opts[0].state[split_p]["low"])
    assert torch.equal(master, exact_p.detach())  # torch's float32 AdamW, exactly
    assert torch.equal(split_p.detach(), split(exact_p.detach())[0])  # its nearest bf16
    moved = (exact_p.detach() - w0.float()).abs().mean()
    assert moved > 100 * LR  # 300 steps of about 0.45 lr each
    # plain bf16 AdamW: most weights never moved, and the mean movement is a fraction
    assert (plain_p.detach() != w0).float().mean() < 0.05
    assert (plain_p.detach().float() - w0.float()).abs().mean() < 0.1 * moved
    assert (split_p.detach() != w0).float().mean() > 0.5  # the split weights did move


def test_a_saved_state_loads_back_with_its_dtypes_and_resumes_exactly():
    w0 = _weights((32, 16))
    grads = list(_grads(w0.shape, 20))
    whole = torch.nn.Parameter(w0.clone())
    opt = SplitAdamW([whole], lr=LR)
    for g in grads:
        whole.grad = g.clone()
        opt.step()
    first = torch.nn.Parameter(w0.clone())
    opt = SplitAdamW([first], lr=LR)
    for g in grads[:10]:
        first.grad = g.clone()
        opt.step()
    saved = opt.state_dict()
    resumed = torch.nn.Parameter(first.detach().clone())
    opt = SplitAdamW([resumed], lr=LR)
    opt.load_state_dict(saved)  # torch would cast the state to the weights' bfloat16
    state = opt.state[resumed]
    assert (state["low"].dtype, state["exp_avg"].dtype) == (torch.int16, torch.float32)
    for g in grads[10:]:
        resumed.grad = g.clone()
        opt.step()
    assert torch.equal(resumed.detach(), whole.detach())
    assert torch.equal(state["low"], opt.state[resumed]["low"])


def test_make_optimizer_picks_split_for_bf16_weights_unless_told_plain():
    bf16 = [torch.nn.Parameter(_weights((4, 4)))]
    fp32 = [torch.nn.Parameter(torch.zeros(4, 4))]
    assert isinstance(make_optimizer(bf16, 1e-6, (0.9, 0.99), 0.0), SplitAdamW)
    plain = make_optimizer(bf16, 1e-6, (0.9, 0.99), 0.0, exact_bf16=False)
    assert type(plain) is torch.optim.AdamW
    assert type(make_optimizer(fp32, 1e-6, (0.9, 0.99), 0.0)) is torch.optim.AdamW
    with pytest.raises(ValueError, match="keeps bfloat16 weights.*torch.optim.AdamW"):
        SplitAdamW(fp32, lr=1e-6)


def test_the_warning_measures_what_plain_16_bit_weights_would_lose():
    bf16 = [torch.nn.Parameter(_weights())]
    warning = lost_updates_warning(bf16, 1e-6, exact_bf16=False)
    share = float(warning.split("%")[0]) / 100
    assert share > 0.95  # weights near 0.05 move by steps of ~2e-4, far above 1e-6
    assert "--bf16-updates exact" in warning and "lr 1e-06" in warning
    assert lost_updates_warning(bf16, 1e-6, exact_bf16=True) is None
    fp32 = [torch.nn.Parameter(_weights().float())]
    assert lost_updates_warning(fp32, 1e-6, exact_bf16=False) is None
    fp16 = [torch.nn.Parameter(_weights().half())]
    assert "--dtype float32" in lost_updates_warning(fp16, 1e-6, exact_bf16=True)
    # at a large lr bf16 keeps every update here: the share is measured, not assumed, and
    # nothing lost is no warning (never "0.0% ... would not move")
    assert lost_updates_warning(bf16, 1e-2, exact_bf16=False) is None
    assert lost_updates_warning(fp16, 6e-4, exact_bf16=False) is None


def _bits(*patterns: int) -> torch.Tensor:
    """float32 tensors of the given bit patterns (0xFFC00000 and above as negative int32)."""
    signed = [p - (1 << 32) if p >= 1 << 31 else p for p in patterns]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def test_a_nan_master_stays_nan_and_inf_stays_inf():
    """(bits + 0x8000) >> 16 wraps CUDA's canonical NaN 0x7FFFFFFF to 0x8000 (bf16 -0.0)
    and rounds a small-payload NaN (0x7F800001) to inf: every NaN must stay a NaN."""
    nans = _bits(0x7FFFFFFF, 0x7FC00000, 0xFFC00000, 0xFFFFFFFF, 0x7F800001, 0xFF800001,
                 0x7F808000, 0x7FFF8000)
    upper, low = split(nans)
    assert bool(upper.isnan().all()), upper.view(torch.int16)
    assert bool(join(upper, low).isnan().all())
    infs = _bits(0x7F800000, 0xFF800000)
    upper, low = split(infs)
    assert upper.tolist() == [float("inf"), float("-inf")]
    assert torch.equal(join(upper, low).view(torch.int32), infs.view(torch.int32))


def test_resuming_from_torch_adamws_state_rebuilds_the_low_bits_as_zero():
    """A bf16 run's checkpoint of torch's AdamW (no "low") loads into SplitAdamW: the bf16
    weight becomes the master, the moments float32, and the load says so once."""
    w0 = _weights((32, 16))
    plain_p = torch.nn.Parameter(w0.clone())
    plain = torch.optim.AdamW([plain_p], lr=LR)
    for g in _grads(w0.shape, 3):
        plain_p.grad = g
        plain.step()
    p = torch.nn.Parameter(plain_p.detach().clone())
    exact = SplitAdamW([p], lr=LR)
    with pytest.warns(UserWarning, match="no low bits for 1 bfloat16 weights") as caught:
        exact.load_state_dict(plain.state_dict())
    assert len(caught) == 1
    state = exact.state[p]
    assert torch.equal(state["low"], torch.zeros_like(p, dtype=torch.int16))
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    p.grad = next(_grads(w0.shape, 1))
    exact.step()  # no KeyError 'low'
    assert int(state["step"]) == 4 and (p.detach() != plain_p.detach()).any()
