"""Bring your own data and verifiable reward.

    pods train --task custom --data-file problems.jsonl --reward-fn my_rewards:exact

``--data-file``: a JSONL, JSON or Parquet file of records with ``prompt`` and ``answer``
fields (other fields are ignored). An optional ``split`` field ("train" or "test") assigns
records; without one, a fixed 10% of the records (chosen by a seeded shuffle) is the test set.

``--reward-fn module:function``: the reward, called as ``function(completion, answer)``
with two strings and returning a float (1.0 for a correct answer is the convention).
The module is imported by name, so it must be importable (installed, or on PYTHONPATH / in
the current folder). Without ``--reward-fn`` the paper's math reward is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pods.tasks import Problem
from pods.tasks.math.rewards import PAPER_WEIGHTS, MathRewardConfig, math_reward

RewardFn = Callable[[str, str], float]


def load_reward_fn(spec: str) -> RewardFn:
    """The function named by "module:function"."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--reward-fn {spec!r} must look like module:function, e.g. "
                         f"my_rewards:exact_match.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--reward-fn {spec!r}: cannot import module {module_name!r} "
                         f"({error}); put it on PYTHONPATH or in the current folder.") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"--reward-fn {spec!r}: {module_name} has no function {attr!r}.")
    return fn


def load_records(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--data-file {path} does not exist.")
    kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(path.suffix)
    if kind is None:
        raise ValueError(f"--data-file {path}: use a .jsonl, .json or .parquet file.")
    from datasets import load_dataset

    rows = list(load_dataset(kind, data_files=str(path), split="train"))
    missing = {"prompt", "answer"} - set(rows[0] if rows else {})
    if not rows or missing:
        raise ValueError(f"--data-file {path}: every record needs 'prompt' and 'answer' "
                         f"fields (missing: {', '.join(sorted(missing)) or 'all records'}).")
    return rows


class CustomTask:
    name = "custom"
    system_prompt = None

    def __init__(self, data_file: str | None, reward_fn: str | None = None,
                 weights: MathRewardConfig = PAPER_WEIGHTS, seed: int = 0):
        if data_file is None:
            raise ValueError("--task custom needs --data-file FILE (JSONL/Parquet records "
                             "with 'prompt' and 'answer').")
        self._fn = load_reward_fn(reward_fn) if reward_fn else None
        self.reward_name = reward_fn  # how reward errors name it (pods.tasks.scoring)
        self.weights = weights
        self._train, self._test = _split(load_records(data_file), seed)

    def train(self) -> list[Problem]:
        return self._train

    def test(self) -> list[Problem]:
        return self._test

    def reward(self, completion: str, problem: Problem) -> float:
        """The user's function's value as it returned it (pods.tasks.scoring checks that it is
        a finite number), or the math reward."""
        if self._fn is None:
            return math_reward(completion, problem.answer, self.weights)
        return self._fn(completion, problem.answer)


def _split(rows: list[dict], seed: int) -> tuple[list[Problem], list[Problem]]:
    problems = [Problem(prompt=str(r["prompt"]), answer=str(r["answer"])) for r in rows]
    if any("split" in r and r["split"] is not None for r in rows):
        splits = [r.get("split") for r in rows]
        bad = sorted({str(s) for s in splits} - {"train", "test"})
        if bad:
            raise ValueError(f"--data-file: 'split' must be train or test, found {bad}.")
        return ([p for p, s in zip(problems, splits, strict=True) if s == "train"],
                [p for p, s in zip(problems, splits, strict=True) if s == "test"])
    order = np.random.default_rng(seed).permutation(len(problems))
    cut = max(1, len(problems) // 10)
    return [problems[i] for i in order[cut:]], [problems[i] for i in order[:cut]]
