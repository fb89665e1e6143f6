"""Arithmetic word problems of graded difficulty, made by pods, with the paper's prompt and
math reward.

    level 1  one step (+ or -), numbers 2-12       "There are 11 coins in a drawer. Liam
                                                    puts 12 more in. How many coins are in
                                                    the drawer now?"                   -> 23
    level 2  one step, numbers 2-30 (one over 12)
    level 3  one step, two-digit numbers (one over 30)
    level 4  two steps mixing +, - and x           "4 bags with 12 marbles in each, and 9
                                                    loose marbles"                      -> 57
    level 5  two or three steps with x and exact /  "buys 3 packs of 12 and 5 packs of 8"
                                                                                        -> 76

A small instruct model (SmolLM2-135M-Instruct) solves some of the first levels' problems and
fails many: the situation RL with verifiable rewards needs; the later levels leave room to
learn. The user turn is the story alone; the paper's system prompt asks for the
<think>/<answer> layout, and the reward is the paper's math reward (correctness + format +
tags, weighted by ``--correctness-weight``/``--format-weight``/``--tag-weight``), graded as
GSM8K is.

What a problem is: its arithmetic form ("a*b+c"), its story template and its operands; the
names, objects and verbs filling the template are drawn at random, so the model cannot key on
one surface form. The split is made on that key, not on the text: a stable hash puts each
(form, template, operands) in test (1 in ``TEST_FRACTION``) or in train for good, whatever
the seed, so no test problem is trained on under other names. (The same sum can appear in
train in another template: the computation itself is not held out.) The levels' operand
ranges do not overlap, so no problem belongs to two levels. Problems are drawn with a fixed
seed (as the embedded arithmetic task's are), so every run has the same test set.

The test split is the first ``TEST_PER_LEVEL`` test problems of each level, then up to
``HELDOUT_PER_LEVEL`` more, drawn from a random stream of their own (so the train split and
the first test problems are what they always were): a measurement set beside the stories a
recipe was tuned on (``--eval-offset``). Level 1 has no test problems beyond its 73.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pods.tasks.base import Problem
from pods.tasks.math.rewards import PAPER_WEIGHTS, MathGraded, MathRewardConfig
from pods.tasks.math.tasks import SYSTEM_PROMPT

SEED = 2504  # the generator's seed: the same problems for every run
TEST_FRACTION = 10  # 1 problem (form, template, operands) in 10 is held out
TRAIN_PER_LEVEL, TEST_PER_LEVEL = 2000, 100  # at most (level 1 has 631 and 73)
HELDOUT_PER_LEVEL = 400  # more test problems after those, at most (level 1 has none)


@dataclass(frozen=True)
class Form:
    """One arithmetic computation: the operand ranges (inclusive), the answer, and which
    operand tuples make a sensible story (nothing negative, division exact) of this level."""

    ranges: tuple[tuple[int, int], ...]  # one (low, high) per operand a, b, c, d
    answer: Callable[..., int]
    valid: Callable[..., bool] = lambda *ops: True


def one_step(low: int, high: int, above: int = 0) -> dict[str, Form]:
    """a + b and a - b (a > b) with operands in [low, high], the larger one above ``above``
    (so that no computation belongs to two levels)."""
    ranges = ((low, high), (low, high))
    return {"a+b": Form(ranges, lambda a, b: a + b, lambda a, b: max(a, b) > above),
            "a-b": Form(ranges, lambda a, b: a - b, lambda a, b: a > max(b, above))}


FACTOR, COUNT = (2, 9), (3, 12)
LEVELS: dict[int, dict[str, Form]] = {
    1: one_step(2, 12),
    2: one_step(2, 30, above=12),
    3: one_step(10, 99, above=30),
    4: {"a+b-c": Form(((10, 60), (10, 60), (2, 40)), lambda a, b, c: a + b - c,
                      lambda a, b, c: c < a + b),
        "a-b+c": Form(((20, 90), (2, 40), (10, 60)), lambda a, b, c: a - b + c,
                      lambda a, b, c: b < a),
        "a*b+c": Form((FACTOR, COUNT, (2, 20)), lambda a, b, c: a * b + c),
        "a*b-c": Form((FACTOR, COUNT, (2, 20)), lambda a, b, c: a * b - c,
                      lambda a, b, c: c < a * b)},
    5: {"a*b+c*d": Form((FACTOR, COUNT, FACTOR, COUNT), lambda a, b, c, d: a * b + c * d,
                        lambda a, b, c, d: (a, b) != (c, d)),
        "(a+b)*c": Form(((5, 40), (5, 40), (2, 5)), lambda a, b, c: (a + b) * c),
        "(a-b)/c": Form(((20, 99), (2, 30), (2, 9)), lambda a, b, c: (a - b) // c,
                        lambda a, b, c: b < a and (a - b) % c == 0)},
}

# {A} {B} {C} {D}: the operands; {name}/{name2}: people; {She}/{her}: name's pronouns;
# {obj}: a plural object; {place}: a container; {box}/{boxes}: a unit holding several.
TEMPLATES: dict[str, tuple[str, ...]] = {
    "a+b": ("{name} has {A} {obj}. {She} {gets} {B} more. How many {obj} does {name} have "
            "now?",
            "There are {A} {obj} in a {place}. {name} puts {B} more in. How many {obj} are in "
            "the {place} now?",
            "{name} has {A} {obj} and {name2} has {B} {obj}. How many {obj} do they have "
            "altogether?",
            "{name} has {A} {obj}. {name2} has {B} more {obj} than {name}. How many {obj} "
            "does {name2} have?"),
    "a-b": ("{name} has {A} {obj}. {She} {loses} {B} of them. How many {obj} does {name} "
            "have left?",
            "There are {A} {obj} in a {place}. {name} takes {B} out. How many {obj} are left "
            "in the {place}?",
            "{name} has {A} {obj} and {name2} has {B} {obj}. How many more {obj} does {name} "
            "have than {name2}?",
            "{name} wants {A} {obj}. {She} already has {B}. How many more {obj} does {name} "
            "need?"),
    "a+b-c": ("{name} had {A} {obj}. {She} {got} {B} more and then {lost} {C}. How many "
              "{obj} does {name} have now?",
              "A {place} holds {A} {obj}. {name} puts {B} more in and {name2} takes {C} out. "
              "How many {obj} are in the {place} now?"),
    "a-b+c": ("{name} had {A} {obj}. {She} {lost} {B} of them and then {got} {C} more. How "
              "many {obj} does {name} have now?",
              "There were {A} {obj} in a {place}. {name} took {B} out and {name2} put {C} in. "
              "How many {obj} are in the {place} now?"),
    "a*b+c": ("{name} has {A} {boxes} with {B} {obj} in each, and {C} loose {obj}. How many "
              "{obj} does {name} have in all?",
              "{name} buys {A} {boxes} of {obj} with {B} in each {box}. {name2} gives {her} "
              "{C} more. How many {obj} does {name} have now?"),
    "a*b-c": ("{name} fills {A} {boxes} with {B} {obj} each. Then {she} {loses} {C} of the "
              "{obj}. How many {obj} does {name} have left?",
              "{name} buys {A} {boxes} of {obj} with {B} in each {box} and gives {C} of them "
              "to {name2}. How many {obj} does {name} keep?"),
    "a*b+c*d": ("{name} buys {A} {boxes} of {B} {obj} and {C} {boxes} of {D} {obj}. How "
                "many {obj} does {name} buy in all?",
                "{name} has {A} {boxes} with {B} {obj} in each. {name2} has {C} {boxes} with "
                "{D} {obj} in each. How many {obj} do they have together?"),
    "(a+b)*c": ("{name} has {A} {obj} and {gets} {B} more. {name2} has {C} times as many "
                "{obj} as {name} has now. How many {obj} does {name2} have?",
                "{name} puts {A} red {obj} and {B} blue {obj} in each {box}. How many {obj} "
                "are in {C} {boxes}?"),
    "(a-b)/c": ("{name} has {A} {obj}. {She} keeps {B} and shares the rest equally among "
                "{C} friends. How many {obj} does each friend get?",
                "There are {A} {obj} in a {place}. {name} takes {B} out and packs the rest "
                "into {C} bags with the same number in each. How many {obj} go in each bag?"),
}

NAMES = (("Mia", "she", "her"), ("Liam", "he", "him"), ("Ava", "she", "her"),
         ("Noah", "he", "him"), ("Sofia", "she", "her"), ("Omar", "he", "him"),
         ("Priya", "she", "her"), ("Kenji", "he", "him"), ("Lena", "she", "her"),
         ("Mateo", "he", "him"), ("Zara", "she", "her"), ("Tom", "he", "him"),
         ("Amara", "she", "her"), ("Ivan", "he", "him"), ("Chloe", "she", "her"),
         ("Ravi", "he", "him"))
OBJECTS = ("apples", "marbles", "stickers", "pencils", "books", "coins", "cookies",
           "shells", "stamps", "cards", "buttons", "crayons", "beads", "oranges", "toy cars",
           "feathers")
PLACES = ("box", "basket", "jar", "drawer", "bucket", "bag")
UNITS = (("box", "boxes"), ("bag", "bags"), ("pack", "packs"), ("jar", "jars"),
         ("crate", "crates"), ("tray", "trays"))
GETS = ("buys", "finds", "gets", "picks up", "wins", "is given")
GOT = ("bought", "found", "got", "picked up", "won", "was given")
LOSES = ("gives away", "sells", "loses", "uses", "eats", "trades away")
LOST = ("gave away", "sold", "lost", "used", "ate", "traded away")


def parse_levels(text: str) -> tuple[int, ...]:
    """'1,2,3' -> (1, 2, 3); an unknown or empty level list is an error naming the flag."""
    try:
        levels = tuple(sorted({int(part) for part in str(text).split(",") if part.strip()}))
    except ValueError:
        levels = ()
    if not levels or not set(levels) <= set(LEVELS):
        raise ValueError(f"word_levels {text!r} must be a comma-separated list of levels "
                         f"from {', '.join(map(str, LEVELS))}, e.g. 1,2,3.")
    return levels


def split_of(key: tuple) -> str:
    """'test' or 'train' for a problem, by a stable hash of its key (not Python's ``hash``,
    which changes between processes)."""
    digest = hashlib.sha256(repr(key).encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_FRACTION == 0 else "train"


def render(form: str, template: int, operands: tuple[int, ...],
           rng: np.random.Generator) -> str:
    """The story of one problem: template ``template`` of ``form`` with drawn names, objects
    and verbs."""
    (name, she, her), (name2, _, _) = (NAMES[i] for i in rng.choice(len(NAMES), 2, False))
    box, boxes = UNITS[rng.integers(len(UNITS))]
    slots = dict(zip("ABCD", map(str, operands), strict=False)) | dict(
        name=name, name2=name2, She=she.capitalize(), she=she, her=her, box=box, boxes=boxes,
        obj=OBJECTS[rng.integers(len(OBJECTS))], place=PLACES[rng.integers(len(PLACES))],
        gets=GETS[rng.integers(len(GETS))], got=GOT[rng.integers(len(GOT))],
        loses=LOSES[rng.integers(len(LOSES))], lost=LOST[rng.integers(len(LOST))])
    return TEMPLATES[form][template].format(**slots)


Key = tuple  # (form, template, operands): what a problem is, whatever its names and objects


def generate(level: int, seed: int = SEED, train_size: int = TRAIN_PER_LEVEL,
             test_size: int = TEST_PER_LEVEL,
             heldout_size: int = HELDOUT_PER_LEVEL) -> dict[str, list[tuple[Key, Problem]]]:
    """{"train": [(key, problem)], "test": [...], "heldout": [...]} for one level: each
    problem at most once, in the split its key hashes to, until both splits are full or the
    level's problems run out; then ``heldout``: more test problems (``more_tests``)."""
    rng = np.random.default_rng([seed, level])
    splits: dict[str, list[tuple[Key, Problem]]] = {"train": [], "test": []}
    quota = {"train": train_size, "test": test_size}
    seen: set[Key] = set()
    for _ in range(20 * (train_size + test_size)):  # level 1 runs out of problems
        key, form = draw(rng, level)
        if not form.valid(*key[2]) or key in seen:
            continue
        seen.add(key)
        split = split_of(key)
        if len(splits[split]) < quota[split]:
            splits[split].append((key, make(key, form, rng)))
        if all(len(splits[s]) == quota[s] for s in splits):
            break
    taken = {key for key, _ in splits["test"]}
    return splits | {"heldout": more_tests(level, seed, taken, heldout_size)}


