"""SciKnowEval chemistry: questions with an exactly checkable answer, graded without a judge.

Source: the Hugging Face hub dataset ``hicai-zju/SciKnowEval``, config ``v2``, split ``test``
(``data/v2/sciknoweval_test_v2.jsonl``: 28,392 questions in Biology, Chemistry, Material and
Physics, levels L1-L5; the same rows as ``raw_data/`` in github.com/HICAI-ZJU/SciKnowEval).
Each row (one JSON object per line):

    question   str    the question (L2 rows start with the passage it is about)
    choices    {"text": [str, ...], "label": ["A", "B", ...]}   empty lists unless multiple choice
    answerKey  str    the gold option letter of mcq-4-choices / mcq-2-choices rows, else ""
    answer     str    the gold of true_or_false ("Yes"/"No") and filling rows, else ""
    type       str    mcq-4-choices, mcq-2-choices, true_or_false, filling, open-ended-qa,
                      relation_extraction
    domain     str    Biology, Chemistry, Material, Physics
    details    {"level": "L1".."L5", "task": str, "subtask": str, "source": str}
    prompt     {"default": str}   the benchmark's instruction for the row's task

Kept: Chemistry rows of the exactly checkable types (``EXACT_TYPES``): multiple choice (gold:
the letter), true/false (gold "True"/"False", from "Yes"/"No") and filling (chemistry's one
filling task, balancing an equation; gold: the balanced equation). Dropped and counted in
``ChemistryTask.counts``: open-ended-qa and relation_extraction, which the benchmark scores with
an LLM judge or word vectors. Rows with the same prompt are kept once. On the 8,994 chemistry
rows of v2 (counted on raw_data/): 6,263 + 1,131 + 300 kept (one true/false row is a duplicate),
899 + 400 dropped. ``levels=("L3",)`` keeps 2,100 + 300 = 2,400 (SDPO's chemistry set: the
2,100 L3 multiple-choice questions).

The hub has only a test split, so the task makes its own: a seeded permutation (``SPLIT_SEED``,
fixed on purpose: every training seed of a comparison, and ``pods eval``, see the same test
set) holds out ``TEST_FRACTION`` of the problems (769 of 7,694) as the test set.
Grading: see ``grade``; prompts: see ``render``.

Offline: ``--data-dir DIR`` reads ``DIR/sciknoweval/test.jsonl`` (.json and .parquet work too)
in the hub's row format, e.g. the hub file itself, or
``load_dataset("hicai-zju/SciKnowEval", "v2")["test"].to_json(...)`` on a machine with network.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from pods.config.groups import TaskConfig
from pods.tasks.base import Problem, Task
from pods.tasks.math.rewards import PAPER_WEIGHTS, MathRewardConfig, format_correct
from pods.tasks.math.tasks import Source

HUB_ID = "hicai-zju/SciKnowEval"
DOMAIN = "Chemistry"
MCQ_TYPES = ("mcq-4-choices", "mcq-2-choices")
EXACT_TYPES = (*MCQ_TYPES, "true_or_false", "filling")
SPLIT_SEED = 0
TEST_FRACTION = 0.1
MAX_COMPLETION_CHARS = 20_000  # only the tail of a longer completion is searched

SYSTEM_PROMPT = """
You will be given a chemistry question.
Reason about the question and correct your own mistakes if you make any.

Respond in the following format:
<think>
Reason here. Decide to answer when you are confident as your response length is limited.
</think>
<answer>
Only the final answer: the letter of the correct option (e.g. B) for a multiple-choice
question, True or False for a true/false question, or the balanced equation when asked to
balance one.
</answer>
"""

# ---------------------------------------------------------------- grading

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
# A stated answer in free text: "the answer is (B)", "Answer: True", "option C", "choice (A)".
# The letter must be a capital A-D: "the answer is a mixture" and "carbon (C)" are not answers.
_STATED = re.compile(r"\b(?:answer|option|choice)(?:\s+is)?\s*[:=-]?\s*[*_`'\"(\[]*\s*"
                     r"((?-i:[A-D])|true|false|yes|no)(?!\w)", re.IGNORECASE)
_WRAP = " \t\r\n*_`'\"“”.,:;!"  # markdown, quotes and punctuation around an answer
_LETTER = re.compile(r"(?:(?:option|choice)\s*[:-]?\s*)?[(\[]?([A-Za-z])(?:[)\].:]\s*\S.*)?[)\]]?",
                     re.DOTALL | re.IGNORECASE)
_TRUTH = {"true": "true", "yes": "true", "false": "false", "no": "false"}
_BARE = re.compile(r"[(\[]?[A-Za-z][)\]]?|true|false|yes|no", re.IGNORECASE)
_TRUTH_FIRST = re.compile(r"(true|false|yes|no)(?:[.,;:!]\s.*)?", re.DOTALL | re.IGNORECASE)
_ARROW = re.compile(r"\\(?:long)?rightarrow|<=>|<->|->|=>|[→⟶⇌⇒]")
_ONE = re.compile(r"(^|[+=])1(?=[A-Z(\[])")  # an explicit coefficient 1


def answer_kind(gold: str) -> str:
    """What a gold answer is: "letter" (an option), "truth" (true/false) or "equation"."""
    gold = gold.strip()
    if re.fullmatch(r"[A-Z]", gold):
        return "letter"
    return "truth" if gold.lower() in _TRUTH else "equation"


def extract_answer(completion: str) -> str | None:
    """The content of the completion's last <answer>...</answer> block, or None."""
    tagged = _TAG.findall(completion[-MAX_COMPLETION_CHARS:])
    return tagged[-1] if tagged else None


