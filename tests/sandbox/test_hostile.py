"""pods.sandbox against hostile programs, in every isolation mode and for both kinds of
caller: root, and an unprivileged uid (the tests run as root here and in CI; the
unprivileged caller is another process dropped to a uid with no passwd entry, see
sandbox_callers.py; run as a normal user, only the unprivileged cases run, as that user).

Each probe first runs sandboxed, then unsandboxed by the same caller (the control): the
control must reach what the sandboxed program could not, so a probe that cannot reach its
target for another reason fails the test instead of passing it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pytest
import sandbox_callers
from sandbox_callers import MODE_PARAMS, REQUIRED

PROBE = r"""
import json, os, socket, sys
t = json.loads(sys.stdin.read())
out = {}

def attempt(name, action):
    try:
        out[name] = action()
    except OSError as e:
        out[name] = type(e).__name__

def send(address):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(address)
        s.sendall(b"hello from the program")
    return "sent"

def change(path, action):  # the control only checks the permission: it must not write
    if t["control"]:
        return "allowed" if os.access(path, os.W_OK) else "denied"
    action()
    return "done"

if not t["control"]:
    attempt("own program", lambda: t["marker"] in open("main.py").read())
attempt("data file", lambda: open(t["data"]).read())
attempt("test source", lambda: len(open(t["source"]).read()) > 0)
attempt("caller cwd", lambda: sorted(os.listdir(t["cwd"])))
attempt("checkpoint", lambda: open(t["checkpoint"]).read())
attempt("unix socket", lambda: send(t["socket"]))
attempt("abstract socket", lambda: send("\0" + t["abstract"]))
attempt("overwrite checkpoint",
        lambda: change(t["checkpoint"], lambda: open(t["checkpoint"], "w").write("0")))
attempt("delete checkpoint",
        lambda: change(os.path.dirname(t["checkpoint"]), lambda: os.remove(t["checkpoint"])))
attempt("write cwd", lambda: change(t["cwd"], lambda: open(t["cwd"] + "/planted", "w").close()))
print(json.dumps(out))
"""
THREADS = """
import threading, time
threading.stack_size(1 << 18)  # address space is limited too (memory_mb): small stacks
stop, started = threading.Event(), 0
try:
    for _ in range(64):
        threading.Thread(target=stop.wait).start()
        started += 1
except RuntimeError:
    pass
