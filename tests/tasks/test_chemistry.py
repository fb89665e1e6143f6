"""The chemistry task: grading table, the SciKnowEval fixture rows (the hub's row format) read
through the real --data-dir path, the seeded split, prompts, rewards and error messages."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fixture_data import FIXTURE_DATA
from pods.tasks import Problem, get_task
from pods.tasks.chemistry import (
    SYSTEM_PROMPT,
    ChemistryTask,
    answer_kind,
    grade,
    normalize,
    render,
    select,
    split,
)
from pods.tasks.math.rewards import MathRewardConfig
from runs import task_config

DATA = str(FIXTURE_DATA)
ROWS = [json.loads(line) for line in (FIXTURE_DATA / "sciknoweval" / "test.jsonl").open()]
T = "<think>\nreasoning\n</think>\n"
H2O = "2H2 + O2 = 2H2O"


@pytest.mark.parametrize("completion, gold, verdict", [
    (T + "<answer>\nB\n</answer>", "B", True),  # the tagged letter
    ("<answer>(B)</answer>", "B", True),  # in parentheses
    ("<answer>b</answer>", "B", True),  # lower case
    ("<answer>B. Chromatography</answer>", "B", True),  # the option's text after the letter
    ("<answer>(B) Chromatography</answer>", "B", True),
    ("<answer>Option B</answer>", "B", True),
    ("<answer>**B**</answer>", "B", True),  # markdown
    ("<answer>\n\n   C  \n\n</answer>", "C", True),  # whitespace and newlines
    ("<answer>A</answer> no, wait: <answer>C</answer>", "C", True),  # two answers: the last
    ("<answer>C</answer> no, wait: <answer>A</answer>", "C", False),
    ("<answer>A</answer>", "B", False),  # the wrong letter
    ("<answer>A or B</answer>", "B", False),  # hedged
    ("<answer>A, B</answer>", "B", False),
    ("<answer>Chromatography</answer>", "B", False),  # the option's text alone
    ("<answer>The answer is (B).</answer>", "B", True),  # a sentence stating the letter
    ("<answer>A mixture is separated by its phases.</answer>", "A", False),  # "A": an article
    ("After comparing the options, the answer is (B).", "B", True),  # no tag: stated letter
    ("Answer: D", "D", True),
    ("The answer is A. Hmm, no: the correct option is C.", "C", True),  # the last stated
    ("Carbon (C) is in group 14, so the answer is (B)", "B", True),
    ("Carbon (C) is in group 14.", "C", False),  # a letter that is not stated as the answer
    ("the answer is b", "B", False),  # untagged lower case: not read ("the answer is a ...")
    ("B", "B", True),  # a bare answer
    ("", "B", False),  # no answer
    ("I am not sure.", "B", False),
    ("<answer>True</answer>", "True", True),
    ("<answer>yes</answer>", "True", True),  # Yes/No as True/False
    ("<answer>FALSE.</answer>", "False", True),
    ("<answer>No</answer>", "False", True),
    ("<answer>\nFalse, the valve must be closed.\n</answer>", "False", True),
    ("<answer>True</answer>", "False", False),
    ("<answer>True/False</answer>", "True", False),  # hedged
    ("<answer>B</answer>", "True", False),
    ("<answer>The statement is true.</answer>", "True", False),  # no stated answer in it
    ("So the answer is: **False**", "False", True),  # untagged, stated
    ("true", "True", True),  # bare
    (f"<answer>{H2O}</answer>", H2O, True),  # a balanced equation
    ("<answer>2 H2 + O2 → 2 H2O</answer>", H2O, True),  # spaces and arrows do not matter
    ("<answer>2H2 + 1O2 -> 2H2O.</answer>", H2O, True),  # nor a coefficient 1
    (f"<answer>The balanced equation is: {H2O}</answer>", H2O, True),
    ("<answer>4H2 + 2O2 = 4H2O</answer>", H2O, False),  # not the smallest coefficients
    ("<answer>2h2 + o2 = 2h2o</answer>", H2O, False),  # case matters in formulas
    (H2O, H2O, False),  # equations are read from the tag only
])
def test_grade(completion, gold, verdict):
    assert grade(completion, gold) is verdict


def test_answer_kinds_and_normal_forms():
    assert [answer_kind(g) for g in ("B", "True", "No", H2O)] == \
        ["letter", "truth", "truth", "equation"]
    assert normalize("Option: c", "letter") == "C" and normalize("Yes", "truth") == "true"
    assert normalize("Fe + 1Cl2 ⟶ FeCl2", "equation") == "Fe+Cl2=FeCl2"
    assert normalize("no equation here", "equation") is None


def test_fixture_rows_load_through_the_data_dir():
    task = get_task("chemistry", task_config(data_dir=DATA))
    assert task.name == "chemistry" and task.system_prompt == SYSTEM_PROMPT
    train, test = task.train(), task.test()
    assert (len(train), len(test)) == (13, 2)  # 15 questions, 10% (rounded) held out
    assert dict(task.counts) == {
        "rows": 23, "other_domains": 3, "duplicates": 1, "conflicting": 0,
        "kept/mcq-4-choices": 10, "kept/true_or_false": 3, "kept/filling": 2,
        "dropped/open-ended-qa": 3, "dropped/relation_extraction": 1}
    answers = sorted(p.answer for p in train + test)
    assert answers == sorted(["B", "A", "C", "D", "B", "A", "C", "B", "B", "A", H2O,
                              "2Fe(s) + 3Cl2(g) = 2FeCl3(s)", "True", "False", "True"])
    prompts = " ".join(p.prompt for p in train + test)
    for absent in ("Rock salt", "thermophilic", "free fall", "Buffers", "Zinc oxide"):
        assert absent not in prompts  # other domains and judged types are filtered out


def test_split_is_seeded_disjoint_and_deterministic():
    first, again = ChemistryTask(DATA), ChemistryTask(DATA)
    assert first.train() == again.train() and first.test() == again.test()
    train = {p.prompt for p in first.train()}
    test = {p.prompt for p in first.test()}
    assert not train & test and len(train | test) == 15
    other = ChemistryTask(DATA, split_seed=1)
    assert {p.prompt for p in other.test()} != test
    assert {p.prompt for p in other.train() + other.test()} == train | test
    problems = [Problem(prompt=str(i), answer="A") for i in range(100)]
    a, b = split(problems, seed=3), split(problems, seed=3)
    assert a == b and (len(a[0]), len(a[1])) == (90, 10)
    assert split(problems[:3])[1] and split([]) == ([], [])


def test_levels_keep_only_those_questions():
    task = ChemistryTask(DATA, levels=("L3",))
    problems = task.train() + task.test()
    assert len(problems) == 7 and task.counts["other_levels"] == 13
    assert {answer_kind(p.answer) for p in problems} == {"letter", "equation"}


def test_prompts_render_the_question_and_lettered_options():
    problems = ChemistryTask(DATA).train() + ChemistryTask(DATA).test()
    ethanol = next(p for p in problems if "'ethanol'" in p.prompt)
    assert ethanol.answer == "D"
    assert ethanol.prompt == (
        "Given a question and four options, please select the right answer.\n\n"
        "What is the molar weight (g/mol) of the molecule with the IUPAC name 'ethanol'?\n\n"
        "A. 32.042\nB. 60.052\nC. 18.015\nD. 46.069\n\n"
        "Answer with the letter of the correct option (A, B, C or D).")
    acid = next(p for p in problems if "sulfuric acid" in p.prompt)
    assert acid.answer == "False" and acid.prompt.endswith("Answer True or False.")
    water = next(p for p in problems if p.answer == H2O)
    assert "H2 + O2 = H2O" in water.prompt and "without any explanation" not in water.prompt
    for p in problems:  # the benchmark's "answer with nothing else" sentences are removed
        assert "Your answer should be" not in p.prompt and "directly give" not in p.prompt
    two = next(r for r in ROWS if r["type"] == "mcq-2-choices")
    assert render(two).endswith("A. An enzyme from a thermophilic archaeon\nB. An enzyme "
                                "from a mesophilic bacterium\n\nAnswer with the letter of "
                                "the correct option (A or B).")


def test_prompts_with_a_chat_template(chat_model_dir):
    from transformers import AutoTokenizer

    from pods.rollout.prompts import render_prompts

    task = ChemistryTask(DATA)
    texts, special = render_prompts(AutoTokenizer.from_pretrained(chat_model_dir), task,
                                    task.test())
    assert special is False and texts[0].startswith("<|im_start|>system\n" + SYSTEM_PROMPT)
    assert f"<|im_start|>user\n{task.test()[0].prompt}<|im_end|>" in texts[0]


def test_rewards_correctness_and_format():
    task = get_task("chemistry", task_config(data_dir=DATA))
    problem = Problem(prompt="q", answer="B")
    good = "<think>\nB is right\n</think>\n<answer>\nB\n</answer>"
    assert task.reward(good, problem) == pytest.approx(1.1)  # correct + format bonus
    assert task.reward("Hi! " + good, problem) == pytest.approx(1.0)  # correct, loose format
    assert task.reward(good.replace("B\n</answer>", "A\n</answer>"), problem) == \
        pytest.approx(0.1)  # wrong, well formatted
    assert task.reward("the answer is (A)", problem) == 0.0
    assert task.correct(good, problem) and not task.correct("nothing", problem)
    assert task.format_ok(good) and not task.format_ok("Hi! " + good)
    weighted = get_task("chemistry", task_config(data_dir=DATA, correctness_weight=2.0,
                                                 format_weight=0.0, tag_weight=0.5))
    assert weighted.reward(good, problem) == 2.0  # the tag weight is not used here
    custom = ChemistryTask(DATA, MathRewardConfig(correctness=1.0, format=0.5))
    assert custom.reward(good, Problem(prompt="q", answer="True")) == 0.5


def test_duplicates_with_two_golds_are_dropped():
    row = next(r for r in ROWS if r.get("answerKey") == "D")
    problems, counts = select([row, {**row, "answerKey": "A"}, {**row, "answerKey": ""}])
    assert problems == [] and counts["conflicting"] == 1 and counts["duplicates"] == 1
    assert counts["dropped/no_gold"] == 1


def test_missing_local_data_says_where_to_put_it(tmp_path):
    with pytest.raises(ValueError, match=r"tried .*sciknoweval/test\.jsonl.*--data-dir"):
        get_task("chemistry", task_config(data_dir=str(tmp_path))).train()


def test_rows_without_chemistry_questions_are_an_error(tmp_path):
    (tmp_path / "sciknoweval").mkdir()
    other = [r for r in ROWS if r["domain"] != "Chemistry"]
    (tmp_path / "sciknoweval" / "test.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in other))
    with pytest.raises(ValueError, match="no Chemistry questions"):
        ChemistryTask(str(tmp_path)).test()


def test_hub_failure_says_how_to_provide_files():
    code = textwrap.dedent("""
        from pods.tasks import get_task
        try:
            get_task("chemistry").train()
        except ValueError as e:
            print(e)
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120).stdout
    assert "could not load hicai-zju/SciKnowEval (v2, split test)" in out
    assert "DIR/sciknoweval/test.jsonl" in out and "--data-dir DIR" in out


