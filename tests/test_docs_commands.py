"""Every command and file the README and the documentation name exists: the scripts under
benchmarks/, the configs, the test files, pods's modules, `pods` subcommands and `make`
targets (a page once named benchmarks/gpu.py after it was gone)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# a repository path: a folder pods has, then a file name with its extension
PATH = re.compile(r"(?<![\w./-])((?:benchmarks|configs|tests|src/pods|docs)/[\w./-]*\w"
                  r"\.(?:py|yaml|md|png|json|sh))")
POD = re.compile(r"(?<![\w./-])(pods/[\w/]+\.py)")  # a module named from the package root
SUBCOMMAND = re.compile(r"`pods ([a-z]+)\b|^\s*(?:\.venv[\w-]*/bin/)?pods ([a-z]+)\b", re.M)
MAKE = re.compile(r"`make ([a-z-]+)`|^\s*make ([a-z-]+)\b", re.M)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
# a script retired after its figure was published is named with the commit that has it
RETIRED = re.compile(r"(?:commit|git show) ([0-9a-f]{7})")
# written as examples of a user's own files, not pods's
EXAMPLES = {"configs/my.yaml"}


def _targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, re.M))


def _subcommands() -> set[str]:
    from pods.cli import _parser

    return set(_parser().commands)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_and_command_a_page_names_exists(page):
    text = page.read_text()
    lines = text.splitlines()
    missing = [p for i, line in enumerate(lines) for p in PATH.findall(line)
               if p not in EXAMPLES and "*" not in p and not (ROOT / p).exists()
               and not RETIRED.search(" ".join(lines[max(0, i - 2):i + 3]))]
    missing += [p for p in POD.findall(text) if not (ROOT / "src" / p).exists()]
    code = "\n".join(FENCE.findall(text))  # commands at a line's start: in code blocks only
    inline = re.findall(r"`pods ([a-z]+)\b", text) + re.findall(r"`make ([a-z-]+)`", text)
    subcommands, targets = _subcommands(), _targets()
    missing += [f"pods {a or b}" for a, b in SUBCOMMAND.findall(code)
                if (a or b) not in subcommands]
    missing += [f"make {a or b}" for a, b in MAKE.findall(code) if (a or b) not in targets]
    missing += [f"`pods {w}` or `make {w}`" for w in inline
                if w not in subcommands and w not in targets]
    assert missing == [], f"{page.relative_to(ROOT)} names what does not exist: {missing}"


def test_the_patterns_catch_a_missing_script():
    assert PATH.findall("run `python benchmarks/gpu.py` then") == ["benchmarks/gpu.py"]
    assert not (ROOT / "benchmarks" / "gpu.py").exists()
    assert SUBCOMMAND.findall("`pods trian`")[0][0] == "trian"
