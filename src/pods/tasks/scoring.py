"""Scoring rollouts with a task's reward, guarded: a reward function is user code.

A reward that raises, or returns something other than a finite number (NaN, infinity,
text, None), is a reward error. The policy (``reward_errors`` in TrainConfig) decides:
    raise   stop with a ``RewardError`` that names the reward function, what it raised or
            returned, the problem and the start of the completion (the default);
    zero    score the rollout 0, count it (``rollout/reward_errors`` per step) and warn once.
"""

from __future__ import annotations

import contextvars
import math
import numbers
import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from pods.config.groups import REWARD_ERRORS

SHOWN = 80  # characters of a prompt or completion quoted in a message


@dataclass(frozen=True)
class Scores:
    """What scoring one step's rollouts found: everything the step logs about rewards."""

    rewards: Tensor  # [P, n]
    reward_errors: int  # rewards that raised or were not finite, scored 0 (policy zero)
    grading_failures: int  # answers the grader could not compare (error or timeout: 0)


class _Count:
    def __init__(self) -> None:
        self.value, self.lock = 0, threading.Lock()

    def add(self) -> None:
        with self.lock:
            self.value += 1


_grading_failures: contextvars.ContextVar[_Count | None] = contextvars.ContextVar(
    "pods_grading_failures", default=None)


def note_grading_failure() -> None:
    """Called by a grader that could not compare an answer (it grades it wrong): counted in
    the ``Scores`` of the ``Scorer.rewards`` call under way, if any."""
    count = _grading_failures.get()
    if count is not None:
        count.add()


class RewardError(ValueError):
    """A reward function raised or returned a value that is not a finite number."""


def reward_name(task) -> str:
    """How messages name a task's reward: a custom reward's module:function, else
    ``Task.reward``."""
    return task.reward_name or f"{type(task).__name__}.reward"


def checked_reward(task, completion: str, problem) -> float:
    """``task.reward(completion, problem)`` as a float, or a RewardError saying what the
    function did, for which problem and completion."""
    try:
        value = task.reward(completion, problem)
    except Exception as error:
        what = f"raised {type(error).__name__}: {error}"
    else:
        if isinstance(value, numbers.Real) and math.isfinite(float(value)):
            return float(value)
        what = f"returned {value!r} ({type(value).__name__}), not a finite number"
    raise RewardError(f"reward function {reward_name(task)} {what}; problem "
                      f"{_start(problem.prompt)}, completion {_start(completion)}")


class Scorer:
    """Scores rollouts under a policy, warning once (through ``warn``) under ``zero``."""

    def __init__(self, task, policy: str = "raise", warn=print):
        if policy not in REWARD_ERRORS:
            raise ValueError(f"unknown reward_errors {policy!r}; use one of "
                             f"{', '.join(REWARD_ERRORS)}.")
        self.task, self.policy, self.warn, self.warned = task, policy, warn, False

    def score(self, completion: str, problem) -> tuple[float, bool]:
        """(reward, whether it was a reward error scored 0)."""
        try:
            return checked_reward(self.task, completion, problem), False
        except RewardError as error:
            if self.policy == "raise":
                raise
            if not self.warned:
                self.warned = True
                self.warn(f"warning: {error}. Scored 0 (reward_errors=zero); further errors "
                          f"are counted in rollout/reward_errors without a message.")
            return 0.0, True

    def rewards(self, texts: list[str], problems: list, n: int) -> Scores:
        """The ``Scores`` of rollouts ``texts`` [P*n] (row p*n + j: rollout j of
        ``problems[p]``): rewards [P, n], reward errors scored 0 and grading failures."""
        failures = _Count()
        token = _grading_failures.set(failures)
        try:
            scored = task_map(self.task, lambda i: self.score(texts[i], problems[i // n]),
                              range(len(texts)))
        finally:
            _grading_failures.reset(token)
        values = torch.tensor([value for value, _ in scored], dtype=torch.float32)
        return Scores(values.view(-1, n), sum(failed for _, failed in scored), failures.value)


def task_map(task, fn, items) -> list:
    """``[fn(x) for x in items]``, on ``task.reward_workers`` threads when the task asks for
    more than one (code tasks: each reward waits on sandboxed processes)."""
    items = list(items)
    workers = min(task.reward_workers, len(items))
    if workers <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    contexts = [contextvars.copy_context() for _ in items]  # the caller's (its counters)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda c, x: c.run(fn, x), contexts, items))


def _start(text: str) -> str:
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")
