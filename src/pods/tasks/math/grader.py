r"""Grading math answers (GSM8K, MATH, AMC): does a completion's final answer equal the gold?

``grade(completion, gold)`` is the one call rewards and evaluation use. It takes a few candidate
answers from the completion (``candidate_answers``) and returns True when one equals the gold:
as text after cleaning (free), else by math-verify, which parses both sides into sympy and
compares them (1/2 = 0.5 = \frac{1}{2}, x=5 = 5, intervals, sets).

``clean_answer`` runs on both sides first and removes exactly: (1) surrounding whitespace and
one trailing full stop; (2) enclosing $...$, $$...$$, \(...\), \[...\]; (3) every \$, and a
lone $ ("$18"); (4) a trailing % or \% ("18\%" -> "18": GSM8K golds write percentages bare);
(5) degree marks ^\circ, ^{\circ}, \circ, \degree, °; (6) trailing \text{...} groups (also
\textrm, \textbf, \mbox, \mathrm; with an optional ^2 or ^3) when something is left in front
("18 \text{ dollars}" -> "18"), while a whole-answer \text{X} becomes X; (7) one to three words
after a plain number ("18 dollars", "5cm", "3 square units"); (8) LaTeX thousands separators
{,} and ,\!, then the commas of a plain number ("1,000" -> "1000"). math-verify itself also
drops $ signs, \text{} units and some unit words when it parses.

Simplifications, and why:
- Only the last ``MAX_COMPLETION_CHARS`` (20,000) characters of a completion are searched, so
  a run-away output costs no more than a long one. Candidates longer than ``MAX_ANSWER_CHARS``
  (1,000) are not compared (a \boxed{} inside them, or a plain sentence's last number, is).
- The last number of the whole text is a candidate only when the completion has neither an
  <answer> block nor a \boxed{}. The official code always tries it, but then
  "\boxed{\frac{1}{2}}" would grade equal to "2" and "\boxed{2^{10}}" equal to "10".

Timeout: sympy can run for minutes on a short answer such as 9^{9^{9^9}}. In the main thread
each ``answers_equal`` runs under a SIGALRM timer (``signal.setitimer``, fractional seconds)
whose handler raises inside the parse or comparison; ``grade`` shares one budget among its
candidates. math-verify's own timeouts use the same signal in whole seconds per step and would
cancel ours, so they are off. Python runs signal handlers only in the main thread: from any
other thread (or on Windows) grading runs WITHOUT a timeout, and logs so once. To grade in
parallel use worker processes, each grading in its own main thread. A timeout or an exception
grades False and is counted in ``grading_stats().failures``.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

logger = logging.getLogger(__name__)

MAX_COMPLETION_CHARS = 20_000  # only the tail of a longer completion is searched
MAX_ANSWER_CHARS = 1_000  # a longer candidate or gold is never parsed

# ---------------------------------------------------------------- extraction

_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"  # 1,000  12  3.5  3/4
_NUMBER = re.compile(rf"(?:(?<![\w)])[-+])?{_NUM}|(?<![\d.])\.\d+")  # sign unless after a term
_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_TOKEN = re.compile(r"[^\s${}]+")
_LATEX_TEXT = re.compile(r"\\(?:text\w*|mbox|mathrm|operatorname)\s*\{[^{}]*\}")
_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{3,}")  # a word that is not a LaTeX command


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = deque(pattern.finditer(text), maxlen=1)
    return last[0] if last else None


def extract_boxed(text: str) -> str | None:
    r"""Content of the last \boxed{...} or \fbox{...} (or "\boxed 5"), braces counted.

    >>> extract_boxed(r"so \boxed{1} and then \boxed{\frac{1}{2}}")
    '\\frac{1}{2}'
    >>> extract_boxed(r"\boxed{\frac{1}{2}") is None  # unbalanced: truncated output
    True
    """
    last = _last_match(_BOX, text)
    if last is None:
        return None
    rest = text[last.end() :].lstrip()
    if not rest.startswith("{"):
        token = _TOKEN.match(rest)
        return token.group() if token else None
    depth, i = 0, 0
    while i < len(rest):
        if rest[i] == "\\":  # \{ and \} are characters, not groups
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(rest[i], 0)
        if depth == 0:
            return rest[1:i].strip()
        i += 1
    return None


def extract_answer_tag(text: str) -> str | None:
    """Stripped content of the last complete <answer>...</answer> block, or None."""
    end = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, end) if end >= 0 else -1
    return None if start < 0 else text[start + len("<answer>") : end].strip()


def extract_last_number(text: str) -> str | None:
    """The last number in the text, commas removed: signs, decimals, simple fractions.

    >>> extract_last_number("paid $1,250.50, then 10-3/4 of it")
    '3/4'
    >>> extract_last_number("the loss is -7.")
    '-7'
    """
    last = _last_match(_NUMBER, text)
    return None if last is None else last.group().replace(",", "").lstrip("+")


def _is_prose(answer: str) -> bool:
    """Whether an answer contains words (outside \\text{}), i.e. is a sentence, not a formula."""
    return _WORD.search(_LATEX_TEXT.sub("", answer)) is not None


def _plain_sentence(answer: str) -> bool:
    """A sentence without LaTeX: its last number is its answer (not so in "is \\frac{1}{2}")."""
    return _is_prose(answer) and not any(mark in answer for mark in "\\^{")


def candidate_answers(completion: str) -> list[str]:
    """The answers ``grade`` tries, in order, without duplicates or empties: the <answer>
    block; a \\boxed{} inside it; the last \\boxed{} of the text; the last number inside the
    block or the boxed answer when that is a sentence without LaTeX ("The total is 18
    dollars."); and, only when the text has neither a block nor a \\boxed{}, its last number."""
    text = completion[-MAX_COMPLETION_CHARS:]
    block = extract_answer_tag(text)
    boxed = extract_boxed(text)
    found = [block, extract_boxed(block) if block is not None else None, boxed]
    for answer in (block, boxed):
        if answer is not None and _plain_sentence(answer):
            found.append(extract_last_number(answer))
    if block is None and boxed is None:
        found.append(extract_last_number(text))
    return list(dict.fromkeys(c for c in found if c))


# ---------------------------------------------------------------- cleaning

_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_PERCENT = re.compile(r"\s*\\?%$")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°")
_TRAILING_TEXT = re.compile(r"\s*\\(?:text\w*|mbox|mathrm)\s*\{[^{}]*\}(?:\^\{?[23]\}?)?$")
_WHOLE_TEXT = re.compile(r"\\(?:text\w*|mbox|mathrm)\s*\{([^{}]*)\}")
_NUMBER_AND_WORDS = re.compile(rf"([-+]?{_NUM})\s*[a-zA-Z]{{2,}}(?:\s+[a-zA-Z]+){{0,2}}(?:\^[23])?")
_COMMA_NUMBER = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _strip_delimiters(text: str) -> str:
    text = text.strip()
    for left, right in _DELIMITERS:
        inner = text[len(left) : -len(right)]
        if len(text) >= len(left + right) and text.startswith(left) and text.endswith(right):
            return inner.strip() if left not in inner else text
    return text


def _strip_number_commas(text: str) -> str:
    return text.replace(",", "") if _COMMA_NUMBER.fullmatch(text) else text


def normalize_gold(gold: str) -> str:
    r"""The gold answer as compared: the \boxed{} content if boxed, without enclosing $...$,
    thousands commas of a plain number removed ("1,000" -> "1000")."""
    text = gold.strip()
    boxed = extract_boxed(text)
    return _strip_number_commas(_strip_delimiters(text if boxed is None else boxed))


def clean_answer(answer: str) -> str:
    """The answer without the decorations listed in the module docstring (steps 1-8)."""
    text = answer.strip()
    text = _strip_delimiters(text[:-1] if text.endswith(".") else text)
    text = text.replace("\\$", "")
    text = text.replace("$", "") if text.count("$") == 1 else text
    text = _DEGREES.sub("", _PERCENT.sub("", text))
    for _ in range(2):  # e.g. 5\text{ cm}\text{.}
        text = _TRAILING_TEXT.sub("", text).strip() or text
    whole = _WHOLE_TEXT.fullmatch(text)
    text = whole.group(1).strip() if whole else text
    words = _NUMBER_AND_WORDS.fullmatch(text)
    text = words.group(1) if words else text
    text = text.replace("{,}", ",").replace(",\\!", ",")
    return _strip_number_commas(text).strip()


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class GradingStats:
    calls: int = 0  # answers_equal calls since the last reset (one per candidate tried)
    failures: int = 0  # of which ended by an exception or a timeout (and graded False)
    timeouts: int = 0  # of the failures, those that ran out of time


_counts = {"calls": 0, "failures": 0, "timeouts": 0}
_counts_lock = threading.Lock()


def _count(*keys: str) -> None:
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
    if _is_prose(answer):
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


def answers_equal(pred: str, gold: str, timeout_s: float | None = 5.0) -> bool:
    """Whether two short answers are mathematically equal: cleaned text first, then
    math-verify (``verify(gold, pred)``) within ``timeout_s`` seconds (main thread only; None
    for no limit). Never raises: a timeout or an error is False, counted in grading_stats()."""
    _count("calls")
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    pred, gold = clean_answer(pred), clean_answer(gold)
    if not pred or not gold:
        return False
    if _squash(pred) == _squash(gold):
        return True
    try:
        return _call_with_timeout(lambda: _verify(pred, gold), timeout_s)
    except _Timeout:
        _count("failures", "timeouts")
    except Exception:
        logger.debug("grading %r against %r failed", pred[:100], gold[:100], exc_info=True)
        _count("failures")
    return False


def grade(completion: str, gold: str, timeout_s: float = 5.0) -> bool:
    r"""Whether any candidate answer of ``completion`` equals ``gold``.

    All candidates are first compared as cleaned text, which costs no sympy; then each in turn
    by math-verify, sharing ``timeout_s`` seconds in all.

    >>> grade("so x = 1/2, that is \\boxed{\\frac{1}{2}}", "0.5")
    True
    >>> grade("<think>6 * 3 = 18</think><answer>18 dollars</answer>", "$18")
    True
    >>> grade("<answer>180</answer>", "18")
    False
    """
    target = normalize_gold(gold)
    candidates = candidate_answers(completion)
    key = _squash(clean_answer(target))
    short = [c for c in candidates if len(c) <= MAX_ANSWER_CHARS]
    if key and any(_squash(clean_answer(c)) == key for c in short):
        return True
    deadline = time.monotonic() + timeout_s
    for candidate in candidates:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if answers_equal(candidate, target, timeout_s=left):
            return True
    return False
