"""Rollout generation behind one small interface (``Engine``), one module per engine:

    hf     transformers ``generate`` on the trainer's own module (pods.rollout.hf)
    vllm   vLLM in this process, colocated, weight-synced (pods.rollout.vllm)

``ENGINES`` maps each name to its module, which defines ``build(spec, model, tokenizer) ->
Engine`` (``spec``: an ``EngineSpec``, the run's rollout config group, device, sizes and
seed) and may define ``check(options, device, sharded)``, raising a ValueError for settings
it cannot run, before any model loads, and ``SAMPLED_LOGPROBS = True`` where its rollouts
carry the sampled tokens' log-probs (``returns_logprobs``). ``make_engine`` builds the one
a spec asks for; training and evaluation use the same. An engine generates the n rollouts
of P prompts (``Engine.generate``) and takes new weights (``Engine.sync_weights``).
Randomness is keyed per rollout (pods.rollout.sampling). A new engine is its module and
one line in ``ENGINES``.
"""

from __future__ import annotations

import importlib

import torch

from pods.config.step import RolloutConfig
from pods.rollout.base import Engine, EngineSpec, Rollouts, completion_mask
from pods.rollout.hf import HFEngine, SamplingRequest, generate
from pods.rollout.sampling import KeyedSampler, mix32, rollout_keys, sample_keys

__all__ = ["ENGINES", "Engine", "EngineSpec", "HFEngine", "KeyedSampler", "Rollouts",
           "SamplingRequest", "completion_mask", "engine_names", "generate", "make_engine",
           "mix32", "resolve_engine", "returns_logprobs", "rollout_keys", "sample_keys"]

ENGINES: dict[str, object] = {  # name -> the module that builds it (or an object with build)
    "hf": "pods.rollout.hf",
    "vllm": "pods.rollout.vllm",
}


def engine_names() -> tuple[str, ...]:
    """What ``--engine`` accepts: auto, then every registered engine."""
    return ("auto", *ENGINES)


def _module(name: str):
    """The module (or any object with ``build``) that builds engine ``name``."""
    entry = ENGINES[name]
    return importlib.import_module(entry) if isinstance(entry, str) else entry


def returns_logprobs(name: str) -> bool:
    """Whether engine ``name`` returns its sampled tokens' log-probs (``Rollouts.logprobs``,
    at temperature > 0), which the importance-sampling correction needs: its module's
    (or plug-in's) ``SAMPLED_LOGPROBS``, False where it sets none. auto: the engines it may
    pick all do."""
    if name == "auto":
        return all(returns_logprobs(engine) for engine in ("hf", "vllm"))
    return bool(getattr(_module(name), "SAMPLED_LOGPROBS", False))


def resolve_engine(options: RolloutConfig, device: torch.device, sharded: bool = False) -> str:
    """The engine to build (auto: vllm where it is installed and the device is a GPU, else
    hf), or a ValueError saying what to change (the engine's ``check``); cheap, so it runs
    before the model loads."""
    name = options.engine
    if name == "auto":
        usable = device.type == "cuda" and not sharded and _module("vllm").installed()
        name = "vllm" if usable else "hf"
    check = getattr(_module(name), "check", None)
    if check is not None:
        check(options, device, sharded)
    return name


def make_engine(spec: EngineSpec, model, tokenizer) -> Engine:
    """The engine ``spec.rollout`` names (auto resolved for ``spec.device``), generating
    from ``model``'s current weights."""
    name = resolve_engine(spec.rollout, spec.device, spec.sharded)
    return _module(name).build(spec, model, tokenizer)
