"""What both wrapper commands share: the tools they run, the uid a program gets, its
resource limits, its interpreter command line and environment, and the run-time warnings
where this machine weakens a guarantee.

The program's uid. As root, every sandbox runs as its own uid, ``UID_BASE`` plus the
kernel thread id of the thread that runs it (``threading.get_native_id()``): thread ids
are unique across all processes of the machine while they live, and the calling thread
waits until the sandbox is gone, so no two live sandboxes share a uid and RLIMIT_NPROC
counts one sandbox's processes only. The range (``UID_BASE`` + pid_max, at most 2**22)
lies in the block systemd leaves unused (1879048192-2147483647). A thread that holds several
sandboxes open at once (pods.sandbox.pair: a judge beside a solution) gives each its own
slot (``uid_slot``), a further span of 2**22 uids. Without root, each
sandbox has its own user namespace, and the kernel (5.14+, "ucounts") counts RLIMIT_NPROC
per user namespace and uid, so it counts one sandbox's processes (plus its init, added to
the limit) there too.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import pods.sandbox.cgroup as cgroup
from pods.sandbox.rootfs import (
    SYSTEM_DIRS,
    Entry,
    SandboxUnavailable,
    exposed,
    interpreter,
    under,
)

UID_BASE = 0x70000000
OPEN_FILES = 256
NPROC_PER_USERNS = (5, 14)  # the kernel that counts RLIMIT_NPROC per user namespace
INSTALL = {
    "bwrap": "install bubblewrap (apt-get install bubblewrap / dnf install bubblewrap)",
    "unshare": "install util-linux (apt-get install util-linux: unshare, setpriv, prlimit, "
               "mount, umount, pivot_root)",
}
IN_SANDBOX = ("sh", "setpriv", "prlimit", "mount", "umount")  # run after the root changed
_warned: set[str] = set()
_warned_lock = threading.Lock()


MAX_PROCESSES = 32  # per program, threads included; see the trust boundary
DEFAULT_OUTPUT_LIMIT = 1 << 20  # bytes kept per stream (expected outputs can exceed 64 KiB)


@dataclass(frozen=True)
class Limits:
    """What one sandboxed program may use; checked when made."""

    timeout_s: float = 2.0  # wall-clock seconds from the sandbox's start (RLIMIT_CPU backs
    # it up); for a pods.sandbox.pair Channel, the whole conversation's CPU-time backstop
    memory_mb: int = 512  # RLIMIT_AS of each of the program's processes, MiB
    disk_mb: int = 64  # size of each private tmpfs (working folder, /tmp) and largest file
    max_processes: int = MAX_PROCESSES  # RLIMIT_NPROC: its processes and threads together
    output_limit: int = DEFAULT_OUTPUT_LIMIT  # bytes of stdout and of stderr kept by
    # run_python (the rest is read and dropped); a Channel caps its frames instead

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.memory_mb <= 0 or self.disk_mb <= 0:
            raise ValueError("timeout_s, memory_mb and disk_mb must be positive")
        if self.output_limit < 0:
            raise ValueError(f"output_limit={self.output_limit} must be >= 0 (bytes kept)")


def is_root() -> bool:
    return os.geteuid() == 0


PID_SPAN = 1 << 22  # the largest pid_max: thread ids stay below it
UID_SLOTS = 4  # sandboxes one thread may hold open at once (UID_BASE + 4 spans < 2**31)
_slot = threading.local()


def sandbox_uid() -> int:
    """The uid (and gid) of a program started from this thread when the caller is root."""
    return UID_BASE + getattr(_slot, "value", 0) * PID_SPAN + threading.get_native_id()


@contextmanager
def uid_slot(slot: int):
    """Sandboxes started in this block by this thread get the uids of ``slot`` (0 to
    UID_SLOTS - 1), so that one thread can hold sandboxes of different uids open at once."""
    if not 0 <= slot < UID_SLOTS:
        raise ValueError(f"uid slot {slot} is not in 0..{UID_SLOTS - 1}")
    before, _slot.value = getattr(_slot, "value", 0), slot
    try:
        yield
    finally:
        _slot.value = before


def tools(mode: str) -> dict[str, str]:
    """Absolute paths of the executables ``mode`` needs; SandboxUnavailable if one is missing
    or, for those run inside the sandbox, lives outside the system folders it sees."""
    names = ["prlimit", "setpriv", "sh"]
    names += ["bwrap"] if mode == "bwrap" else ["unshare", "mount", "umount", "pivot_root"]
    found = {name: shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
             for name in names}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        hint = INSTALL["bwrap" if "bwrap" in missing else "unshare"]
        raise SandboxUnavailable(f"{mode}: {', '.join(missing)} not found on PATH; {hint}")
    outside = [path for name, path in found.items() if name in IN_SANDBOX
               and not any(under(os.path.realpath(path), d) for d in SYSTEM_DIRS)]
    if outside:
        raise SandboxUnavailable(f"{mode}: {', '.join(outside)} lie outside "
                                 f"{', '.join(SYSTEM_DIRS)}, the only folders the sandbox "
                                 f"sees; install util-linux from the system's packages")
    return found


@cache
def tool_output(path: str, flag: str) -> str:
    """What ``path flag`` prints (``--help``, ``--version``), once per process; "" if it
    cannot run: what a wrapper's options depend on."""
    try:
        return subprocess.run([path, flag], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def python_argv(site_packages: bool = False) -> list[str]:
    """The interpreter in isolated mode (-I: no PYTHON* variables, user site or script dir on
    sys.path), no .pyc writes, UTF-8 stdio whatever the locale."""
    return [interpreter(site_packages), "-I", "-B", "-X", "utf8", "main.py"]


def sandbox_env(workdir: str, site_packages: bool = False) -> dict[str, str]:
    """The program's whole environment: never the caller's (no secrets leak through it)."""
    bindir = os.path.dirname(interpreter(site_packages))
    return {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}


def drop_privileges(paths: dict[str, str]) -> list[str]:
    """setpriv: as root, the sandbox's own uid and gid; no capabilities; no_new_privs."""
    uid = str(sandbox_uid())
    ids = ["--reuid", uid, "--regid", uid, "--clear-groups"] if is_root() else []
    return [paths["setpriv"], *ids, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
            "--"]


def processes(limits: Limits) -> int:
    """The program's processes and threads: ``max_processes`` where a memory group bounds
    the sandbox's total (pods.sandbox.cgroup), else 1, so that RLIMIT_AS bounds it."""
    return limits.max_processes if cgroup.parent() is not None else 1


def rlimits(paths: dict[str, str], limits: Limits, helpers: int = 0) -> list[str]:
    """prlimit for the interpreter. ``helpers``: the sandbox's own processes that the kernel
    counts with the program's (its init, without root), added to RLIMIT_NPROC."""
    cpu = math.ceil(limits.timeout_s) + 1  # a backstop: the wall deadline comes first
    size = limits.disk_mb << 20
    return [paths["prlimit"], f"--as={limits.memory_mb << 20}", f"--cpu={cpu}:{cpu + 1}",
            f"--fsize={size}", f"--nofile={OPEN_FILES}",
            f"--nproc={processes(limits) + helpers}", "--core=0", "--"]


def warn_once(key: str, message: str) -> None:
    """A RuntimeWarning the first time ``key`` comes up in this process."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def kernel_version() -> tuple[int, int]:
    release = os.uname().release.split(".")
    try:
        return int(release[0]), int("".join(c for c in release[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def check_guarantees(mode: str, plan: tuple[Entry, ...]) -> None:
    """Warn (once) where this machine or caller weakens a guarantee without risking the
    user's data (nothing of the host is writable in any case)."""
    if not is_root() and kernel_version() < NPROC_PER_USERNS:
        warn_once("nproc", f"pods.sandbox ({mode}): kernel {os.uname().release} counts "
                  f"RLIMIT_NPROC per uid, not per user namespace (5.14+): without root, "
                  f"concurrent sandboxes share one process limit and may starve each other")
    for folder in exposed(plan):
        warn_once(f"exposed:{folder}", f"pods.sandbox ({mode}): the caller's folder {folder} "
                  f"lies inside a folder the programs see (read-only): they can read it; "
                  f"keep data and the project outside /usr and the interpreter's folders")
