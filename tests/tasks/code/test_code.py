"""Code tasks: extraction, tests in both styles run in the sandbox, the fixture files in the
hub datasets' row formats (LiveCodeBench, MBPP, HumanEval), and a tiny end-to-end run."""

import base64
import json
import pickle
import zlib

import pytest

from fixture_data import FIXTURE_DATA
from pods.config import CodeConfig
from pods.tasks import get_task
from pods.tasks.code.data import Suite, _private_cases
from pods.tasks.code.tasks import CodeTask, extract_code, outputs_match
from runs import task_config

DATA = str(FIXTURE_DATA)


@pytest.mark.parametrize("completion, code", [
    ("```python\nprint(1)\n```", "print(1)"),
    ("<think>x</think>\n```py\na = 1\nprint(a)\n```\n", "a = 1\nprint(a)"),
    ("```\nprint(2)\n```", "print(2)"),  # a bare fence
    ("```python\nprint(1)\n```\nthen\n```python\nprint(3)\n```", "print(3)"),  # the last
    ("```python\nprint(1)\n```\n```cpp\nint main() {}\n```", "print(1)"),  # not C++
    ("```python\nprint(1)\n```\n```python\nprint(", "print(1)"),  # an unclosed block: cut
    ("print(1)", None), ("", None), ("```cpp\nint x;\n```", None),
    ("  ```Python3\n    x = 1\n  ```", "    x = 1"),
])
def test_extract_code(completion, code):
    assert extract_code(completion) == code


@pytest.mark.parametrize("got, expected, same", [
    ("3\n", "3\n", True), ("3", "3\n", True), ("3  \n\n", "3", True),
    ("1 2\n3\n", "1 2\n3", True), ("4\n", "3\n", False), ("3\n4\n", "3\n", False),
    (" 3\n", "3\n", False),  # leading whitespace counts
])
def test_outputs_match(got, expected, same):
    assert outputs_match(got, expected) is same


def test_private_tests_decode_json_and_compressed_pickles_but_no_globals():
    cases = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    packed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()
    assert _private_cases(packed) == cases == _private_cases(json.dumps(cases))

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refused to load builtins.print"):
        _private_cases(evil)


def task(name, **options):
    return get_task(name, task_config(data_dir=DATA, **options))


def test_livecodebench_fixture_splits_by_date_and_holds_both_test_kinds():
    code = task("code")
    train, test = code.train(), code.test()
    assert len(train) == 4 and len(test) == 1  # the newest fifth is held out
    assert "countPairs" in test[0].prompt and "```python" in test[0].prompt
    kinds = [Suite.from_answer(p.answer).kind for p in train]
    assert kinds == ["stdio", "stdio", "call", "stdio"]  # sorted by contest date
    assert len(Suite.from_answer(train[0].answer).cases) == 3  # public + private (pickled)
    assert "standard input" in train[0].prompt


SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
MAX_PAIR = ("```python\nclass Solution:\n    def maxPair(self, nums: List[int]) -> int:\n"
            "        a, b = sorted(nums)[-2:]\n        return a + b\n```")


def test_stdio_and_call_rewards():
    code = task("code")
    add, _, pair, _ = code.train()
    assert code.reward(SUM, add) == 1.0 and code.correct(SUM, add)
    wrong = SUM.replace("a + b", "a - b")  # passes only 0 0
    assert code.reward(wrong, add) == pytest.approx(1 / 3) and not code.correct(wrong, add)
    assert code.reward(MAX_PAIR, pair) == 1.0
    assert code.reward(MAX_PAIR.replace("[-2:]", "[:2]"), pair) == pytest.approx(1 / 3)
    assert code.reward("no code here", add) == 0.0
    assert code.reward("```python\nwhile True: pass\n```", add) == 0.0  # per-test timeout


def test_all_or_nothing_and_test_cap():
    add = task("code").train()[0]
    wrong = SUM.replace("a + b", "a - b")
    assert task("code", code_reward="all").reward(wrong, add) == 0.0
    capped = task("code", code_max_tests=1)  # only the public test (1 2 -> 3)
    assert capped.reward(wrong, add) == 0.0 and capped.reward(SUM, add) == 1.0
    assert not capped.correct(wrong, add)  # pass@1 runs every test


def test_mbpp_asserts_with_setup_and_humaneval_check():
    mbpp = task("mbpp")
    assert len(mbpp.train()) == 3 and len(mbpp.test()) == 2
    dict_sum = mbpp.test()[1]  # its first test uses test_setup_code's D
    assert "assert dict_sum(D) == 6" in dict_sum.prompt
    solution = "```python\ndef dict_sum(d):\n    return sum(d.values())\n```"
    assert mbpp.reward(solution, dict_sum) == 1.0
    assert mbpp.reward(solution.replace("sum(d.values())", "len(d)"), dict_sum) == \
        pytest.approx(1 / 3)  # only {} -> 0 passes
    humaneval = task("humaneval")
    add = humaneval.test()[0]
    good = "```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```"
    assert humaneval.correct(good, add) and humaneval.reward(good, add) == 1.0
    assert humaneval.reward(good.replace("a + b", "a * b"), add) == 0.0
    with pytest.raises(ValueError, match="humaneval is a test set only"):
        humaneval.train()


def test_missing_local_files_say_where_to_put_them(tmp_path):
    with pytest.raises(ValueError, match="livecodebench/test.jsonl"):
        get_task("code", task_config(data_dir=str(tmp_path)))


