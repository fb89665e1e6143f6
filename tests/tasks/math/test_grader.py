"""Tables of completion -> gold -> expected grade, and the extractors with worked examples."""

import doctest
import signal
import threading
import time

import pytest

import pods.tasks.math.answers
import pods.tasks.math.grader
from pods.tasks.math.answers import (
    clean_answer,
    extract_answer_tag,
    extract_boxed,
    extract_last_number,
    final_answer,
    normalize_gold,
)
from pods.tasks.math.grader import (
    answers_equal,
    grade,
    grade_answer,
    grading_stats,
    reset_grading_stats,
)

pytest.importorskip("math_verify")

SLOW = r"\boxed{9^{9^{9^{9}}}}"  # sympy would try to evaluate this for minutes


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"\boxed{5}", "5"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{a_{b_{c}}}", "a_{b_{c}}"),
        (r"first \boxed{1}, then \boxed{2}", "2"),  # the last one
        (r"\fbox{7}", "7"),
        (r"\boxed 5", "5"),
        (r"$\boxed 5$.", "5"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces are not groups
        (r"\boxed{ 12 }", "12"),
        ("no box here", None),
        (r"\boxed{\frac{1}{2}", None),  # unbalanced: a truncated output
        ("ends with \\boxed", None),
        (r"\boxedfoo{3}", None),  # another command
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<answer> 42 </answer>", "42"),
        ("<answer>1</answer> then <answer>2</answer>", "2"),
        ("<answer>line one\nline two</answer>", "line one\nline two"),  # DOTALL
        ("<answer>1</answer><answer>unfinished", "1"),  # last complete block
        ("<answer>unfinished", None),
        ("</answer> before <answer>", None),
        ("no tags", None),
        ("<answer></answer>", ""),
    ],
)
def test_extract_answer_tag(text, expected):
    assert extract_answer_tag(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("I have 3 apples and 5 pears", "5"),
        ("total: 1,000", "1000"),
        ("1,234,567.89 dollars", "1234567.89"),
        ("the loss is -7.", "-7"),  # the sign stays, the full stop goes
        ("10-3 = 7", "7"),
        ("10-3", "3"),  # a minus after a term is subtraction, not a sign
        ("x = -3/4", "-3/4"),
        ("pi is about 3.14", "3.14"),
        ("costs $18.", "18"),
        ("the list 1,2,3", "3"),  # not a thousands separator
        ("+5", "5"),
        ("no digits", None),
        ("", None),
    ],
)
def test_extract_last_number(text, expected):
    assert extract_last_number(text) == expected


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<think>2+2</think><answer>4</answer>", "4"),
        (r"<answer>\boxed{\frac{1}{2}}</answer>", r"\frac{1}{2}"),  # the box inside the block
        ("<answer>The total is 18 dollars.</answer>", "18"),  # a sentence: its last number
        ("<answer>Evelyn</answer>", "Evelyn"),  # a sentence without numbers: itself
        (r"<answer>It is \frac{1}{2}</answer>", r"It is \frac{1}{2}"),  # no "2" from LaTeX
        (r"so \boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # no "2": a box is there
        (r"<answer>3</answer> or \boxed{4} 5", "3"),  # the block, only
        (r"\boxed{4} then <answer>3</answer>", "3"),
        (r"\boxed{The total is 18 dollars.}", "18"),
        ("She has 3 cats and 1,000 mice", "1000"),  # neither: the last number
        ("<answer>3</answer><answer>4</answer>", "4"),  # the last block
        ("", None),
        ("<answer> </answer>", None),  # an empty block is no answer (no fall-back)
        (r"<answer> </answer> \boxed{4}", None),
    ],
)
def test_final_answer(completion, expected):
    assert final_answer(completion) == expected


# Two answers in one completion, in every way found to make the grader of the paper's code
# (and pods before this test) pay for either: the block and a box, a sentence naming both,
# math-verify's reading of a sentence against its last number, boxes inside a block.
HEDGES = [
    r"<answer>{a}</answer> \boxed{{{b}}}",
    r"\boxed{{{a}}} <answer>{b}</answer>",
    "<answer>The answer is {a} or {b}</answer>",
    "<answer>{a} and {b}</answer>",
    "<answer>either {a} or {b} dollars</answer>",
    r"<answer>\boxed{{{a}}} {b}</answer>",
    r"<answer>{a} \boxed{{{b}}}</answer>",
    r"<answer>\boxed{{{a}}}\boxed{{{b}}}</answer>",
    r"\boxed{{{a}}} \boxed{{{b}}}",
    "<answer>{a}, {b}</answer>",
    r"<answer>\{{{a}, {b}\}}</answer>",
    r"<answer>{a} \lor {b}</answer>",
    "<answer>{a}\n{b}</answer>",
    r"<answer>${a}$ or ${b}$</answer>",
    "<answer>The answer is ${a}$ or ${b}$</answer>",
    "The answer is {a}. <answer>{b}</answer>",
    "<answer>{a}</answer> <answer>{b}</answer>",
    "I think {a}, no, {b}",
]


