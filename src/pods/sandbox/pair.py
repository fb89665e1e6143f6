"""Sandboxed programs that talk: each runs in its own sandbox (the same isolation as
``run_python``: fresh PID, mount, network, IPC and UTS namespaces, rlimits, as root a uid of
its own: ``slot`` tells apart the sandboxes one thread holds open at once) with its stdin
and stdout as a channel of length-prefixed frames to this process, which relays between
them (two programs never share a pipe, a file, a namespace or a uid).

    with Channel(program_text, Limits(timeout_s=..., memory_mb=...)) as a, Channel(...) as b:
        a.send(frame_bytes)
        relay = Relay([a, b])
        payload = relay.next_frame(a, deadline)   # bytes, or None: ended, garbage, deadline

A frame is a 4-byte big-endian length and that many bytes; the relay does not parse them.
A program that announces a frame over ``max_frame`` bytes (or more than ``max_frame`` bytes
of frames not yet taken: this process never holds more), closes its stdout or misses the
deadline gets None (its sandbox is then to be killed: leave the ``with``). stderr is
drained and discarded but for its last bytes (``stderr_tail``), so a chatty program never
blocks. The caller sets deadlines per exchange; ``limits.timeout_s`` here is only the
CPU-time backstop (RLIMIT_CPU) of the whole program, so give it the whole conversation's
time (``limits.output_limit`` does not apply: ``max_frame`` bounds what is held).
"""

from __future__ import annotations

import os
import secrets
import selectors
import struct
import subprocess
import time
from collections import deque
from contextlib import ExitStack

from pods.sandbox.cgroup import contained
from pods.sandbox.commands import uid_slot
from pods.sandbox.isolation import BUILDERS, CODE_ON_STDIN, Limits, resolve, sandbox_env
from pods.sandbox.process import CHUNK, TAIL, kill_sandbox, memory_file

HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME = 1 << 24


class Channel:
    """One sandboxed program whose stdin/stdout carry frames; a context manager that kills
    the whole sandbox on exit."""

    def __init__(self, program: str, limits: Limits, *, isolation: str | None = None,
                 max_frame: int = DEFAULT_MAX_FRAME, slot: int = 0) -> None:
        self.mode, self.max_frame = resolve(isolation), max_frame
        self._program = program.encode(errors="replace")
        self._limits, self._slot = limits, slot
        self.inbox: deque[bytes] = deque()
        self.stderr_tail, self.ended = b"", False
        self._outbox, self._buffer = bytearray(), bytearray()
        self._stack = ExitStack()

    def __enter__(self) -> Channel:
        with ExitStack() as stack:
            stack.push(self)  # kill and count down if starting fails
            workdir = f"/tmp/pods-{secrets.token_hex(6)}"
            on_stdin = CODE_ON_STDIN[self.mode]
            code_fd = -1 if on_stdin else self._stack.enter_context(memory_file(self._program))
            with uid_slot(self._slot):  # as root, its own uid beside this thread's others
                argv = BUILDERS[self.mode](code_fd, len(self._program), workdir,
                                           self._limits)
            group = self._stack.enter_context(contained(self._limits.memory_mb))
            self.proc = subprocess.Popen(
                argv if group is None else group.wrap(argv), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=sandbox_env(workdir), cwd="/", pass_fds=() if on_stdin else (code_fd,),
                start_new_session=True)
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                os.set_blocking(pipe.fileno(), False)
            if on_stdin:
                self._outbox += self._program
            stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None:
            kill_sandbox(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                pipe.close()
        self._stack.close()

    def send(self, payload: bytes) -> None:
        """Queue one frame for the program's stdin (written as the relay runs)."""
        self._outbox += HEADER.pack(len(payload)) + payload

    def _write(self) -> None:
        try:
            written = os.write(self.proc.stdin.fileno(), self._outbox[:CHUNK])
        except BlockingIOError:
            return
        except (BrokenPipeError, OSError):
            self._outbox.clear()
            self.ended = True
            return
        del self._outbox[:written]

    def _read_stdout(self) -> None:
        chunk = _read(self.proc.stdout.fileno())
        if chunk == b"":
            self.ended = True
        self._buffer += chunk or b""
        while len(self._buffer) >= HEADER.size and not self.ended:
            (size,) = HEADER.unpack_from(self._buffer)
            if size > self.max_frame or sum(map(len, self.inbox)) + size > self.max_frame:
                self.ended = True  # garbage or a flood: nothing more is read from it
            elif len(self._buffer) >= HEADER.size + size:
                self.inbox.append(bytes(self._buffer[HEADER.size:HEADER.size + size]))
                del self._buffer[:HEADER.size + size]
            else:
                break

    def _read_stderr(self) -> bool:
        chunk = _read(self.proc.stderr.fileno())
        self.stderr_tail = (self.stderr_tail + (chunk or b""))[-TAIL:]
        return chunk != b""


def _read(fd: int) -> bytes | None:
    """Up to CHUNK bytes; b"" at EOF; None if nothing is there yet."""
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return None


class Relay:
    """Moves bytes between this process and several channels until a frame arrives."""

    def __init__(self, channels: list[Channel]) -> None:
        self.channels = channels
        self._stderr_open = {id(c): True for c in channels}

    def next_frame(self, channel: Channel, deadline: float) -> bytes | None:
        """The next frame from ``channel``, pumping every channel's pipes meanwhile; None
        if it ended (exit, closed stdout, an oversized frame) or ``deadline`` passed."""
        while not channel.inbox:
            if channel.ended:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._pump(left)
        return channel.inbox.popleft()

    def _pump(self, timeout: float) -> None:
        with selectors.DefaultSelector() as sel:
            for c in self.channels:
                if not c.ended:
                    sel.register(c.proc.stdout, selectors.EVENT_READ, (c, c._read_stdout))
                    if c._outbox:
                        sel.register(c.proc.stdin, selectors.EVENT_WRITE, (c, c._write))
                if self._stderr_open[id(c)]:
                    sel.register(c.proc.stderr, selectors.EVENT_READ, (c, c._read_stderr))
            for key, _ in sel.select(timeout):
                c, act = key.data
                if act == c._read_stderr:
                    self._stderr_open[id(c)] = c._read_stderr()
                else:
                    act()
