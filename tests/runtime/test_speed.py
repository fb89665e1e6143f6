"""pods.runtime.speed: the fused AdamW computes what the per-tensor loop does, and glibc keeps
freed memory for reuse once asked to (and not when told to leave it alone)."""

import subprocess
import sys

import pytest
import torch

from pods.runtime.speed import adamw

needs_glibc = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="mallopt is glibc's (Linux)")


def _steps(fused: bool | None) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    if fused is None:
        opt = adamw(model.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.99),
                                weight_decay=0.1, fused=fused)
    x = torch.randn(32, 8)
    for _ in range(5):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_adamw_is_fused_on_cpu_and_steps_as_the_loop_does():
    params = [torch.nn.Parameter(torch.randn(3))]
    assert adamw(params, lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0).defaults["fused"]
    for ours, loop in zip(_steps(None), _steps(False), strict=True):
        torch.testing.assert_close(ours, loop, rtol=1e-5, atol=1e-6)
    assert not torch.equal(_steps(None)[0], _steps(False)[0] * 0)  # the steps moved weights


def test_adamw_falls_back_where_the_device_has_no_fused_kernel():
    params = [torch.nn.Parameter(torch.randn(3, device="meta"))]
    assert not adamw(params, lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0).defaults["fused"]


WHERE = """
import ctypes, sys, torch
from pods.runtime.speed import keep_freed_memory
print(keep_freed_memory(), file=sys.stderr)
libc = ctypes.CDLL("libc.so.6")
libc.sbrk.restype, libc.sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
x = torch.empty(2**24)  # 64 MB: above glibc's own mmap threshold (32 MB at most)
print("heap" if x.data_ptr() < libc.sbrk(0) else "mapping")  # below the program break?
"""


def _where(env: dict[str, str]) -> tuple[str, str]:
    import os

    out = subprocess.run([sys.executable, "-c", WHERE], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True)
    return out.stdout.strip(), out.stderr.strip().splitlines()[-1]


@needs_glibc
def test_keep_freed_memory_puts_large_tensors_in_the_heap_where_freed_pages_stay():
    # a mapping of its own is unmapped when the tensor is freed, and the next update pays a
    # page fault for each of its pages again; a block of the heap is kept for reuse
    assert _where({}) == ("heap", "True")
    assert _where({"PODS_KEEP_FREED_MEMORY": "0"}) == ("mapping", "False")
