"""What a task is: ``Problem``, one prompt and its gold answer, and ``Task``, the interface
every task implements (subclass it).

A task defines
    name: str
    train() -> list[Problem]      problems the policy is trained on
    test() -> list[Problem]       held-out problems for evaluation (disjoint from train)
    reward(completion, problem) -> float
and may override any optional member, each defaulted here:
    system_prompt     None: prompts go through the chat template without a system turn
    reward_workers    1: rewards computed one at a time (the code tasks use threads, each
                      waiting on sandboxed processes)
    reward_name       None: messages call the reward ``<class name>.reward``
    correct(completion, problem) -> bool | None
                      None: evaluation counts a reward of at least 1 as correct
    format_ok(completion) -> bool | None
                      None: the task asks for no layout (no format accuracy is reported)
    graded(completion, problem) -> Graded
                      the reward and whether grading failed (an answer the grader could
                      not compare: an error or a timeout, graded wrong); default: the
                      reward, never failed
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class Problem:
    prompt: str  # the text the model continues
    answer: str  # the gold answer the reward checks against


class Graded(NamedTuple):
    """A reward and whether grading failed (the answer graded wrong because the grader
    could not compare it: counted in ``rollout/grading_failures``)."""

    value: float
    failed: bool = False


class Task:
    """A train and a test split of problems and a verifiable reward (see the module)."""

    name: str
    system_prompt: str | None = None
    reward_workers: int = 1
    reward_name: str | None = None

    def train(self) -> list[Problem]:
        raise NotImplementedError(f"{type(self).__name__} defines no train()")

    def test(self) -> list[Problem]:
        raise NotImplementedError(f"{type(self).__name__} defines no test()")

    def reward(self, completion: str, problem: Problem) -> float:
        raise NotImplementedError(f"{type(self).__name__} defines no reward()")

    def correct(self, completion: str, problem: Problem) -> bool | None:
        """Whether ``completion`` answers ``problem``; None: judge by the reward."""
        return None

    def format_ok(self, completion: str) -> bool | None:
        """Whether ``completion`` has the layout the task asks for; None: it asks for none."""
        return None

    def graded(self, completion: str, problem: Problem) -> Graded:
        """The reward and whether grading failed; tasks whose grader can fail override it."""
        return Graded(self.reward(completion, problem))
