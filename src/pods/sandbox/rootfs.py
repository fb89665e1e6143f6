"""The program's filesystem: a minimal root built from a few host paths, the same plan for
both isolation modes (bubblewrap turns it into options, unshare into mount commands).

What a program sees, and nothing else of the host:

    /usr, /bin, /sbin, /lib*     read-only (a symlink on the host stays a symlink)
    /etc                         only ld.so.cache (library lookup) and localtime
    the interpreter              the base interpreter's executable and its prefix's lib
                                 folder (standard library, extension modules, its own
                                 site-packages), read-only, when they live outside /usr
    /proc, /dev, /tmp, /dev/shm  added by the modes: its own procfs, a few device nodes,
                                 private size-limited tmpfs (the working folder is in /tmp);
                                 a bound path inside /tmp or /dev/shm (an environment under
                                 /tmp) is mounted after their tmpfs, which would cover it

The root itself is an empty read-only tmpfs, so /home, /root, /run (host sockets, the
user's runtime folder and D-Bus bus), /var, /srv, /mnt, /media, /opt, the run folder, the
data files and the caller's working folder simply do not exist there. A caller's folder
that lies inside a bound one (a project under /usr/src, a home under /opt/...) is covered
by an empty tmpfs.

The program runs the *base* interpreter (``sys._base_executable``, symlinks resolved) with
``-I``, so a virtual environment, wherever it is, is not part of the root. ``site_packages``
(opt-in) runs the caller's ``sys.executable`` instead and binds its environment
(``sys.prefix``) read-only as well, for programs that need the caller's packages.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cache

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
NEEDED = ("/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32",
          "/usr/libexec")  # never covered, even where a caller's folder lies inside
MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup
PRIVATE_TMPFS = ("/tmp", "/dev/shm")  # each mode mounts a private tmpfs of its own here


class SandboxUnavailable(RuntimeError):
    """No requested isolation mode works here; the message says what to install or enable
    (defined here, the lowest module, as the root's plan is the first thing that may fail)."""


@dataclass(frozen=True)
class Entry:
    """One thing put into the program's root, at the same path as on the host.

    ``bind``: the host file or folder, read-only; ``symlink``: a link to ``target``;
    ``hide``: an empty read-only tmpfs over a caller's folder inside a bound one."""

    kind: str
    path: str
    target: str = ""


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def interpreter(site_packages: bool = False) -> str:
    """The interpreter the program runs: the base one, its symlinks resolved; with
    ``site_packages`` the caller's own (a virtual environment's ``bin/python``)."""
    if site_packages:
        if not sys.executable:
            raise SandboxUnavailable("sys.executable is unknown: cannot start an interpreter")
        return os.path.join(os.path.realpath(os.path.dirname(sys.executable)),
                            os.path.basename(sys.executable))
    base = getattr(sys, "_base_executable", None) or sys.executable
    if not base:
        raise SandboxUnavailable("sys.executable is unknown: cannot start an interpreter")
    return os.path.realpath(base)


def _symlink_chain(path: str) -> tuple[list[tuple[str, str]], str]:
    """The symlinks met on the way from ``path`` to the real file (each with its target, as
    written), and that file; folders on the way are resolved, not recreated."""
    links = []
    for _ in range(MAX_LINKS):
        path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if not os.path.islink(path):
            return links, path
        target = os.readlink(path)
        links.append((path, target))
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    raise SandboxUnavailable(f"too many symbolic links on the way to {path}")


def _system() -> list[Entry]:
    entries = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            entries.append(Entry("symlink", d, os.readlink(d)))
        elif os.path.isdir(d):
            entries.append(Entry("bind", d))
    for f in ETC_FILES:
        if os.path.islink(f):
            entries.append(Entry("symlink", f, os.readlink(f)))
        elif os.path.isfile(f):
            entries.append(Entry("bind", f))
    return entries


def _covered(path: str, binds: list[str]) -> bool:
    return any(under(path, b) for b in binds)


@cache
def _interpreter_paths(site_packages: bool) -> tuple[list[str], list[tuple[str, str]], str]:
    """The interpreter's folders (each prefix's lib folders; with ``site_packages`` the
    environment's whole folder), the symlinks on the way to its executable, and that file."""
    base = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    libs = {os.path.join(p, lib) for p in base for lib in {"lib", sys.platlibdir}}
    env = {os.path.realpath(sys.prefix)} - base if site_packages else set()
    folders = sorted((d for d in libs | env if os.path.isdir(d)), key=len)
    links, executable = _symlink_chain(interpreter(site_packages))
    if not os.access(executable, os.X_OK):
        raise SandboxUnavailable(f"the interpreter {executable} is not executable")
    return folders, links, executable


@cache
def static_entries(site_packages: bool = False) -> tuple[Entry, ...]:
    """The system paths and the interpreter, in mount order (a folder before what is put
    inside it). Cached: they do not change while the process runs."""
    entries = _system()
    binds = [os.path.realpath(e.path) for e in entries if e.kind == "bind"]
    folders, links, executable = _interpreter_paths(site_packages)
    for path in (*folders, executable):
        if not _covered(path, binds):
            entries.append(Entry("bind", path))
            binds.append(path)
    entries += [Entry("symlink", link, target) for link, target in links
                if not _covered(link, binds)]
    return tuple(entries)


def _caller_folders() -> list[str]:
    """The caller's working folder and home (those that exist now)."""
    found = []
    for get in (os.getcwd, lambda: os.path.expanduser("~")):
        try:
            folder = os.path.realpath(get())
        except OSError:  # a working folder deleted meanwhile
            continue
        if os.path.isabs(folder) and folder != "/" and folder not in found:
            found.append(folder)
    return found


def entries(site_packages: bool = False) -> tuple[Entry, ...]:
    """The whole plan: ``static_entries`` and, last, an empty tmpfs over the caller's
    working folder and home where they lie inside a bound system folder, unless covering
    them would hide what programs need (a bound path, the system's programs and libraries)."""
    plan = static_entries(site_packages)
    system = [e.path for e in plan if e.kind == "bind" and e.path in SYSTEM_DIRS]
    folders, _, executable = _interpreter_paths(site_packages)
    needed = [*NEEDED, *folders, executable]
    hide = [f for f in _caller_folders() if any(under(f, s) and f != s for s in system)
            and not any(under(f, n) or under(n, f) for n in needed)]
    return plan + tuple(Entry("hide", f) for f in hide)


def inside_private(plan: tuple[Entry, ...]) -> tuple[tuple[Entry, ...], tuple[Entry, ...]]:
    """``plan`` in two, order kept: what the modes mount before their private /tmp and
    /dev/shm, and what lies inside those (a caller's environment under /tmp, bound for
    ``site_packages``), to be mounted after them: their tmpfs would otherwise cover it."""
    inside = tuple(e for e in plan if any(under(e.path, t) for t in PRIVATE_TMPFS))
    return tuple(e for e in plan if e not in inside), inside


def exposed(plan: tuple[Entry, ...]) -> list[str]:
    """The caller's folders that the program can read all the same (inside a bound folder
    and not covered): a project in /usr/lib, or one holding the environment that
    ``site_packages`` binds."""
    sources = [e.path for e in plan if e.kind == "bind"]
    hidden = [e.path for e in plan if e.kind == "hide"]
    return [f for f in _caller_folders() if any(under(f, s) for s in sources)
            and not any(under(f, h) for h in hidden)]
