"""A comparison's records in one archive, to carry them from one machine to the next.

``pack`` writes a comparison folder's records into a ``.tar.gz``: its spec
(``compare.yaml``), each finished run's ``metrics.jsonl`` and ``config.yaml``, the runs'
wall-clock times (``run_times.jsonl``, which the next machine's time box reads) and the
summary (``summary.md``, ``summary.json``, ``curves.png``, ``seeds.png``); never
checkpoints or weights, so the archive stays small (tens of kB a run). A finished run is
read from its records alone, so the folder ``unpack`` makes summarizes, and `pods compare`
extends it with more seeds, as the original would. Runs not finished (no "done" record)
stay behind: without a checkpoint they would start over anyway.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import yaml

from pods.experiments.compare import is_finished
from pods.experiments.spec import spec_changes
from pods.experiments.timebox import TIMES

__all__ = ["pack", "unpack"]

SPEC = "compare.yaml"
RUN_FILES = ("metrics.jsonl", "config.yaml")
SUMMARY = ("summary.md", "summary.json", "curves.png", "seeds.png")  # redrawn from the runs
# what an archive may hold, by path inside it (a variant's folder never starts with a dot:
# no '..' or '.' that would write outside the comparison's folder)
MEMBER = re.compile(rf"(?:{re.escape(SPEC)}|{re.escape(TIMES)}|"
                    rf"{'|'.join(map(re.escape, SUMMARY))}|"
                    rf"[A-Za-z0-9_-][A-Za-z0-9_.-]*/seed-?\d+/"
                    rf"(?:{'|'.join(map(re.escape, RUN_FILES))}))")


def pack(out_dir: str | Path, archive: str | Path) -> tuple[list[str], list[str]]:
    """Write ``out_dir``'s records to ``archive`` (.tar.gz); returns the finished runs
    packed and the unfinished ones left out ("variant/seed<k>")."""
    out_dir, archive = Path(out_dir), Path(archive)
    if not (out_dir / SPEC).is_file():
        raise ValueError(f"{out_dir} has no {SPEC}: pack a folder made by `pods compare`.")
    runs = sorted(p.parent for p in out_dir.glob("*/seed*/metrics.jsonl"))
    packed = [r for r in runs if is_finished(r)]
    files = [SPEC, TIMES, *SUMMARY] + [f"{r.parent.name}/{r.name}/{name}"
                                       for r in packed for name in RUN_FILES]
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for name in files:
            if (out_dir / name).is_file():
                tar.add(out_dir / name, arcname=name, recursive=False)
    return ([f"{r.parent.name}/{r.name}" for r in packed],
            [f"{r.parent.name}/{r.name}" for r in runs if r not in packed])


def unpack(archive: str | Path, out_dir: str | Path) -> list[str]:
    """Write a packed comparison's records into ``out_dir`` (made if needed; a folder that
    holds runs already gets the archive's beside them); returns the runs it added.

    Refused, before anything is written, where the archive holds a path it should not,
    where the folder's spec differs in its runs (pods.experiments.spec.spec_changes: seeds
    may differ, the folder's spec is kept), or where a run's file is there already with
    other contents (another run of the same name); a file the folder holds as is, is left.
    Run times are merged; the summary's files are written only where the folder has none
    (the next `pods compare`, or `pods plot`, redraws them over all its runs)."""
    archive, out_dir = Path(archive), Path(out_dir)
    if not archive.is_file():
        raise ValueError(f"{archive} does not exist; give the file `pods compare --pack` wrote.")
    files = _read(archive)
    if (out_dir / SPEC).is_file() and SPEC in files:
        changes = spec_changes(yaml.safe_load((out_dir / SPEC).read_text()) or {},
                               yaml.safe_load(files[SPEC]) or {})
        if changes:
            raise ValueError(f"{out_dir} holds another comparison than {archive}: "
                             f"{'; '.join(changes)} (the folder's / the archive's); unpack "
                             "into another --out folder.")
    clashes = [name for name, data in files.items() if name.endswith(RUN_FILES)
               and (out_dir / name).is_file() and (out_dir / name).read_bytes() != data]
    if clashes:
        raise ValueError(f"{out_dir} holds {', '.join(clashes)} already, with other contents "
                         f"than in {archive}: another run of the same name; unpack into "
                         "another --out folder.")
    added = []
    for name, data in files.items():
        path = out_dir / name
        if name == TIMES:
            data = _merged_lines(path, data)
        elif path.is_file():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if name.endswith("/metrics.jsonl"):
            added.append(name.removesuffix("/metrics.jsonl"))
    return added


# bounds on what an archive may unpack (a comparison's records are about 60 kB): each file,
# all of them, and how many; checked from each member's header before its data is read,
# so a small compressed file that would expand to gigabytes is refused, not read
MAX_FILE = 64 * 2**20
MAX_TOTAL = 256 * 2**20
MAX_FILES = 100_000


def _read(archive: Path) -> dict[str, bytes]:
    """An archive's files by path, each checked against ``MEMBER`` and the bounds above
    (a member at a time, its header before its data)."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members, total = [], 0
            for member in tar:  # headers one by one: a later one is not read yet
                _check_member(archive, member, len(members), total)
                members.append(member)
                total += member.size
            return {m.name: tar.extractfile(m).read() for m in members}
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ValueError(f"{archive} is not a packed comparison ({error}).") from None


def _check_member(archive: Path, member: tarfile.TarInfo, count: int, total: int) -> None:
    """Refuse a member a packed comparison would not hold, or one past the bounds."""
    if not (member.isfile() and MEMBER.fullmatch(member.name)):
        raise ValueError(f"{archive} holds {member.name}, which a packed comparison does "
                         "not; unpack only files `pods compare --pack` wrote.")
    if member.size > MAX_FILE or total + member.size > MAX_TOTAL or count >= MAX_FILES:
        raise ValueError(f"{archive} holds {member.name} of {member.size:,} bytes (after "
                         f"{count} files, {total:,} bytes): more than a packed comparison "
                         f"holds (at most {MAX_FILE // 2**20} MiB a file, {MAX_TOTAL // 2**20}"
                         f" MiB and {MAX_FILES:,} files in all); it was not unpacked.")


def _merged_lines(path: Path, data: bytes) -> bytes:
    """The lines of ``path`` (if it exists), then those of ``data`` it lacks."""
    old = path.read_bytes().decode().splitlines() if path.is_file() else []
    new = [line for line in data.decode().splitlines() if line not in old]
    return "".join(f"{line}\n" for line in old + new).encode()
