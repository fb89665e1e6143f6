"""Tasks: a train and a test split of problems, and a verifiable reward.

A task is any object with
    name: str
    train() -> list[Problem]      problems the policy is trained on
    test() -> list[Problem]       held-out problems for evaluation (disjoint from train)
    reward(completion: str, problem: Problem) -> float
``TASKS`` maps a name to a factory taking no arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Problem:
    prompt: str  # the text the model continues
    answer: str  # the gold answer the reward checks against


class Task(Protocol):
    name: str

    def train(self) -> list[Problem]: ...

    def test(self) -> list[Problem]: ...

    def reward(self, completion: str, problem: Problem) -> float: ...


def _arithmetic() -> Task:
    from pods.tasks.arithmetic import Arithmetic

    return Arithmetic()


TASKS: dict[str, Callable[[], Task]] = {"arithmetic": _arithmetic}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; use one of {', '.join(sorted(TASKS))}.")
    return TASKS[name]()
