"""The paper's rewards for math tasks: correctness plus small format and tag-count bonuses.

As in the official single-GPU code (the paper, arXiv 2504.13818, and its official code):

    reward = correctness * 1{grade(completion, gold)}          (1.0 or 0.0)
           + format      * format_score(completion)            (0.1 x a score in [0, 1])
           + tags        * tag_score(completion)               (0.1 x 0.25 per tag)

Set ``format`` and ``tags`` to 0 for correctness only.

    >>> text = "<think>\\n3 + 4 = 7\\n</think>\\n<answer>\\n7\\n</answer>"
    >>> round(math_reward(text, "7"), 3)        # 1 + 0.1 * 1.0 + 0.1 * 1.0
    1.2
    >>> math_reward("The answer is 8.", "7", MathRewardConfig(format=0, tags=0))
    0.0
"""

from __future__ import annotations

import re

from pods.config.groups import MathRewardConfig
from pods.tasks.base import Graded, Task
from pods.tasks.math.grader import grade, grade_answer

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_LAYOUT = re.compile(r"<think>.*</think>[ \n]?<answer>.*</answer>", flags=re.DOTALL)
_WHOLE = re.compile(r"[ \n]?<think>.*</think>[ \n]?<answer>.*</answer>[ \n]?", flags=re.DOTALL)


PAPER_WEIGHTS = MathRewardConfig()  # the paper's weights, also the config's defaults


def format_score(text: str) -> float:
    """1 for the <think>...</think> <answer>...</answer> layout, minus 0.01 per character
    outside it (floored at 0); 0 without the layout."""
    match = _LAYOUT.search(text)
    if match is None:
        return 0.0
    return max(0.0, 1.0 - 0.01 * (len(text) - len(match.group(0))))


def format_correct(text: str) -> bool:
    """The whole completion is exactly the layout (up to a space or newline at the ends):
    the "format accuracy" of the evaluation protocol."""
    return _WHOLE.fullmatch(text) is not None


def tag_score(text: str) -> float:
    """0.25 for each of <think>, </think>, <answer>, </answer> present exactly once."""
    return sum(0.25 for tag in TAGS if text.count(tag) == 1)


def math_reward(completion: str, gold: str, weights: MathRewardConfig = PAPER_WEIGHTS) -> float:
    return math_graded(completion, gold, weights).value


def math_graded(completion: str, gold: str,
                weights: MathRewardConfig = PAPER_WEIGHTS) -> Graded:
    """``math_reward``, and whether grading failed (pods.tasks.math.grader.grade_answer)."""
    correct, failed = grade_answer(completion, gold)
    reward = weights.correctness * float(correct)
    if weights.format:
        reward += weights.format * format_score(completion)
    if weights.tags:
        reward += weights.tags * tag_score(completion)
    return Graded(reward, failed)


class MathGraded(Task):
    """The reward, pass@1 and format accuracy of a task graded like the paper's math tasks;
    the task sets ``weights`` (a MathRewardConfig)."""

    weights: MathRewardConfig = PAPER_WEIGHTS

    def reward(self, completion: str, problem) -> float:
        return math_reward(completion, problem.answer, self.weights)

    def graded(self, completion: str, problem) -> Graded:
        return math_graded(completion, problem.answer, self.weights)

    def correct(self, completion: str, problem) -> bool:
        return grade(completion, problem.answer)

    def format_ok(self, completion: str) -> bool:
        return format_correct(completion)
