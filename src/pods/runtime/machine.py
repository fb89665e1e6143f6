"""The machine a run trains on, in a few fields that decide its speed.

A comparison's speed-ups divide training times, and its budgets are training minutes, so
its runs must share a machine class. Two 2-core VMs of one workplace, both reporting "AMD
EPYC", differ by 10x on the SmolLM2 recipe (a generation round of 16 rollouts: 7 s with
AVX-512 BF16, 67 s without it, where a bf16 matmul of SmolLM2's shapes ran at 1 GFLOP/s
against 103 in float32: torch emulates bf16 on such a CPU). Each run writes a "machine"
record to metrics.jsonl when it starts and at each resume; `pods compare` refuses to train
in a folder whose runs so far were made on another machine class (``check_same_machine``),
and a comparison's summary says when its runs' machines differ.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

HOST = ("machine/cpu", "machine/cores", "machine/cpu_capability", "machine/bf16")
# what a comparison's runs must share: the host's fields, and the device trained on
KEY = (*HOST, "machine/device")


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; else the platform's answer)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


NATIVE_BF16 = ("amx", "avx512_bf16")  # the cpu_bf16 answers where bf16 runs in hardware


def cpu_bf16() -> str:
    """How this CPU multiplies bf16: "amx", "avx512_bf16", "none" (torch emulates it: tens
    to hundreds of times slower than float32) or "unknown" (not x86, or an older torch)."""
    import torch

    try:
        if torch.cpu._is_amx_tile_supported():
            return "amx"
        if torch.cpu._is_avx512_bf16_supported():
            return "avx512_bf16"
    except AttributeError:
        return "unknown"
    return "none" if platform.machine().lower() in ("x86_64", "amd64") else "unknown"


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def host() -> dict[str, Any]:
    """The host's fields (``HOST``); cheap, touches no accelerator."""
    import torch

    return {"machine/cpu": cpu_name(), "machine/cores": cores(),
            "machine/cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine/bf16": cpu_bf16()}


def machine_fields(device) -> dict[str, Any]:
    """The host's fields, the kind of device trained on ("cpu", or "cuda NVIDIA H100 ...":
    not its index, so runs on two GPUs of one kind match) and torch's version: the fields
    of a "machine" record."""
    import torch

    name = device.type
    if device.type == "cuda":
        name += f" {torch.cuda.get_device_name(device)}"
    return {**host(), "machine/device": name, "machine/torch": torch.__version__}


def slow_bf16(device, dtype: str, mixed_precision: str) -> str | None:
    """A warning when a run on the CPU computes in bf16 (weights ``dtype`` "bfloat16", or
    ``mixed_precision`` "bf16") on a CPU that emulates it; else None."""
    in_bf16 = dtype == "bfloat16" or mixed_precision == "bf16"
    if device.type != "cpu" or not in_bf16 or cpu_bf16() != "none":
        return None
    return ("this CPU has neither AVX-512 BF16 nor AMX: torch emulates bf16 matmuls, tens "
            "to hundreds of times slower than float32 (1 vs 103 GFLOP/s measured on such a "
            "2-core AMD EPYC). Train in float32 here (--dtype float32 --mixed-precision no; "
            "--mixed-precision auto picks bf16 only where it is native), or on a CPU with "
            "AVX-512 BF16 or AMX.")


def differences(a: dict[str, Any], b: dict[str, Any], fields=KEY) -> list[str]:
    """The fields in which two machine records differ, as "field: a / b"."""
    return [f"{k.removeprefix('machine/')}: {a.get(k)} / {b.get(k)}"
            for k in fields if a.get(k) != b.get(k)]


def check_same_machine(recorded: dict[str, dict[str, Any]], here: dict[str, Any]) -> None:
    """Refuse to train more runs of a comparison on a host unlike its runs' so far.

    ``recorded``: each run's last machine record, by run name (finished runs, and stopped
    ones that would resume here); runs made before pods recorded machines are not in it.
    ``here``: this host (``host()``). Only runs trained on the CPU are checked: for a GPU
    run the GPU decides, and naming it here would start CUDA in the comparison's own
    process; the summary names differing GPUs."""
    for run, record in recorded.items():
        if record.get("machine/device", "cpu") != "cpu":
            continue
        diff = differences(record, here, HOST)
        if diff:
            raise ValueError(
                f"{run} was made on another machine ({'; '.join(diff)}; theirs / this one's): "
                "runs timed on both would not be comparable. Run the rest on a machine like "
                "the finished runs', or compare into a new --out folder; --any-machine adds "
                "the runs anyway (the summary then names the machines).")
