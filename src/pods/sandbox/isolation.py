"""The isolation modes and a cached probe of which work here.

    bwrap     bubblewrap (pods.sandbox.bwrap)
    unshare   util-linux unshare, mount, pivot_root, setpriv, prlimit (pods.sandbox.unshare)

Both give the program the same minimal read-only root (pods.sandbox.rootfs: the system
folders, the base interpreter, its own /proc, a minimal /dev, private tmpfs /tmp and
/dev/shm), new PID, network, IPC, UTS and mount namespaces, and the same resource limits;
as root, a uid of its own per sandbox (pods.sandbox.commands), else a user namespace of its
own. A mode that cannot build that root here is unusable: there is no weaker fallback.
"""

from __future__ import annotations

import os
import threading

from pods.sandbox.bwrap import bwrap_argv
from pods.sandbox.commands import (
    INSTALL,
    Limits,
    SandboxUnavailable,
    is_root,
    python_argv,
    sandbox_env,
    sandbox_uid,
    tools,
)
from pods.sandbox.unshare import unshare_argv

__all__ = ["BUILDERS", "CODE_ON_STDIN", "ENV_VAR", "MODES", "Limits", "SandboxUnavailable",
           "is_root", "python_argv", "reset_probes", "resolve", "sandbox_env", "sandbox_uid",
           "tools", "unusable_reason"]

MODES = ("bwrap", "unshare")
ENV_VAR = "PODS_SANDBOX"
NAMESPACES_HINT = ("run as root, or allow unprivileged user namespaces "
                   "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0, "
                   "kernel.apparmor_restrict_unprivileged_userns=0)")


BUILDERS = {"bwrap": bwrap_argv, "unshare": unshare_argv}
CODE_ON_STDIN = {"bwrap": False, "unshare": True}
_probe_lock = threading.Lock()
_probed: dict[str, str | None] = {}


def unusable_reason(mode: str) -> str | None:
    """None if ``mode`` works here (probed once per process by running a trivial program in
    it), else why not and what to install or enable."""
    with _probe_lock:
        if mode not in _probed:
            _probed[mode] = _probe(mode)
        return _probed[mode]


def reset_probes() -> None:
    """Forget the probe results (tests; after installing a tool)."""
    with _probe_lock:
        _probed.clear()


def _probe(mode: str) -> str | None:
    from pods.sandbox.process import execute

    workdir = "/tmp/pods-probe"
    limits = Limits(timeout_s=20.0, memory_mb=512, disk_mb=1, max_processes=8,
                    output_limit=1 << 16)
    try:
        tools(mode)
        code = b"print('ok')"
        out = execute(lambda fd: BUILDERS[mode](fd, len(code), workdir, limits), code, b"",
                      sandbox_env(workdir), limits, CODE_ON_STDIN[mode])
    except SandboxUnavailable as e:
        return str(e)
    except OSError as e:
        return f"{mode}: cannot start: {e}; {INSTALL[mode]}"
    if out.returncode == 0 and out.stdout == b"ok\n":
        return None
    detail = out.stderr.decode(errors="replace").strip()[-500:] or f"exit {out.returncode}"
    return f"{mode} does not work here ({detail}); {NAMESPACES_HINT}"


def resolve(requested: str | None) -> str:
    """The mode to use: ``requested``, else $PODS_SANDBOX, else auto (bwrap, then unshare)."""
    name = (requested or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if name not in (*MODES, "auto"):
        raise ValueError(f"isolation must be one of auto, {', '.join(MODES)}; got {name!r}")
    reasons = []
    for mode in MODES if name == "auto" else (name,):
        reason = unusable_reason(mode)
        if reason is None:
            return mode
        reasons.append(reason)
    raise SandboxUnavailable("no sandbox available: " + " | ".join(reasons))
