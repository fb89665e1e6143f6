"""The `pods check --model tiny` example of docs/guides/new-machine.md measures the
step-time ratio the page describes (not "not measured ... raise --steps")."""

import re
import shlex
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "new-machine.md"


def test_the_documented_tiny_check_prints_its_ratio(tmp_path, capsys):
    from pods.cli import main

    [command] = re.findall(r"^pods check --model tiny .*$", GUIDE.read_text(), re.M)
    args = shlex.split(command)[1:]
    args[args.index("--out") + 1] = str(tmp_path / "check")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"step-time ratio PODS 16/4 : GRPO 4/4 = \d+\.\d\d \(", out), out
    assert "not measured" not in out
