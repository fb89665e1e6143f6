"""The optimizer a run trains with, and how its updates survive the weights' dtype.

    make_optimizer(params, lr, betas, weight_decay, exact_bf16)
        float32 weights (the default on every device): torch's AdamW, fused where it can be
        bfloat16 weights (--dtype bfloat16, a full fine-tune): ``SplitAdamW`` unless
        ``exact_bf16`` is False (--bf16-updates plain): then torch's AdamW, which rounds
        most RL-sized updates away (``pods.models.precision.lost_share`` says how many)

Why: bfloat16 keeps 8 significant bits, so a weight w moves only by steps of about
|w| * 2**-8. AdamW's update is about lr per weight, and at RL's learning rates (1e-6 to
2e-5) that is below half a step for nearly every weight of a real model: measured on
SmolLM2-135M-Instruct, one step at lr 1e-6 moves 0.4% of its bf16 weights (results page,
"Updates that reach the weights"). Trainers keep a float32 master copy for this (DeepSpeed
and Megatron under bf16, AReaL's FSDP engine); a Kahan-compensated optimizer (torch-optimi,
torchdistX's AnyPrecisionAdamW) keeps the lost part in a second bf16 buffer, which itself
holds only 8 more bits: measured here, at lr 1e-6 it still lost about half of 200 updates of
weights near 0.05, and all of them near 1.0 (layer norms), where the compensation stalls
below the weight's step.

``SplitAdamW`` keeps the float32 master exactly, in the same 4 bytes a parameter that a
float32 weight takes: the bf16 weight is the master's upper 16 bits (rounded to nearest),
and the optimizer keeps its lower 16 bits (``low`` in the state, int16). Each step rebuilds
the float32 master from the two, applies torch's AdamW arithmetic to it in float32 with
float32 moments, and splits it again. So the master follows float32 AdamW bit for bit
(tests/train/test_optimizer.py), the forward and backward passes run on bf16 weights
without autocast's casts, and gradients take 2 bytes a parameter. The same idea as the
multi-component floats of Collage (Yu et al., ICML 2024), for the weights only.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from pods.runtime.speed import adamw

HALF = 0x8000  # half of the low 16 bits: rounds the upper half to the nearest bf16
QUIET = 0x0040  # bf16's quiet-NaN bit (the top bit of its 7-bit mantissa)


def split(master: Tensor) -> tuple[Tensor, Tensor]:
    """A float32 tensor as (upper, low): its nearest bfloat16 (ties away from zero) and the
    signed 16-bit rest of its bit pattern, so that ``join(upper, low)`` is ``master``
    bit for bit (integer arithmetic on the patterns; any finite float32, and +-inf).

    A NaN stays a NaN: rounding its pattern would wrap (CUDA's 0x7FFFFFFF becomes 0x8000,
    a bf16 -0.0) or drop a small payload (0x7F800001 would be inf), so a NaN's upper half
    is its own top 16 bits with the quiet bit set, and its low bits 0 (the master is then
    that quiet NaN; its payload is not kept)."""
    bits = master.view(torch.int32)
    upper = (bits + HALF) >> 16  # arithmetic shift: the rounded upper half, signed
    nan = master.isnan()
    upper = torch.where(nan, (bits >> 16) | QUIET, upper)
    low = torch.where(nan, 0, bits - (upper << 16))  # in [-0x8000, 0x7fff]
    return upper.to(torch.int16).view(torch.bfloat16), low.to(torch.int16)


def join(upper: Tensor, low: Tensor) -> Tensor:
    """The float32 tensor that ``split`` cut into ``upper`` (bfloat16) and ``low`` (int16)."""
    high = upper.view(torch.int16).to(torch.int32) << 16  # sign-extended, so the sum wraps
    return (high + low.to(torch.int32)).view(torch.float32)  # right for either sign


class SplitAdamW(torch.optim.Optimizer):
    """AdamW (torch's arithmetic, decoupled weight decay, bias correction) on bfloat16
    parameters whose float32 master is the parameter plus the low 16 bits kept in the state.
    Float32 moments. Parameters of other dtypes are refused."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        for group in self.param_groups:
            for p in group["params"]:
                if p.dtype != torch.bfloat16:
                    raise ValueError(f"SplitAdamW keeps bfloat16 weights; got {p.dtype}. "
                                     f"Use torch.optim.AdamW for float32 weights.")

    def load_state_dict(self, state_dict: dict) -> None:
        """As torch's, but the state keeps its dtypes: torch casts every floating
        parameter's state to the parameter's dtype, which would turn the low bits (int16)
        and the float32 moments into bfloat16 and lose the master.

        A state without low bits (torch's AdamW: a bf16 run from before exact updates, or
        one with --bf16-updates plain) starts them at zero, so the bf16 weight is the
        master from here on; its moments become float32. Said once, as a warning."""
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        rebuilt = 0
        for theirs, ours in zip(state_dict["param_groups"], self.param_groups, strict=True):
            for index, p in zip(theirs["params"], ours["params"], strict=True):
                for key, value in saved.get(index, {}).items():
                    if key != "step":  # torch keeps the step count on the CPU: leave it
                        dtype = torch.float32 if key.startswith("exp_avg") else value.dtype
                        self.state[p][key] = value.to(p.device, dtype)
                if index in saved and "low" not in saved[index]:
                    self.state[p]["low"] = torch.zeros_like(p, dtype=torch.int16)
                    rebuilt += 1
        if rebuilt:
            warnings.warn(f"the optimizer state holds no low bits for {rebuilt} bfloat16 "
                          f"weights (torch's AdamW wrote it: --bf16-updates plain, or a "
                          f"pods version before exact updates); their float32 masters start "
                          f"as the bf16 weights, and keep every update from here on.",
                          stacklevel=2)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, self.state[p], group)
        return loss

    def _update(self, p: Tensor, state: dict, group: dict) -> None:
        """torch.optim.AdamW's single-tensor step, on the joined float32 master."""
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["low"] = torch.zeros_like(p, dtype=torch.int16)  # p is exact to start
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        lr, (beta1, beta2) = group["lr"], group["betas"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        state["step"] += 1
        step = state["step"].item()
        master = join(p, state["low"])  # float32, as p's shape
        grad = p.grad.float()
        master.mul_(1 - lr * group["weight_decay"])
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5  # torch's own expression
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(group["eps"])
        master.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1 ** step))
        upper, state["low"] = split(master)
        p.copy_(upper)


