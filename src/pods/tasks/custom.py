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
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pods.tasks.base import Graded, Problem, Task
from pods.tasks.math.rewards import PAPER_WEIGHTS, MathRewardConfig, math_graded, math_reward

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
    """The records of a --data-file, each checked: a broken JSON line, a record without a
    ``prompt`` or ``answer`` (or with null), or an empty file is one error naming the file
    and the line (JSONL) or record number (JSON, Parquet), before any model is loaded."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--data-file {path} does not exist.")
    readers = {".jsonl": _json_lines, ".json": _json_file, ".parquet": _parquet_rows}
    if path.suffix not in readers:
        raise ValueError(f"--data-file {path}: use a .jsonl, .json or .parquet file.")
    rows = readers[path.suffix](path)  # [(where, record)]
    if not rows:
        raise ValueError(f"--data-file {path} holds no records; write one JSON object per "
                         f"line with 'prompt' and 'answer' fields.")
    bad = [(where, _problem(record)) for where, record in rows if _problem(record)]
    if bad:
        more = f" (and {len(bad) - 1} more records)" if len(bad) > 1 else ""
        raise ValueError(f"--data-file {path}, {bad[0][0]}: {bad[0][1]}{more}; every record "
                         f"needs a 'prompt' and an 'answer' that are not null.")
    return [record for _, record in rows]


def _problem(record) -> str | None:
    """What is wrong with one record, or None."""
    if not isinstance(record, dict):
        return f"expected a JSON object, found {type(record).__name__}"
    missing = [k for k in ("prompt", "answer") if k not in record]
    null = [k for k in ("prompt", "answer") if k in record and record[k] is None]
    if missing or null:
        return "; ".join([f"no {k!r} field" for k in missing] + [f"{k!r} is null" for k in null])
    return None


def _json_lines(path: Path) -> list[tuple[str, dict]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            rows.append((f"line {number}", _parse(line, path, f"line {number}")))
    return rows


def _json_file(path: Path) -> list[tuple[str, dict]]:
    """A JSON list of records, or one record per line (as .jsonl) in a .json file."""
    text = path.read_text(encoding="utf-8")
    if not text.lstrip().startswith("["):
        return _json_lines(path)
    records = _parse(text, path, "")
    return [(f"record {i + 1}", record) for i, record in enumerate(records)]


def _parse(text: str, path: Path, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        at = where or f"line {error.lineno}"
        raise ValueError(f"--data-file {path}, {at}: not valid JSON ({error.msg} at column "
                         f"{error.colno}).") from None


def _parquet_rows(path: Path) -> list[tuple[str, dict]]:
    from datasets import load_dataset

    rows = load_dataset("parquet", data_files=str(path), split="train")
    return [(f"record {i + 1}", row) for i, row in enumerate(rows)]


class CustomTask(Task):
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

    def graded(self, completion: str, problem: Problem) -> Graded:
        """The math reward's grading can fail (and says so); a user's function cannot."""
        if self._fn is None:
            return math_graded(completion, problem.answer, self.weights)
        return super().graded(completion, problem)


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
