"""GSM8K, MATH (test: MATH-500) and AMC23 with the paper's prompt and rewards.

Data comes from the Hugging Face hub under the names the community uses (as in the official
PODS code), or, on offline machines, from local files given with ``--data-dir DIR``:

    DIR/gsm8k/train.jsonl   DIR/gsm8k/test.jsonl     fields: question, answer ("... #### 42")
    DIR/math/train.jsonl    DIR/math/test.jsonl      train: problem, solution (\\boxed{} answer)
                                                     test (MATH-500): problem, answer
    DIR/amc23/test.jsonl                             fields: question, answer

(.json and .parquet work too.) The records are exactly the hub datasets' rows, so on a
machine with network ``load_dataset(...)[split].to_json("DIR/gsm8k/train.jsonl")`` makes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pods.tasks.base import Problem
from pods.tasks.math.answers import extract_boxed
from pods.tasks.math.rewards import PAPER_WEIGHTS, MathGraded, MathRewardConfig

# The official code's system prompt for instruct models (arXiv 2504.13818's code).
SYSTEM_PROMPT = """
You will be given a math question.
Reason about the question and correct your own mistakes if you make any.

Respond in the following format:
<think>
Reason here. Decide to answer when you are confident as your response length is limited.
</think>
<answer>
Answer here.
</answer>
"""

MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra",
                 "number_theory", "prealgebra", "precalculus")
EXTENSIONS = (".jsonl", ".json", ".parquet")


def gsm8k_gold(answer: str) -> str:
    """GSM8K: the text after '####', thousands separators removed."""
    return answer.split("####")[-1].strip().replace(",", "")


def math_gold(solution: str) -> str:
    """MATH: the content of the solution's last \\boxed{...} (nested braces handled)."""
    gold = extract_boxed(solution)
    if gold is None:
        raise ValueError(f"MATH solution without a \\boxed{{}} answer: {solution[:80]!r}...")
    return gold


def amc_gold(answer) -> str:
    """AMC23: answers are integers, sometimes stored as floats (12.0 -> '12')."""
    value = float(answer)
    return str(int(value)) if value.is_integer() else str(answer)


@dataclass(frozen=True)
class Source:
    """One split of one hub dataset, and how to turn its rows into problems."""

    hub_id: str
    configs: tuple[str | None, ...]  # hub configs concatenated (MATH has one per subject)
    split: str
    local: str  # file stem under --data-dir, e.g. "gsm8k/train"
    question: str  # field holding the question
    gold: Callable[[dict], str]  # row -> gold answer
    prompt: Callable[[dict], str] | None = None  # row -> prompt; None: the question field
    data_files: tuple[str, ...] = ()  # hub files to read (datasets without loading script)

    def rows(self, data_dir: str | None) -> list[dict]:
        return local_rows(self, Path(data_dir)) if data_dir else hub_rows(self)

    def load(self, data_dir: str | None) -> list[Problem]:
        prompt = self.prompt or (lambda row: row[self.question])
        return [Problem(prompt=prompt(row), answer=self.gold(row))
                for row in self.rows(data_dir)]


def hub_rows(source: Source) -> list[dict]:
    from datasets import load_dataset

    from pods.runtime.hub import before_hub_data

    before_hub_data()  # no network: a cached dataset, or the error below at once

    files = {"data_files": {source.split: list(source.data_files)}} if source.data_files \
        else {}
    rows: list[dict] = []
    for config in source.configs:
        try:
            rows.extend(load_dataset(source.hub_id, config, split=source.split, **files))
        except Exception as error:  # offline, missing, renamed: say how to provide the files
            raise ValueError(
                f"could not load {source.hub_id} ({config or 'default'}, split "
                f"{source.split}) from the Hugging Face hub: {error}. On an offline machine, "
                f"write the rows to DIR/{source.local}.jsonl on a machine with network "
                f"(load_dataset({source.hub_id!r}, {config!r})[{source.split!r}]"
                f".to_json(...)) and pass --data-dir DIR.") from None
    return rows


def local_rows(source: Source, data_dir: Path) -> list[dict]:
    from datasets import load_dataset

    for ext in EXTENSIONS:
        path = data_dir / f"{source.local}{ext}"
        if path.is_file():
            kind = "parquet" if ext == ".parquet" else "json"
            return list(load_dataset(kind, data_files=str(path), split="train"))
    tried = ", ".join(str(data_dir / f"{source.local}{ext}") for ext in EXTENSIONS)
    raise ValueError(f"no data file for {source.hub_id} split {source.split}: tried {tried}. "
                     f"Put the dataset's rows there (fields: {source.question}, ...) or drop "
                     f"--data-dir to download from the hub.")


GSM8K = {split: Source("openai/gsm8k", ("main",), split, f"gsm8k/{split}", "question",
                       lambda row: gsm8k_gold(row["answer"])) for split in ("train", "test")}
MATH_TRAIN = Source("EleutherAI/hendrycks_math", MATH_SUBJECTS, "train", "math/train", "problem",
                    lambda row: math_gold(row["solution"]))
MATH500 = Source("HuggingFaceH4/MATH-500", (None,), "test", "math/test", "problem",
                 lambda row: str(row["answer"]))
AMC23 = Source("zwhe99/amc23", (None,), "test", "amc23/test", "question",
               lambda row: amc_gold(row["answer"]))


class MathTask(MathGraded):
    """A math word-problem task: the paper's system prompt, rewards and answer grading."""

    system_prompt = SYSTEM_PROMPT

    def __init__(self, name: str, train: Source | None, test: Source,
                 data_dir: str | None = None, weights: MathRewardConfig = PAPER_WEIGHTS):
        self.name, self._train, self._test = name, train, test
        self.data_dir, self.weights = data_dir, weights
        self._cache: dict[str, list[Problem]] = {}

    def train(self) -> list[Problem]:
        if self._train is None:
            raise ValueError(f"{self.name} is a test set only; train on gsm8k or math and "
                             f"evaluate on {self.name} with `pods eval RUN --task {self.name}`.")
        return self._load("train", self._train)

    def test(self) -> list[Problem]:
        return self._load("test", self._test)

    def _load(self, split: str, source: Source) -> list[Problem]:
        if split not in self._cache:
            self._cache[split] = source.load(self.data_dir)
        return self._cache[split]


def gsm8k(data_dir=None, weights=PAPER_WEIGHTS) -> MathTask:
    return MathTask("gsm8k", GSM8K["train"], GSM8K["test"], data_dir, weights)


def math(data_dir=None, weights=PAPER_WEIGHTS) -> MathTask:
    return MathTask("math", MATH_TRAIN, MATH500, data_dir, weights)


def amc23(data_dir=None, weights=PAPER_WEIGHTS) -> MathTask:
    return MathTask("amc23", None, AMC23, data_dir, weights)
