"""Each run of a comparison in a fresh process (``in_fresh_process``), stopped with the
comparison that started it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pods.config import TrainConfig

__all__ = ["in_fresh_process"]


def in_fresh_process(train_fn: Callable[[TrainConfig], Any]) -> Callable[[TrainConfig], Any]:
    """``train_fn`` (a module-level function, or a partial of one) run in a new process at
    each call, which returns its result or raises its exception. What a run holds
    (weights, optimizer, vLLM's KV cache, threads) is released when it ends: in one
    process it was not, and a comparison of SmolLM2 runs on 24 GB ran out of memory in
    its second run (the first left 7 GB behind). Each process imports pods again, about 5 s.
    On Linux the run gets SIGINT if this process dies (``kill`` of `pods compare`), and
    stops as on Ctrl-C, with a checkpoint; else it would train on, orphaned, beside
    the next `pods compare` (a 2-core machine ran two seeds at once that way)."""
    def run(config: TrainConfig) -> Any:
        spawn = multiprocessing.get_context("spawn")  # nothing inherited from this process
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn,
                                 initializer=_stop_with_parent) as pool:
            return pool.submit(_while_parent_lives, train_fn, config).result()
    return run


_PARENT: int | None = None  # in a spawned run: the pid of the comparison that started it


def _while_parent_lives(train_fn: Callable[[TrainConfig], Any], config: TrainConfig) -> Any:
    """``train_fn(config)`` in the spawned process; if the comparison died meanwhile (its
    SIGINT stopped the run), the process ends here, instead of waiting, as the pool's
    worker would, for work that will never come."""
    try:
        return train_fn(config)
    finally:
        if _PARENT is not None and os.getppid() != _PARENT:
            os._exit(130)  # 128 + SIGINT, as a shell reports a Ctrl-C


def _stop_with_parent() -> None:
    """Ask Linux to send this process SIGINT when its parent dies (prctl PR_SET_PDEATHSIG);
    elsewhere nothing. SIGINT is made Python's own again first: a comparison started in
    the background by a script (``nohup pods compare ... &``) starts with it ignored, and
    its runs would inherit that and train on."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    global _PARENT
    _PARENT = os.getppid()
    signal.signal(signal.SIGINT, signal.default_int_handler)

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGINT), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent died before the call: stop now
        os.kill(os.getpid(), signal.SIGINT)
