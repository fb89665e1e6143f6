"""The run folder's format: where checkpoints and metrics live, and how they are read.

Everything that reads a run folder (resume, `pods eval`, `pods export`, `pods compare`,
`pods plot`, `pods check`) reads it through this package; what goes into a checkpoint is the
trainer's (``Trainer.save`` / ``Trainer.load``, pods.train.checkpoint).

Layout of a run folder:
    config.yaml                  the resolved TrainConfig (the values in force now)
    resumes.jsonl                one line per resume: what it changed (pods.train.resumes)
    metrics.jsonl                see pods.runs.metrics
    checkpoints/step_000120/     model/ (save_pretrained: weights, config, tokenizer),
                                 config.yaml (the config it was written with) and
                                 state.pt (optimizer, RNG states, clock, counters); under
                                 FSDP2 also shards/ (every rank's weight and optimizer
                                 shards, pods.runtime.fsdp), and state.pt holds no optimizer
    checkpoints/latest           name of the newest complete checkpoint

A checkpoint is written under a temporary name and renamed when complete, and ``latest`` is
replaced atomically, so a hard kill at any moment leaves the previous checkpoint loadable.
The ``keep`` newest checkpoints are kept (``keep_checkpoints``, two by default).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def staging_dir(run_dir: Path, step: int) -> Path:
    """Where checkpoint ``step`` is written before it is renamed into place."""
    return run_dir / "checkpoints" / f".tmp_step_{step:06d}"


def start_checkpoint(run_dir: Path, step: int) -> Path:
    """An empty staging folder for checkpoint ``step`` (other ranks may add to it)."""
    tmp = staging_dir(run_dir, step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish_checkpoint(run_dir: Path, step: int, keep: int) -> Path:
    """Rename the staged checkpoint ``step`` (written by the trainer: ``Trainer.save``) into
    place, point ``latest`` at it and drop all but the ``keep`` newest. Atomic: a kill at any
    moment leaves the previous checkpoint or this one complete."""
    if keep < 1:
        raise ValueError(f"keep={keep}: a run keeps at least its newest checkpoint.")
    root, tmp = run_dir / "checkpoints", staging_dir(run_dir, step)
    final = root / f"step_{step:06d}"
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    pointer = root / ".latest.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, root / "latest")
    for old in [*sorted(root.glob("step_*"))[:-keep], *root.glob(".tmp_step_*")]:
        shutil.rmtree(old, ignore_errors=True)  # old ones; staging left by a kill
    return final


def latest_checkpoint(path: str | Path) -> Path | None:
    """The newest complete checkpoint of a run folder (or ``path`` itself if it is one)."""
    path = Path(path)
    if (path / "state.pt").is_file():
        return path
    pointer = path / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    found = path / "checkpoints" / pointer.read_text().strip()
    return found if (found / "state.pt").is_file() else None


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's complete checkpoints, newest first: the one ``latest`` names, then the
    other written ones (for falling back when the newest cannot be read)."""
    newest = latest_checkpoint(run_dir)
    others = sorted((p for p in (Path(run_dir) / "checkpoints").glob("step_*")
                     if (p / "state.pt").is_file() and p != newest), reverse=True)
    return ([newest] if newest is not None else []) + others


def _write_errors() -> tuple[type[BaseException], ...]:
    """What the writers raise when a write fails (a full disk, a file-size limit): OSError
    from Python's own files, RuntimeError from torch.save's zip writer, SafetensorError from
    safetensors (save_pretrained's weights)."""
    try:
        from safetensors import SafetensorError
    except ImportError:  # the core install has no model writer
        return OSError, RuntimeError
    return OSError, RuntimeError, SafetensorError


WRITE_ERRORS = _write_errors()


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk, say); the previous one is intact."""


def first_readable(checkpoints: list[Path], load: Callable[[Path], Any],
                   log=print) -> tuple[Path, Any]:
    """(checkpoint, ``load(checkpoint)``) for the first of ``checkpoints`` (newest first)
    that can be read: an unreadable one (a truncated file, a missing piece) is passed over,
    saying which and why. Resume, `pods eval` and `pods export` all fall back this way."""
    problems = []
    for i, checkpoint in enumerate(checkpoints):
        if i > 0:
            log(f"falling back to {checkpoint.name}")
        try:
            return checkpoint, load(checkpoint)
        except Exception as error:  # torch.load and safetensors raise many kinds
            problem = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}" \
                if str(error) else type(error).__name__
            problems.append(problem)
            log(f"checkpoint {checkpoint} cannot be read ({problem})")
    if len(checkpoints) == 1:
        raise ValueError(f"checkpoint {checkpoints[0]} cannot be read ({problems[0]}).")
    raise ValueError(f"none of the checkpoints of {checkpoints[0].parent.parent} can be read "
                     f"({', '.join(c.name for c in checkpoints)}); see above why.")


def checkpoints_and_config(path: str | Path):
    """(checkpoints to try, newest first; TrainConfig of its run) for a run folder (its
    complete checkpoints) or a checkpoint folder (that one). The config is the one the
    checkpoint was written with where it holds one, else the run folder's config.yaml."""
    from pods.config import from_dict, load_run_config

    path = Path(path)
    checkpoint = latest_checkpoint(path)
    if checkpoint is None:
        raise ValueError(f"{path} holds no complete checkpoint (expected a run folder with "
                         f"checkpoints/latest, or a checkpoints/step_N folder).")
    checkpoints = [path] if checkpoint == path else complete_checkpoints(path)
    run_dir = checkpoint.parent.parent
    own = checkpoint / "config.yaml"
    config_file = own if own.is_file() else run_dir / "config.yaml"
    if not config_file.is_file():
        raise ValueError(f"{run_dir} has no config.yaml to tell the model and task of "
                         f"{checkpoint}.")
    return checkpoints, from_dict(load_run_config(config_file))