def stated_answer(text: str, kind: str) -> str | None:
    """The last option letter (kind "letter") or true/false word (kind "truth") that the
    text states as its answer: "the answer is (B)", "Answer: True", "option C"."""
    found = [m for m in _STATED.findall(text) if (len(m) == 1) == (kind == "letter")]
    return found[-1] if found else None


def normalize(answer: str, kind: str) -> str | None:
    """The canonical form of an answer of ``kind``: an upper-case letter ("(b)", "B. text",
    "Option B", "The answer is B." -> "B"), "true"/"false" (True/Yes, False/No), or an
    equation without spaces, with "=" for arrows and no coefficient 1; None if not one."""
    if kind == "equation":
        return _equation(answer)
    text = answer.strip(_WRAP)
    match = (_LETTER if kind == "letter" else _TRUTH_FIRST).fullmatch(text)
    word = match.group(1) if match else stated_answer(text, kind)
    if word is None:
        return None
    return word.upper() if kind == "letter" else _TRUTH[word.lower()]


def _equation(answer: str) -> str | None:
    lines = [line for line in answer.strip().splitlines() if line.strip()]
    if not lines:
        return None
    text = lines[-1].rsplit(":", 1)[-1]  # "The balanced equation is: ..." -> the equation
    text = _ARROW.sub("=", re.sub(r"\s+", "", text)).strip(_WRAP)
    return _ONE.sub(r"\1", text) if "=" in text else None


def grade(completion: str, gold: str) -> bool:
    """Whether the completion's final answer equals the gold exactly after ``normalize``.

    The answer is the last <answer>...</answer> block. Without one: the whole completion if
    it is a bare answer ("B", "True"), else the last answer it states ("the answer is (B)");
    an equation is only read from the tag.
    """
    kind = answer_kind(gold)
    answer = extract_answer(completion)
    if answer is None:
        if kind == "equation":
            return False
        bare = completion.strip(_WRAP)
        answer = bare if _BARE.fullmatch(bare) else stated_answer(
            completion[-MAX_COMPLETION_CHARS:], kind)
    normal = None if answer is None else normalize(answer, kind)
    return normal is not None and normal == normalize(gold, kind)


# ---------------------------------------------------------------- rows -> problems

_MUZZLE = re.compile(r"your answer should be|directly give the answer|do not output",
                     re.IGNORECASE)


def row_type(row: dict) -> str:
    kind = row["type"]
    return kind[0] if isinstance(kind, list) else kind  # the upstream scorer allows a list


def gold(row: dict) -> str:
    """The gold answer: the option letter, "True"/"False", or the balanced equation ("" when
    the row has none)."""
    kind = row_type(row)
    if kind in MCQ_TYPES:
        return (row.get("answerKey") or "").strip()
    answer = (row.get("answer") or "").strip()
    if kind == "true_or_false":
        truth = _TRUTH.get(answer.lower())
        return {"true": "True", "false": "False"}.get(truth, "")
    return answer


def instruction(row: dict) -> str:
    """The benchmark's instruction for the row's task without its "answer with nothing else"
    sentences, which would forbid the reasoning the system prompt asks for."""
    text = row.get("prompt") or ""
    if isinstance(text, dict):
        text = text.get("default") or ""
    sentences = re.split(r"(?<=[.!?])\s+", text.replace(" without any explanation", ""))
    return " ".join(s for s in sentences if s and not _MUZZLE.search(s))


