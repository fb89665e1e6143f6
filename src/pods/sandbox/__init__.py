"""Run untrusted, model-written Python programs, each in its own sandboxed process.

    from pods.sandbox import Limits, run_python
    result = run_python(code, stdin="", limits=Limits(timeout_s=2.0, memory_mb=512))
    result.status      # "ok", "error", "timeout", "memory" or "killed"
    result.stdout, result.stderr, result.returncode

Every call starts the base interpreter (``sys._base_executable -I``: the standard library,
no virtual environment, no PYTHON* variables) in fresh Linux namespaces on a minimal
read-only root, through bubblewrap (``isolation="bwrap"``) or util-linux unshare
(``"unshare"``); ``"auto"`` (the default, or $PODS_SANDBOX) takes the first that works
here, probed once per process. There is no unisolated or weaker mode: where neither can
build that root, calls raise SandboxUnavailable saying what to install or enable.

Trust boundary (docs/guides/sandbox.md has it per mode and caller). Guarded, in both modes,
for root and non-root callers:
  * files: the program's / is a read-only tmpfs holding only /usr, /bin, /sbin, /lib*, two
    files of /etc, the base interpreter's executable and lib folder (pods.sandbox.rootfs),
    its own /proc, a minimal /dev and private size-limited tmpfs /tmp and /dev/shm
    (``disk_mb``, gone with the sandbox) holding its working folder and main.py. Home,
    /root, /run, /var, /srv, /mnt, /media, /opt, the run folder, data files, the caller's
    working folder and every host UNIX socket do not exist there; a caller's folder inside
    a bound one is covered by an empty tmpfs. Nothing of the host is writable
  * network: an empty network namespace (its own loopback only; abstract UNIX sockets
    belong to the network namespace, so the host's are out of reach too)
  * time: the program and everything it started are SIGKILLed at ``timeout_s`` of wall time
    (the PID namespace: its init dies, the kernel kills the rest, setsid daemons included);
    the call returns within ``timeout_s + TIMEOUT_SLACK_S``; RLIMIT_CPU is a backstop
  * memory: ``memory_mb`` for the whole sandbox (its processes and tmpfs pages) by a
    memory cgroup of its own where the caller can make one (pods.sandbox.cgroup), else by
    one process per sandbox; RLIMIT_AS of ``memory_mb`` per process in either case; output
    drained and capped at ``output_limit`` bytes per stream, so the caller does not grow
  * processes: RLIMIT_NPROC of ``max_processes`` (threads included) counted per sandbox:
    as root each sandbox runs as a uid of its own (pods.sandbox.commands says how it is
    unique across processes), else in a user namespace of its own (kernel 5.14+ counts
    per user namespace; older kernels get a warning), so sandboxes never starve each other
  * the caller: not visible (own /proc of the PID namespace), cannot be signalled or read;
    the environment is a fixed minimal one, never the caller's (no secrets)
  * privileges: no capabilities, no_new_privs; as root a fresh unprivileged uid
Not guarded: what the minimal root itself shows (the system's /usr, the base interpreter's
own site-packages), CPU and memory bandwidth shared with other programs, kernel exploits
and the kernel surface (user namespaces stay usable inside, except with bwrap 0.8+ run
without root), timing side channels; without a memory cgroup, a sandbox's tmpfs pages
(``disk_mb`` in each of its 2 private tmpfs, in RAM) beside its one process.

The interpreter keeps ``site`` (so ``exit()``/``quit()`` exist, as model-written programs
expect); ``-S`` would save ~3 ms a run but drop them. ``site_packages=True`` runs the
caller's ``sys.executable`` with its environment's packages (that folder bound read-only).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pods.sandbox.commands import DEFAULT_OUTPUT_LIMIT, MAX_PROCESSES
from pods.sandbox.isolation import (
    BUILDERS,
    CODE_ON_STDIN,
    ENV_VAR,
    MODES,
    Limits,
    SandboxUnavailable,
    resolve,
    sandbox_env,
    unusable_reason,
)
from pods.sandbox.process import classify, execute

__all__ = ["DEFAULT_LIMITS", "DEFAULT_OUTPUT_LIMIT", "ENV_VAR", "MAX_PROCESSES", "MODES",
           "TIMEOUT_SLACK_S", "Limits", "RunResult", "SandboxUnavailable", "available_modes",
           "default_workers", "run_many", "run_python"]

TIMEOUT_SLACK_S = 2.0  # a call returns within timeout_s + this (typically ~0.05 s)
DEFAULT_LIMITS = Limits()  # 2 s, 512 MiB per process, 64 MiB tmpfs, 32 processes, 1 MiB out


@dataclass(frozen=True)
class RunResult:
    """One program's run. ``returncode``: the program's exit status, or -N if a signal N
    ended it (-9 after a timeout); ``truncated``: output past ``output_limit`` was dropped."""

    status: str
    stdout: str
    stderr: str
    returncode: int
    truncated: bool = False
    seconds: float = 0.0
    isolation: str = ""


def run_python(code: str, stdin: str | bytes = "", limits: Limits = DEFAULT_LIMITS, *,
               isolation: str | None = None, site_packages: bool = False) -> RunResult:
    """Run ``code`` as a Python program with ``stdin`` within ``limits`` (``Limits``: wall
    time, memory, disk, processes, output kept); thread-safe.

    Status: ``timeout`` if the wall deadline passed (or RLIMIT_CPU's SIGXCPU); ``memory`` if
    it failed with MemoryError (or another out-of-memory message) in stderr; ``killed`` if a
    signal ended it; ``error`` for a non-zero exit (an exception: traceback in stderr);
    ``ok`` otherwise. ``isolation``: "auto", "bwrap" or "unshare" (default $PODS_SANDBOX or
    auto). ``site_packages``: run the caller's interpreter with its packages (its
    environment folder visible, read-only) instead of the base interpreter and its standard
    library. Raises SandboxUnavailable if no isolation works here."""
    mode = resolve(isolation)
    start = time.monotonic()
    workdir = f"/tmp/pods-{secrets.token_hex(6)}"
    stdin_bytes = stdin.encode(errors="replace") if isinstance(stdin, str) else stdin
    program = code.encode(errors="replace")
    out = execute(lambda fd: BUILDERS[mode](fd, len(program), workdir, limits,
                                            site_packages=site_packages),
                  program, stdin_bytes, sandbox_env(workdir, site_packages), limits,
                  CODE_ON_STDIN[mode])
    return RunResult(classify(out.returncode, out.timed_out, out.stderr_tail, out.oom_killed),
                     out.stdout.decode(errors="replace"), out.stderr.decode(errors="replace"),
                     out.returncode, out.truncated, time.monotonic() - start, mode)


def default_workers() -> int:
    """Programs to run at once: the CPUs this process may use."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:
        return os.cpu_count() or 1


def run_many(codes: Iterable[str], stdins: Iterable[str | bytes] | None = None, *,
             workers: int | None = None, **options) -> list[RunResult]:
    """``[run_python(code, stdin, **options) ...]`` in order, ``workers`` at a time
    (``options``: ``limits``, ``isolation``, ``site_packages``)."""
    codes = list(codes)
    stdins = [""] * len(codes) if stdins is None else list(stdins)
    if len(stdins) != len(codes):
        raise ValueError(f"{len(codes)} programs but {len(stdins)} stdins")
    with ThreadPoolExecutor(max(workers or default_workers(), 1)) as pool:
        pairs = zip(codes, stdins, strict=True)
        return list(pool.map(lambda pair: run_python(*pair, **options), pairs))


def available_modes() -> list[str]:
    """The isolation modes that work here (each probed once)."""
    return [mode for mode in MODES if unusable_reason(mode) is None]
