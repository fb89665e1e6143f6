"""The order the test suite runs in (tests/conftest.py applies it at collection)."""

# The files whose tests take longest one by one (each a minute or more of subprocesses on 2
# cores), run first. pytest-xdist hands out the xdist_group groups first (the most tests
# first), then single tests in collection order: a long test collected last (tests/train
# sorts last) would start when the other worker is nearly done and leave it idle.
LONG_FIRST = ("tests/train/test_faults.py", "tests/test_docs.py",
              "tests/benchmarks/test_quick.py", "tests/check/test_gpu_check.py",
              "tests/test_cli.py")


def long_first(items: list) -> None:
    """Sort ``items`` (anything with a ``nodeid``) in place: the files of ``LONG_FIRST`` in
    its order, then the rest in their order."""
    items.sort(key=lambda item: next((i for i, path in enumerate(LONG_FIRST)
                                      if item.nodeid.startswith(f"{path}::")), len(LONG_FIRST)))
