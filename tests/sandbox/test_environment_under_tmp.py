"""``site_packages=True`` from a virtual environment under /tmp: the sandbox's own private
/tmp must not cover the environment it binds (a clone under /tmp built with `make` once
failed so: "prlimit: failed to execute /tmp/.../.venv/bin/python")."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sandbox_callers import MODE_PARAMS, SRC

from pods.sandbox.rootfs import Entry, inside_private

CALLER = """
import json, sys, types
pods = types.ModuleType("pods")
pods.__path__ = [sys.argv[1] + "/pods"]
sys.modules["pods"] = pods
from pods.sandbox import run_python
results = [run_python(code, isolation=sys.argv[2], site_packages=True)
           for code in json.loads(sys.stdin.read())]
print(json.dumps([[r.status, r.stdout, r.stderr] for r in results]))
"""
PROGRAMS = [
    # the environment's own package, and the prefix the program runs in
    "import sys, pods_tmp_marker\nprint(pods_tmp_marker.WHERE, sys.prefix)",
    # the environment stays read-only
    "import sys\nopen(sys.prefix + '/planted', 'w')",
    # /tmp is still the sandbox's own: the host's other files there are not visible
    "import json, os\nprint(json.dumps(os.listdir('/tmp')))",
]


@pytest.fixture
def venv_under_tmp():
    """A virtual environment in a new folder of /tmp (open to the sandbox's uid), holding
    one module of its own."""
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="pods-venv-"))
    try:
        folder.chmod(0o755)
        subprocess.run([sys._base_executable, "-m", "venv", "--without-pip",
                        str(folder / "env")], check=True)
        site = next((folder / "env" / "lib").glob("python*/site-packages"))
        (site / "pods_tmp_marker.py").write_text("WHERE = 'found'\n")
        yield folder / "env"
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_an_environment_under_tmp_is_bound_over_the_private_tmp(mode, venv_under_tmp):
    done = subprocess.run([str(venv_under_tmp / "bin" / "python"), "-I", "-c", CALLER,
                           str(SRC), mode], input=json.dumps(PROGRAMS), capture_output=True,
                          text=True, timeout=120, cwd="/", env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    found, planted, listed = json.loads(done.stdout)
    assert found[:2] == ["ok", f"found {venv_under_tmp}\n"], found
    assert planted[0] == "error" and "Read-only file system" in planted[2], planted
    assert listed[0] == "ok", listed
    names = sorted(json.loads(listed[1]))  # the working folder and the way to the env
    workdirs = [n for n in names if re.fullmatch(r"pods-[0-9a-f]{12}", n)]
    assert len(workdirs) == 1 and names == sorted([*workdirs, venv_under_tmp.parent.name])


def test_the_plan_is_split_at_the_private_tmpfs():
    plan = (Entry("bind", "/usr"), Entry("bind", "/tmp/a/env"), Entry("bind", "/tmpfoo"),
            Entry("symlink", "/dev/shm/x/python", "python3"), Entry("bind", "/opt/py/lib"))
    outside, inside = inside_private(plan)
    assert [e.path for e in outside] == ["/usr", "/tmpfoo", "/opt/py/lib"]
    assert [e.path for e in inside] == ["/tmp/a/env", "/dev/shm/x/python"]
