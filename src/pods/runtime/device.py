"""The device a run asks for, by name ("auto", "cpu", "cuda", "cuda:1", "mps"), and what
the process has held on it at most."""

from __future__ import annotations

import resource
import sys

import torch


def resolve_device(name: str) -> torch.device:
    """``torch.device(name)``; "auto" is the GPU when one is visible, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """Peak resident memory of this process (and peak GPU memory on CUDA), in MB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
    out = {"mem/peak_rss_mb": rss / (2**20 if sys.platform == "darwin" else 2**10)}
    if device.type == "cuda":
        out["mem/peak_gpu_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out
