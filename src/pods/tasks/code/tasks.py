"""Code tasks: the model writes a Python program, the reward runs it against the problem's
tests in the sandbox (pods.sandbox), so that only positive evidence counts
(pods.tasks.code.judge): assert tests run in a judge sandbox apart from the program, calls
and outputs are compared here.

    code        LiveCodeBench (code_generation_lite, release v6): stdin/stdout and
                LeetCode-style method tests; the newest fifth of the problems by contest
                date is the test split
    mbpp        MBPP (full): assert tests; its own train and test splits
    humaneval   HumanEval: check() as one test; a test set only

Reward: the fraction of the problem's tests that pass (``code_reward: all``: 1 only if all
pass), over at most ``code_max_tests`` tests per problem per step (the first ones: public
tests come first). Evaluation reports pass@1, all tests passing, as ``eval/accuracy``.
Test outcomes are cached per (program, problem), so evaluation's reward and pass@1 run each
test once.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from functools import lru_cache

from pods.config.groups import CodeConfig
from pods.tasks.base import Problem, Task
from pods.tasks.code.data import (
    LIVECODEBENCH,
    MBPP,
    Suite,
    by_date,
    humaneval_problems,
    to_problems,
)

SYSTEM_PROMPT = """
You are an expert Python programmer. You will be given a programming problem.
Think about it, then write one complete Python program that solves it.

Respond in the following format:
<think>
Reason here.
</think>
```python
# the complete solution
```
"""

REWARDS = ("fraction", "all")
PYTHON_FENCES = ("python", "python3", "py", "")
# LeetCode-style solutions use these names without importing them (LiveCodeBench does the same)
CALL_PRELUDE = "from typing import *\nimport bisect, collections, heapq, itertools, math, re\n" \
               "from collections import *\nfrom functools import *\n"


def extract_code(completion: str) -> str | None:
    """The last closed fenced Python block (```python, ```py, ```python3 or a bare ```), or
    None if there is none (a block cut off by the length limit does not count)."""
    blocks, body, language = [], None, ""
    for line in completion.splitlines():
        if line.lstrip().startswith("```"):
            if body is None:
                body, language = [], line.strip()[3:].strip().lower()
            else:
                if language in PYTHON_FENCES:
                    blocks.append("\n".join(body))
                body = None
        elif body is not None:
            body.append(line)
    return blocks[-1] if blocks else None


def outputs_match(got: str, expected: str) -> bool:
    """stdout against the expected output, line by line, ignoring trailing whitespace and
    trailing empty lines."""
    def lines(text: str) -> list[str]:
        out = [line.rstrip() for line in text.strip("\n").splitlines()]
        while out and not out[-1]:
            out.pop()
        return out

    return lines(got) == lines(expected)


DEFAULT_CODE = CodeConfig()


_said: set[str] = set()


def _say_once(line: str) -> None:
    """Print ``line`` to stderr the first time this process says it (a run's log)."""
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr)