def more_tests(level: int, seed: int, taken: set[Key], size: int) -> list[tuple[Key, Problem]]:
    """Up to ``size`` test problems (keys that hash to test) not in ``taken``, from a random
    stream of their own: drawing them changes neither split ``generate`` made before."""
    rng = np.random.default_rng([seed, level, 1])
    taken, out = set(taken), []
    for _ in range(20 * size):
        key, form = draw(rng, level)
        if form.valid(*key[2]) and key not in taken and split_of(key) == "test":
            taken.add(key)
            out.append((key, make(key, form, rng)))
            if len(out) == size:
                break
    return out


def draw(rng: np.random.Generator, level: int) -> tuple[Key, Form]:
    """One problem's key (form, template, operands) of ``level``, and its form."""
    forms = LEVELS[level]
    form_name = sorted(forms)[rng.integers(len(forms))]
    template = int(rng.integers(len(TEMPLATES[form_name])))
    form = forms[form_name]
    operands = tuple(int(rng.integers(lo, hi + 1)) for lo, hi in form.ranges)
    return (form_name, template, operands), form


def make(key: Key, form: Form, rng: np.random.Generator) -> Problem:
    """The problem of ``key``: its story (names drawn from ``rng``) and answer."""
    form_name, template, operands = key
    return Problem(prompt=render(form_name, template, operands, rng),
                   answer=str(form.answer(*operands)))


def interleave(groups: list[list[Problem]]) -> list[Problem]:
    """Round robin over the levels, so any prefix of the test split (``eval_size``) holds
    the levels in equal parts."""
    longest = max(map(len, groups), default=0)
    return [g[i] for i in range(longest) for g in groups if i < len(g)]


class WordProblems(MathGraded):
    """Word problems of the chosen levels, with the paper's system prompt and math reward."""

    name = "wordproblems"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, levels: str | tuple[int, ...] = "1,2",
                 weights: MathRewardConfig = PAPER_WEIGHTS, seed: int = SEED):
        self.levels = levels if isinstance(levels, tuple) else parse_levels(levels)
        self.weights, self.seed = weights, seed
        self._splits: tuple[list[Problem], list[Problem]] | None = None

    def train(self) -> list[Problem]:
        return self._make()[0]

    def test(self) -> list[Problem]:
        return self._make()[1]

    def _make(self) -> tuple[list[Problem], list[Problem]]:
        if self._splits is None:
            made = [generate(level, self.seed) for level in self.levels]

            def problems(split: str) -> list[Problem]:
                return interleave([[p for _, p in level[split]] for level in made])

            self._splits = (problems("train"), problems("test") + problems("heldout"))
        return self._splits