def test_pods_eval_on_the_fixture_test_set(chat_model_dir):
    from pods.cli.evaluate import EvalRequest, evaluate_path

    result = evaluate_path(EvalRequest(chat_model_dir, ("chemistry",), repeats=2,
                                       fields=dict(max_new_tokens=6, data_dir=DATA)))["chemistry"]
    assert result["eval/problems"] == 2
    assert {"eval/accuracy", "eval/format_accuracy", "eval/both_accuracy"} <= set(result)


def test_training_on_chemistry_fixtures_with_a_chat_model(chat_model_dir, tmp_path):
    from pods.config import from_dict
    from pods.runs.metrics import read_metrics
    from pods.train.run import train

    cfg = from_dict(dict(model=chat_model_dir, task="chemistry", data_dir=DATA,
                      prompts_per_step=2, n=4, m=2, max_new_tokens=8, max_steps=2,
                      max_time=None, eval_size=2, eval_every=1e9, out_dir=str(tmp_path),
                         run_name="chem",
                      progress=False, max_prompt_tokens=1000, recipe="embedded"))
    run = train(cfg)
    evals = read_metrics(run / "metrics.jsonl", "eval")
    assert [r["step"] for r in evals] == [0, 2]
    assert {"eval/accuracy", "eval/format_accuracy", "eval/both_accuracy"} <= set(evals[0])
    assert len(read_metrics(run / "metrics.jsonl", "step")) == 2
