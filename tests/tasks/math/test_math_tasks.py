import os
import subprocess
import sys
import textwrap

import pytest
from transformers import AutoTokenizer

from fixture_data import FIXTURE_DATA
from pods.rollout.prompts import drop_long_prompts, render_prompts
from pods.tasks import get_task
from pods.tasks.math.rewards import (
    MathRewardConfig,
    format_correct,
    format_score,
    math_reward,
    tag_score,
)
from pods.tasks.math.tasks import SYSTEM_PROMPT, amc_gold, gsm8k_gold, math_gold
from runs import task_config

DATA = str(FIXTURE_DATA)


def test_gold_answers():
    assert gsm8k_gold("1,200 * 2 = 2,400\n#### 2,400") == "2400"
    assert math_gold("so $x = \\boxed{\\frac{3}{4}}$.") == "\\frac{3}{4}"  # nested braces
    assert math_gold("first \\boxed{1}, finally \\boxed{\\{1,2\\}}") == "\\{1,2\\}"
    with pytest.raises(ValueError, match="without a"):
        math_gold("no boxed answer here")
    assert amc_gold(15.0) == "15" and amc_gold("4") == "4" and amc_gold(2.5) == "2.5"


def test_tasks_load_from_a_data_dir():
    options = task_config(data_dir=DATA)
    gsm8k = get_task("gsm8k", options)
    assert len(gsm8k.train()) == 4 and len(gsm8k.test()) == 3
    assert gsm8k.train()[1].answer == "2400" and gsm8k.test()[2].answer == "750"
    math = get_task("math", options)
    assert [p.answer for p in math.train()] == ["\\frac{3}{4}", "2\\sqrt{2}", "5", "\\{1,2\\}"]
    assert [p.answer for p in math.test()] == ["12", "\\frac{3}{4}"]  # MATH-500's field
    amc = get_task("amc23", options)
    assert [p.answer for p in amc.test()] == ["15", "4"]
    with pytest.raises(ValueError, match="test set only"):
        amc.train()


def test_missing_local_data_says_where_to_put_it(tmp_path):
    with pytest.raises(ValueError, match=r"tried .*gsm8k/train.jsonl.*--data-dir"):
        get_task("gsm8k", task_config(data_dir=str(tmp_path))).train()


