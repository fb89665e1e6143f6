"""The bubblewrap wrapper command: the minimal root (pods.sandbox.rootfs) as bwrap options,
fresh PID, network, IPC, UTS, cgroup and mount namespaces, and, without root, a user
namespace of its own per sandbox with further user namespaces disabled inside."""

from __future__ import annotations

from pods.sandbox.commands import (
    Limits,
    check_guarantees,
    drop_privileges,
    is_root,
    python_argv,
    rlimits,
    sandbox_uid,
    tool_output,
    tools,
    warn_once,
)
from pods.sandbox.rootfs import PRIVATE_TMPFS, Entry, entries, inside_private, under

HIDE_TMPFS_BYTES = 4096
# as root: the working folder (made by bwrap, owned by root) goes to the program's uid
CHOWN_THEN_EXEC = 'chown "$0" "$1" && shift && exec "$@"'


def bwrap_has(path: str, option: str) -> bool:
    """Whether this bwrap knows ``option`` (--size and --disable-userns came in 0.7/0.8)."""
    return option in tool_output(path, "--help")


def root_options(plan: tuple[Entry, ...], sized: bool, made: tuple[str, ...] = ()) -> list[str]:
    """The plan's entries as bwrap options, each after the folders on its way (made mode
    0755: bwrap would make them 0700, closed to the program's uid) but those in ``made``."""
    argv: list[str] = []
    made = set(made)
    for e in plan:
        parts = e.path.strip("/").split("/")[:-1]
        for i in range(len(parts)):
            folder = "/" + "/".join(parts[:i + 1])
            if folder not in made and not any(under(folder, p.path) for p in plan):
                argv += ["--perms", "0755", "--dir", folder]
                made.add(folder)
        if e.kind == "bind":
            argv += ["--ro-bind", e.path, e.path]
        elif e.kind == "symlink":
            argv += ["--symlink", e.target, e.path]
        else:
            size = ["--size", str(HIDE_TMPFS_BYTES)] if sized else []
            argv += [*size, "--perms", "0755", "--tmpfs", e.path, "--remount-ro", e.path]
    return argv


def _namespaces(bwrap: str) -> list[str]:
    argv = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname",
            "sandbox"]
    if is_root():
        return argv
    argv.append("--unshare-user")  # its own user namespace: its own RLIMIT_NPROC count
    if bwrap_has(bwrap, "--disable-userns"):
        return argv + ["--disable-userns"]
    warn_once("bwrap-userns", "pods.sandbox (bwrap): this bubblewrap (< 0.8) cannot disable "
              "user namespaces inside the sandbox: programs can reach more of the kernel; "
              "install bubblewrap 0.8+")
    return argv


def bwrap_argv(code_fd: int, code_len: int, workdir: str, limits: Limits, *,
               site_packages: bool = False) -> list[str]:
    """bubblewrap around the program: the minimal read-only root, its own /proc, a minimal
    /dev, private tmpfs /tmp and /dev/shm of ``limits.disk_mb``, the program file copied
    from ``code_fd`` (which bwrap closes) into ``workdir``; ``code_len`` is not needed."""
    paths, root, plan = tools("bwrap"), is_root(), entries(site_packages)
    check_guarantees("bwrap", plan)
    sized = bwrap_has(paths["bwrap"], "--size")
    if not sized:
        warn_once("bwrap-size", "pods.sandbox (bwrap): this bubblewrap (< 0.7) cannot size "
                  "a tmpfs: a program may fill /tmp until memory runs out; install "
                  "bubblewrap 0.7+")
    disk = ["--size", str(limits.disk_mb << 20)] if sized else []
    outside, inside = inside_private(plan)
    argv = [paths["bwrap"], *_namespaces(paths["bwrap"]),
            *root_options(outside, sized),
            "--dev", "/dev", "--proc", "/proc",
            *disk, "--perms", "1777", "--tmpfs", "/tmp",
            *disk, "--perms", "1777", "--tmpfs", "/dev/shm",
            *root_options(inside, sized, made=("/dev", *PRIVATE_TMPFS)),
            "--perms", "0700", "--dir", workdir,
            "--perms", "0444", "--file", str(code_fd), f"{workdir}/main.py",
            "--remount-ro", "/", "--chdir", workdir, "--"]
    if root:
        uid = sandbox_uid()
        argv += [paths["sh"], "-c", CHOWN_THEN_EXEC, f"{uid}:{uid}", workdir,
                 *drop_privileges(paths)]
    # without root, the sandbox's init (bwrap's pid 1) is counted with the program
    return argv + rlimits(paths, limits, helpers=0 if root else 1) + python_argv(site_packages)
