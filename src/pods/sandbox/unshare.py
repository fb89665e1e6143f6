"""The util-linux wrapper command: unshare makes fresh PID, network, IPC, UTS and mount
namespaces (and, without root, a user namespace of its own per sandbox); a sh script run
as the namespace's init builds the minimal root (pods.sandbox.rootfs) on a tmpfs (its
folders in one mkdir, every mount from one fstab in one ``mount -a``: a few processes, not
one per mount), moves into it with pivot_root and detaches the host's root, then starts the
program through setpriv and prlimit.

pivot_root, not chroot: a program that makes a user namespace of its own (allowed in this
mode) could leave a chroot; after pivot_root and the detach, the host's root is no longer
in its mount namespace at all, and the mounts it inherits are locked read-only.
"""

from __future__ import annotations

import os
import re
import shlex

from pods.sandbox.commands import (
    INSTALL,
    Limits,
    SandboxUnavailable,
    check_guarantees,
    drop_privileges,
    is_root,
    python_argv,
    rlimits,
    sandbox_uid,
    tool_output,
    tools,
)
from pods.sandbox.rootfs import SYSTEM_DIRS, Entry, entries, inside_private

NEW_ROOT = "/tmp"  # where the new root's tmpfs is mounted before pivot_root (private ns)
FSTAB = "/.pods-fstab"  # the mounts, in the new root until pivot_root, then removed
FIRST_FD, LAST_FD = 5, 9  # dash cannot use descriptors above 9
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("/proc/self/fd", "fd"), ("/proc/self/fd/0", "stdin"),
             ("/proc/self/fd/1", "stdout"), ("/proc/self/fd/2", "stderr"))
ROOT_TMPFS = "mode=0755,size=64k,nosuid,nodev"
BIND_RO = "bind,ro,nosuid,nodev"  # util-linux 2.27+ remounts a bind read-only itself
MOUNT_MIN = (2, 27)
# what the new root needs, all under NEW_ROOT: folders, empty files (mount points), symlinks
# (link, target) and mounts (source, target, type, options), in mount order
Layout = tuple[list[str], list[str], list[tuple[str, str]], list[tuple[str, str, str, str]]]


def check_mount(path: str) -> None:
    """SandboxUnavailable unless ``path`` is util-linux mount 2.27+: an older one makes a
    "bind,ro" fstab entry a writable bind."""
    out = tool_output(path, "--version")
    found = re.search(r"util-linux[^0-9]*(\d+)\.(\d+)", out)
    if not found or tuple(map(int, found.groups())) < MOUNT_MIN:
        raise SandboxUnavailable(f"unshare: {path} is not util-linux mount 2.27 or later "
                                 f"({out.strip() or 'no version'}); {INSTALL['unshare']}")


def _fstab_field(text: str) -> str:
    """A path as an fstab field: space, tab, newline and backslash octal-escaped."""
    for char in "\\ \t\n":
        text = text.replace(char, f"\\{ord(char):03o}")
    return text


def _plan_mounts(plan: tuple[Entry, ...], fds: dict[str, int]) -> Layout:
    """The plan's entries as the new root's Layout; ``fds``: sources opened by descriptor."""
    r = NEW_ROOT
    folders, files, links, mounts = [], [], [], []
    for e in plan:
        target = r + e.path
        if e.kind == "symlink":
            folders.append(os.path.dirname(target))
            links.append((target, e.target))
        elif e.kind == "hide":
            mounts.append(("pods-hidden", target, "tmpfs", "ro,mode=0755,size=4k"))
        else:
            if os.path.isdir(e.path):
                folders.append(target)
            else:
                files.append(target)
                folders.append(os.path.dirname(target))
            source = f"/proc/self/fd/{fds[e.path]}" if e.path in fds else e.path
            mounts.append((source, target, "none", BIND_RO))
    return folders, files, links, mounts


def _special_mounts(disk_mb: int) -> Layout:
    """Its own /proc, a minimal /dev (host device nodes bound, as bubblewrap does; a folder
    of the root, read-only with it) and private tmpfs /tmp and /dev/shm."""
    r = NEW_ROOT
    private = f"mode=1777,size={disk_mb}m,nosuid,nodev"
    folders = [f"{r}/proc", f"{r}/dev/shm", f"{r}/tmp"]
    files = [f"{r}/dev/{name}" for name in DEVICES]
    links = [(f"{r}/dev/{name}", target) for target, name in DEV_LINKS]
    mounts = [("proc", f"{r}/proc", "proc", "nosuid,nodev,noexec")]
    mounts += [(f"/dev/{name}", f"{r}/dev/{name}", "none", "bind,nosuid") for name in DEVICES]
    mounts += [("pods-shm", f"{r}/dev/shm", "tmpfs", private),
               ("pods-tmp", f"{r}/tmp", "tmpfs", private)]
    return folders, files, links, mounts


def _link_lines(links: list[tuple[str, str]]) -> list[str]:
    """ln commands for the symlinks: one per folder for those named as their target's last
    part (/bin -> usr/bin), one each for the rest."""
    q, lines, named = shlex.quote, [], {}
    for link, target in links:
        if os.path.basename(link) == os.path.basename(target.rstrip("/")):
            named.setdefault(os.path.dirname(link), []).append(target)
        else:
            lines.append(f"ln -s -- {q(target)} {q(link)}")
    return [f"ln -s -t {q(folder)} -- {shlex.join(targets)}" for folder, targets in named.items()] \
        + lines


