"""The TRL guide's offline example runs as written, on the shipped tiny model."""

import re
from pathlib import Path

import pytest

pytest.importorskip("trl")

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "trl.md"


def offline_block() -> str:
    section = GUIDE.read_text().split("## A run offline, on pods's tiny model", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


def test_the_offline_example_trains_two_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # its output_dir "out"
    scope: dict = {}
    exec(compile(offline_block(), str(GUIDE), "exec"), scope)
    trainer = scope["trainer"]
    assert trainer.state.global_step == 2
    assert "\n2 steps; reward " in capsys.readouterr().out  # after TRL's own log lines
    rewards = [r["reward"] for r in trainer.state.log_history if "reward" in r]
    assert len(rewards) == 2 and all(0 <= r <= 1 for r in rewards)