@pytest.mark.parametrize("template", HEDGES)
@pytest.mark.parametrize("a, b", [("23", "24"), ("24", "23"), (r"\frac{1}{2}", "2")])
def test_a_completion_with_two_answers_is_paid_for_one_at_most(template, a, b):
    completion = template.format(a=a, b=b)
    paid = [gold for gold in (a, b) if grade(completion, gold)]
    assert len(paid) <= 1, f"{completion!r} is graded right against both {a!r} and {b!r}"


@pytest.mark.parametrize(
    "gold, expected",
    [
        (" 1,000 ", "1000"),  # GSM8K style
        ("$18$", "18"),
        (r"\boxed{\frac{3}{4}}", r"\frac{3}{4}"),  # MATH solution style
        (r"$\boxed{5}$", "5"),
        ("(1,2)", "(1,2)"),  # a pair keeps its comma
        ("72", "72"),
    ],
)
def test_normalize_gold(gold, expected):
    assert normalize_gold(gold) == expected


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("  18. ", "18"),  # 1. whitespace, full stop
        (r"$\frac{1}{2}$", r"\frac{1}{2}"),  # 2. delimiters
        (r"\(x+1\)", "x+1"),
        ("$$7$$", "7"),
        (r"\$18", "18"),  # 3. currency
        ("$1,000", "1000"),
        (r"18\%", "18"),  # 4. percent
        ("18 %", "18"),
        (r"90^\circ", "90"),  # 5. degrees
        (r"90^{\circ}", "90"),
        ("90°", "90"),
        (r"18 \text{ dollars}", "18"),  # 6. trailing \text{}
        (r"5\mbox{ cm}^2", "5"),
        (r"\text{Evelyn}", "Evelyn"),  # a whole \text{} is unwrapped
        ("18 dollars", "18"),  # 7. words after a number
        ("3 square units", "3"),
        ("2 x", "2 x"),  # a single letter is a variable, not a unit
        (r"10{,}000", "10000"),  # 8. thousands separators
        (r"10,\!000", "10000"),
        ("(1,2)", "(1,2)"),
    ],
)
def test_clean_answer(answer, expected):
    assert clean_answer(answer) == expected


