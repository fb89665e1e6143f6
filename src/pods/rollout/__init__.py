"""Rollout generation behind one small interface (``Engine``), one module per engine:

    hf     transformers ``generate`` on the trainer's own module (pods.rollout.hf)
    vllm   vLLM in this process, colocated, weight-synced (pods.rollout.vllm)

``make_engine`` builds the one a config asks for; training and evaluation use the same.
An engine generates the n rollouts of P prompts (``Engine.generate``) and takes new
weights (``Engine.sync_weights``). Randomness is keyed per rollout (pods.rollout.sampling).
"""

from __future__ import annotations

import importlib.util

import torch

from pods.config.groups import RolloutConfig
from pods.rollout.base import Engine, Rollouts, completion_mask
from pods.rollout.hf import HFEngine, generate
from pods.rollout.sampling import KeyedSampler, mix32, rollout_keys, sample_keys

__all__ = ["ENGINES", "Engine", "HFEngine", "KeyedSampler", "Rollouts",
           "completion_mask", "generate", "make_engine", "mix32", "resolve_engine",
           "rollout_keys", "sample_keys"]

ENGINES = ("auto", "hf", "vllm")


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_engine(options: RolloutConfig, device: torch.device, sharded: bool = False) -> str:
    """The engine to build (auto: vllm where it is installed and the device is a GPU, else
    hf), or a ValueError saying what to change; cheap, so it runs before the model loads."""
    name = options.engine
    if name == "auto":
        return "vllm" if device.type == "cuda" and vllm_installed() and not sharded else "hf"
    if name == "vllm":
        from pods.rollout.vllm import INSTALL

        if not vllm_installed():
            raise ValueError(INSTALL)
        if sharded:
            raise ValueError("the vllm engine does not run under FSDP yet (each rank would "
                             "need the whole model); use DDP, or --engine hf.")
        if options.vllm_sleep and device.type != "cuda":
            raise ValueError("vllm_sleep releases GPU memory during the update; it does "
                             "nothing on a CPU: drop --vllm-sleep.")
    return name


def make_engine(options: RolloutConfig, model, tokenizer, device: torch.device, *,
                max_model_len: int = 1024, seed: int = 0, world: int = 1,
                sharded: bool = False, dtype: torch.dtype | None = None) -> Engine:
    """The engine ``options`` names, generating from ``model``'s current weights;
    ``max_model_len`` (prompt + completion tokens) and ``seed`` size and seed vLLM.
    ``dtype``: the dtype to sample in when it is not the weights' (mixed precision)."""
    name = resolve_engine(options, device, sharded)
    if name == "hf":
        return HFEngine(model, tokenizer, options.gen_batch_size, synced=sharded,
                        dtype=dtype)
    from pods.rollout.vllm import VLLMEngine

    return VLLMEngine(model, tokenizer, max_model_len=max_model_len,
                      max_num_seqs=options.gen_batch_size,
                      gpu_memory_utilization=options.vllm_gpu_memory_utilization,
                      sleep=options.vllm_sleep, seed=seed, world=world, dtype=dtype,
                      seeded=options.vllm_seeded)