def test_rewards_are_scored_on_several_threads():
    from pods.tasks.scoring import Scorer

    code = CodeTask("t", [], [], CodeConfig(workers=4))
    assert code.reward_workers == 4
    problem = task("code").train()[0]
    scores = Scorer(code).rewards([SUM, "x", SUM, "y"], [problem, problem], n=2)
    rewards, errors = scores.rewards, scores.reward_errors
    assert rewards.tolist() == [[1.0, 0.0], [1.0, 0.0]] and errors == 0


@pytest.mark.parametrize("name", ["code", "mbpp"])
def test_training_on_code_fixtures_with_a_chat_model(name, chat_model_dir, tmp_path):
    from pods.config import from_dict
    from pods.runs.metrics import read_metrics
    from pods.train.run import train

    cfg = from_dict(dict(model=chat_model_dir, task=name, data_dir=DATA, prompts_per_step=2,
                      n=4, m=2, max_new_tokens=8, max_steps=2, max_time=None, eval_size=2,
                         eval_every=1e9,
                      out_dir=str(tmp_path), run_name=name, progress=False,
                      max_prompt_tokens=1000, sandbox_workers=2, recipe="embedded"))
    run = train(cfg)
    evals = read_metrics(run / "metrics.jsonl", "eval")
    assert [r["step"] for r in evals] == [0, 2] and evals[0]["eval/problems"] >= 1
    assert {"eval/accuracy", "eval/format_accuracy"} <= set(evals[0])
    assert len(read_metrics(run / "metrics.jsonl", "step")) == 2


def test_the_training_loop_runs_model_written_programs_in_the_sandbox(chat_model_dir,
                                                                      tmp_path, monkeypatch):
    """An untrained model cannot write a program in 8 tokens, so every reward above would be
    0 without running anything. Here the engine's completions (their texts, which are what
    the reward reads) are replaced: rollouts 0, 2, ... by MBPP's reference solution of their
    prompt, the others by a wrong one. Each step's rewards must then be 1 and 0 exactly: the
    programs ran in the sandbox inside the loop, and the selection saw their contrast; the
    evaluation (one rollout per problem: the reference) passes every test."""
    from pods.config import from_dict
    from pods.rollout.hf import HFEngine
    from pods.runs.metrics import read_metrics
    from pods.train.run import train

    rows = [json.loads(line) for split in ("train", "test")
            for line in (FIXTURE_DATA / "mbpp" / f"{split}.jsonl").open()]
    real = HFEngine.generate

    def programs(self, prompts, n, *args, **kwargs):
        rollouts = real(self, prompts, n, *args, **kwargs)
        for i, prompt in enumerate(prompts):
            row = next(r for r in rows if r["text"] in prompt)
            wrong = row["code"].replace("return", "return None and", 1)
            for j in range(n):
                program = row["code"] if j % 2 == 0 else wrong
                rollouts.texts[i * n + j] = f"```python\n{program}\n```"
        return rollouts

    monkeypatch.setattr(HFEngine, "generate", programs)
    cfg = from_dict(dict(model=chat_model_dir, task="mbpp", data_dir=DATA, prompts_per_step=2,
                      n=4, m=2, max_new_tokens=8, max_steps=2, max_time=None, eval_size=2,
                         eval_every=1e9,
                      out_dir=str(tmp_path), run_name="programs", progress=False,
                      max_prompt_tokens=1000, sandbox_workers=2, recipe="embedded"))
    run = train(cfg)
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["rollout/reward_mean"] for r in steps] == [0.5, 0.5]  # half pass every test
    assert all(r["select/var_kept"] == 0.25 for r in steps)  # max-variance: one of each
    evals = read_metrics(run / "metrics.jsonl", "eval")  # one rollout each: the reference
    assert [r["eval/accuracy"] for r in evals] == [1.0, 1.0]  # pass@1, every test run


def test_per_test_timeout_is_the_config_field(tmp_path):
    """A solution that takes 1 s per test passes under code_test_timeout 3 and fails
    under 0.5."""
    slow = "```python\nimport time\ntime.sleep(1.0)\ndef square(x):\n    return x * x\n```"
    patient = task("mbpp", code_test_timeout=3.0, code_max_tests=1)
    hasty = task("mbpp", code_test_timeout=0.5, code_max_tests=1)
    problem = next(p for p in patient.train() if "square" in p.prompt)
    assert patient.reward(slow, problem) == 1.0
    assert hasty.reward(slow, problem) == 0.0


def test_prompts_with_a_chat_template(chat_model_dir):
    from transformers import AutoTokenizer

    from pods.rollout.prompts import render_prompts
    from pods.tasks.code.tasks import SYSTEM_PROMPT

    code = task("mbpp")
    texts, special = render_prompts(AutoTokenizer.from_pretrained(chat_model_dir), code,
                                    code.test())
    assert special is False and texts[0].startswith("<|im_start|>system\n" + SYSTEM_PROMPT)
    assert f"<|im_start|>user\n{code.test()[0].prompt}<|im_end|>" in texts[0]
    assert "```python" in SYSTEM_PROMPT  # the answer format it asks for


def test_a_machine_without_a_sandbox_is_refused_before_any_model_loads(monkeypatch):
    import pods.sandbox.isolation as isolation
    from pods.sandbox import SandboxUnavailable

    def nowhere(requested):
        raise SandboxUnavailable("no sandbox available: install bubblewrap")

    monkeypatch.setattr(isolation, "resolve", nowhere)
    with pytest.raises(ValueError, match="task mbpp runs model-written programs in "
                       "pods.sandbox, which cannot start here: no sandbox available"):
        task("mbpp")
