"""What a down-sampling rule may read of each rollout besides its reward.

A rule names the inputs it reads in a ``needs`` attribute (``shortest.needs = ("lengths",)``)
and takes them as keyword arguments, each [P, n]. Each name is a key of ``ROLLOUT_INPUTS``: a
function of the completions whose parameter names say what it reads, out of ``SOURCES``

    completion_ids   [rows, T] token ids, right-padded
    completion_mask  [rows, T] 1 on the completion's tokens (up to and including eos), 0 after

and which returns one number per rollout, [rows]. The trainer, the TRL adapter and verl's two
hooks all call ``rule_inputs`` with the completions they hold (verl fetches only the sources
that ``rule_sources`` names), so a rule with a new input is two additions in ``pods/core``:
the input's function here and the rule in ``pods.core.downsample.RULES``
(docs/development.md walks through one).

    inputs = rule_inputs("shortest", completion_mask=mask)     # {"lengths": [rows]}
    idx = downsample(rewards, m, "shortest", **{k: v.view(P, n) for k, v in inputs.items()})
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from torch import Tensor

from pods.core.downsample import rule_needs

SOURCES = ("completion_ids", "completion_mask")


def completion_lengths(completion_mask: Tensor) -> Tensor:
    """[rows, T] mask -> [rows] tokens in each completion, eos included (the length rules)."""
    return completion_mask.sum(-1)


ROLLOUT_INPUTS: dict[str, Callable[..., Tensor]] = {
    "lengths": completion_lengths,
}


def _reads(name: str, rule) -> tuple[str, ...]:
    fn = ROLLOUT_INPUTS.get(name)
    if fn is None:
        label = rule if isinstance(rule, str) else getattr(rule, "__name__", "custom")
        raise ValueError(f"rule {label!r} needs {name!r}, which is not a per-rollout input; "
                         f"define it in pods.core.rollout_inputs.ROLLOUT_INPUTS (known: "
                         f"{', '.join(sorted(ROLLOUT_INPUTS))}).")
    reads = tuple(inspect.signature(fn).parameters)
    unknown = sorted(set(reads) - set(SOURCES))
    if unknown:
        raise ValueError(f"rollout input {name!r} reads {', '.join(unknown)}; its function's "
                         f"parameters must be among {', '.join(SOURCES)}.")
    return reads


def rule_sources(rule) -> tuple[str, ...]:
    """Which of ``SOURCES`` the inputs of ``rule`` (a name in RULES or a callable) read; ()
    for a rule of rewards alone. Raises ValueError for an input no function computes: call
    it before any work to refuse such a rule early."""
    reads = [source for name in rule_needs(rule) for source in _reads(name, rule)]
    return tuple(source for source in SOURCES if source in reads)


def rule_inputs(rule, **sources: Tensor) -> dict[str, Tensor]:
    """The inputs ``rule`` needs, each [rows], from the completions' ``sources`` ([rows, T]
    each; only those ``rule_sources(rule)`` names must be given)."""
    inputs = {}
    for name in rule_needs(rule):
        reads = _reads(name, rule)
        missing = [source for source in reads if sources.get(source) is None]
        if missing:
            raise ValueError(f"rollout input {name!r} is computed from {', '.join(reads)}; "
                             f"pass {', '.join(missing)} to rule_inputs.")
        inputs[name] = ROLLOUT_INPUTS[name](**{source: sources[source] for source in reads})
    return inputs