def _layout_lines(mount: str, layout: Layout) -> list[str]:
    """Make the layout's folders, files and links, then every mount at once from an fstab
    (a few processes instead of one per mount)."""
    q, r = shlex.quote, NEW_ROOT
    folders, files, links, mounts = layout
    fstab = [" ".join((_fstab_field(src), _fstab_field(dst), kind, options, "0 0"))
             for src, dst, kind, options in mounts]
    lines = [f"mkdir -p -- {shlex.join(dict.fromkeys(folders))}"] if folders else []
    lines += [f": >{q(f)}" for f in files]
    lines += _link_lines(links)
    lines.append(f"printf '%s\\n' {shlex.join(fstab)} >{q(r + FSTAB)}")
    lines.append(f"{mount} --no-canonicalize -a -T {q(r + FSTAB)}")
    return lines


def _root_lines(mount: str, plan: tuple[Entry, ...], disk_mb: int) -> list[str]:
    """Open the plan's non-system sources (they may lie under NEW_ROOT, which the new root
    covers), mount the root tmpfs, lay out the plan and the special mounts, then what of
    the plan lies inside the private /tmp or /dev/shm (their tmpfs would cover it)."""
    q, r = shlex.quote, NEW_ROOT
    by_fd = [e.path for e in plan if e.kind == "bind" and e.path not in SYSTEM_DIRS
             and not e.path.startswith("/etc/")]
    if len(by_fd) > LAST_FD - FIRST_FD + 1:
        raise SandboxUnavailable(f"unshare: too many interpreter paths to bind: {by_fd}")
    fds = {path: fd for fd, path in enumerate(by_fd, start=FIRST_FD)}
    outside, inside = inside_private(plan)
    lines = [f"exec {fd}<{q(path)}" for path, fd in fds.items()]
    lines.append(f"{mount} -t tmpfs -o {ROOT_TMPFS} pods-root {r}")
    lines += _layout_lines(mount, tuple(a + b for a, b in zip(
        _plan_mounts(outside, fds), _special_mounts(disk_mb), strict=True)))
    if inside:
        lines += _layout_lines(mount, _plan_mounts(inside, fds))
    lines += [f"exec {fd}<&-" for fd in fds.values()]
    return lines


def _unshare_script(paths: dict[str, str], code_len: int, workdir: str, limits: Limits,
                    plan: tuple[Entry, ...], python: list[str]) -> str:
    """sh run as the namespace's init: the root (``plan``), the program file (the first ``code_len``
    bytes of stdin; the rest is the program's stdin), pivot_root, then the program as a
    child (so it is not PID 1, which ignores signals) through setpriv, prlimit and the
    ``python`` command line, its exit status passed on."""
    q, r, mount = shlex.quote, NEW_ROOT, shlex.quote(paths["mount"])
    lines = ["set -eu", "umask 022"]
    lines += _root_lines(mount, plan, limits.disk_mb)
    work = q(r + workdir)
    lines += [f"mkdir -m 0700 {work}", f"head -c {code_len} >{work}/main.py",
              f"chmod 0444 {work}/main.py"]
    if is_root():
        uid = sandbox_uid()
        lines.append(f"chown {uid}:{uid} {work}")
    lines += [f"mkdir {r}/.old", f"cd {r}", f"{q(paths['pivot_root'])} . .old", "cd /",
              f"{q(paths['umount'])} -l /.old", f"rm -d /.old {FSTAB}",
              f"{mount} -o remount,bind,ro,nosuid,nodev /", f"cd {q(workdir)}"]
    # without root, `unshare` itself and this sh are counted with the program
    program = drop_privileges(paths) + rlimits(paths, limits, helpers=0 if is_root() else 2)
    program += python
    # sh reports a signal death on the command's stderr: run it in a subshell whose own
    # stderr is /dev/null, the program's stderr on fd 4
    lines += ["set +e", "exec 4>&2 2>/dev/null", f"({shlex.join(program)} 2>&4 4>&-)",
              "exit $?"]
    return "\n".join(lines)


def unshare_argv(code_fd: int, code_len: int, workdir: str, limits: Limits, *,
                 site_packages: bool = False) -> list[str]:
    """util-linux unshare; setpriv --pdeathsig so it dies with the calling thread. The program
    text comes first on stdin (dash cannot close an inherited descriptor above 9), so
    ``code_fd`` is not used."""
    paths, plan = tools("unshare"), entries(site_packages)
    check_mount(paths["mount"])
    check_guarantees("unshare", plan)
    user = [] if is_root() else ["--user", "--map-root-user"]
    script = _unshare_script(paths, code_len, workdir, limits, plan,
                             python_argv(site_packages))
    return [paths["setpriv"], "--pdeathsig", "KILL", "--", paths["unshare"], "--pid",
            "--fork", "--kill-child", "--mount-proc", "--net", "--ipc", "--uts", "--mount",
            "--propagation", "private", *user, "--", paths["sh"], "-c", script,
            "pods-sandbox"]
