"""The plan of `pods check`: which training modes to try on this machine, and why the
others are skipped. Plain data in, plain data out (no torch), so that the plan is tested
without running anything.

Modes (each a few steps of the same run, config fields given as flat keys):
    hf-full, hf-lora        transformers generate; full fine-tuning and LoRA
    vllm-full, vllm-lora    the vllm engine, when vLLM imports here (its CPU build included)
    vllm-sleep              vLLM's sleep mode during the update: GPUs only
    ddp, fsdp2              data parallel over every visible GPU (torchrun): 2+ GPUs only
    grpo-M/M                the reference engine, full fine-tuning, with n = m: the
                            baseline of the PODS n/m : GRPO m/m step-time ratio
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LORA_RANK = 8  # small: the check is about the code path, not the adapter's capacity


@dataclass(frozen=True)
class Machine:
    """What the plan depends on: the device kind, the GPUs visible, what is installed."""

    device: str  # "cpu" or "cuda"
    gpus: int
    vllm: bool  # vLLM imports here
    fsdp2: str | None  # None: this pods supports parallelism=fsdp2; else why not


@dataclass(frozen=True)
class Mode:
    """One row of the check: config overrides (flat keys), processes, or why it is skipped."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    procs: int = 1  # > 1: launched with torchrun
    skip: str | None = None


def fsdp2_support() -> str | None:
    """None when this pods's config accepts parallelism=fsdp2, else why it is skipped."""
    from pods.config import from_dict

    try:
        from_dict({"parallelism": "fsdp2"})
    except (ValueError, TypeError):
        return "this pods has no FSDP2 support"
    return None


def reference_engine(machine: Machine) -> str:
    """The engine a real run would use here (as engine=auto picks on one process)."""
    return "vllm" if machine.vllm and machine.device == "cuda" else "hf"


def plan(machine: Machine, n: int, m: int) -> list[Mode]:
    """Every mode, runnable or skipped with the reason, the GRPO baseline last."""
    no_vllm = None if machine.vllm else "vLLM is not installed (pip install -e '.[vllm]')"
    on_gpu = None if machine.device == "cuda" else "needs a GPU"
    several = None if machine.gpus >= 2 else "needs 2+ GPUs"
    engine = reference_engine(machine)
    modes = [
        Mode("hf-full", {"engine": "hf"}),
        Mode("hf-lora", {"engine": "hf", "lora_rank": LORA_RANK}),
        Mode("vllm-full", {"engine": "vllm"}, skip=no_vllm),
        Mode("vllm-lora", {"engine": "vllm", "lora_rank": LORA_RANK}, skip=no_vllm),
        Mode("vllm-sleep", {"engine": "vllm", "vllm_sleep": True}, skip=no_vllm or on_gpu),
        Mode("ddp", {"engine": engine}, procs=max(machine.gpus, 2), skip=several),
        Mode("fsdp2", {"engine": "hf", "parallelism": "fsdp2"}, procs=max(machine.gpus, 2),
             skip=machine.fsdp2 or several),
        Mode(f"grpo-{m}/{m}", {"engine": engine, "n": m, "m": m}),
    ]
    return [mode for mode in modes if n != m or not mode.name.startswith("grpo-")]


def pods_mode(machine: Machine) -> str:
    """The row whose step time is the PODS side of the ratio (the reference engine, full)."""
    return f"{reference_engine(machine)}-full"
