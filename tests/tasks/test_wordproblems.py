"""The wordproblems task: generated stories with exact answers, disjoint splits, the paper's
prompt and math reward."""

import re

import pytest
from transformers import AutoTokenizer

from pods.config import from_dict
from pods.config.groups import MathRewardConfig, TaskConfig
from pods.rollout.prompts import render_prompts
from pods.tasks import get_task
from pods.tasks.math.tasks import SYSTEM_PROMPT
from pods.tasks.wordproblems import (
    LEVELS,
    NAMES,
    OBJECTS,
    SEED,
    TEMPLATES,
    WordProblems,
    generate,
    interleave,
    parse_levels,
    split_of,
)

MADE = {level: generate(level) for level in LEVELS}  # ~1 s for all five levels


def test_generation_is_deterministic_and_the_seed_matters():
    assert generate(3) == MADE[3]
    assert WordProblems("1").test() == WordProblems("1").test()
    assert generate(3, seed=SEED + 1)["test"] != MADE[3]["test"]


@pytest.mark.parametrize("level", LEVELS)
def test_answers_recompute_from_the_numbers_in_the_story(level):
    """Each form's name is its expression: evaluating it on the operands, and on the numbers
    as they appear in the story, gives the stored answer; answers are whole and >= 0."""
    for split in ("train", "test"):
        for (form, template, operands), problem in MADE[level][split]:
            assert form in LEVELS[level] and 0 <= template < len(TEMPLATES[form])
            assert [int(x) for x in re.findall(r"\d+", problem.prompt)] == list(operands)
            names = dict(zip("abcd"[:len(operands)], operands, strict=True))
            value = eval(form.replace("/", "//"), {}, names)  # the form's own expression
            assert problem.answer == str(value) and value >= 0
            if "/" in form:  # exact division
                a, b, c = operands
                assert (a - b) % c == 0


@pytest.mark.parametrize("level", LEVELS)
def test_splits_never_share_a_problem_or_a_story(level):
    train, test = MADE[level]["train"], MADE[level]["test"]
    assert len(test) == (73 if level == 1 else 100) and len(train) >= 600
    train_keys, test_keys = {k for k, _ in train}, {k for k, _ in test}
    assert len(test_keys) == len(test) and len(train_keys) == len(train)  # no repeats
    assert not train_keys & test_keys
    assert not {p.prompt for _, p in train} & {p.prompt for _, p in test}
    # the split belongs to the problem: another seed's train never holds these tests
    other = {k for k, _ in generate(level, seed=SEED + 1)["train"]}
    assert not other & test_keys and other & train_keys


@pytest.mark.parametrize("level", LEVELS)
def test_held_out_tests_come_after_and_change_no_split(level):
    """The held-out problems hash to test, are new, and drawing them changes neither split."""
    made, alone = MADE[level], generate(level, heldout_size=0)
    assert alone["heldout"] == [] and alone["train"] == made["train"]
    assert alone["test"] == made["test"]
    keys = [k for k, _ in made["heldout"]]
    assert len(keys) == len(set(keys)) == {1: 0, 2: 216}.get(level, 400)
    assert all(split_of(k) == "test" for k in keys)
    assert not set(keys) & {k for split in ("train", "test") for k, _ in made[split]}
    for (form, _, operands), problem in made["heldout"]:
        assert problem.answer == str(LEVELS[level][form].answer(*operands))


def test_the_test_split_ends_with_the_held_out_problems():
    test = WordProblems("1,2").test()
    base = interleave([[p for _, p in MADE[level]["test"]] for level in (1, 2)])
    assert test[:173] == base and len(test) == 173 + 216
    assert test[173:] == [p for _, p in MADE[2]["heldout"]]


