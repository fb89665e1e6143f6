r"""Grading math answers (GSM8K, MATH, AMC): does a completion's final answer equal the gold?

``grade(completion, gold)`` is the one call rewards and evaluation use. It takes the one answer
the completion gives (``final_answer``: its <answer> block, else its last \boxed{}, else its
last number; never a choice among several, so a hedge cannot pay) and returns True when it
equals the gold: as text after cleaning (free), else by math-verify, which parses both sides
into sympy and compares them (1/2 = 0.5 = \frac{1}{2}, x=5 = 5, intervals, sets).

The answer and cleaning (what is stripped from both sides, and the simplifications) are
in ``pods.tasks.math.answers``.

Timeout: sympy can run for minutes on a short answer such as 9^{9^{9^9}}. In the main thread
each ``answers_equal`` runs under a SIGALRM timer (``signal.setitimer``, fractional seconds)
whose handler raises inside the parse or comparison. math-verify's own timeouts use the same
signal in whole seconds per step and would cancel ours, so they are off. Python runs signal
handlers only in the main thread: from any other thread (or on Windows) grading runs WITHOUT a
timeout, and logs so once. To grade in parallel use worker processes, each grading in its own
main thread. A timeout or an exception grades False, is counted in ``grading_stats().failures``
(process-wide, for tests and debugging) and in the ``Scores`` of the scoring call under way
(``pods.tasks.scoring``).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from pods.tasks.math.answers import (
    MAX_ANSWER_CHARS,
    clean_answer,
    final_answer,
    is_prose,
    normalize_gold,
)

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class GradingStats:
    calls: int = 0  # answers_equal calls since the last reset (one per graded answer)
    failures: int = 0  # of which ended by an exception or a timeout (and graded False)
    timeouts: int = 0  # of the failures, those that ran out of time


_counts = {"calls": 0, "failures": 0, "timeouts": 0}
_counts_lock = threading.Lock()


def _count(*keys: str) -> None:
    """Count into the process-wide stats (``grading_stats``)."""
    with _counts_lock:
        for key in keys:
            _counts[key] += 1


def grading_stats() -> GradingStats:
    """A snapshot of the counters, e.g. to log ``failures`` as a metric."""
    with _counts_lock:
        return GradingStats(**_counts)


def reset_grading_stats() -> None:
    with _counts_lock:
        _counts.update(calls=0, failures=0, timeouts=0)


# ---------------------------------------------------------------- timeout


class _Timeout(BaseException):
    """Raised by the SIGALRM handler. A BaseException so that the ``except Exception``
    clauses inside math-verify do not swallow it and carry on computing."""


def _raise_timeout(signum, frame):
    raise _Timeout


_warned_no_timer = False


def _call_with_timeout(fn: Callable[[], bool], timeout_s: float | None) -> bool:
    """fn(), interrupted by _Timeout after timeout_s seconds when this is the main thread."""
    global _warned_no_timer
    main = threading.current_thread() is threading.main_thread()
    if timeout_s is None or not main or not hasattr(signal, "setitimer"):
        if timeout_s is not None and not _warned_no_timer:
            _warned_no_timer = True
            logger.warning("pods.tasks.math.grader: no timer outside the main thread, "
                           "no grading timeout")
        return fn()
    old_handler = signal.signal(signal.SIGALRM, _raise_timeout)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 1e-3))
    start = time.monotonic()
    try:
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:  # reached even when the alarm fires just before the line above
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:  # an outer timer was running: give it back what is left of it
            left = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


# ---------------------------------------------------------------- comparison


@lru_cache(maxsize=1)
def _math_verify():
    """math-verify, imported on first use (it pulls in sympy), without its warning that
    its own timeout is off: ours replaces it."""
    import math_verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(
            lambda record: not record.getMessage().startswith("Timeout is disabled")
        )
    return math_verify


@lru_cache(maxsize=4096)
def _parse(answer: str) -> tuple:
    """math-verify's parse of a cleaned answer. A formula is parsed wrapped in $...$ (raw,
    math-verify reads "2^{10}" as 2 and "(1, 2)" as 2); a sentence, or text that has its own
    $ or \\boxed, is parsed as it is. The other way is tried when the first finds nothing.
    Cached: the same gold is graded against every rollout of its prompt."""
    parse = _math_verify().parse
    if any(mark in answer for mark in ("$", "\\(", "\\[", "\\boxed", "\\fbox")):
        return tuple(parse(answer, parsing_timeout=None))
    ways = [f"${answer}$", answer]
    if is_prose(answer):
        ways.reverse()
    return tuple(parse(ways[0], parsing_timeout=None) or parse(ways[1], parsing_timeout=None))


def _verify(pred: str, gold: str) -> bool:
    gold_parsed, pred_parsed = _parse(gold), _parse(pred)
    if not gold_parsed or not pred_parsed:
        return False
    verify = _math_verify().verify
    return bool(verify(list(gold_parsed), list(pred_parsed), timeout_seconds=None))


def _squash(text: str) -> str:
    return "".join(text.split())


class Grade(NamedTuple):
    correct: bool  # the answer equals the gold
    failed: bool = False  # the comparison ended by an error or a timeout (graded wrong)


def answers_equal(pred: str, gold: str, timeout_s: float | None = 5.0) -> bool:
    """Whether two short answers are mathematically equal (``compare_answers``)."""
    return compare_answers(pred, gold, timeout_s).correct


def compare_answers(pred: str, gold: str, timeout_s: float | None = 5.0) -> Grade:
    """Whether two short answers are mathematically equal: cleaned text first, then
    math-verify (``verify(gold, pred)``) within ``timeout_s`` seconds (main thread only; None
    for no limit). Never raises: a timeout or an error is not equal and ``failed``, and
    counted in grading_stats()."""
    _count("calls")
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return Grade(False)
    pred, gold = clean_answer(pred), clean_answer(gold)
    if not pred or not gold:
        return Grade(False)
    if _squash(pred) == _squash(gold):
        return Grade(True)
    try:
        return Grade(_call_with_timeout(lambda: _verify(pred, gold), timeout_s))
    except _Timeout:
        _count("failures", "timeouts")
    except Exception:
        logger.debug("grading %r against %r failed", pred[:100], gold[:100], exc_info=True)
        _count("failures")
    return Grade(False, failed=True)


def grade(completion: str, gold: str, timeout_s: float = 5.0) -> bool:
    r"""Whether the answer ``completion`` gives (``final_answer``) equals ``gold``
    (``grade_answer``).

    >>> grade("so x = 1/2, that is \\boxed{\\frac{1}{2}}", "0.5")
    True
    >>> grade("<think>6 * 3 = 18</think><answer>18 dollars</answer>", "$18")
    True
    >>> grade("<answer>180</answer>", "18")
    False
    >>> grade("<answer>17</answer> or maybe \\boxed{18}", "18")  # one answer: the block
    False
    """
    return grade_answer(completion, gold, timeout_s).correct


def grade_answer(completion: str, gold: str, timeout_s: float = 5.0) -> Grade:
    """``grade``, and whether the comparison failed (an error or a timeout: graded wrong)."""
    answer = final_answer(completion)
    if answer is None:
        return Grade(False)
    return compare_answers(answer, normalize_gold(gold), timeout_s)