class CodeTask(Task):
    """A code-generation task whose reward executes tests in the sandbox."""

    system_prompt = SYSTEM_PROMPT

    def __init__(self, name: str, train: list[Problem] | None, test: list[Problem],
                 options: CodeConfig = DEFAULT_CODE):
        from pods.sandbox import SandboxUnavailable, cgroup, default_workers
        from pods.sandbox.isolation import resolve

        try:  # before any model loads: the reward cannot run without a sandbox
            mode = resolve(None)
        except SandboxUnavailable as error:
            raise ValueError(f"task {name} runs model-written programs in pods.sandbox, "
                             f"which cannot start here: {error}") from None
        _say_once(f"pods.sandbox: {mode}; a program's total memory is bounded by "
                  f"{cgroup.bound()}")
        self.name, self._train, self._test, self.options = name, train, test, options
        self.reward_workers = options.workers or default_workers()  # pods.tasks.scoring

    def train(self) -> list[Problem]:
        if self._train is None:
            raise ValueError(f"{self.name} is a test set only; train on code or mbpp and "
                             f"evaluate on {self.name} with `pods eval RUN --task {self.name}`.")
        return self._train

    def test(self) -> list[Problem]:
        return self._test

    def reward(self, completion: str, problem: Problem) -> float:
        code = extract_code(completion)
        if code is None:
            return 0.0
        count = len(Suite.from_answer(problem.answer).cases)
        count = min(count, self.options.max_tests or count)
        passed = self._outcomes(code, problem.answer, count)
        if self.options.reward == "all":
            return float(all(passed))
        return sum(passed) / count if count else 0.0

    def correct(self, completion: str, problem: Problem) -> bool:
        """pass@1: every test of the problem passes."""
        code = extract_code(completion)
        count = len(Suite.from_answer(problem.answer).cases)
        return code is not None and all(self._outcomes(code, problem.answer, count))

    def format_ok(self, completion: str) -> bool:
        return extract_code(completion) is not None

    def _outcomes(self, code: str, answer: str, count: int) -> tuple[bool, ...]:
        o = self.options
        return run_tests(code, answer, count, o.test_timeout, o.memory_mb)


class _Outcomes:
    """The outcomes of a problem's first tests for one program, extended on demand."""

    def __init__(self) -> None:
        self.lock, self.passed = threading.Lock(), ()


@lru_cache(maxsize=65536)
def _cached(code: str, answer: str, timeout_s: float, memory_mb: int) -> _Outcomes:
    return _Outcomes()


def run_tests(code: str, answer: str, count: int, timeout_s: float, memory_mb: int
              ) -> tuple[bool, ...]:
    """Whether ``code`` passes each of the first ``count`` tests of the problem whose tests
    are ``answer``; each test runs once per (program, problem, limits), thread-safe."""
    outcomes = _cached(code, answer, timeout_s, memory_mb)
    with outcomes.lock:
        done = len(outcomes.passed)
        if done < count:
            outcomes.passed += _run(code, Suite.from_answer(answer), done, count, timeout_s,
                                    memory_mb)
        return outcomes.passed[:count]


def run_test(code: str, answer: str, index: int, timeout_s: float, memory_mb: int) -> bool:
    """Whether ``code`` passes test ``index`` of the problem whose tests are ``answer``."""
    return run_tests(code, answer, index + 1, timeout_s, memory_mb)[index]


def _run(code: str, tests: Suite, start: int, count: int, timeout_s: float, memory_mb: int
         ) -> tuple[bool, ...]:
    """Tests ``start`` .. ``count - 1``: asserts in a judge sandbox, calls and outputs
    compared here (the expected values never enter a sandbox)."""
    from pods.sandbox import Limits, run_python
    from pods.tasks.code.judge import run_asserts, run_calls

    limits, tests = Limits(timeout_s, memory_mb), replace(tests, cases=tests.cases[:count])
    if tests.kind == "assert":
        return run_asserts(code, tests, limits, start)
    if tests.kind == "call":
        return run_calls(code, tests, limits, start, CALL_PRELUDE)
    cases = tests.cases[start:]
    runs = [run_python(code, stdin, limits) for stdin, _ in cases]
    return tuple(r.status == "ok" and not r.truncated and outputs_match(r.stdout, expected)
                 for r, (_, expected) in zip(runs, cases, strict=True))


def code(data_dir: str | None, options: CodeConfig) -> CodeTask:
    train, test = by_date(LIVECODEBENCH.rows(data_dir))
    return CodeTask("code", to_problems(train, LIVECODEBENCH),
                    to_problems(test, LIVECODEBENCH), options)


def mbpp(data_dir: str | None, options: CodeConfig) -> CodeTask:
    return CodeTask("mbpp", MBPP["train"].load(data_dir), MBPP["test"].load(data_dir), options)


def humaneval(data_dir: str | None, options: CodeConfig) -> CodeTask:
    return CodeTask("humaneval", None, humaneval_problems(data_dir), options)
