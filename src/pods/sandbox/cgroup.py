"""One memory control group per sandbox: the program and everything it starts share one
bound, ``memory_mb`` for the whole sandbox (pages of its tmpfs included: the kernel charges
them to the group of the process that wrote them).

Where the group is made (``parent``, found once per process):
  * ``$PODS_SANDBOX_CGROUP``: a cgroup folder the caller may create groups in (the cgroup v1
    memory controller, or cgroup v2 with ``memory`` in its ``cgroup.subtree_control``, as a
    systemd unit with ``Delegate=yes`` gives one);
  * else the caller's own cgroup of the v1 memory controller, where the caller may write
    (root on a machine that mounts it, as these do);
  * else the caller's own cgroup v2, if ``memory`` is already in its subtree_control and it
    is writable.
Nothing is made elsewhere, and only groups made here are removed. Each sandbox's group,
``pods-sandbox-<pid>-<random>``, is made before its wrapper starts; the wrapper command
enters it (``sh`` writes its pid into ``cgroup.procs`` and execs the wrapper, so the
namespace and the program are born inside), and it is removed once the sandbox is gone,
after a timeout or a kill too. Over the bound the kernel's out-of-memory killer ends a
process of the group (never one outside it), and the run's status is ``memory``.

Without a group (no writable memory cgroup), the sandbox's total is bounded by allowing it
one process (RLIMIT_NPROC: no fork, no threads; ``pods.sandbox.commands.rlimits``), whose
RLIMIT_AS is ``memory_mb``; ``bound()`` says which bound is in force.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ENV_VAR = "PODS_SANDBOX_CGROUP"
SH = "/bin/sh"
ENTER = 'echo $$ > "$0" && exec "$@"'  # sh -c ENTER <cgroup.procs> <wrapper argv...>
REMOVE_WAIT_S = 2.0


@dataclass(frozen=True)
class Parent:
    """The cgroup folder sandbox groups are made in."""

    path: Path
    version: int  # 1: the v1 memory controller; 2: the unified hierarchy


def own_cgroups(text: str) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; the unified hierarchy (v2) under ""."""
    found = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                found[controller] = parts[2]
    return found


def cgroup_mounts(text: str) -> list[tuple[str, Path, str, set[str]]]:
    """/proc/self/mountinfo's cgroup mounts: (root, mount point, fstype, super options)."""
    found = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[3], Path(fields[4]), tail[0], set(tail[2].split(","))))
    return found


def find_parent(cgroups: str, mountinfo: str, override: str | None) -> Parent | None:
    """Where this caller may make sandbox groups (module docstring), or None."""
    if override:
        return _override(Path(override))
    own, mounts = own_cgroups(cgroups), cgroup_mounts(mountinfo)
    for root, point, fstype, options in mounts:  # v1: the memory controller's hierarchy
        if fstype == "cgroup" and "memory" in options and "memory" in own:
            path = _inside(point, root, own["memory"])
            if (path / "memory.limit_in_bytes").is_file() and os.access(path, os.W_OK):
                return Parent(path, 1)
    for root, point, fstype, _ in mounts:  # v2, where memory is delegated to children
        if fstype == "cgroup2" and "" in own:
            path = _inside(point, root, own[""])
            if _delegates_memory(path) and os.access(path, os.W_OK):
                return Parent(path, 2)
    return None


def _inside(point: Path, root: str, path: str) -> Path:
    """The folder of cgroup ``path`` under a mount of the hierarchy's ``root`` (one that
    does not exist where the mount does not show the path)."""
    relative = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
    if relative.startswith(".."):
        return point / "pods-not-under-this-mount"
    return point if relative in ("", ".") else point / relative


def _delegates_memory(path: Path) -> bool:
    try:
        return "memory" in (path / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def _override(path: Path) -> Parent:
    if (path / "memory.limit_in_bytes").is_file() and os.access(path, os.W_OK):
        return Parent(path, 1)
    if _delegates_memory(path) and os.access(path, os.W_OK):
        return Parent(path, 2)
    raise ValueError(f"${ENV_VAR}={path} is not a cgroup folder this process can make memory "
                     f"groups in: it needs the v1 memory controller's files, or cgroup v2 "
                     f"with 'memory' in cgroup.subtree_control, and write access; unset it "
                     f"to let pods find one (or fall back to one process per sandbox).")


@cache
def parent() -> Parent | None:
    """This process's parent folder for sandbox groups, found once."""
    try:
        cgroups = Path("/proc/self/cgroup").read_text()
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    return find_parent(cgroups, mountinfo, os.environ.get(ENV_VAR))


def bound() -> str:
    """Which bound on a sandbox's total memory is in force for this caller, in words."""
    found = parent()
    if found is None:
        return ("one process per sandbox (no memory cgroup this caller may write: set "
                f"${ENV_VAR} to a delegated one for programs that fork or start threads)")
    return f"a memory cgroup per sandbox (v{found.version}, under {found.path})"


class Group:
    """One sandbox's memory group, made under ``parent`` with a limit of ``limit_bytes``."""

    def __init__(self, parent: Parent, limit_bytes: int):
        self.version = parent.version
        self.path = parent.path / f"pods-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
        self.path.mkdir()
        try:
            self._limit(limit_bytes)
        except OSError:
            self.path.rmdir()
            raise

    def _limit(self, limit: int) -> None:
        if self.version == 1:
            self._write("memory.limit_in_bytes", limit)
            if (self.path / "memory.memsw.limit_in_bytes").exists():  # no way out to swap
                self._write("memory.memsw.limit_in_bytes", limit)
        else:
            self._write("memory.max", limit)
            if (self.path / "memory.swap.max").exists():
                self._write("memory.swap.max", 0)

    def _write(self, name: str, value: int) -> None:
        (self.path / name).write_text(str(value))

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside this group (before it forks anything)."""
        return [SH, "-c", ENTER, str(self.path / "cgroup.procs"), *argv]

    def oom_killed(self) -> bool:
        """Whether the kernel ended a process of this group for its memory."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            lines = (self.path / name).read_text().splitlines()
        except OSError:
            return False
        counts = dict(line.split()[:2] for line in lines if len(line.split()) >= 2)
        return int(counts.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        """Remove the group once its processes are gone (any left are killed first)."""
        deadline = time.monotonic() + REMOVE_WAIT_S
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
            for pid in self._pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def _pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []


@contextmanager
def contained(memory_mb: int) -> Iterator[Group | None]:
    """A group of ``memory_mb`` MiB for one sandbox, removed on exit; None where this
    caller can make none (``bound()`` says what holds then)."""
    found = parent()
    if found is None:
        yield None
        return
    group = Group(found, memory_mb << 20)
    try:
        yield group
    finally:
        group.remove()