def test_levels_never_share_a_problem_and_are_graded():
    keys = [{k for split in MADE[level].values() for k, _ in split} for level in LEVELS]
    assert sum(map(len, keys)) == len(set().union(*keys))
    largest = {level: max(int(p.answer) for _, p in MADE[level]["test"]) for level in LEVELS}
    assert largest[1] <= 24 < largest[2] <= 60 < largest[3] <= 198
    steps = {level: {sum(map(form.count, "+-*/")) for form in LEVELS[level]}
             for level in LEVELS}
    assert steps == {1: {1}, 2: {1}, 3: {1}, 4: {2}, 5: {2, 3}}


@pytest.mark.parametrize("level", LEVELS)
def test_stories_vary(level):
    """Every template of every form of the level is used, with many names and objects."""
    used = {(form, template) for (form, template, _), _ in MADE[level]["train"]}
    assert used == {(f, t) for f in LEVELS[level] for t in range(len(TEMPLATES[f]))}
    assert all(len(TEMPLATES[form]) >= 2 for form in LEVELS[level])
    words = {w for _, p in MADE[level]["test"] for w in p.prompt.split()}
    assert len(words & {name for name, _, _ in NAMES}) >= 10
    assert len(words & {obj.split()[-1] for obj in OBJECTS}) >= 10


def test_the_task_mixes_the_chosen_levels_round_robin():
    task = WordProblems("1,3")
    assert task.levels == (1, 3) and len(task.test()) == 173 + 400  # level 1: no held-out
    first = [p for _, p in MADE[1]["test"]]
    third = [p for _, p in MADE[3]["test"]]
    assert task.test()[:4] == [first[0], third[0], first[1], third[1]]
    assert interleave([[1, 2, 3], [4]]) == [1, 4, 2, 3]
    assert set(task.train()) == {p for level in (1, 3) for _, p in MADE[level]["train"]}


def test_levels_option_and_its_checks():
    from pods.train.checks import check

    assert parse_levels("3, 1,3") == (1, 3)
    for bad in ("", "0", "6", "one"):
        with pytest.raises(ValueError, match="word_levels"):
            parse_levels(bad)
    config = from_dict({"model": "m", "task": "wordproblems", "word_levels": [2, 4]})
    assert config.task.levels == "2,4"  # YAML lists and numbers become the flat text
    assert get_task("wordproblems", config.task).levels == (2, 4)
    assert from_dict({"model": "m", "word_levels": 2}).task.levels == "2"
    # the task's own checks, made before a run loads anything (pods.train.checks)
    with pytest.raises(ValueError, match="word_levels '7'"):
        check(from_dict({"model": "m", "task": "wordproblems", "word_levels": "7"}))
    with pytest.raises(ValueError, match="embedded model 'tiny'"):
        check(from_dict({"task": "wordproblems"}))


def test_reward_is_the_papers_math_reward():
    task = get_task("wordproblems", TaskConfig(levels="1"))
    problem = task.test()[0]  # "There are 11 coins in a drawer. Liam puts 12 more in. ..."
    assert problem.answer == "23"
    worked = "<think>\n11 + 12 = 23\n</think>\n<answer>\n23\n</answer>"
    assert task.reward(worked, problem) == pytest.approx(1.2)  # 1 + 0.1 layout + 0.1 tags
    wrong = worked.replace("23", "22")
    assert task.reward(wrong, problem) == pytest.approx(0.2)  # the format alone
    assert task.reward("11 + 12 = 23. The answer is 23.", problem) == 1.0  # no layout
    assert task.correct(worked, problem) and task.format_ok(worked)
    assert not task.correct(wrong, problem) and not task.format_ok("Sure. " + worked)
    weighted = get_task("wordproblems", TaskConfig(levels="1", math=MathRewardConfig(
        correctness=2.0, format=0.0, tags=0.0)))
    assert weighted.reward(worked, problem) == 2.0


def test_prompt_goes_through_the_chat_template_with_the_system_prompt(chat_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(chat_model_dir)
    task = WordProblems("2")
    texts, special = render_prompts(tokenizer, task, task.test()[:1])
    assert special is False
    assert texts[0] == (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
                        f"<|im_start|>user\n{task.test()[0].prompt}<|im_end|>\n"
                        f"<|im_start|>assistant\n")
