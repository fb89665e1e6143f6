"""Reward errors: what the message says, and the two policies."""

import math

import numpy as np
import pytest
import torch

from pods.tasks import Graded, Problem, Task
from pods.tasks.scoring import RewardError, Scorer, checked_reward

PROBLEM = Problem("12+30=", "24")


class Returns(Task):
    """A task whose reward returns (or raises) what it is given."""

    reward_name = "my_rewards:judge"

    def __init__(self, value):
        self.value = value

    def reward(self, completion, problem):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


@pytest.mark.parametrize("value, says", [
    (KeyError("score"), "raised KeyError: 'score'"),
    (float("nan"), "returned nan (float), not a finite number"),
    (math.inf, "returned inf (float), not a finite number"),
    ("yes", "returned 'yes' (str), not a finite number"),
    (None, "returned None (NoneType), not a finite number"),
])
def test_a_reward_error_names_function_value_problem_and_completion(value, says):
    with pytest.raises(RewardError) as caught:
        checked_reward(Returns(value), "42" * 100, PROBLEM)
    message = str(caught.value)
    assert message.startswith(f"reward function my_rewards:judge {says}; problem '12+30='")
    assert "completion '" + "42" * 40 + "...'" in message  # the start of the completion


@pytest.mark.parametrize("value", [1, 0.5, True, np.float32(0.25), np.int64(2)])
def test_finite_numbers_of_any_numeric_type_are_rewards(value):
    assert checked_reward(Returns(value), "x", PROBLEM) == float(value)


def test_a_task_without_a_reward_name_is_named_by_its_class():
    class Plain(Task):
        def reward(self, completion, problem):
            raise ValueError("boom")

    with pytest.raises(RewardError, match=r"^reward function Plain.reward raised ValueError"):
        checked_reward(Plain(), "x", PROBLEM)


def test_zero_policy_scores_zero_counts_and_warns_once():
    warnings = []

    class Flaky(Task):
        def reward(self, completion, problem):
            return float("nan") if completion == "bad" else 1.0

    scorer = Scorer(Flaky(), "zero", warn=warnings.append)
    scores = scorer.rewards(["ok", "bad", "bad", "ok"], [PROBLEM, PROBLEM], n=2)
    rewards, errors = scores.rewards, scores.reward_errors
    assert rewards.tolist() == [[1.0, 0.0], [0.0, 1.0]] and errors == 2
    assert len(warnings) == 1 and "Scored 0 (reward_errors=zero)" in warnings[0]
    with pytest.raises(RewardError):
        Scorer(Flaky(), "raise").rewards(["bad"], [PROBLEM], n=1)
    with pytest.raises(ValueError, match="unknown reward_errors 'skip'"):
        Scorer(Flaky(), "skip")


class Ungradable(Task):
    """A task whose grader fails to compare every answer containing '?' (and says so in
    what it returns: Task.graded)."""

    def __init__(self, workers=1):
        self.reward_workers = workers

    def reward(self, completion, problem):
        return self.graded(completion, problem).value

    def graded(self, completion, problem):
        return Graded(0.0, failed=True) if "?" in completion else Graded(1.0)


@pytest.mark.parametrize("workers", [1, 3])
def test_scores_count_this_calls_grading_failures(workers):
    """The count is the call's own (also when rewards run on worker threads), from what
    each grading returned: a second call starts from 0."""
    scorer = Scorer(Ungradable(workers))
    first = scorer.rewards(["a", "?", "?", "b"], [PROBLEM, PROBLEM], n=2)
    assert first.grading_failures == 2 and first.reward_errors == 0
    assert first.rewards.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert scorer.rewards(["a", "b"], [PROBLEM], n=2).grading_failures == 0


def test_math_grading_failures_reach_the_scores(monkeypatch):
    """The math grader reports what it could not compare (here: math-verify raising)."""
    from pods.tasks.math import grader
    from pods.tasks.math.rewards import MathGraded

    class Math(MathGraded):
        pass

    def broken(pred, gold):
        raise RuntimeError("sympy fell over")

    monkeypatch.setattr(grader, "_verify", broken)
    scores = Scorer(Math()).rewards(["<answer>x^2+1</answer>", "<answer>42</answer>"],
                                    [Problem("6*7=", "42")], n=2)
    assert scores.grading_failures == 1  # "42" matches as text: math-verify never runs
    assert scores.rewards[0, 1] > scores.rewards[0, 0]


def test_a_cut_rollout_is_paid_truncated_reward_without_being_graded():
    """A rollout cut at the length limit (finished False) gets truncated_reward and never
    reaches the grader; by default it is graded like the others. Either way it is counted."""
    graded = []

    class Spy(Task):
        def reward(self, completion, problem):
            graded.append(completion)
            return 1.0

    finished = torch.tensor([True, False, True, False])  # [P*n]
    texts, problems = ["a", "cut b", "c", "cut d"], [PROBLEM, PROBLEM]
    shaped = Scorer(Spy(), truncated_reward=-0.5).rewards(texts, problems, 2, finished)
    assert shaped.rewards.tolist() == [[1.0, -0.5], [1.0, -0.5]] and shaped.truncated == 2
    assert graded == ["a", "c"]
    graded.clear()
    default = Scorer(Spy()).rewards(texts, problems, 2, finished)
    assert default.rewards.tolist() == [[1.0, 1.0], [1.0, 1.0]] and default.truncated == 2
    assert graded == texts
    unknown = Scorer(Spy(), truncated_reward=0.0).rewards(texts, problems, 2)
    assert unknown.rewards.tolist() == [[1.0, 1.0], [1.0, 1.0]] and unknown.truncated == 0
