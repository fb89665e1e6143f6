"""Every benchmark script, rehearsed: ``python benchmarks/<group>/<script>.py --quick`` runs
the script's own code on sizes a CPU takes in seconds and must print its markdown table and
write its rows as JSON. Scripts are found by folder (each .py in a folder of benchmarks/),
so a new one joins by being there; one with a module-level ``REHEARSAL`` string (it needs a
GPU, or its own test runs it) is left out, the string saying where it is rehearsed, and so
is a folder of ``ELSEWHERE`` (the GPU check's, which its own test rehearses part by part).
Each script runs as ``__main__`` in the test's process (tests/bench_scripts.py)."""

import ast
import json
from pathlib import Path

import pytest

from bench_scripts import BENCHMARKS, run_script

ROOT = BENCHMARKS.parent
# Folders whose scripts their own test rehearses (every part of the GPU check runs there,
# sized for a CPU): left out here as a whole, helper modules included.
ELSEWHERE = {"gpu": "tests/check/test_gpu_check.py"}
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*/*.py")
                 if not p.name.startswith("_") and p.parent.name not in ELSEWHERE)


def rehearsal(path: Path) -> str | None:
    """The script's ``REHEARSAL`` string (where it is rehearsed instead), None if absent."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "REHEARSAL" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def name(path: Path) -> str:
    return path.relative_to(BENCHMARKS).as_posix()


@pytest.mark.parametrize("script", [p for p in SCRIPTS if rehearsal(p) is None], ids=name)
def test_the_script_runs_quick_and_prints_its_table(script, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = run_script(script, ["--quick", "--json", "rows.json"], monkeypatch, capsys)
    assert "\n|---" in out, out[-2000:]  # its markdown table
    report = json.loads((tmp_path / "rows.json").read_text())
    assert report["machine"] and report["rows"]


def test_the_suite_is_grouped_and_every_script_is_short_and_quick():
    assert {p.parent.name for p in SCRIPTS} >= {"selection", "update", "generation", "runs",
                                                "tasks", "sandbox", "integrations"}
    loose = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != "suite.py")
    assert not loose, f"scripts outside a group folder, so never rehearsed: {loose}"
    for path in SCRIPTS:
        text = path.read_text()
        assert len(text.splitlines()) <= 300, f"{name(path)} is over 300 lines: split it"
        assert "--quick" in text or rehearsal(path), f"{name(path)} has no --quick rehearsal"


def test_the_documentation_names_the_command_of_every_script():
    """Each table's command is beside it on the results page (or the guide that shows it)."""
    docs = "".join(p.read_text() for p in (ROOT / "docs").rglob("*.md"))
    missing = [name(p) for p in SCRIPTS if f"benchmarks/{name(p)}" not in docs]
    assert not missing, f"no command in docs/ runs {missing}"


def test_the_rule_leaves_out_a_script_that_says_where_it_is_rehearsed(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text('"""A GPU probe."""\n\nREHEARSAL = "needs a GPU: tests/x.py"\n')
    assert rehearsal(script) == "needs a GPU: tests/x.py"
    script.write_text('"""A probe."""\n\nQUICK = 1\n')
    assert rehearsal(script) is None
    assert all((ROOT / test).is_file() for test in ELSEWHERE.values())  # what rehearses them
