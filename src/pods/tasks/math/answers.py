r"""Answers in completions and golds: the one answer a completion gives (``final_answer``),
and cleaning both sides before they are compared
(``clean_answer``, ``normalize_gold``); ``pods.tasks.math.grader`` compares them.

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
  a run-away output costs no more than a long one. Answers longer than ``MAX_ANSWER_CHARS``
  (1,000) are not compared.
- One answer per completion. The official code grades a completion right when any of its
  readings matches (the whole text, the last answer block, the last number), so a completion
  that states two answers is paid for either; and its last number makes "\boxed{\frac{1}{2}}"
  equal to "2" and "\boxed{2^{10}}" equal to "10".
"""

from __future__ import annotations

import re
from collections import deque

MAX_COMPLETION_CHARS = 20_000  # only the tail of a longer completion is searched
MAX_ANSWER_CHARS = 1_000  # a longer answer or gold is never parsed

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


def is_prose(answer: str) -> bool:
    """Whether an answer contains words (outside \\text{}), i.e. is a sentence, not a formula."""
    return _WORD.search(_LATEX_TEXT.sub("", answer)) is not None


def _plain_sentence(answer: str) -> bool:
    """A sentence without LaTeX: its last number is its answer (not so in "is \\frac{1}{2}")."""
    return is_prose(answer) and not any(mark in answer for mark in "\\^{")


def _answer_in(span: str) -> str | None:
    """The answer a block or a box states: the \\boxed{} inside it, else, for a sentence
    without LaTeX ("The total is 18 dollars."), its last number, else the whole span."""
    boxed = extract_boxed(span)
    if boxed is not None:
        return boxed or None
    if _plain_sentence(span):
        return extract_last_number(span) or span
    return span or None


def final_answer(completion: str) -> str | None:
    """The one answer a completion gives, or None: the last complete <answer> block when there
    is one; else the last \\boxed{} of the text; else, when it has neither, its last number.
    A block or a box is read by ``_answer_in`` (a box inside it, or a sentence's last number).

    One answer, never a choice among several: a completion that states two ("<answer>23
    </answer> ... \\boxed{24}", "<answer>The answer is 23 or 24</answer>") is graded on one of
    them only, so that hedging cannot pay (the paper's official code pays if any of its readings
    matches: docs/guides/tasks.md).

    >>> final_answer(r"<answer>23</answer> so \\boxed{24}")
    '23'
    >>> final_answer("<answer>The total is 1,000 dollars.</answer>")
    '1000'
    """
    text = completion[-MAX_COMPLETION_CHARS:]
    block = extract_answer_tag(text)
    if block is not None:
        return _answer_in(block)
    boxed = extract_boxed(text)
    if boxed is not None:
        return _answer_in(boxed)
    return extract_last_number(text)


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
