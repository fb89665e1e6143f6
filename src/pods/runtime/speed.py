"""Settings that make the update faster without changing what it computes.

    adamw(params, lr, betas, weight_decay)   torch's AdamW, its fused kernel where the
                                             parameters' device has one (CPU, CUDA, MPS)
    keep_freed_memory()                      glibc keeps freed memory for reuse (Linux)

Measured by ``benchmarks/update/update_profile.py`` (results page, "Where the update's time goes"):
on SmolLM2-135M and 2 CPU cores the unfused AdamW step spends about 0.35 s in some 1,400
small per-tensor operations where the fused kernel takes one pass, and glibc hands every
tensor over 32 MB (the log-probs' logits chunks, activations of a few rows) back to the
kernel when it is freed, so the next update takes each page again as a fresh page fault.
"""

from __future__ import annotations

import ctypes
import os
import sys

import torch

# glibc mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 2**30  # only blocks above 1 GiB get their own mapping (glibc: 32 MiB at most
# by its own adaptive rule), so freed activations stay in the heap for the next update
TRIM_THRESHOLD = 2**31 - 1  # and the heap's free top (up to 2 GiB, mallopt takes a C int) is
# not handed back between updates
OPT_OUT = "PODS_KEEP_FREED_MEMORY"  # "0": leave the allocator as it is
FUSED_DEVICES = {"cpu", "cuda", "mps"}  # torch's fused AdamW kernels (torch >= 2.4 for cpu)


def adamw(params, lr: float, betas: tuple[float, float],
          weight_decay: float) -> torch.optim.Optimizer:
    """``torch.optim.AdamW`` with ``fused=True`` where every parameter lives on a device
    with the fused kernel; the same arithmetic as the per-tensor loop, in one pass over the
    parameters (tests/runtime/test_speed.py compares the two). Elsewhere the default."""
    params = list(params)
    kinds = {p.device.type for p in params}
    fused = bool(params) and kinds <= FUSED_DEVICES and all(p.is_floating_point() for p in params)
    return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay,
                             fused=fused or None)


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (``mallopt``) so that memory freed by one update
    is reused by the next instead of being unmapped and faulted in again. The process's
    resident memory then stays near its peak between steps, as it does under the jemalloc
    or tcmalloc that CPU training guides preload. True where it was set; False off glibc
    (macOS, musl), or with ``PODS_KEEP_FREED_MEMORY=0`` in the environment."""
    if os.environ.get(OPT_OUT, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
