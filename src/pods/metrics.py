"""metrics.jsonl: one JSON object per line, flushed as written, read back tolerantly.

Every record has ``kind`` ("step" or "eval"), ``step`` (optimizer steps done) and ``time``
(training seconds: the clock that excludes evaluation and checkpointing). Other keys are
grouped by prefix: ``rollout/``, ``select/``, ``loss/``, ``time/``, ``mem/``, ``eval/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class MetricsWriter:
    """Appends records to a metrics.jsonl file, one flushed line each."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_metrics(path: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """All complete records of a metrics.jsonl (of one ``kind`` if given).

    A line that is not valid JSON (a run killed mid-write leaves a truncated last line) is
    skipped, so reading never fails on a crashed run's log.
    """
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and (kind is None or record.get("kind") == kind):
            records.append(record)
    return records


def truncate_metrics(path: str | Path, last_step: int) -> None:
    """Keep only the records up to ``last_step`` (on resume: the steps after the checkpoint
    are redone). The file as it was is kept beside it as metrics.before-resume.jsonl."""
    path = Path(path)
    if not path.exists():
        return
    keep = [r for r in read_metrics(path) if r.get("step", 0) <= last_step]
    path.replace(path.with_name("metrics.before-resume.jsonl"))
    with path.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in keep)
