"""The device a run asks for, by name ("auto", "cpu", "cuda", "cuda:1", "mps"), checked
before anything loads, and what the process has held on it at most."""

from __future__ import annotations

import resource
import sys

import torch

TRAINS_ON = ("cpu", "cuda", "mps")  # the device types pods trains and evaluates on
CUDA_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cu128; " \
             "pytorch.org/get-started gives the command for your CUDA version"


def resolve_device(name: str) -> torch.device:
    """``torch.device(name)``; "auto" is the GPU when one is visible, else the CPU. A
    device this torch or machine lacks is a ValueError that says which devices exist, or
    what to install, raised before any model loads."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:  # torch: "Expected one of cpu, cuda, ipu, ... device type"
        device = None
    if device is None or device.type not in TRAINS_ON:
        raise ValueError(f"unknown device {name!r}; pods runs on auto, cpu, cuda, cuda:N or "
                         f"mps, and this machine has {', '.join(available())}.")
    problem = _missing(device)
    if problem:
        raise ValueError(problem)
    return device


def available() -> list[str]:
    """The devices of this machine, as --device names them."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        names.append("mps")
    return names


def _missing(device: torch.device) -> str | None:
    """Why ``device`` (a type pods runs on) is not here, or None."""
    if device.type == "cuda" and torch.version.cuda is None and torch.version.hip is None:
        return f"--device {device} needs a CUDA build of torch, and this one " \
               f"({torch.__version__}) was built without CUDA: install one ({CUDA_TORCH}), " \
               f"or use --device cpu (or auto)."
    if device.type == "cuda" and not torch.cuda.is_available():
        return f"--device {device}: this torch has CUDA {torch.version.cuda} but sees no GPU " \
               f"(check nvidia-smi and CUDA_VISIBLE_DEVICES), or use --device cpu (or auto)."
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        return f"--device {device}: this machine has {', '.join(available())}."
    if device.type == "mps" and not torch.backends.mps.is_available():
        return f"--device mps: this machine has no Apple GPU that torch can use; it has " \
               f"{', '.join(available())}."
    return None


def device_notes(name: str, device: torch.device, written_for_gpu: bool) -> list[str]:
    """The lines a run logs about its device: which one ``auto`` chose and why, and a
    warning when a config written for a GPU runs on a CPU."""
    notes = []
    if name == "auto" and device.type == "cuda":
        notes.append(f"device: auto chose {device} ({torch.cuda.get_device_name(device)})")
    elif name == "auto":
        why = "this torch was built without CUDA" if torch.version.cuda is None and \
            torch.version.hip is None else "no GPU is visible"
        notes.append(f"device: auto chose {device} ({why})")
    if written_for_gpu and device.type == "cpu":
        notes.append("warning: this config is written for a GPU (written_for_gpu: true) and "
                     "runs on the CPU, where it makes far fewer steps in the same budget and "
                     "its results are not the GPU's; set written_for_gpu false to run it "
                     "here knowingly.")
    return notes


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """Peak resident memory of this process (and peak GPU memory on CUDA), in MB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
    out = {"mem/peak_rss_mb": rss / (2**20 if sys.platform == "darwin" else 2**10)}
    if device.type == "cuda":
        out["mem/peak_gpu_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out
