"""pods.sandbox: each guarantee checked in every isolation mode that works on this machine
(a mode whose tool is missing is skipped, with what to install, unless it is named in
PODS_SANDBOX_REQUIRE, as CI does: then its tests run and fail)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sandbox_callers import MODE_PARAMS

from pods.sandbox import (
    TIMEOUT_SLACK_S,
    Limits,
    RunResult,
    SandboxUnavailable,
    available_modes,
    run_many,
    run_python,
)
from pods.sandbox.commands import UID_BASE
from pods.sandbox.isolation import reset_probes
from pods.sandbox.process import classify, normalise


@pytest.fixture(params=MODE_PARAMS)
def mode(request) -> str:
    return request.param


def run(mode: str, code: str, stdin: str | bytes = "", site_packages: bool = False,
        **limits) -> RunResult:
    """``code`` in isolation ``mode``; ``limits``: the fields of ``Limits`` to set."""
    return run_python(code, stdin, Limits(**limits), isolation=mode,
                      site_packages=site_packages)


def marked(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (the host sees namespaced ones too)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(name))
        except (OSError, ValueError):
            continue
    return found


def memory_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


# -- normal behaviour ------------------------------------------------------------------


def test_stdin_stdout_stderr_and_exit_code(mode):
    code = "import sys\ndata = sys.stdin.read()\nprint(data.upper())\n" \
           "print('to stderr', file=sys.stderr)\nsys.exit(3)\n"
    r = run(mode, code, stdin="hello ünïcode")
    assert (r.status, r.returncode, r.isolation) == ("error", 3, mode)
    assert r.stdout == "HELLO ÜNÏCODE\n" and r.stderr == "to stderr\n"
    ok = run(mode, "print(sum(range(100)))")
    assert (ok.status, ok.returncode, ok.stdout, ok.truncated) == ("ok", 0, "4950\n", False)


def test_exception_is_error_with_traceback(mode):
    r = run(mode, "def f():\n    return 1 / 0\nf()\n")
    assert (r.status, r.returncode) == ("error", 1)
    assert "Traceback" in r.stderr and "ZeroDivisionError" in r.stderr
    assert "return 1 / 0" in r.stderr  # the source line: the program is a real file


def test_large_stdin_and_exit_builtin(mode):
    r = run(mode, "import sys\nprint(len(sys.stdin.read()))\nexit(0)\n", stdin="x" * 3_000_000)
    assert (r.status, r.stdout) == ("ok", "3000000\n")


def test_only_standard_descriptors_are_inherited(mode):
    extra = [open(os.devnull) for _ in range(16)]  # pushes the sandbox's own fds past 9
    try:
        r = run(mode, "import os\nprint(sorted(os.listdir('/proc/self/fd'), key=int))")
    finally:
        for f in extra:
            f.close()
    assert r.stdout == "['0', '1', '2', '3']\n"  # 3: listdir's own directory handle


def test_killed_by_signal(mode):
    r = run(mode, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert (r.status, r.returncode) == ("killed", -signal.SIGSEGV)


# -- limits ----------------------------------------------------------------------------


def test_infinite_loop_times_out_within_slack(mode):
    start = time.monotonic()
    r = run(mode, "while True:\n    pass\n", timeout_s=1.0)
    assert r.status == "timeout" and r.returncode == -signal.SIGKILL
    assert time.monotonic() - start < 1.0 + TIMEOUT_SLACK_S


def test_memory_bomb_without_parent_growth(mode):
    reset_peak_rss()
    before = memory_kb("VmRSS")
    r = run(mode, "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))\n",
            memory_mb=256, timeout_s=10)
    assert r.status == "memory" and "MemoryError" in r.stderr
    assert memory_kb("VmHWM") - before < 16 * 1024


def test_output_is_capped_without_parent_growth(mode):
    reset_peak_rss()
    before = memory_kb("VmRSS")
    code = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(200):\n" \
           "    sys.stdout.write(chunk)\n"
    r = run(mode, code, output_limit=64 * 1024, timeout_s=30)
    assert (r.status, r.truncated, len(r.stdout)) == ("ok", True, 64 * 1024)
    assert memory_kb("VmHWM") - before < 8 * 1024


def test_fork_bomb_is_contained_and_gone(mode):
    marker = f"pods-bomb-{secrets.token_hex(8)}"
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n" \
           "    except OSError:\n        time.sleep(0.001)\n"
    code = f"import os, sys\nos.execv(sys.executable, " \
           f"[sys.executable, '-c', {bomb!r}, {marker!r}])\n"
    seen = []
    with ThreadPoolExecutor(1) as pool:
        start = time.monotonic()
        future = pool.submit(run, mode, code, timeout_s=2.0, max_processes=24)
        while not future.done():
            seen.append(len(marked(marker)))
            time.sleep(0.05)
        elapsed = time.monotonic() - start
        r = future.result()
    assert r.status == "timeout"
    assert elapsed < 2.0 + TIMEOUT_SLACK_S  # the whole namespace torn down in time
    assert max(seen) >= 2, "the bomb never ran (or /proc scanning is broken)"
    assert max(seen) <= 24, "more processes than the limit"
    assert marked(marker) == []


def test_daemonised_children_are_gone(mode):
    marker = f"pods-daemon-{secrets.token_hex(8)}"
    code = f"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", {marker!r}])
    os._exit(0)
os.wait()
for _ in range(500):  # until the daemon's exec shows in this namespace's /proc
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if {marker!r} in open(f"/proc/{{pid}}/cmdline").read():
                print("daemon running", flush=True)
                sys.exit(0)
        except OSError:
            pass
    time.sleep(0.01)
"""
    r = run(mode, code, timeout_s=10)
    assert (r.status, r.stdout) == ("ok", "daemon running\n"), r.stderr
    assert marked(marker) == []


