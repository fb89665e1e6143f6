"""Callers of pods.sandbox for the hostile tests: this process (root here and in CI), or
another Python process, as root or dropped to an unprivileged uid with no passwd entry.

An unprivileged caller needs to read the interpreter. Where a folder on the way to it is
closed to others (here: /root, holding pyenv's Python), the caller starts in a mount
namespace of its own where that folder is an open tmpfs with only the needed child bound
back, as it would be on a machine where a user owns their Python.

The other process imports ``pods.sandbox`` alone (a bare ``pods`` package object stands in
for ``pods/__init__``, which loads torch), so it starts in well under a second.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pods.sandbox.isolation import MODES, unusable_reason

REQUIRED = set(filter(None, os.environ.get("PODS_SANDBOX_REQUIRE", "").split(",")))
MODE_PARAMS = [pytest.param(m, marks=pytest.mark.skipif(unusable_reason(m) is not None
                                                        and m not in REQUIRED,
                                                        reason=str(unusable_reason(m))))
               for m in MODES]
SRC = Path(__file__).resolve().parents[2] / "src"
UNPRIVILEGED = 54321  # no passwd entry; not nobody, whom older sandboxes ran as
CALLER = """
import json, subprocess, sys, types
pods = types.ModuleType("pods")
pods.__path__ = [sys.argv[1] + "/pods"]
sys.modules["pods"] = pods
from pods.sandbox import Limits, SandboxUnavailable, run_many
job = json.loads(sys.stdin.read())
if job["mode"] == "control":  # the same programs, unsandboxed: what this caller may reach
    runs = [subprocess.run([sys.executable, "-I", "-c", code], input=stdin, text=True,
                           capture_output=True, timeout=30) for code, stdin in job["programs"]]
    print(json.dumps([{"status": "ok" if r.returncode == 0 else "error", "stdout": r.stdout,
                       "stderr": r.stderr} for r in runs]))
    sys.exit(0)
try:
    codes, stdins = zip(*job["programs"])
    limits = Limits(timeout_s=job["timeout_s"], memory_mb=job.get("memory_mb", 512))
    results = run_many(codes, stdins, isolation=job["mode"], workers=job["workers"],
                       limits=limits)
except SandboxUnavailable as e:
    print(json.dumps({"unavailable": str(e)}))
    sys.exit(0)
from pods.sandbox.commands import processes  # what this caller's sandboxes may start
print(json.dumps([{"status": r.status, "stdout": r.stdout, "stderr": r.stderr,
                   "processes": processes(limits)} for r in results]))
"""


def _closed_ancestors() -> dict[str, str]:
    """Folders on the way to the interpreter that others cannot enter, each with the child
    on the way (to be bound back into an open tmpfs)."""
    found = {}
    for path in {sys.executable, os.path.realpath(sys.executable), sys.base_prefix,
                 os.path.realpath(sys.base_prefix), sys.prefix, str(SRC)}:
        current = "/"
        parts = Path(path).parts[1:]
        for i, part in enumerate(parts[:-1]):
            current = os.path.join(current, part)
            if not os.stat(current).st_mode & stat.S_IXOTH:
                found[current] = os.path.join(current, parts[i + 1])
                break
    return found


def _wrapper(uid: int | None) -> list[str]:
    """The command that runs a Python process as ``uid`` (None: unchanged) with the
    interpreter reachable (each closed folder's child opened before it is covered)."""
    if uid is None:
        return []
    lines = ["set -eu"]
    for fd, (folder, child) in enumerate(_closed_ancestors().items(), start=5):
        lines += [f"exec {fd}<{child}", f"mount -t tmpfs -o mode=0755 pods-open {folder}",
                  f"mkdir -p {child}", f"mount --no-canonicalize --bind /proc/self/fd/{fd} "
                  f"{child}", f"exec {fd}<&-"]
    lines.append('exec setpriv --reuid "$0" --regid "$0" --clear-groups -- "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            "\n".join(lines), str(uid)]


def start(job: dict, uid: int | None, cwd: Path, home: Path) -> subprocess.Popen:
    """A Python process running ``job`` (mode, programs, workers, timeout_s), as ``uid``
    (None: as this process's user) in ``cwd``; read it back with ``finish``."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(home),
           "LANG": "C.UTF-8"}
    proc = subprocess.Popen([*_wrapper(uid), sys.executable, "-I", "-c", CALLER, str(SRC)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    proc.job = json.dumps(job)
    return proc


def finish(proc: subprocess.Popen, timeout_s: float = 120) -> list[dict] | dict:
    """The results of ``start``'s process: one dict per program, or {"unavailable": why}."""
    out, err = proc.communicate(proc.job, timeout=timeout_s)
    assert proc.returncode == 0, err
    return json.loads(out)


def run(job: dict, uid: int | None, cwd: Path, home: Path) -> list[dict] | dict:
    return finish(start(job, uid, cwd, home))