time.sleep(0.3)  # hold them while the other sandboxes start theirs
stop.set()
print(started)
"""
MAX_PROCESSES = 32  # run_python's default: the program's processes and threads together


@pytest.fixture(params=MODE_PARAMS)
def mode(request) -> str:
    return request.param


@pytest.fixture(params=["root", "unprivileged"])
def uid(request) -> int | None:
    """The caller's uid (None: this process's own, when it is not root)."""
    if request.param == "root":
        if os.geteuid() != 0:
            pytest.skip("the root caller needs the tests to run as root")
        return 0
    return sandbox_callers.UNPRIVILEGED if os.geteuid() == 0 else None


def _owned(path: Path, uid: int | None, mode: int = 0o755) -> Path:
    path.mkdir(mode=mode)
    if uid:
        os.chown(path, uid, uid)
    return path


@pytest.fixture
def scene(uid):
    """A caller's world outside /tmp and home: a data file, a run folder with a checkpoint
    and a working folder (both the caller's own), a UNIX socket server under /run (else
    /var/tmp) and an abstract one, each reachable by the caller without the sandbox."""
    with ExitStack() as stack:
        base = Path(tempfile.mkdtemp(prefix="pods-hostile-", dir="/var/tmp"))
        stack.callback(shutil.rmtree, base)
        base.chmod(0o755)
        secret = secrets.token_hex(16)
        (base / "answers.json").write_text(json.dumps({"expected": secret}))
        run_dir, cwd, home = (_owned(base / name, uid) for name in ("run", "cwd", "home"))
        (run_dir / "checkpoint.pt").write_text("weights")
        (cwd / "notes.txt").write_text("the caller's own file")
        for path in (run_dir / "checkpoint.pt", cwd / "notes.txt"):
            os.chown(path, uid or os.geteuid(), uid or os.geteuid())
        sockets = Path(tempfile.mkdtemp(prefix="pods-test-", dir="/run"
                                        if os.access("/run", os.W_OK) else base))
        stack.callback(shutil.rmtree, sockets, True)
        sockets.chmod(0o755)
        servers = {}
        for name, address in (("unix socket", str(sockets / "bus")),
                              ("abstract socket", f"\0pods-test-{secrets.token_hex(8)}")):
            server = stack.enter_context(socket.socket(socket.AF_UNIX))
            server.bind(address)
            if not address.startswith("\0"):
                os.chmod(address, 0o777)
            server.listen()
            server.setblocking(False)
            servers[name] = (server, address)
        targets = {"data": str(base / "answers.json"), "source": __file__, "cwd": str(cwd),
                   "checkpoint": str(run_dir / "checkpoint.pt"),
                   "socket": servers["unix socket"][1],
                   "abstract": servers["abstract socket"][1].lstrip("\0")}
        yield {"uid": uid, "secret": secret, "targets": targets, "servers": servers,
               "cwd": cwd, "home": home, "run": run_dir}


def _call(mode: str, scene: dict, programs: list, **job) -> list[dict]:
    job = {"mode": mode, "programs": programs, "workers": 2, "timeout_s": 10, **job}
    results = sandbox_callers.run(job, scene["uid"] or None, scene["cwd"], scene["home"])
    if isinstance(results, dict):
        if mode in REQUIRED:
            pytest.fail(f"{mode} is required but unusable for this caller: {results}")
        pytest.skip(f"{mode} unusable for this caller: {results['unavailable']}")
    return results


def _received(servers: dict) -> dict[str, bool]:
    """Whether each server has a connection waiting (accepting it)."""
    got = {}
    for name, (server, _) in servers.items():
        try:
            server.accept()[0].close()
            got[name] = True
        except BlockingIOError:
            got[name] = False
    return got


def test_program_sees_nothing_of_the_callers_files_and_sockets(mode, scene):
    marker = secrets.token_hex(8)
    targets = scene["targets"]
    program = f"# {marker}\n{PROBE}"
    sandboxed = _call(mode, scene, [[program, json.dumps({**targets, "control": False,
                                                           "marker": marker})]])[0]
    assert sandboxed["status"] == "ok", sandboxed["stderr"]
    seen = json.loads(sandboxed["stdout"])
    assert seen.pop("own program") is True
    assert all(isinstance(v, str) and v.endswith("Error") for v in seen.values()), seen
    assert _received(scene["servers"]) == {"unix socket": False, "abstract socket": False}
    assert (scene["run"] / "checkpoint.pt").read_text() == "weights"
    assert sorted(p.name for p in scene["cwd"].iterdir()) == ["notes.txt"]

    control = _call("control", scene, [[PROBE, json.dumps({**targets, "control": True})]])[0]
    reached = json.loads(control["stdout"])
    assert json.loads(reached["data file"]) == {"expected": scene["secret"]}
    assert reached["test source"] is True and reached["caller cwd"] == ["notes.txt"]
    assert reached["unix socket"] == reached["abstract socket"] == "sent"
    assert {reached[k] for k in ("overwrite checkpoint", "delete checkpoint", "write cwd")} \
        == {"allowed"}
    assert _received(scene["servers"]) == {"unix socket": True, "abstract socket": True}


def test_sandboxes_of_two_processes_do_not_share_a_process_limit(mode, scene):
    """Two callers, each running two sandboxes at once whose programs start threads up
    to the limit: every program gets exactly its own limit (MAX_PROCESSES - 1 threads
    besides its main thread where a memory cgroup bounds the sandbox, none where the
    caller can make no cgroup and a sandbox gets one process: pods.sandbox.cgroup), never
    fewer because of the others, never more."""
    job = {"mode": mode, "programs": [[THREADS, ""]] * 2, "workers": 2, "timeout_s": 20,
           "memory_mb": 2048}
    uid = scene["uid"] or None
    callers = [sandbox_callers.start(job, uid, scene["cwd"], scene["home"]) for _ in range(2)]
    results = [sandbox_callers.finish(c) for c in callers]
    if any(isinstance(r, dict) for r in results):
        _call(mode, scene, [[THREADS, ""]])  # skips or fails with the reason
    counts = [r["stdout"].strip() or r["stderr"] for rs in results for r in rs]
    allowed = {r["processes"] for rs in results for r in rs}
    assert allowed <= {MAX_PROCESSES, 1}, allowed
    if scene["uid"] == 0:  # root makes memory groups wherever the v1 controller is mounted
        assert allowed == {MAX_PROCESSES} or not Path("/sys/fs/cgroup/memory").is_dir()
    assert counts == [str(r["processes"] - 1) for rs in results for r in rs]
