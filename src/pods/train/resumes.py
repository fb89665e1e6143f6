"""What a resume may change, and the record of what each resume changed.

A resumed run must make its steps as the run made them, or its run folder would say one
thing and hold another. So a resume takes the config its newest checkpoint was written with
(``checkpoints/step_N/config.yaml``) and refuses any difference in a key that changes how
steps are made, whether it comes from a flag (``--resume RUN --n 8``) or from an edit of
the run folder's ``config.yaml``. Only the keys of ``MAY_CHANGE`` may differ: the budget,
the evaluation and checkpoint cadence, trackers, the progress bar, where the run runs, and
where its model and data files are found (the same files, moved).

Every resume appends one line to ``resumes.jsonl`` in the run folder: when, from which
checkpoint, and each changed key with its value before and after. ``config.yaml`` holds the
values in force now; the values the first steps were made with are the ``from`` of the
first change of each key (and every checkpoint holds the config it was written with).

Local paths (the model, data_dir, data_file) are recorded absolute (``anchored``): a
``--model ./ckpt`` given in one folder still means the same files when the run is resumed
from another.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from pods.config import TrainConfig, from_dict, load_run_config

# Keys a resume may change: none of them changes how a step is made. Note that the lr
# schedule runs over the budget, so a new max_steps or max_time reshapes the lr of the steps
# still to come (the steps already made keep theirs); with lr_schedule constant it does not.
MAY_CHANGE = {
    "max_steps": "budget", "max_time": "budget",
    "eval_every": "cadence", "checkpoint_every": "cadence",
    "keep_checkpoints": "cadence",
    "report_to": "tracking", "tracker_project": "tracking", "tracker_group": "tracking",
    "progress": "logging",
    "device": "where it runs", "dist_timeout": "where it runs",
    "out_dir": "where it runs", "run_name": "where it runs",
    # the same model or data found at another path (a moved folder, another machine);
    # pods cannot tell that it is the same, so the resume's log line and record say it
    "model": "where its files are", "data_dir": "where its files are",
    "data_file": "where its files are",
}


def anchored(config: TrainConfig) -> TrainConfig:
    """``config`` with its local paths absolute, as the working directory reads them now:
    the model (a folder or .gguf file that exists, not a built-in name), data_dir and
    data_file. Hub ids, built-in names and paths that do not exist stay as given."""
    from pods.models.source import is_builtin

    def absolute(path: str | None) -> str | None:
        if path is None or not os.path.exists(os.path.expanduser(path)):
            return path
        return str(Path(path).expanduser().resolve())

    model = config.model.name
    return config.replace(model=model if is_builtin(model) else absolute(model),
                          data_dir=absolute(config.task.data_dir),
                          data_file=absolute(config.task.data_file))


def checkpoint_config(checkpoint: Path | None) -> dict[str, Any] | None:
    """The flat config a checkpoint was written with, or None (checkpoints of earlier
    pods versions hold none)."""
    if checkpoint is None or not (checkpoint / "config.yaml").is_file():
        return None
    return load_run_config(checkpoint / "config.yaml")


def resume_config(run_dir: Path, written_with: dict[str, Any] | None,
                  overrides: dict[str, Any]) -> tuple[TrainConfig, dict[str, tuple]]:
    """The config to resume ``run_dir`` with: its config.yaml, then ``overrides`` (flags).
    ``written_with`` is its checkpoint's config (None: compare with config.yaml alone).
    Returns the config and {key: (before, after)} of the allowed changes; a change to any
    other key is refused with a message naming each and what to do."""
    saved = load_run_config(run_dir / "config.yaml")
    before = from_dict(written_with if written_with is not None else saved).to_dict()
    config = from_dict({**saved, **overrides})
    after = config.to_dict()
    changed = {k: (before[k], after[k]) for k in after if after.get(k) != before.get(k)}
    refused = {k: v for k, v in changed.items() if k not in MAY_CHANGE}
    if refused:
        raise ValueError(_refusal(run_dir, refused, overrides))
    return config, changed


def _refusal(run_dir: Path, refused: dict[str, tuple], overrides: dict[str, Any]) -> str:
    def where(key: str) -> str:
        return f"--{key.replace('_', '-')}" if key in overrides else "edited in config.yaml"

    changes = ", ".join(f"{k} {a!r} -> {b!r} ({where(k)})" for k, (a, b) in refused.items())
    fix = []
    if any(k in overrides for k in refused):
        fix.append("drop those flags")
    if any(k not in overrides for k in refused):
        fix.append(f"put back the values in {run_dir / 'config.yaml'} (each checkpoint "
                   f"holds the config it was written with, checkpoints/step_N/config.yaml)")
    allowed = ", ".join(sorted(MAY_CHANGE))
    return (f"resuming {run_dir} would change how its steps are made: {changes}. A resume "
            f"may change only {allowed}; {' and '.join(fix)}, or train a new run with the "
            f"changes: `pods train --config {run_dir / 'config.yaml'} --run-name NEW ...`.")


def record_resume(run_dir: Path, checkpoint: Path | None, step: int, seconds: float,
                  changed: dict[str, tuple]) -> None:
    """Append this resume to ``resumes.jsonl``: when, from what, and what changed."""
    record = {"resumed_at": f"{datetime.now():%Y-%m-%dT%H:%M:%S}",
              "checkpoint": checkpoint.name if checkpoint else None, "step": step,
              "time": seconds,
              "changed": {k: {"from": a, "to": b} for k, (a, b) in changed.items()}}
    with (run_dir / "resumes.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def describe(changed: dict[str, tuple]) -> str:
    """The changes as one phrase for the resume's log line."""
    return ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
