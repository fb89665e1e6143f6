"""Run one wrapper command (bwrap or unshare around the program) and supervise it: a wall
deadline, capped output, and a kill of the whole sandbox before returning.

The program text and stdin reach the sandbox as memory files (memfd): nothing is written to
the host's disk. stdout and stderr are drained as they come, keeping at most ``output_limit``
bytes of each and discarding the rest, so a chatty program neither blocks nor grows this
process. No ``preexec_fn`` is used (unsafe with threads): the wrappers set the limits.
"""

from __future__ import annotations

import os
import re
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from pods.sandbox.cgroup import contained
from pods.sandbox.commands import Limits

CHUNK = 1 << 16
TAIL = 4096  # last bytes of stderr kept for classification, even past the output limit
KILL_WAIT_S = 5.0  # bound on waiting for a killed namespace to be torn down
MEMORY_RE = re.compile(rb"\bMemoryError\b|Cannot allocate memory|[Oo]ut of memory|bad_alloc")


@dataclass(frozen=True)
class Outcome:
    """What came back from one sandboxed run, before classification."""

    returncode: int
    stdout: bytes
    stderr: bytes
    stderr_tail: bytes
    timed_out: bool
    truncated: bool
    oom_killed: bool = False  # the sandbox's memory group ended a process (pods.sandbox.cgroup)


def normalise(returncode: int) -> int:
    """The program's return code: bwrap and sh report a child killed by signal N as 128 + N;
    that becomes -N, as subprocess reports signals (an exit(129..192) looks the same)."""
    if 128 < returncode <= 128 + 64:
        return 128 - returncode
    return returncode


def classify(returncode: int, timed_out: bool, stderr_tail: bytes,
             oom_killed: bool = False) -> str:
    """Status from the normalised return code: timeout, memory, killed, error or ok;
    ``memory`` also when the sandbox's memory group ended one of its processes."""
    if timed_out or returncode == -signal.SIGXCPU:
        return "timeout"
    if oom_killed or (returncode != 0 and MEMORY_RE.search(stderr_tail)):
        return "memory"
    if returncode < 0:
        return "killed"
    return "error" if returncode else "ok"


@contextmanager
def memory_file(data: bytes):
    """A file descriptor on an anonymous in-memory file holding ``data``, at offset 0."""
    fd = os.memfd_create("pods-sandbox", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


class _Drain:
    """Reads both pipes until EOF or the deadline, keeping a bounded prefix of each."""

    def __init__(self, proc: subprocess.Popen, limit: int) -> None:
        self.out, self.err = proc.stdout.fileno(), proc.stderr.fileno()
        self.bufs = {self.out: bytearray(), self.err: bytearray()}
        self.limit, self.tail, self.truncated = limit, bytearray(), False

    def run(self, deadline: float) -> bool:
        """Whether both streams reached EOF before the deadline."""
        with selectors.DefaultSelector() as sel:
            for fd in self.bufs:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                for key, _ in sel.select(left):
                    if not self._read(key.fd):
                        sel.unregister(key.fd)
        return True

    def _read(self, fd: int) -> bool:
        chunk = os.read(fd, CHUNK)
        buf = self.bufs[fd]
        room = max(self.limit - len(buf), 0)
        buf += chunk[:room]
        self.truncated |= len(chunk) > room
        if fd == self.err and chunk:
            self.tail = (self.tail + chunk)[-TAIL:]
        return bool(chunk)


def execute(argv_for: Callable[[int], Sequence[str]], code: bytes, stdin: bytes,
            env: Mapping[str, str], limits: Limits, code_on_stdin: bool = False) -> Outcome:
    """Run ``argv_for(code_fd)``, a wrapper command that reads the program from ``code_fd``
    (or, if ``code_on_stdin``, from the start of its stdin, ``stdin`` following), keep
    ``limits.output_limit`` bytes of each stream, and kill its whole sandbox at
    ``limits.timeout_s`` (wall clock from the start). Where a memory group can be made
    (pods.sandbox.cgroup), the wrapper starts inside one of ``limits.memory_mb``."""
    with ExitStack() as stack:
        group = stack.enter_context(contained(limits.memory_mb))  # removed last
        if code_on_stdin:
            code_fd, in_fd = -1, stack.enter_context(memory_file(code + stdin))
        else:
            code_fd = stack.enter_context(memory_file(code))
            in_fd = stack.enter_context(memory_file(stdin))
        deadline = time.monotonic() + limits.timeout_s
        argv = list(argv_for(code_fd))
        proc = subprocess.Popen(
            argv if group is None else group.wrap(argv), stdin=in_fd, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=dict(env), cwd="/",
            pass_fds=() if code_on_stdin else (code_fd,), start_new_session=True)
        timed_out = True
        try:
            drain = _Drain(proc, limits.output_limit)
            timed_out = not (drain.run(deadline) and _wait(proc, deadline))
        finally:
            if timed_out or proc.poll() is None:
                kill_sandbox(proc)
            proc.stdout.close()
            proc.stderr.close()
        oom = group is not None and group.oom_killed()
    return Outcome(normalise(proc.returncode), bytes(drain.bufs[drain.out]),
                   bytes(drain.bufs[drain.err]), bytes(drain.tail), timed_out, drain.truncated,
                   oom)


def _wait(proc: subprocess.Popen, deadline: float) -> bool:
    try:
        proc.wait(max(deadline - time.monotonic(), 0))
        return True
    except subprocess.TimeoutExpired:
        return False


def kill_sandbox(proc: subprocess.Popen) -> None:
    """SIGKILL the namespace's init (the wrapper's child), so the kernel kills every process
    of the PID namespace, then the wrapper's process group; return once they are all gone."""
    opened = (_pidfd(proc.pid, pid) for pid in _children(proc.pid))
    pidfds = [fd for fd in opened if fd is not None]
    for fd in pidfds:
        _signal(fd)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for fd in pidfds:
        poller = select.poll()  # a pidfd is readable once its process exited, after the
        poller.register(fd, select.POLLIN)  # kernel killed the rest of the namespace
        poller.poll(KILL_WAIT_S * 1000)
        os.close(fd)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _pidfd(parent: int, pid: int) -> int | None:
    """A pidfd on ``pid`` if it is still the child of ``parent`` once opened (so the pid was
    not recycled in between: the wrappers start exactly one child)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    if pid in _children(parent):
        return fd
    os.close(fd)
    return None


def _signal(fd: int) -> None:
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass
