"""Tasks: a train and a test split of problems, and a verifiable reward.

A task is any object with
    name: str
    train() -> list[Problem]      problems the policy is trained on
    test() -> list[Problem]       held-out problems for evaluation (disjoint from train)
    reward(completion: str, problem: Problem) -> float
and optionally ``system_prompt`` (str or None) for chat-templated prompts.
``TASKS`` maps a name to a factory taking ``TaskOptions``.
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


@dataclass(frozen=True)
class TaskOptions:
    """What a task may need from the config (each task uses what applies to it)."""

    data_dir: str | None = None  # local data files instead of the hub (math tasks)
    data_file: str | None = None  # the records of the custom task
    reward_fn: str | None = None  # "module:function" reward of the custom task
    correctness_weight: float = 1.0  # math rewards: reward for a correct answer
    format_weight: float = 0.1  # math rewards: weight of the format bonus
    tag_weight: float = 0.1  # math rewards: weight of the tag-count bonus
    seed: int = 0  # the custom task's train/test split
    code_test_timeout: float = 2.0  # code tasks: seconds per test
    code_memory_mb: int = 512  # code tasks: memory limit per test
    code_max_tests: int | None = 8  # code tasks: tests per problem per step
    code_reward: str = "fraction"  # code tasks: fraction of tests passed, or all
    sandbox_workers: int | None = None  # code tasks: rollouts scored at once (None: CPUs)


def _weights(o: TaskOptions):
    from pods.tasks.math.rewards import RewardWeights

    return RewardWeights(correctness=o.correctness_weight, format=o.format_weight,
                         tags=o.tag_weight)


def _arithmetic(o: TaskOptions) -> Task:
    from pods.tasks.arithmetic import Arithmetic

    return Arithmetic()


def _math(name: str) -> Callable[[TaskOptions], Task]:
    def make(o: TaskOptions) -> Task:
        from pods.tasks.math import tasks as math_tasks

        return getattr(math_tasks, name)(o.data_dir, _weights(o))

    return make


def _code(name: str) -> Callable[[TaskOptions], Task]:
    def make(o: TaskOptions) -> Task:
        from pods.tasks.code import tasks as code

        options = code.CodeOptions(test_timeout=o.code_test_timeout,
                                   memory_mb=o.code_memory_mb, max_tests=o.code_max_tests,
                                   reward=o.code_reward, workers=o.sandbox_workers)
        return getattr(code, name)(o.data_dir, options)

    return make


def _chemistry(o: TaskOptions) -> Task:
    from pods.tasks.chemistry import chemistry

    return chemistry(o)


def _custom(o: TaskOptions) -> Task:
    from pods.tasks.custom import CustomTask

    return CustomTask(o.data_file, o.reward_fn, _weights(o), o.seed)


TASKS: dict[str, Callable[[TaskOptions], Task]] = {
    "arithmetic": _arithmetic,
    "gsm8k": _math("gsm8k"),
    "math": _math("math"),
    "amc23": _math("amc23"),
    "code": _code("code"),
    "mbpp": _code("mbpp"),
    "humaneval": _code("humaneval"),
    "chemistry": _chemistry,
    "custom": _custom,
}


def get_task(name: str, options: TaskOptions = TaskOptions()) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; use one of {', '.join(sorted(TASKS))}.")
    return TASKS[name](options)