@pytest.mark.parametrize(
    "pred, gold, expected",
    [
        ("1/2", "0.5", True),
        (r"\frac{1}{2}", "0.5", True),
        (r"\dfrac12", "1/2", True),
        ("1,000", "1000", True),
        ("$18", "18", True),
        (r"18 \text{ dollars}", "18", True),
        (r"18\%", "18", True),
        ("x=5", "5", True),
        (r"\sqrt{2}/2", r"\frac{\sqrt{2}}{2}", True),
        (r"\frac{3}{4}", "0.75", True),
        (r"2\sqrt{2}", r"\sqrt{8}", True),
        (r"\pi/2", r"\frac{\pi}{2}", True),
        ("1+x^2", "x^2+1", True),
        ("-3.0", "-3", True),
        ("(1, 2)", "(1,2)", True),  # an open interval (or a pair)
        ("(2,-3)", "(2, -3)", True),
        (r"\text{(C)}", "C", True),
        ("2", "3", False),
        ("0.5", "0.51", False),
        ("18", "180", False),
        ("-5", "5", False),
        ("(2,1)", "(1,2)", False),
        ("[1,2)", "(1,2)", False),
        (r"\sqrt{2}", "1.414", False),
        ("", "5", False),
        ("5", "", False),
    ],
)
def test_answers_equal(pred, gold, expected):
    assert answers_equal(pred, gold) is expected


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        # boxed, nested braces, boxed inside <answer>
        (r"So the answer is \boxed{\frac{1}{2}}.", "0.5", True),
        (r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{\sqrt{2}}{2}", True),
        (r"<think>...</think><answer>\boxed{\dfrac{3}{4}}</answer>", r"\frac{3}{4}", True),
        (r"<answer>The answer is $\boxed{12}$</answer>", "12", True),
        # fractions, decimals, negatives
        ("<answer>1/2</answer>", r"\frac{1}{2}", True),
        ("<answer>0.25</answer>", "1/4", True),
        ("<answer>-7</answer>", "-7", True),
        ("<answer>-7</answer>", "7", False),
        ("<answer>2.50</answer>", "2.5", True),
        # commas, units, currency, percent: GSM8K golds
        ("<answer>1,000</answer>", "1000", True),
        ("<answer>1000</answer>", "1,000", True),
        ("<answer>$1,250</answer>", "1250", True),
        ("<answer>The total is 18 dollars.</answer>", "18", True),
        (r"<answer>18 \text{ dollars}</answer>", "18", True),
        (r"<answer>25\%</answer>", "25", True),
        ("<answer>25%</answer>", "25", True),
        (r"The angle is \boxed{90^\circ}", "90", True),
        ("<answer>12 cm</answer>", "12", True),
        # missing tags: the last number of the text
        ("I think it is 5, no, 7", "7", True),
        ("I think it is 5, no, 7", "5", False),
        ("Natalia sold 48 + 24 = 72 clips", "72", True),
        # MATH golds: radicals, intervals, pairs, expressions
        (r"\boxed{\sqrt{2}}", r"\sqrt{2}", True),
        (r"\boxed{\sqrt 2}", r"\sqrt{2}", True),
        (r"\boxed{(1, 2)}", "(1,2)", True),
        (r"\boxed{[1, 2)}", "[1,2)", True),
        (r"\boxed{(2, 1)}", "(1,2)", False),
        (r"\boxed{x = 5}", "5", True),
        (r"\boxed{2x+1}", "1+2x", True),
        # wrong answers and empty output
        (r"\boxed{\frac{1}{2}}", "2", False),  # the 2 of \frac{1}{2} is no answer
        (r"\boxed{2^{10}}", "10", False),
        (r"\boxed{2^{10}}", "1024", True),
        ("<answer>180</answer>", "18", False),
        ("<answer>0.51</answer>", "0.5", False),
        ("", "5", False),
        ("<answer></answer>", "5", False),
        ("no numbers at all", "5", False),
    ],
)
def test_grade(completion, gold, expected):
    assert grade(completion, gold) is expected


def test_long_output_searches_only_the_tail_and_is_fast():
    filler = "blah 123 " * 12_000  # 108,000 characters full of wrong numbers
    start = time.monotonic()
    assert grade(filler + r" so the answer is \boxed{\frac{3}{4}}", "0.75")
    assert grade(filler + " so the answer is 42", "42")
    assert not grade(r"\boxed{42} " + filler, "42")  # beyond the last 20,000 characters
    assert time.monotonic() - start < 5.0


def test_stats_count_calls_and_timeouts():
    reset_grading_stats()
    assert grading_stats().calls == 0
    assert not answers_equal(r"\frac{1}{", "5")  # unparsable: a call, graded False
    assert grading_stats().calls == 1
    assert not answers_equal(SLOW[7:-1], "5", timeout_s=0.2)
    stats = grading_stats()
    assert (stats.calls, stats.failures, stats.timeouts) == (2, 1, 1)
    reset_grading_stats()
    assert grading_stats() == pods.tasks.math.grader.GradingStats()


def test_a_failed_comparison_is_returned_not_only_counted():
    """grade_answer says whether grading failed (pods.tasks.scoring counts it per rollout
    from this return value)."""
    assert grade_answer("<answer>42</answer>", "42") == (True, False)  # text: no sympy
    assert grade_answer("<answer>41</answer>", "42") == (False, False)
    assert grade_answer(f"<answer>{SLOW[7:-1]}</answer>", "5", timeout_s=0.2) == (False, True)


def test_pathological_input_returns_within_budget():
    start = time.monotonic()
    assert not grade(SLOW, "5", timeout_s=1.0)
    assert not grade(f"<answer>{SLOW[7:-1]}!</answer>{SLOW}", "5", timeout_s=1.0)
    assert time.monotonic() - start < 4.0


def test_timer_restores_an_outer_timer_and_handler():
    def outer(signum, frame):
        raise AssertionError("the outer timer must not fire during the test")

    previous = signal.signal(signal.SIGALRM, outer)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        assert not answers_equal(SLOW[7:-1], "5", timeout_s=0.2)
        assert signal.getsignal(signal.SIGALRM) is outer
        assert 90.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_grading_in_a_thread_works_without_timeout():
    results = []
    worker = threading.Thread(target=lambda: results.append(grade(r"\boxed{0.5}", "1/2")))
    worker.start()
    worker.join(timeout=30)
    assert results == [True]


def test_docstring_examples():
    assert doctest.testmod(pods.tasks.math.grader).failed == 0
    assert doctest.testmod(pods.tasks.math.answers).failed == 0
