"""Sections default and tests of the GPU check (benchmarks/gpu/check.py), each a fresh
process stopped at the section's share with what it reached:

default: the embedded default (``pods train``, device auto): its steps, training seconds
and accuracy at each evaluation so far.
tests: on a CUDA GPU ``make test-gpu`` (the tests that need CUDA and the files a GPU
changes, with this Python), its passed, failed and skipped counts from its JUnit file;
where there is no such target or no CUDA, the test files that exercise the device (GPU
paths first: names with gpu, cuda, liger or kernels; tests/check excluded).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from gpucommon import emit, left, read_rows, run_capped, section_args

ROOT = Path(__file__).resolve().parents[2]
TEST_FILES = ["tests/rollout/test_hf_decode.py", "tests/rollout/test_hf_static.py",
              "tests/models/test_precision.py", "tests/train/test_optimizer.py",
              "tests/train/test_update.py", "tests/train/test_mixed_precision.py",
              "tests/rollout"]  # those this checkout has, in this order
GPU_NAMES = ("gpu", "cuda", "liger", "kernels")
INTERRUPT_S = 4.0  # seconds between the interrupt at the share's end and the kill


def until_share(command: list[str], log: Path, args) -> tuple[int | None, float]:
    """Run ``command`` (output to ``log``) until it ends or the share is spent: then it is
    interrupted as Ctrl-C would (pytest then writes its JUnit file with the tests run so
    far), and killed ``INTERRUPT_S`` later (a quarter of a shorter share). (Its exit code
    or None, wall seconds.)"""
    start, grace = time.perf_counter(), min(INTERRUPT_S, args.seconds / 4)
    with log.open("w") as out:
        code = run_capped(command, max(1.0, left(args) - grace - 1), interrupt=grace,
                          stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    return code, time.perf_counter() - start


def default_run(args) -> dict:
    out = Path(args.out) / "default-run"
    command = [sys.executable, "-m", "pods", "train", "--out-dir", str(out), "--run-name",
               "default", "--progress", "false"]
    if args.quick:
        command += ["--max-steps", "1", "--eval-size", "8"]
    code, wall = until_share(command, Path(args.out) / "default.log", args)
    records = read_rows(out / "default" / "metrics.jsonl")
    evals = [(round(r["time"], 1), r["eval/accuracy"]) for r in records
             if r.get("kind") == "eval"]
    steps = [r for r in records if r.get("kind") == "step"]
    return {"wall_s": wall, "finished": code == 0,
            **({} if code in (0, None) else {"error": f"exit {code}: see default.log"}),
            "steps": len(steps), "train_s": steps[-1]["time"] if steps else None,
            "evals": evals}


def test_files() -> list[str]:
    found = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                   if any(word in p.stem for word in GPU_NAMES) and "check" not in p.parts)
    return found + [f for f in TEST_FILES if f not in found and (ROOT / f).exists()]


def make_target(name: str) -> bool:
    """Whether this checkout's Makefile has target ``name`` (``make -n``: nothing runs)."""
    try:
        return subprocess.run(["make", "-n", name], cwd=ROOT, capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def junit_counts(path: Path) -> dict:
    """passed, failed (failures and errors) and skipped of a pytest JUnit file, or {}."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return {}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites)
             for k in ("tests", "failures", "errors", "skipped")}
    failed = total["failures"] + total["errors"]
    return {"passed": total["tests"] - failed - total["skipped"], "failed": failed,
            "skipped": total["skipped"]}


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def device_tests(args) -> dict:
    log, junit = Path(args.out) / "tests.log", Path(args.out) / "tests-junit.xml"
    if make_target("test-gpu") and cuda():
        files = ["make test-gpu"]
        os.environ["GPU_JUNIT"] = str(junit)  # where the target writes its JUnit file
        command = ["make", "test-gpu", f"GPU_PYTHON={sys.executable}",
                   f"PYTHON={sys.executable}"]
    else:
        files = test_files()
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                   f"--junitxml={junit}", *files]
    code, wall = until_share(command, log, args)
    lines = log.read_text().strip().splitlines()
    counts = junit_counts(junit)
    passed = counts.get("passed", sum(line.split(" [")[0].count(".") for line in lines
                                      if line.endswith("%]")))
    summary = lines[-1] if code is not None and lines else \
        f"stopped at its share: {passed} passed, {counts.get('failed', 0)} failed so far"
    return {"files": files, "summary": summary, "returncode": code, "wall_s": wall, **counts}


def main() -> None:
    def extra(parser):
        parser.add_argument("--what", choices=("default", "tests"), required=True)

    args = section_args(__doc__.splitlines()[0], extra)
    emit(args, default_run(args) if args.what == "default" else device_tests(args))


if __name__ == "__main__":
    main()
