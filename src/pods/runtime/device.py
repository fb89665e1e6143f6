"""The device a run asks for, by name ("auto", "cpu", "cuda", "cuda:1", "mps")."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    """``torch.device(name)``; "auto" is the GPU when one is visible, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
