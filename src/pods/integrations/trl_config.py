"""``PODSGRPOConfig``: TRL's ``GRPOConfig`` with the two PODS options, and the checks that
say, before TRL builds anything, which batch sizes keep whole groups. Imported and
re-exported by ``pods.integrations.trl`` (the module docstring there explains the batch
arithmetic); the trainer lives there."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import trl
from packaging.version import Version
from trl import GRPOConfig

from pods.core.downsample import RULES, check_rule
from pods.core.rollout_inputs import rule_sources

SUPPORTED_TRL = (Version("1.16"), Version("1.17"))  # [low, high): the minor versions tested
if not SUPPORTED_TRL[0] <= Version(trl.__version__) < SUPPORTED_TRL[1]:
    warnings.warn(f"pods.integrations.trl is tested with trl>=1.16,<1.17 and overrides TRL "
                  f"internals; found trl {trl.__version__}. Run tests/integrations/test_trl.py "
                  f"or install pods with its trl extra (pip install -e '.[trl]' in its "
                  f"clone).", stacklevel=2)

@dataclass
class PODSGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the two PODS options (Xu et al. 2025, arXiv 2504.13818)."""

    pods_m: int | None = field(default=None, metadata={
        "help": "PODS m: rollouts kept per group for the update, 2 <= m <= num_generations "
                "(= n generated). None keeps all n (plain GRPO). per_device_train_batch_size "
                "counts kept rollouts."})
    # Typed str so that HfArgumentParser / TrlParser can read it from the command line; from
    # Python a callable works too.
    pods_rule: str = field(default="max_variance", metadata={
        "help": "Down-sampling rule: a name in pods.core.downsample.RULES (max_variance is "
                f"the paper's; all: {', '.join(sorted(RULES))}) or, from Python, a callable "
                "rule(rewards [P, n], m) -> LongTensor [P, m] of kept columns (a rule that "
                "reads more of each rollout names its inputs in a needs attribute: "
                "pods.core.rollout_inputs)."})

    def __post_init__(self):
        n, kept = self.num_generations, self.per_device_train_batch_size
        m = n if self.pods_m is None else self.pods_m
        _check_pods_options(m, n, self.pods_rule)
        generated = self.generation_batch_size  # counts generated rollouts when set
        if generated is not None and generated % n:
            raise ValueError(f"generation_batch_size={generated} counts generated rollouts and "
                             f"must be whole groups of num_generations={n}; set it to a "
                             f"multiple of {n}.")
        # steps_per_generation is known here unless TRL derives it from generation_batch_size
        steps = self.steps_per_generation or (
            None if generated else self.gradient_accumulation_steps)
        _check_kept_batch(kept, n, m, steps)
        # TRL's batch arithmetic (data loader, sampler, its checks) counts generated rollouts.
        self.per_device_train_batch_size = kept * n // m
        try:
            super().__post_init__()
        except ValueError as error:
            if m == n:
                raise
            raise ValueError(f"{error} (PODSGRPOConfig ran this TRL check with "
                             f"per_device_train_batch_size={kept} kept x n/m = "
                             f"{self.per_device_train_batch_size} generated rollouts.)") from None
        finally:
            self.per_device_train_batch_size = kept
        _check_kept_batch(kept, n, m, self.steps_per_generation)


def _check_pods_options(m, n: int, rule) -> None:
    if isinstance(m, bool) or not isinstance(m, int):
        raise ValueError(f"pods_m must be an integer number of rollouts kept per group, got "
                         f"{m!r}.")
    if not 2 <= m <= n:
        raise ValueError(f"pods_m={m} must be in [2, num_generations={n}]: it keeps m of the n "
                         f"rollouts of each prompt, and group advantages need at least 2; set "
                         f"pods_m between 2 and {n} (or raise num_generations).")
    check_rule(rule, "pods_rule")
    rule_sources(rule)  # every input the rule needs is one pods computes


def _check_kept_batch(kept: int, n: int, m: int, steps: int | None) -> None:
    """Each process keeps whole groups per generation and loads whole generated rows
    (``steps`` None: not known yet, checked again once TRL has derived it). m == n is
    stock GRPO: TRL's own checks apply."""
    problems = []
    if steps is not None and (kept * steps) % m:
        problems.append(f"each process must keep whole groups of m={m} per generation, but "
                        f"per_device_train_batch_size * steps_per_generation = {kept * steps}")
    if (kept * n) % m:
        problems.append(f"each micro-batch must come from a whole number of generated "
                        f"rollouts, but per_device_train_batch_size * n / m = {kept * n / m:g}")
    if m == n or not problems:
        return
    step = math.lcm(m // math.gcd(m, steps or m), m // math.gcd(m, n))
    raise ValueError(
        f"per_device_train_batch_size={kept} with num_generations={n}, pods_m={m}"
        f"{f', steps_per_generation={steps}' if steps else ''}: per_device_train_batch_size "
        f"counts kept rollouts; "
        f"{'; and '.join(problems)}. Set per_device_train_batch_size to a multiple of {step} "
        f"(e.g. {step * max(1, round(kept / step))}).")
