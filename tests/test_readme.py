"""The README's Python examples run as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert BLOCKS


@pytest.mark.parametrize("code", BLOCKS)
def test_readme_example_runs(code):
    if code.startswith("# Sketch:"):  # says what it needs that a test machine lacks
        pytest.skip(code.splitlines()[0])
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    if "idx" in namespace:  # the quick start's documented selection
        assert namespace["idx"].tolist() == [[1, 2, 6, 7], [0, 1, 2, 6]]
