"""Scoring rollouts with a task's reward, guarded: a reward function is user code.

A reward that raises, or returns something other than a finite number (NaN, infinity,
text, None), is a reward error. The policy (``reward_errors`` in TrainConfig) decides:
    raise   stop with a ``RewardError`` that names the reward function, what it raised or
            returned, the problem and the start of the completion (the default);
    zero    score the rollout 0, count it (``rollout/reward_errors`` per step) and warn once.
A grader that could not compare an answer says so in its return value (``Task.graded``):
those rollouts are counted in ``rollout/grading_failures``.

A rollout cut at the length limit (no end-of-sequence token) is graded like any other
unless ``truncated_reward`` is set: then it gets that reward without being graded, so an
unfinished completion whose last number happens to be right is not paid (counted in
``rollout/truncated`` either way). Evaluation (``Scorer.score``) always grades.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor

from pods.config.fields import REWARD_ERRORS
from pods.tasks.base import Graded

SHOWN = 80  # characters of a prompt or completion quoted in a message


@dataclass(frozen=True)
class Scores:
    """What scoring one step's rollouts found: everything the step logs about rewards."""

    rewards: Tensor  # [P, n]
    reward_errors: int  # rewards that raised or were not finite, scored 0 (policy zero)
    grading_failures: int  # rollouts whose grading failed (Task.graded: error or timeout)
    truncated: int = 0  # rollouts cut at the length limit (known only with ``finished``)


class RewardError(ValueError):
    """A reward function raised or returned a value that is not a finite number."""


def reward_name(task) -> str:
    """How messages name a task's reward: a custom reward's module:function, else
    ``Task.reward``."""
    return task.reward_name or f"{type(task).__name__}.reward"


def checked_reward(task, completion: str, problem) -> float:
    """``task.reward(completion, problem)`` as a float (``checked_grade``)."""
    return checked_grade(task, completion, problem).value


def checked_grade(task, completion: str, problem) -> Graded:
    """``task.graded(completion, problem)`` with its value a float, or a RewardError saying
    what the reward function did, for which problem and completion."""
    try:
        value, failed = task.graded(completion, problem)
    except Exception as error:
        what = f"raised {type(error).__name__}: {error}"
    else:
        if isinstance(value, numbers.Real) and math.isfinite(float(value)):
            return Graded(float(value), bool(failed))
        what = f"returned {value!r} ({type(value).__name__}), not a finite number"
    raise RewardError(f"reward function {reward_name(task)} {what}; problem "
                      f"{_start(problem.prompt)}, completion {_start(completion)}")


class Scorer:
    """Scores rollouts under a policy, warning once (through ``warn``) under ``zero``;
    ``truncated_reward`` (None: grade them) is what ``rewards`` pays a cut rollout."""

    def __init__(self, task, policy: str = "raise", warn=print,
                 truncated_reward: float | None = None):
        if policy not in REWARD_ERRORS:
            raise ValueError(f"unknown reward_errors {policy!r}; use one of "
                             f"{', '.join(REWARD_ERRORS)}.")
        self.task, self.policy, self.warn, self.warned = task, policy, warn, False
        self.truncated_reward = truncated_reward

    def score(self, completion: str, problem) -> tuple[float, bool, bool]:
        """(reward, whether it was a reward error scored 0, whether grading failed)."""
        try:
            value, failed = checked_grade(self.task, completion, problem)
            return value, False, failed
        except RewardError as error:
            if self.policy == "raise":
                raise
            if not self.warned:
                self.warned = True
                self.warn(f"warning: {error}. Scored 0 (reward_errors=zero); further errors "
                          f"are counted in rollout/reward_errors without a message.")
            return 0.0, True, False

    def _scored(self, completion: str, problem, cut: bool) -> tuple[float, bool, bool]:
        """``score``, or truncated_reward for a cut rollout when it is set."""
        if cut and self.truncated_reward is not None:
            return self.truncated_reward, False, False
        return self.score(completion, problem)

    def rewards(self, texts: list[str], problems: list, n: int,
                finished: Tensor | None = None) -> Scores:
        """The ``Scores`` of rollouts ``texts`` [P*n] (row p*n + j: rollout j of
        ``problems[p]``): rewards [P, n], reward errors scored 0, grading failures, and
        the rollouts cut at the length limit (``finished`` [P*n] bool False; None: not
        known, every rollout graded)."""
        cut = set() if finished is None else set((~finished.bool()).nonzero().flatten().tolist())
        scored = task_map(self.task, lambda i: self._scored(texts[i], problems[i // n],
                                                            i in cut), range(len(texts)))
        values = torch.tensor([value for value, _, _ in scored], dtype=torch.float32)
        return Scores(values.view(-1, n), sum(error for _, error, _ in scored),
                      sum(failed for _, _, failed in scored), len(cut))


def task_map(task, fn, items) -> list:
    """``[fn(x) for x in items]``, on ``task.reward_workers`` threads when the task asks for
    more than one (code tasks: each reward waits on sandboxed processes)."""
    items = list(items)
    workers = min(task.reward_workers, len(items))
    if workers <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


def _start(text: str) -> str:
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")
