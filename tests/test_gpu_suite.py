"""`make test-gpu` (the Makefile's GPU_TESTS) names files that exist and holds every test
marked gpu, so that a renamed or new GPU test cannot fall out of it; on a machine without
CUDA those tests are collected and skipped with the reason (tests/conftest.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).parents[1]


def gpu_tests() -> list[str]:
    text = ROOT.joinpath("Makefile").read_text().replace("\\\n", " ")
    return re.search(r"^GPU_TESTS := (.+)$", text, re.M).group(1).split()


def test_the_gpu_suite_names_files_that_exist_and_every_gpu_test():
    paths = gpu_tests()
    assert "tests/gpu" in paths
    for path in paths:
        assert (ROOT / path).exists(), path
    marked = {str(p.relative_to(ROOT)) for p in ROOT.glob("tests/**/test_*.py")
              if re.search(r"pytest\.mark\.gpu\b", p.read_text())}
    assert marked, "no test is marked gpu"
    outside = [m for m in marked if not any(m == p or m.startswith(p + "/") for p in paths)]
    assert outside == []


def test_without_cuda_the_gpu_tests_are_collected_and_skipped_with_the_reason(monkeypatch,
                                                                          pytestconfig):
    """conftest's collection hook marks every gpu test skipped with the reason where CUDA is
    not there, and leaves it to run where it is; other tests are left alone."""

    (conftest,) = [p for p in pytestconfig.pluginmanager.get_plugins()
                   if getattr(p, "__file__", None) == str(ROOT / "tests" / "conftest.py")]

    class Item:
        def __init__(self, nodeid: str, keywords: set[str]):
            self.nodeid, self.keywords, self.marks = nodeid, keywords, []

        def add_marker(self, mark):
            self.marks.append(mark)

    for available, skipped in ((False, [True, False]), (True, [False, False])):
        monkeypatch.setattr(torch.cuda, "is_available", lambda available=available: available)
        items = [Item("tests/gpu/test_gpu_decode.py::t", {"gpu"}), Item("tests/t.py::t", set())]
        conftest.pytest_collection_modifyitems(None, items)
        assert [any(m.name == "skip" and m.kwargs.get("reason") == conftest.GPU_REASON
                    for m in item.marks) for item in items] == skipped
    assert conftest.GPU_REASON == "needs a CUDA GPU: make test-gpu runs it on one"


def test_the_gpu_suites_pytest_line_runs_in_workers_where_xdist_is_installed(tmp_path):
    """The recipe's pytest command, as make prints it (its CUDA check left out), run on a
    small file: in GPU_WORKERS processes with pytest-xdist here, its JUnit file written."""
    printed = subprocess.run(
        ["make", "-n", "test-gpu", f"GPU_PYTHON={sys.executable}", "GPU_WORKERS=2",
         "GPU_TESTS=tests/models/test_checkpointing.py"], cwd=ROOT, capture_output=True,
        text=True, check=True).stdout.replace("\\\n", " ")
    (line,) = [cmd for cmd in printed.splitlines() if " -m pytest " in cmd]
    junit = tmp_path / "gpu.xml"
    done = subprocess.run(["sh", "-c", line], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "GPU_JUNIT": str(junit)},
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "bringing up nodes" in done.stdout  # pytest-xdist's workers
    assert 'tests="3"' in junit.read_text()