def render(row: dict) -> str:
    """The problem text: instruction, question, lettered options, how to answer."""
    choices = row.get("choices") or {}
    labels, texts = choices.get("label") or [], choices.get("text") or []
    options = "\n".join(f"{label}. {text}" for label, text in zip(labels, texts, strict=True))
    kind = row_type(row)
    if kind in MCQ_TYPES:
        letters = ", ".join(labels[:-1]) + f" or {labels[-1]}" if labels else "A, B, C or D"
        how = f"Answer with the letter of the correct option ({letters})."
    elif kind == "true_or_false":
        how = "Answer True or False."
    else:
        how = "Answer with the balanced equation, written like the one given."
    parts = (instruction(row), row["question"].strip(), options, how)
    return "\n\n".join(part for part in parts if part)


def select(rows, levels: tuple[str, ...] | None = None) -> tuple[list[Problem], Counter]:
    """The problems of the chemistry rows of an exactly checkable type (of ``levels``, None:
    all), each prompt once, and counts of what was kept and dropped, and why."""
    counts: Counter = Counter()
    answers: dict[str, str] = {}
    for row in rows:
        counts["rows"] += 1
        kind = row_type(row)
        if row.get("domain") != DOMAIN:
            counts["other_domains"] += 1
        elif levels is not None and (row.get("details") or {}).get("level") not in levels:
            counts["other_levels"] += 1
        elif kind not in EXACT_TYPES:
            counts[f"dropped/{kind}"] += 1  # scored by an LLM judge or word vectors upstream
        elif not gold(row):
            counts["dropped/no_gold"] += 1
        else:
            prompt, answer = render(row), gold(row)
            counts["duplicates" if prompt in answers else f"kept/{kind}"] += 1
            if answers.setdefault(prompt, answer) != answer:
                answers[prompt] = ""  # the same question with two golds: dropped
    problems = [Problem(prompt=p, answer=a) for p, a in answers.items() if a]
    counts["conflicting"] = len(answers) - len(problems)
    return problems, counts


def split(problems: list[Problem], seed: int = SPLIT_SEED,
          test_fraction: float = TEST_FRACTION) -> tuple[list[Problem], list[Problem]]:
    """(train, test): a seeded permutation; its first ``test_fraction`` (at least one) is
    the test set."""
    order = np.random.default_rng(seed).permutation(len(problems))
    cut = max(1, round(len(problems) * test_fraction)) if problems else 0
    return [problems[i] for i in order[cut:]], [problems[i] for i in order[:cut]]


SOURCE = Source(HUB_ID, ("v2",), "test", "sciknoweval/test", "question", gold)


# ---------------------------------------------------------------- the task


class ChemistryTask(Task):
    """SciKnowEval chemistry (see the module docstring): the paper's <think>/<answer> format,
    reward = correctness * grade + format * format_correct."""

    name = "chemistry"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, data_dir: str | None = None, weights: MathRewardConfig = PAPER_WEIGHTS,
                 levels: tuple[str, ...] | None = None, split_seed: int = SPLIT_SEED,
                 test_fraction: float = TEST_FRACTION):
        self.data_dir, self.weights, self.levels = data_dir, weights, levels
        self.split_seed, self.test_fraction = split_seed, test_fraction
        self.counts: Counter = Counter()  # filled on the first train() or test()
        self._splits: tuple[list[Problem], list[Problem]] | None = None

    def train(self) -> list[Problem]:
        return self._load()[0]

    def test(self) -> list[Problem]:
        return self._load()[1]

    def reward(self, completion: str, problem: Problem) -> float:
        reward = self.weights.correctness * float(grade(completion, problem.answer))
        if self.weights.format:
            reward += self.weights.format * float(format_correct(completion))
        return reward

    def correct(self, completion: str, problem: Problem) -> bool:
        return grade(completion, problem.answer)

    def format_ok(self, completion: str) -> bool:
        return format_correct(completion)

    def _load(self) -> tuple[list[Problem], list[Problem]]:
        if self._splits is None:
            problems, self.counts = select(SOURCE.rows(self.data_dir), self.levels)
            if not problems:
                raise ValueError(f"no {DOMAIN} questions of types {', '.join(EXACT_TYPES)} "
                                 f"in the {HUB_ID} rows ({dict(self.counts)}).")
            self._splits = split(problems, self.split_seed, self.test_fraction)
        return self._splits


def chemistry(config: TaskConfig) -> ChemistryTask:
    """The registry's factory. The run's seed is not used: the split is fixed (SPLIT_SEED)
    so that runs with different seeds share a test set."""
    return ChemistryTask(config.data_dir, config.math)
