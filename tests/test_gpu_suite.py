"""`make test-gpu` (the Makefile's GPU_TESTS) names files that exist and holds every test
marked gpu, so that a renamed or new GPU test cannot fall out of it; on a machine without
CUDA those tests are collected and skipped with the reason."""

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


def test_without_cuda_the_gpu_tests_are_collected_and_skipped_with_the_reason():
    if torch.cuda.is_available():
        return  # make test-gpu runs them
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=-rs", "-m", "gpu", "tests/gpu",
                           "tests/rollout/test_hf_decode.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    skipped = int(re.search(r"(\d+) skipped", done.stdout).group(1))
    assert skipped >= 10 and "passed" not in done.stdout and "failed" not in done.stdout
    assert "needs a CUDA GPU: make test-gpu runs it on one" in done.stdout
