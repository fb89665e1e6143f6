"""The machine a run trains on, in a few fields that decide its speed.

A comparison's speed-ups divide training times, and its budgets are training minutes, so
its runs must share a machine class. Two 2-core VMs of one workplace, both reporting "AMD
EPYC", differ by 10x on the SmolLM2 recipe (a generation round of 16 rollouts: 7 s with
AVX-512 BF16, 67 s without it, where a bf16 matmul of SmolLM2's shapes ran at 1 GFLOP/s
against 103 in float32: torch emulates bf16 on such a CPU). Each run writes a "machine"
record to metrics.jsonl when it starts and at each resume; `pods compare` refuses to train
in a folder whose runs so far were made on another machine class (``check_same_machine``),
and a comparison's summary says when its runs' machines differ.

On a GPU the GPU sets the speed, not the host: a GPU run's record adds the GPUs it trains on
(``machine/gpus``) and the CUDA build of torch (``machine/cuda``), and GPU runs are matched
by ``GPU`` alone (two H200 hosts with different CPUs pool; an H100 and an H200 do not).
The comparison's own process reads its GPUs with the driver's tool (``gpu_names``), never
by starting CUDA. Records of an older pods lack the two new fields: a field one of two
records lacks is not compared (the GPU's name and torch's version still are).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

HOST = ("machine/cpu", "machine/cores", "machine/cpu_capability", "machine/bf16")
# what a comparison's runs must share: the host's fields, and the device trained on
KEY = (*HOST, "machine/device")
# what GPU runs must share: the GPU's name (in the device), how many a run trains on, and
# the torch and CUDA builds that run on it
GPU = ("machine/device", "machine/gpus", "machine/torch", "machine/cuda")


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

    fields = {**host(), "machine/device": device.type, "machine/torch": torch.__version__}
    if device.type == "cuda":
        fields.update(gpu_fields(torch.cuda.get_device_name(device)))
    return fields


def gpu_fields(name: str) -> dict[str, Any]:
    """A GPU run's fields beyond the host's: the device ("cuda NVIDIA H200"), the GPUs it
    trains on (one per process of a torchrun launch: ``WORLD_SIZE``) and the CUDA build of
    torch. Reads no GPU: the caller names it."""
    import torch

    return {"machine/device": f"cuda {name}",
            "machine/gpus": int(os.environ.get("WORLD_SIZE", "1")),
            "machine/cuda": torch.version.cuda}


def gpu_names() -> list[str]:
    """The names of the GPUs this process may use, as runs record them
    (``torch.cuda.get_device_name``): from ``nvidia-smi`` where it can say
    (``CUDA_VISIBLE_DEVICES`` by index or UUID; no CUDA context is made here), else from a
    short process that starts CUDA and asks torch (no nvidia-smi, MIG instances, ROCm, or
    GPUs of several kinds numbered by CUDA's order rather than nvidia-smi's). [] without a
    GPU."""
    names = _smi_names()
    return _torch_names() if names is None else names


def _smi_names() -> list[str] | None:
    """``gpu_names`` from nvidia-smi, or None where it cannot tell them as torch would."""
    import torch

    tool = shutil.which("nvidia-smi")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if tool is None or torch.version.hip is not None or "MIG-" in (visible or ""):
        return None
    try:
        out = subprocess.run([tool, "--query-gpu=index,uuid,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = [[part.strip() for part in line.split(",", 2)] for line in out.splitlines()
            if line.count(",") >= 2]
    if len({name for _, _, name in gpus}) > 1 and \
            os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return None  # CUDA numbers the fastest first, nvidia-smi by bus: ask torch
    if visible is None:
        return [name for _, _, name in gpus]
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    names = [name for want in wanted for index, uuid, name in gpus
             if want in (index, uuid) or (want.startswith("GPU-") and uuid.startswith(want))]
    return names if len(names) == len(wanted) else None


PROBE = ("import torch\n"
         "for i in range(torch.cuda.device_count()):\n"
         "    print(torch.cuda.get_device_name(i))\n")


@lru_cache(maxsize=1)
def _torch_names() -> list[str]:
    """The visible GPUs' names from torch itself, in a short process of its own (once per
    process: this one keeps no CUDA context, which the runs' processes need)."""
    try:
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                             timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def this_machine(device: str) -> dict[str, Any]:
    """The fields a run with config ``device`` ("auto", "cpu", "cuda:1", ...) would record
    on this machine, read without starting CUDA: on a GPU (``gpu_names``; "auto" picks
    one where there is one) the GPU's fields, else the host's and the device's type."""
    import torch

    fields = {**host(), "machine/device": device.split(":")[0], "machine/torch": torch.__version__}
    if device == "auto" or device.startswith("cuda"):
        names = gpu_names()
        index = int(device.split(":")[1]) if device.startswith("cuda:") else 0
        if index < len(names) and torch.version.cuda is not None:
            return {**fields, **gpu_fields(names[index])}
        fields["machine/device"] = "cpu" if device == "auto" else "cuda (no GPU visible)"
    return fields


def on_gpu(record: dict[str, Any]) -> bool:
    """Whether a machine record is a GPU run's."""
    return str(record.get("machine/device", "cpu")).startswith("cuda")


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


def speed_fields(record: dict[str, Any]) -> tuple[str, ...]:
    """The fields that set a run's speed: ``GPU`` for a GPU run, else ``KEY``."""
    return GPU if on_gpu(record) else KEY


def speed_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """How two machine records differ in what sets a run's speed ("field: a / b"): the
    GPU's fields when either ran on a GPU, else the host's and the device. A field one
    of them lacks (a record of an older pods) is not compared."""
    fields = GPU if on_gpu(a) or on_gpu(b) else KEY
    return differences(a, b, [k for k in fields if k in a and k in b])


def check_same_machine(recorded: dict[str, dict[str, Any]], here: dict[str, Any]) -> None:
    """Refuse to train more runs of a comparison on a host unlike its runs' so far.

    ``recorded``: each run's last machine record, by run name (finished runs, and stopped
    ones that would resume here); runs made before pods recorded machines are not in it.
    ``here``: what the next runs will record (``this_machine``). CPU runs must share the
    host (``HOST``), GPU runs the GPU (``GPU``: the host's CPU may differ); a CPU run and
    a GPU run never match (``speed_differences``)."""
    for run, record in recorded.items():
        diff = speed_differences(record, here)
        if diff:
            raise ValueError(
                f"{run} was made on another machine ({'; '.join(diff)}; theirs / this one's): "
                "runs timed on both would not be comparable. Run the rest on a machine like "
                "the finished runs', or compare into a new --out folder; --any-machine adds "
                "the runs anyway (the summary then names the machines).")
