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
  with the test suite's untrained tiny Qwen2 (no warm-up) and ``--recipe embedded`` (it
  stands in for the embedded model, so it trains with the embedded recipe). Flags override
  config files and comparison specs, so the same command, config and code path run, with a
  small budget.
  ``pods check --model tiny`` gets the same untrained model (and the arithmetic task) in
  place of the shipped embedded one, as every example's ``pods train`` does; so does ``pods
  plan`` (unless it names a model), measured on 2 prompts x 4 rollouts.
- A block is self-contained: it writes the files it reads (run folders included).
"""

import re
from collections import Counter

import pytest

from doc_examples import PAGES, ROOT, SMOLLM2, examples, marker, run_shell

CHEAP = "--max-steps 2 --eval-size 16 --progress false"
EXAMPLES = [pytest.param(kind, code, id=name,
                         marks=[pytest.mark.skip(reason=needs)] if needs else [])
            for name, kind, code, needs in examples()]


def test_every_fenced_example_is_found():
    """The block pattern misses none (an indented block in an admonition, a tag with
    attributes): each opening fence of a runnable language, counted line by line, is an
    example of its page."""
    found = Counter(name.rsplit(":", 1)[0] for name, *_ in examples())
    opening = re.compile(r"^ *```(?:python|bash|sh|shell)\b")
    for page in PAGES:
        fences = sum(bool(opening.match(line)) for line in page.read_text().splitlines())
        assert found[str(page.relative_to(ROOT))] == fences, page


def test_the_smollm2_examples_are_marked_for_the_real_model_tests():
    """The examples that need SmolLM2 are marked so (skipped here, run on the fetched
    model by tests/models/test_smollm2_docs.py), not left under a generic "Needs" note."""
    marked = {name.rsplit(":", 1)[0] for name, _, _, needs in examples()
              if needs and needs.startswith(SMOLLM2)}
    assert marked == {"docs/guides/llms.md", "docs/guides/tasks.md"}


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
    run_shell(code, tmp_path, str(tiny_model_dir), CHEAP)
