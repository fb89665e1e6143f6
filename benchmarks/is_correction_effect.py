"""How much the importance-sampling correction changes a config's updates.

The engine that samples (vLLM's bf16 kernels) and the trainer that takes the loss's
log-probs (bf16 autocast over float32 weights) differ slightly, and ``--is-correction``
reweighs each token by the ratio of the two (pods.core.correction). This measures what that
does to the update itself, on the steps a run would take: the trainer a `pods train` with
the config would build samples --steps steps of the base model (its own dynamic sampling
and selection; nothing is trained, so every step sees the base model), and on each step
with signal the gradient of the loss on the kept rollouts is taken once for each
correction mode (no clipping, no optimizer step). Printed per mode: the cosine to the
uncorrected gradient and the relative difference |g_mode - g_none| / |g_none|, and the
correction's own metrics; as a scale, the same two numbers for the uncorrected gradient
computed in float32 instead of under the config's mixed precision (a difference the run
already accepts). Mean over the steps, with the range.

    .venv-vllm/bin/python benchmarks/is_correction_effect.py \
        --config configs/smollm2_wordproblems.yaml --steps 12
    .venv/bin/python benchmarks/is_correction_effect.py --model tiny --steps 4   # quick look
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform

import torch

from pods.config.files import add_config_flags, config_from_args
from pods.core.correction import CORRECTIONS
from pods.models.precision import autocast
from pods.train.update import policy_update


class Capture:
    """Stands in for the optimizer: keeps the gradient the update computed, moves nothing."""

    def __init__(self, params):
        self.params = [p for p in params if p.requires_grad]
        self.grad: torch.Tensor | None = None  # [parameters] float32

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        self.grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                               .flatten().float() for p in self.params])


def gradient(trainer, kept, mode: str, precision: str) -> tuple[torch.Tensor, dict]:
    """The gradient of the loss on ``kept`` with correction ``mode`` and its metrics."""
    spec = trainer.update_spec
    spec = dataclasses.replace(spec, optim=dataclasses.replace(spec.optim, max_grad_norm=0.0),
                               loss=dataclasses.replace(spec.loss, is_correction=mode))
    capture = Capture(trainer.model.parameters())
    with trainer.engine.asleep(), autocast(trainer.device, precision):
        stats = policy_update(trainer.wrapped, trainer.ref_model, capture, kept, spec,
                              trainer.dist)
    capture.zero_grad()
    return capture.grad, stats


def compare(g: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """(cosine, |g - reference| / |reference|)."""
    g, reference = g.double(), reference.double()
    cosine = float(torch.nn.functional.cosine_similarity(g, reference, dim=0))
    return cosine, float((g - reference).norm() / reference.norm())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML file of TrainConfig fields (as pods train)")
    parser.add_argument("--steps", type=int, default=12, help="steps sampled")
    add_config_flags(parser)
    args = parser.parse_args()
    from pods.train.trainer import Trainer

    trainer = Trainer(config_from_args(args))
    precision = trainer.cfg.model.mixed_precision
    modes = [m for m in CORRECTIONS if m != "none"]
    rows: dict[str, list[tuple[float, float]]] = {m: [] for m in [*modes, "float32"]}
    extra: dict[str, list[dict]] = {m: [] for m in modes}
    gaps, skipped = [], 0
    for _ in range(args.steps):
        sampled = trainer.sample()
        trainer.step_count += 1  # the next step's sampling keys
        if not sampled.signal:
            skipped += 1
            continue
        base, stats = gradient(trainer, sampled.kept, "none", precision)
        gaps.append(stats)
        for mode in modes:
            g, mode_stats = gradient(trainer, sampled.kept, mode, precision)
            rows[mode].append(compare(g, base))
            extra[mode].append(mode_stats)
        rows["float32"].append(compare(gradient(trainer, sampled.kept, "none", "no")[0], base))
        print(f"step {trainer.step_count}: " + ", ".join(
            f"{m} {rows[m][-1][1]:.4f}" for m in rows), flush=True)
    print_table(args, trainer, rows, extra, gaps, skipped)


def _mean_range(values: list[float], digits: int) -> str:
    return f"{sum(values) / len(values):.{digits}f} [{min(values):.{digits}f}, " \
           f"{max(values):.{digits}f}]"


def print_table(args, trainer, rows, extra, gaps, skipped) -> None:
    steps = len(gaps)
    if not steps:
        print(f"none of the {args.steps} steps had signal: nothing to compare")
        return
    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"config {args.config or trainer.cfg.model.name}; {steps} steps with signal "
          f"({skipped} without); is_cap {trainer.cfg.loss.is_cap}")
    gap = [s.get("rollout/logprob_gap", 0.0) for s in gaps]
    top = [s.get("rollout/logprob_gap_max", 0.0) for s in gaps]
    outside = [100 * s.get("rollout/ratio_outside_frac", 0.0) for s in gaps]
    print(f"gap on the kept tokens: mean |d| {_mean_range(gap, 4)}, max |d| "
          f"{_mean_range(top, 3)}, % of tokens outside [1/2, 2] {_mean_range(outside, 3)}")
    print("| against the uncorrected gradient | cosine | relative difference | "
          "mean weight | % tokens masked | % tokens capped |")
    print("|---|---|---|---|---|---|")
    for mode, values in rows.items():
        cells = [_mean_range([v[0] for v in values], 5), _mean_range([v[1] for v in values], 4)]
        if mode in extra:
            cells += [_mean_range([s["loss/is_weight_mean"] for s in extra[mode]], 4),
                      _mean_range([100 * s["loss/is_masked_frac"] for s in extra[mode]], 3),
                      _mean_range([100 * s["loss/is_capped_frac"] for s in extra[mode]], 3)]
        else:
            cells += ["", "", ""]
        name = mode if mode in extra else "none, in float32 (scale)"
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