def test_hub_failure_says_how_to_provide_files():
    code = textwrap.dedent("""
        from pods.tasks import get_task
        try:
            get_task("gsm8k").train()
        except ValueError as e:
            print(e)
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120).stdout
    assert "could not load openai/gsm8k" in out and "--data-dir DIR" in out


THINK = "<think>\n6 * 7 = 42\n</think>\n<answer>\n42\n</answer>"


@pytest.mark.parametrize("completion, gold, expected", [
    (THINK, "42", 1.0 + 0.1 * 1.0 + 0.1 * 1.0),  # correct, perfect layout, 4 tags
    (THINK.replace("42\n</answer>", "41\n</answer>"), "42", 0.2),  # wrong: bonuses only
    ("Hello " * 10 + THINK, "42", 1.0 + 0.1 * (1 - 0.01 * 60) + 0.1),  # 60 chars outside
    ("The answer is 42.", "42", 1.0),  # last number, no tags
    ("<answer>42</answer>", "42", 1.0 + 0.1 * 0.5),  # 2 of 4 tags, no layout
    ("", "42", 0.0),
    ("<think><think></think><answer>1,000</answer>", "1000", 1.0 + 0.1 * 1.0 + 0.1 * 0.75),
])
def test_math_reward_table(completion, gold, expected):
    assert math_reward(completion, gold) == pytest.approx(expected)


def test_reward_weights_and_scores():
    assert math_reward(THINK, "42", MathRewardConfig(format=0.0, tags=0.0)) == 1.0
    weighted = get_task("gsm8k", task_config(data_dir=DATA, correctness_weight=2.0,
                                             format_weight=0.0, tag_weight=0.5))
    problem = weighted.test()[0]  # gold "6"
    assert weighted.reward(THINK.replace("42", "6"), problem) == pytest.approx(2.0 + 0.5)
    assert format_score("x" * 200 + THINK) == 0.0  # floored at 0
    assert tag_score("<think></think>") == 0.5
    assert format_correct(THINK) and format_correct("\n" + THINK + "\n")
    assert not format_correct("Sure! " + THINK)


def test_chat_template_prompts(chat_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(chat_model_dir)
    task = get_task("gsm8k", task_config(data_dir=DATA))
    texts, special = render_prompts(tokenizer, task, task.test()[:2])
    assert special is False  # the template placed the special tokens
    assert texts[0].startswith("<|im_start|>system\n" + SYSTEM_PROMPT)
    assert "<|im_start|>user\nAnn has 10 coins" in texts[0]
    assert texts[0].endswith("<|im_start|>assistant\n")
    kept, dropped = drop_long_prompts(tokenizer, task, task.test(), max_tokens=10)
    assert (kept, dropped) == ([], 3)
    kept, dropped = drop_long_prompts(tokenizer, task, task.test(), max_tokens=100000)
    assert (len(kept), dropped) == (3, 0)


def test_custom_task(tmp_path, monkeypatch):
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(f'{{"prompt": "say {i}", "answer": "{i}"}}\n' for i in range(20)))
    (tmp_path / "my_rewards.py").write_text(
        "def exact(completion, answer):\n    return float(completion.strip() == answer)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    task = get_task("custom", task_config(data_file=str(data), reward_fn="my_rewards:exact"))
    assert len(task.train()) == 18 and len(task.test()) == 2  # a fixed 10% held out
    assert not {p.prompt for p in task.train()} & {p.prompt for p in task.test()}
    p = task.train()[0]
    assert task.reward(p.answer, p) == 1.0 and task.reward("nope", p) == 0.0
    # without a reward function: the math reward
    plain = get_task("custom", task_config(data_file=str(data)))
    assert plain.reward(f"The answer is {p.answer}", p) == 1.0


def test_custom_task_explicit_split(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a", "answer": "1", "split": "train"}\n'
                    '{"prompt": "b", "answer": "2", "split": "test"}\n')
    task = get_task("custom", task_config(data_file=str(data)))
    assert [p.prompt for p in task.train()] == ["a"] and [p.prompt for p in task.test()] == ["b"]


@pytest.mark.parametrize("options, message", [
    (dict(data_file="missing.jsonl"), "does not exist"),
    (dict(data_file="BAD_FIELDS"), "line 1: no 'prompt' field"),
    (dict(data_file="OK", reward_fn="nocolon"), "module:function"),
    (dict(data_file="OK", reward_fn="no_such_module_xyz:f"), "cannot import module"),
    (dict(data_file="OK", reward_fn="os:no_such_function"), "has no function"),
])
def test_custom_task_errors(tmp_path, options, message):
    (tmp_path / "ok.jsonl").write_text('{"prompt": "a", "answer": "1"}\n')
    (tmp_path / "bad.jsonl").write_text('{"question": "a", "answer": "1"}\n')
    names = {"OK": "ok.jsonl", "BAD_FIELDS": "bad.jsonl"}
    options["data_file"] = str(tmp_path / names.get(options["data_file"], options["data_file"]))
    with pytest.raises(ValueError, match=message):
        get_task("custom", task_config(**options))


def test_training_on_gsm8k_fixtures_with_a_chat_model(chat_model_dir, tmp_path):
    from pods.config import from_dict
    from pods.runs.metrics import read_metrics
    from pods.train.run import train

    cfg = from_dict(dict(model=chat_model_dir, task="gsm8k", data_dir=DATA, prompts_per_step=2,
                      n=4, m=2, max_new_tokens=8, max_steps=2, max_time=None, eval_size=3,
                         eval_every=1e9,
                      out_dir=str(tmp_path), run_name="gsm8k", progress=False,
                      recipe="embedded"))
    run = train(cfg)
    evals = read_metrics(run / "metrics.jsonl", "eval")
    assert {"eval/accuracy", "eval/format_accuracy", "eval/both_accuracy",
            "data/dropped_train"} <= set(evals[0])
    assert evals[0]["eval/problems"] == 3
    assert "rollout/grading_failures" in read_metrics(run / "metrics.jsonl", "step")[0]


def test_pods_eval_on_fixture_test_sets(chat_model_dir):
    from pods.cli.evaluate import EvalRequest, evaluate_path

    result = evaluate_path(EvalRequest(chat_model_dir, ("gsm8k", "amc23"), repeats=2,
                                       fields=dict(max_new_tokens=6, data_dir=DATA)))
    assert result["gsm8k"]["eval/problems"] == 3 and result["amc23"]["eval/problems"] == 2
    for metrics in (result["gsm8k"], result["amc23"]):
        assert {"eval/accuracy_sem", "eval/format_accuracy", "eval/both_accuracy",
                "eval/completion_len", "eval/dropped_long_prompts"} <= set(metrics)