def test_marker_scan_sees_processes():
    marker = f"pods-scan-{secrets.token_hex(8)}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        deadline = time.monotonic() + 10
        while not marked(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marked(marker) == [proc.pid]
    finally:
        proc.kill()
        proc.wait()


# -- isolation from the caller ---------------------------------------------------------


def test_no_network_to_a_local_listener(mode):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
    print("connected")
except OSError as e:
    print("failed", type(e).__name__)
"""
        r = run(mode, code, timeout_s=5)
        assert r.status == "ok" and r.stdout.startswith("failed"), r.stdout + r.stderr
        with pytest.raises(BlockingIOError):
            server.accept()
        socket.create_connection(("127.0.0.1", port), timeout=1).close()  # the port was open


def test_caller_environment_is_not_visible(mode, monkeypatch):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("PODS_SANDBOX_TEST_SECRET", secret)
    code = f"""
import os
print(dict(os.environ))
for path in ("/proc/{os.getpid()}/environ", "/proc/1/environ", "/proc/2/environ"):
    try:
        print(path, open(path, "rb").read())
    except OSError as e:
        print(path, type(e).__name__)
"""
    r = run(mode, code)
    assert r.status == "ok" and "'PATH'" in r.stdout
    assert secret not in r.stdout + r.stderr
    assert f"/proc/{os.getpid()}/environ FileNotFoundError" in r.stdout


CALLER = """
import os, sys
from pods.sandbox import run_python
me = os.getpid()
program = f'''
import os, signal
for sig in (signal.SIGTERM, signal.SIGKILL):
    for target in ({me}, -{me}):
        try:
            os.kill(target, sig)
            print("sent", target)
        except OSError as e:
            print(type(e).__name__)
'''
result = run_python(program, isolation=sys.argv[1])
print("survived", result.status, result.stdout.split())
"""


def test_program_cannot_signal_the_caller(mode):
    caller = subprocess.run([sys.executable, "-c", CALLER, mode], capture_output=True,
                            text=True, timeout=60, start_new_session=True)
    assert caller.returncode == 0, caller.stderr
    assert caller.stdout.startswith("survived ok"), caller.stdout
    assert "sent" not in caller.stdout and "ProcessLookupError" in caller.stdout


# -- files -----------------------------------------------------------------------------


def test_writes_go_to_a_fresh_private_directory(mode):
    host = Path(f"/var/tmp/pods-sandbox-test-{secrets.token_hex(6)}")
    escaped = f"/tmp/pods-sandbox-escaped-{secrets.token_hex(6)}"
    host.mkdir(mode=0o777)
    host.chmod(0o777)
    try:
        code = f"""
import os
open("data.txt", "w").write("hello")
print(os.getcwd())
print(sorted(os.listdir(".")))
for path in ({str(host)!r} + "/escaped", {escaped!r}):
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as e:
        print("refused", path, type(e).__name__)
"""
        r = run(mode, code)
        assert r.status == "ok", r.stderr
        cwd, listing, *_ = r.stdout.splitlines()
        assert cwd.startswith("/tmp/") and listing == "['data.txt', 'main.py']"
        assert not os.path.exists(cwd) and list(host.iterdir()) == []
        assert not os.path.exists(escaped)
        again = run(mode, "import os\nprint(sorted(os.listdir('.')))")
        assert again.stdout == "['main.py']\n"
    finally:
        shutil.rmtree(host)


def _top(path: str) -> str:
    return "/" + Path(path).parts[1]


def test_root_holds_only_the_minimal_set(mode):
    """The program's / is read-only and holds the system folders, its own /proc, /dev and
    /tmp, and the way to the interpreter; /etc only the loader cache and the time zone."""
    code = """
import json, os, sys
out = {"root": sorted(os.listdir("/")), "etc": sorted(os.listdir("/etc")),
       "uid": os.getuid(), "cwd owner": os.stat(".").st_uid, "executable": sys.executable}
for path in ("/planted", "/usr/planted", "/etc/planted"):
    try:
        open(path, "w").close()
        out[path] = "wrote"
    except OSError as e:
        out[path] = e.strerror
print(json.dumps(out))
"""
    r = run(mode, code)
    assert r.status == "ok", r.stderr
    seen = json.loads(r.stdout)
    system = {d for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr")
              if os.path.exists(d)}
    interpreter = {_top(os.path.realpath(p)) for p in (sys._base_executable, sys.base_prefix)}
    assert {"/" + d for d in seen["root"]} == system | interpreter | {"/dev", "/etc", "/proc",
                                                                     "/tmp"}
    assert set(seen["etc"]) <= {"ld.so.cache", "localtime"}
    assert seen["executable"] == os.path.realpath(sys._base_executable)
    assert {seen[p] for p in ("/planted", "/usr/planted", "/etc/planted")} \
        == {"Read-only file system"}
    assert seen["cwd owner"] == seen["uid"]  # the working folder is the program's own
    if os.geteuid() == 0:  # a uid of its own, from the sandbox range (see commands.py)
        assert seen["uid"] >= UID_BASE


@pytest.mark.skipif(os.geteuid() != 0, reason="uids per sandbox are given as root only")
def test_a_thread_holding_two_sandboxes_gives_each_its_own_uid(mode):
    """pods.sandbox.pair's judge and solution, opened by one thread, never share a uid (and
    so never a process count)."""
    from pods.sandbox.commands import PID_SPAN, uid_slot

    first = int(run(mode, "import os; print(os.getuid())").stdout)
    with uid_slot(1):
        second = int(run(mode, "import os; print(os.getuid())").stdout)
    assert first == UID_BASE + threading.get_native_id() and second == first + PID_SPAN


def test_a_callers_folder_inside_a_bound_one_is_covered(mode, monkeypatch):
    """A working folder under /usr (a project in /usr/src/app, say) is an empty folder."""
    folder = "/usr/share"
    if not os.listdir(folder):
        pytest.skip(f"{folder} is empty here")
    monkeypatch.chdir(folder)
    r = run(mode, f"import os\nprint(os.listdir({folder!r}), bool(os.listdir('/usr/bin')))")
    assert (r.status, r.stdout) == ("ok", "[] True\n"), r.stderr


@pytest.mark.skipif(not os.access("/usr/share", os.W_OK), reason="needs to write /usr/share")
def test_a_covered_folder_may_have_any_name(mode, monkeypatch):
    """A caller's folder whose name holds a space, a tab, a backslash and a newline (the
    characters an fstab escapes) is covered all the same."""
    folder = Path(f"/usr/share/pods test\t\\dir\n{secrets.token_hex(4)}")
    folder.mkdir()
    try:
        (folder / "secret.txt").write_text("host data")
        monkeypatch.chdir(folder)
        r = run(mode, f"import os\nprint(os.listdir({str(folder)!r}))")
        assert (r.status, r.stdout) == ("ok", "[]\n"), r.stderr
    finally:
        shutil.rmtree(folder)


def test_fstab_fields_escape_what_separates_them():
    from pods.sandbox.unshare import _fstab_field

    assert _fstab_field("/a b\tc\\d\ne") == "/a\\040b\\011c\\134d\\012e"
    assert _fstab_field("/usr/lib") == "/usr/lib"


@pytest.mark.parametrize("version", ["mount from util-linux 2.26.2", "mount (BusyBox v1.36)"])
def test_unshare_refuses_a_mount_that_would_bind_writable(tmp_path, version):
    """Before util-linux 2.27 a "bind,ro" fstab entry gives a writable bind: refused."""
    from pods.sandbox.unshare import check_mount

    fake = tmp_path / "mount"
    fake.write_text(f"#!/bin/sh\necho '{version}'\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailable, match="2.27 or later.*util-linux"):
        check_mount(str(fake))


def test_site_packages_only_when_asked(mode):
    """By default the base interpreter and its standard library; ``site_packages=True``
    runs the caller's interpreter with its environment's packages, read-only."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running in a virtual environment")
    import importlib.util

    name = next((m for m in ("rich", "peft", "transformers", "mkdocs", "ruff")
                 if importlib.util.find_spec(m)), None)
    if name is None:
        pytest.skip("no package of this environment to look for")
    base = subprocess.run([sys._base_executable, "-I", "-c", f"import importlib.util; "
                          f"print(importlib.util.find_spec({name!r}) is not None)"],
                          capture_output=True, text=True, check=True).stdout
    code = f"import importlib.util, sys\nprint(importlib.util.find_spec({name!r}) is not " \
           f"None, sys.prefix)"
    assert run(mode, code).stdout == f"{base.strip()} {sys.base_prefix}\n"
    opted = run(mode, code, site_packages=True)
    assert opted.stdout == f"True {sys.prefix}\n", opted.stderr
    wrote = run(mode, f"open({sys.prefix!r} + '/planted', 'w')", site_packages=True)
    assert "Read-only file system" in wrote.stderr


