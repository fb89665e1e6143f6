"""Ctrl-C during a run: stop at once where nothing is lost, finish first where a stop would
lose work.

Most of a step (generating, scoring, selecting) and every evaluation can be dropped and
redone: Ctrl-C there raises KeyboardInterrupt at once, and the run rewinds the step under
way and checkpoints the last complete one (``pods.train.loop``). Two places cannot be
dropped without loss, so Ctrl-C inside them is held until they end:

- the update, from the first optimizer step to the step's record in metrics.jsonl: the
  weights have moved, so the step is completed, recorded and then checkpointed;
- a checkpoint write (and a metrics record): it is finished, so it is not lost.

Inside a held section the first Ctrl-C says what is being finished; the second says it
again and that a third stops at once; the third raises KeyboardInterrupt inside the
section (the step under way is then lost; the checkpoints already written stay whole,
since a checkpoint is staged and renamed into place). ``kill -9`` is never held.

The handler is installed only on the main thread of a process whose SIGINT handler is
Python's default (a program that set its own keeps it).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

FORCE_AFTER = 3  # Ctrl-C presses inside a held section that stop it at once


class Interrupts:
    """SIGINT for one run: raised at once, or held while a section that must finish runs.

    ``held(what)`` brackets a section that must finish (the run's update and its record,
    a checkpoint write); a Ctrl-C held in it is raised when the section ends.
    """

    def __init__(self, log=print):
        self.log = log
        self.holding: str | None = None  # what is being finished, while held
        self.pressed = 0  # Ctrl-C presses held in the current section
        self._previous = None

    @contextmanager
    def installed(self):
        """Route SIGINT through this object for the duration of the block."""
        own = threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        if own:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield self
        finally:
            if own:
                signal.signal(signal.SIGINT, self._previous)
            self.holding, self.pressed = None, 0

    def _on_sigint(self, signum, frame) -> None:
        if self.holding is None:
            raise KeyboardInterrupt
        self.pressed += 1
        if self.pressed >= FORCE_AFTER:
            self.log(f"\nCtrl-C pressed {self.pressed} times: stopping inside {self.holding}; "
                     f"the checkpoints already written are kept")
            self.holding, self.pressed = None, 0
            raise KeyboardInterrupt
        more = FORCE_AFTER - self.pressed
        self.log(f"\nCtrl-C: finishing {self.holding} first, then stopping with a checkpoint "
                 f"(Ctrl-C {more} more time{'s' if more > 1 else ''} to stop at once and "
                 f"lose the step under way)")

    def _release(self, raise_held: bool = True) -> None:
        """End the held section; a Ctrl-C held in it is raised now (``raise_held``)."""
        pressed, self.holding, self.pressed = self.pressed, None, 0
        if pressed and raise_held:
            raise KeyboardInterrupt

    @contextmanager
    def held(self, what: str, raise_after: bool = True):
        """Hold Ctrl-C for the block and raise it after (``raise_after``; False: the run is
        stopping already); a section inside a held one leaves the outer one in charge."""
        if self.holding is not None:
            yield
            return
        self.holding = what
        try:
            yield
        except BaseException:
            self._release(raise_held=False)  # the error under way is the one to report
            raise
        self._release(raise_held=raise_after)
