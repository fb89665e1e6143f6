"""The generated configuration reference (docs/hooks/config_reference.py) lists every field."""

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from pods.config import TrainConfig

HOOK = Path(__file__).resolve().parents[1] / "docs" / "hooks" / "config_reference.py"
spec = importlib.util.spec_from_file_location("config_reference", HOOK)
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)


def test_every_config_key_is_in_the_reference():
    """Fails when a field of TrainConfig (flat key, as YAML and from_dict take it) is missing
    from the generated table, or the table lists one that does not exist."""
    keys = set(TrainConfig().to_dict())
    rows = reference.rows(TrainConfig)
    assert {r.key for r in rows} == keys
    text = reference.reference_markdown(TrainConfig)
    for key in keys:
        assert f"<code>--{key.replace('_', '-')}</code>" in text, key
    assert all(r.help for r in rows), [r.key for r in rows if not r.help]


@dataclass(frozen=True)
class _Math:
    tag_weight: float = field(default=0.1, metadata={"help": "tag bonus"})


@dataclass(frozen=True)
class _Task:
    task: str = field(default="arithmetic", metadata={"help": "the task"})
    math: _Math = field(default_factory=_Math, metadata={"help": "math rewards"})


@dataclass(frozen=True)
class _Nested:
    """The shape the config is moving to: groups of leaves, nested, with explicit keys."""

    task: _Task = field(default_factory=_Task, metadata={"help": "task and reward"})
    lr: float = field(default=3e-4, metadata={"help": "learning rate", "key": "learning_rate"})


def test_nested_groups_and_explicit_keys():
    groups = reference.groups(_Nested)
    assert [(path, help_text) for path, help_text, _ in groups] == [
        ("", ""), ("task", "task and reward"), ("task.math", "math rewards")]
    rows = {r.key: r for r in reference.rows(_Nested)}
    assert rows["learning_rate"].flag == "--learning-rate"
    assert rows["tag_weight"].group == "task.math" and rows["tag_weight"].default == "0.1"
    assert rows["tag_weight"].type == "float"
    text = reference.reference_markdown(_Nested)
    assert "### `task.math`" in text and "math rewards" in text


def test_cells_escape_pipes_and_tags():
    @dataclass
    class _C:
        x: int | None = field(default=None, metadata={"help": "a <think> | b"})

    text = reference.reference_markdown(_C)
    assert "int &#124; None" in text and "a &lt;think&gt; &#124; b" in text
    assert len(dataclasses.fields(_C)) == 1


def test_fixed_choices_show_as_their_values():
    rows = {r.key: r for r in reference.rows(TrainConfig)}
    assert rows["loss_norm"].type == "'sequence' | 'token' | 'constant'"
    assert rows["selection"].type == "'group' | 'batch'" and rows["n"].type == "int"
    assert rows["max_steps"].type == "int | None"


def test_hook_fills_only_the_markers():
    page = "intro\n\n" + reference.MARKER + "\nstale\n" + reference.END + "\nafter\n"
    out = reference.on_page_markdown(page, None, None, None)
    assert "<code>--n</code>" in out and "stale" not in out
    assert out.startswith("intro\n\n" + reference.MARKER) and out.endswith(
        reference.END + "\nafter\n")
    assert reference.on_page_markdown(out, None, None, None) == out  # already current
    assert reference.on_page_markdown("no marker", None, None, None) == "no marker"


def test_the_reference_in_the_file_is_current():
    """docs/configuration.md holds the generated reference itself (it reads on GitHub too)."""
    text = reference.PAGE.read_text()
    assert reference.END in text
    assert reference.pods_reference(text) == text, \
        "docs/configuration.md is out of date: run `python docs/hooks/config_reference.py`"


def test_the_training_guide_names_every_key_in_its_group():
    """The training guide's table of groups lists each group's keys (task.math and
    task.code inside the task row)."""
    guide = (HOOK.parents[1] / "guides" / "training.md").read_text()
    table = {line.split("|")[1].strip(): line for line in guide.splitlines()
             if line.startswith("| ") and line.count("|") == 3}
    for path, _, rows in reference.groups(TrainConfig):
        row = table[path.split(".")[0]]
        missing = [r.key for r in rows if f"`{r.key}`" not in row]
        assert not missing, f"the training guide's {path} row lacks {missing}"