# -- API -------------------------------------------------------------------------------


def test_run_many_keeps_order_under_concurrency():
    codes = ["import sys\nn = int(sys.stdin.read())\nprint(n * n)"] * 12
    results = run_many(codes, [str(i) for i in range(12)], workers=4,
                       limits=Limits(timeout_s=10))
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(12)]
    assert {r.status for r in results} == {"ok"}


def test_run_many_runs_at_most_workers_programs_at_once(monkeypatch):
    """The worker bound, counted: each stand-in run records how many run at that moment."""
    import pods.sandbox as sandbox

    lock, running, peak = threading.Lock(), [0], [0]

    def counting(code, stdin="", **options):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return code

    monkeypatch.setattr(sandbox, "run_python", counting)
    codes = [str(i) for i in range(12)]
    assert run_many(codes, workers=3) == codes
    assert peak[0] == 3


@pytest.mark.parametrize("fields, message", [
    (dict(timeout_s=0.0), "must be positive"), (dict(memory_mb=-1), "must be positive"),
    (dict(disk_mb=0), "must be positive"), (dict(output_limit=-1), "output_limit=-1"),
])
def test_limits_are_checked_before_anything_runs(fields, message):
    with pytest.raises(ValueError, match=message):
        Limits(**fields)


def test_environment_variable_selects_the_mode(monkeypatch):
    for m in available_modes():
        monkeypatch.setenv("PODS_SANDBOX", m)
        assert run_python("print(1)").isolation == m
    monkeypatch.setenv("PODS_SANDBOX", "none")
    with pytest.raises(ValueError):
        run_python("print(1)")


