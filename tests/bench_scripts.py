"""Running a benchmark script as its command line does, in the test's own process (shared
by tests/benchmarks/test_quick.py and the tests that check a script's figures)."""

import os
import runpy
import sys
from pathlib import Path
from unittest import mock

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_script(script: Path, args: list[str], monkeypatch, capsys) -> str:
    """``python script *args`` as ``__main__`` in this process (torch and transformers are
    imported already: a fresh interpreter spends seconds on them), from the current folder;
    its sys.argv, sys.path inserts and environment variables are undone after. Returns what
    it printed. The processes the script starts itself still start."""
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    monkeypatch.setattr(sys, "path", list(sys.path))
    capsys.readouterr()
    with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):  # never the network
        runpy.run_path(str(script), run_name="__main__")
    return capsys.readouterr().out
