"""Every example in README.md and docs/**/*.md runs as written, or says on the page why not.

Policy (what counts, what runs, how `pods train` stays cheap):

- Examples are the fenced blocks tagged ``python``, ``bash``, ``sh`` or ``shell``. Blocks of
  output, YAML, BibTeX or a file tree are tagged otherwise (``text``, ``yaml``, ...).
- A block is *marked* when the paragraph right above it is a visible note whose title starts
  with "Needs": on the site an admonition ``!!! note "Needs a GPU"`` (its indented body may
  follow), in the README a quote ``> **Needs a GPU.** why``. A marked block is reported as
  skipped with that title as the reason; everything else runs.
- Python blocks run with ``exec`` in a fresh namespace, in a temporary working directory.
- Shell blocks run with ``bash -euo pipefail`` in a temporary folder in which ``configs/`` is
  the repository's, and where ``pods`` is a wrapper around this checkout's ``python -m
  pods`` that keeps ``pods train`` and ``pods compare`` small: it appends ``--max-steps 2
  --eval-size 16 --progress false`` (``--max-steps 4`` to a ``--resume``, so that the
  resumed run has steps left) and, unless the command names a model or resumes, ``--model``
  with the test suite's untrained tiny Qwen2 (no warm-up). Flags override config files and
  comparison specs, so the same command, config and code path run, with a small budget.
  ``pods check --model tiny`` gets the same untrained model (and the arithmetic task) in
  place of the embedded one, whose warm-up would take a minute.
- A block is self-contained: it writes the files it reads (run folders included).
"""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```", re.M | re.S)
MARK = re.compile(r'^(?:!!! \w+ "(Needs [^"]+)"|> \*\*(Needs [^*]+?)\.?\*\*)')
LANGS = {"python": "python", "bash": "shell", "sh": "shell", "shell": "shell"}
CHEAP = "--max-steps 2 --eval-size 16 --progress false"


def marker(before: str) -> str | None:
    """The "Needs ..." title of the note right above a block, if there is one."""
    lines = before.rstrip().splitlines()
    i = len(lines) - 1
    while i > 0 and lines[i].startswith(("    ", ">")) and not MARK.match(lines[i]):
        i -= 1  # up through the admonition's indented body or the quote's lines
    match = MARK.match(lines[i]) if lines else None
    return (match.group(1) or match.group(2)) if match else None


def examples() -> list:
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in FENCE.finditer(text):
            kind = LANGS.get(block.group(2))
            if kind is None:
                continue
            indent = len(block.group(1))
            code = "\n".join(line[indent:] for line in block.group(3).splitlines()) + "\n"
            reason = marker(text[: block.start()])
            name = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, block.start()) + 1}"
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            found.append(pytest.param(kind, code, id=name, marks=marks))
    return found


EXAMPLES = examples()
WRAPPER = """#!/usr/bin/env bash
# pods, with train and compare kept small (see tests/test_docs.py)
case "$1" in
  train|compare)
    extra="{cheap}"
    case " $* " in *" --resume "*) extra="${{extra/--max-steps 2/--max-steps 4}}";;
      *" --model "*) ;; *) extra="$extra --model {model}";; esac
    exec "{python}" -m pods "$@" $extra;;
  check)
    args=("$@"); for i in "${{!args[@]}}"; do
      [ "${{args[$i]}}" = tiny ] && args[$i]="{model} --task arithmetic"; done
    exec "{python}" -m pods ${{args[@]}};;
  *) exec "{python}" -m pods "$@";;
esac
"""


def test_every_page_has_examples():
    ran = [p for p in EXAMPLES if not p.marks]
    assert len(ran) >= 20, f"only {len(ran)} runnable examples found"
    assert all(p.marks[0].kwargs["reason"].startswith("Needs") for p in EXAMPLES if p.marks)


def test_marker_is_read_from_admonitions_and_quotes():
    assert marker('text\n\n!!! note "Needs a GPU"\n    why it does\n\n') == "Needs a GPU"
    assert marker("> **Needs the hub.** a model\n> and data\n\n") == "Needs the hub"
    assert marker("an ordinary paragraph\n\n") is None


@pytest.mark.parametrize(("kind", "code"), EXAMPLES)
def test_example_runs(kind, code, tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.chdir(tmp_path)
    if kind == "python":
        exec(compile(code, "example", "exec"), {"__name__": "__example__"})
        return
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "pods"
    wrapper.write_text(WRAPPER.format(cheap=CHEAP, model=tiny_model_dir, python=sys.executable))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                        os.environ.get("PYTHONPATH")])))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
