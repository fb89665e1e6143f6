"""Where the tests' small dataset files live (tests/fixtures/data).

A module of its own, not a name in conftest.py: `from conftest import ...` picks whichever
conftest module pytest imported first (tests/models has one too), so it breaks with the order
in which folders are collected.
"""

from pathlib import Path

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