def make_optimizer(params, lr: float, betas: tuple[float, float], weight_decay: float,
                   exact_bf16: bool = True) -> torch.optim.Optimizer:
    """The run's optimizer over ``params`` (the trainable ones): ``SplitAdamW`` where they
    are bfloat16 and ``exact_bf16``; else torch's AdamW (fused where it can be)."""
    params = list(params)
    if exact_bf16 and params and all(p.dtype == torch.bfloat16 for p in params):
        return SplitAdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
    return adamw(params, lr=lr, betas=betas, weight_decay=weight_decay)


def run_optimizer(params, optim, sharded: bool, log) -> torch.optim.Optimizer:
    """The trainer's optimizer over ``params`` (the trainable weights) with the settings of
    ``optim`` (an OptimConfig): exact on bf16 weights unless ``bf16_updates`` is plain, and
    ``log`` the warning of ``lost_updates_warning`` before any step. ``sharded`` (FSDP2):
    the shards become float32 masters, so torch's AdamW and no warning."""
    params = list(params)
    exact = optim.bf16_updates == "exact" and not sharded
    if not sharded and (lost := lost_updates_warning(params, optim.lr, exact)):
        log(f"warning: {lost}")  # measured on these weights
    return make_optimizer(params, lr=optim.lr, betas=(optim.adam_beta1, optim.adam_beta2),
                          weight_decay=optim.weight_decay, exact_bf16=exact)


def lost_updates_warning(params, lr: float, exact_bf16: bool) -> str | None:
    """What a full fine-tune of 16-bit ``params`` would lose at ``lr``, measured on them,
    and how to avoid it; None where nothing is lost (float32 weights, bfloat16 ones under
    ``SplitAdamW``, or a share under 0.1%: a warning never says "0.0% would not move").
    (float16's own problem, its range, is refused for a full fine-tune before a run loads
    anything: pods.train.checks; float16 weights reach this only under FSDP2's shards.)"""
    from pods.models.precision import lost_share

    params = list(params)
    dtypes = {p.dtype for p in params}
    if not dtypes & {torch.bfloat16, torch.float16} or (exact_bf16 and dtypes == {torch.bfloat16}):
        return None
    share = lost_share(params, lr)
    if share < 1e-3:
        return None
    dtype = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
    fix = "--dtype float32 (or auto)" if torch.float16 in dtypes else \
        "--bf16-updates exact, or --dtype float32 (or auto)"
    return (f"{share:.1%} of the trained weights ({dtype}) would not move by an AdamW step "
            f"of lr {lr:g}: their dtype rounds it away. Use {fix}.")