@pytest.fixture
def no_tools(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    reset_probes()
    yield
    monkeypatch.undo()
    reset_probes()


def test_missing_tools_raise_with_install_hint(no_tools):
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        run_python("print(1)", isolation="bwrap")
    with pytest.raises(SandboxUnavailable, match="util-linux"):
        run_python("print(1)", isolation="unshare")
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*util-linux"):
        run_python("print(1)", isolation="auto")


def test_status_rules():
    assert normalise(137) == -9 and normalise(1) == 1 and normalise(255) == 255
    assert classify(-9, True, b"") == "timeout"
    assert classify(-signal.SIGXCPU, False, b"") == "timeout"
    assert classify(1, False, b"Traceback ...\nMemoryError\n") == "memory"
    assert classify(0, False, b"MemoryError") == "ok"
    assert classify(-11, False, b"") == "killed"
    assert classify(2, False, b"") == "error"


def test_weakened_guarantees_warn_once(mode, monkeypatch):
    """A caller's folder that the programs can read (here: the working folder is the
    environment that site_packages binds) and, without root, a kernel that counts processes
    per uid: a RuntimeWarning each, the first time only."""
    from pods.sandbox import commands, rootfs

    if sys.prefix == sys.base_prefix:
        pytest.skip("not running in a virtual environment")
    monkeypatch.setattr(commands, "_warned", set())
    monkeypatch.chdir(sys.prefix)
    with pytest.warns(RuntimeWarning, match="can read it"):
        assert run(mode, "print(1)", site_packages=True).stdout == "1\n"
    monkeypatch.setattr(commands, "is_root", lambda: False)
    monkeypatch.setattr(commands, "kernel_version", lambda: (5, 10))
    plan = rootfs.entries(site_packages=True)
    with pytest.warns(RuntimeWarning, match="per uid, not per user namespace") as caught:
        commands.check_guarantees(mode, plan)
    assert len(caught) == 1  # the folder's warning came once already
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        commands.check_guarantees(mode, plan)
