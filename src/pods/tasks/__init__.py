"""Tasks: a train and a test split of problems, and a verifiable reward.

``Task`` and ``Problem`` (pods.tasks.base) say what a task is. ``TASKS`` maps a name to a
factory taking the task group of the config (``TaskConfig``) and the run's seed: a new task
is a module of its own under pods/tasks/ plus one entry here. ``task_problems`` checks a
run's task settings before anything loads (pods.train.checks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pods.config.checks import one_of
from pods.config.groups import TaskConfig
from pods.tasks.base import Graded, Problem, Task

__all__ = ["TASKS", "Graded", "Problem", "Task", "get_task", "task_problems"]


def _arithmetic(config: TaskConfig, seed: int) -> Task:
    from pods.tasks.arithmetic import Arithmetic

    return Arithmetic()


def _math(name: str) -> Callable[[TaskConfig, int], Task]:
    def make(config: TaskConfig, seed: int) -> Task:
        from pods.tasks.math import tasks as math_tasks

        return getattr(math_tasks, name)(config.data_dir, config.math)

    return make


def _code(name: str) -> Callable[[TaskConfig, int], Task]:
    def make(config: TaskConfig, seed: int) -> Task:
        from pods.tasks.code import tasks as code

        return getattr(code, name)(config.data_dir, config.code)

    return make


def _chemistry(config: TaskConfig, seed: int) -> Task:
    from pods.tasks.chemistry import chemistry

    return chemistry(config)


def _wordproblems(config: TaskConfig, seed: int) -> Task:
    from pods.tasks.wordproblems import WordProblems

    return WordProblems(config.levels, config.math)  # fixed problems: the same for every seed


def _custom(config: TaskConfig, seed: int) -> Task:
    from pods.tasks.custom import CustomTask

    return CustomTask(config.data_file, config.reward_fn, config.math, seed)


TASKS: dict[str, Callable[[TaskConfig, int], Task]] = {
    "arithmetic": _arithmetic,
    "gsm8k": _math("gsm8k"),
    "math": _math("math"),
    "amc23": _math("amc23"),
    "code": _code("code"),
    "mbpp": _code("mbpp"),
    "humaneval": _code("humaneval"),
    "chemistry": _chemistry,
    "wordproblems": _wordproblems,
    "custom": _custom,
}


def task_problems(task: TaskConfig, model: str) -> Iterator[str]:
    """What is wrong with a run's task settings that can be told before any data loads: a
    task name not in ``TASKS``, the embedded model on a task whose text it cannot read,
    word-problem levels that do not parse."""
    unknown = list(one_of("task", task.name, TASKS))
    if unknown:
        yield from unknown
        return
    if model == "tiny" and task.name != "arithmetic":
        yield f"the embedded model 'tiny' only knows the arithmetic task's characters; for " \
              f"task {task.name!r} pass a real model with --model (hub id, folder, .gguf " \
              f"file or smollm2)."
    if task.name == "wordproblems":
        from pods.tasks.wordproblems import parse_levels

        try:
            parse_levels(task.levels)
        except ValueError as error:
            yield str(error)


def get_task(name: str, config: TaskConfig | None = None, seed: int = 0) -> Task:
    """Task ``name`` with the data and reward settings of ``config`` (its own name field is
    not read, so evaluation can build other test sets with the run's settings); ``seed``
    splits the custom task's data."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; use one of {', '.join(sorted(TASKS))}.")
    return TASKS[name](config or TaskConfig(), seed)
