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


def test_hook_fills_only_the_marker():
    page = "intro\n\n" + reference.MARKER + "\n"
    out = reference.on_page_markdown(page, None, None, None)
    assert reference.MARKER not in out and "<code>--n</code>" in out
    assert reference.on_page_markdown("no marker", None, None, None) == "no marker"
