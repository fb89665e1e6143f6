"""The embedded task: addition of two zero-padded numbers, the sum written reversed.

    "07+85=" -> "290"      (7 + 85 = 092, written least-significant digit first)

Made by the project so that training runs anywhere without downloads; the reward is 1 for
the exact answer and 0 otherwise. Writing the sum least-significant digit first and padding
the operands to a fixed width makes each answer digit depend on two aligned digits and a
carry, which a tiny transformer learns in seconds rather than hours (Lee et al. 2023,
"Teaching Arithmetic to Small Transformers"). Problems with carries are harder than those
without, so a partly trained policy solves some groups always, some never and many
sometimes: the situation where choosing which rollouts to train on matters.

All operand pairs are shuffled deterministically by ``seed`` and cut into a test split
(1/``test_fraction`` of them) and a train split, so the splits never overlap.
"""

from __future__ import annotations

import numpy as np

from pods.tasks.base import Problem, Task


class Arithmetic(Task):
    name = "arithmetic"
    alphabet = "0123456789+="  # every character a prompt or an answer uses

    def __init__(self, digits: int = 2, seed: int = 1234, test_fraction: int = 10):
        self.digits, self.seed, self.test_fraction = digits, seed, test_fraction
        self._splits: tuple[list[Problem], list[Problem]] | None = None

    def train(self) -> list[Problem]:
        return self._make()[0]

    def test(self) -> list[Problem]:
        return self._make()[1]

    def reward(self, completion: str, problem: Problem) -> float:
        return 1.0 if completion.strip() == problem.answer else 0.0

    def problem(self, a: int, b: int) -> Problem:
        d = self.digits
        return Problem(prompt=f"{a:0{d}d}+{b:0{d}d}=", answer=f"{a + b:0{d + 1}d}"[::-1])

    def _make(self) -> tuple[list[Problem], list[Problem]]:
        """Every pair of operands, shuffled by ``seed``: the first 1/test_fraction of the
        permutation is the test split, the rest the train split."""
        if self._splits is None:
            size = 10**self.digits
            codes = np.random.default_rng(self.seed).permutation(size * size).tolist()
            problems = [self.problem(*divmod(code, size)) for code in codes]
            cut = len(problems) // self.test_fraction
            self._splits = (problems[cut:], problems[:cut])
        return self._splits
