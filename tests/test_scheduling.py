"""The test suite's own order (tests/scheduling.py): the longest files go first."""

from pathlib import Path
from types import SimpleNamespace

from scheduling import LONG_FIRST, long_first

ROOT = Path(__file__).resolve().parents[1]


def test_the_long_files_are_collected_first_each_in_its_order():
    ids = ["tests/core/test_loss.py::test_a", "tests/test_cli.py::test_b",
           "tests/train/test_faults.py::test_c", "tests/core/test_loss.py::test_d",
           "tests/test_cli.py::test_e", "tests/test_docs.py::test_f[x]"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    long_first(items)
    assert [i.nodeid.rsplit("::")[-1] for i in items] == ["test_c", "test_f[x]", "test_b",
                                                          "test_e", "test_a", "test_d"]


def test_every_long_file_exists():
    """A renamed file would silently go back to its place in the order."""
    assert [p for p in LONG_FIRST if not (ROOT / p).is_file()] == []
