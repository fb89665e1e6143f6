"""The runnable examples of README.md and docs/**/*.md, and how a shell example runs
(shared by tests/test_docs.py and tests/models/test_smollm2_docs.py; the policy is in
tests/test_docs.py's docstring)."""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```", re.M | re.S)
MARK = re.compile(r'^(?:!!! \w+ "(Needs [^"]+)"|> \*\*(Needs [^*]+?)\.?\*\*)')
LANGS = {"python": "python", "bash": "shell", "sh": "shell", "shell": "shell"}
SMOLLM2 = "Needs SmolLM2"  # the title of the examples tests/models/test_smollm2_docs.py runs


def marker(before: str) -> str | None:
    """The "Needs ..." title of the note right above a block, if there is one."""
    lines = before.rstrip().splitlines()
    i = len(lines) - 1
    while i > 0 and lines[i].startswith(("    ", ">")) and not MARK.match(lines[i]):
        i -= 1  # up through the admonition's indented body or the quote's lines
    match = MARK.match(lines[i]) if lines else None
    return (match.group(1) or match.group(2)) if match else None


def examples() -> list[tuple[str, str, str, str | None]]:
    """(name, kind, code, the "Needs ..." title or None) of every example, page by page."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in FENCE.finditer(text):
            kind = LANGS.get(block.group(2))
            if kind is None:
                continue
            indent = len(block.group(1))
            code = "\n".join(line[indent:] for line in block.group(3).splitlines()) + "\n"
            name = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, block.start()) + 1}"
            found.append((name, kind, code, marker(text[: block.start()])))
    return found


WRAPPER = """#!/usr/bin/env bash
# pods, with train, compare and eval kept small (see tests/test_docs.py)
case "$1" in
  train|compare)
    extra="{cheap}"
    case " $* " in *" --resume "*) extra="${{extra/--max-steps 2/--max-steps 4}}";;
      *" --model "*) ;; *) extra="$extra --model {model} --recipe embedded";; esac
    exec "{python}" -m pods "$@" $extra;;
  eval) exec "{python}" -m pods "$@" {cheap_eval};;
  plan)
    extra="--prompts 2 --samples 4 --rows 1,2"
    case " $* " in *" --model "*) ;;
      *) extra="$extra --model {model} --task arithmetic --recipe embedded";; esac
    exec "{python}" -m pods "$@" $extra;;
  check)
    args=("$@"); for i in "${{!args[@]}}"; do
      [ "${{args[$i]}}" = tiny ] && args[$i]="{model} --task arithmetic"; done
    exec "{python}" -m pods ${{args[@]}};;
  *) exec "{python}" -m pods "$@";;
esac
"""


def run_shell(code: str, folder: Path, model: str, cheap: str, cheap_eval: str = "",
              env: dict[str, str] | None = None) -> None:
    """Run a shell example in ``folder`` (with the repository's configs/), where ``pods`` is
    this checkout's, given ``cheap`` flags for train and compare (and ``--model model``
    unless the command names one) and ``cheap_eval`` flags for eval; fail with its output."""
    (folder / "configs").symlink_to(ROOT / "configs")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "pods"
    wrapper.write_text(WRAPPER.format(cheap=cheap, cheap_eval=cheap_eval, model=model,
                                      python=sys.executable))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    env = dict(env or os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                        os.environ.get("PYTHONPATH")])))
    code = re.sub(r"\.venv(-\w+)?/bin/pods\b", "pods", code)  # the checkout's environment
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
