"""Starting a run folder and resuming one; the loop inside is ``pods.train.loop.Run``.

    train(config)          a new run folder: config.yaml, metrics.jsonl, checkpoints/
    resume(run_dir)        continue from the newest readable checkpoint (or from the start
                           if none was written yet); pods.train.resumes says what may change
    train_or_resume(cfg)   either, for ``pods compare``'s restartable comparisons

A model or data that cannot load fails before anything is written; a folder that already
holds a run is never overwritten (``--resume`` continues it).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pods.config import TrainConfig, save_yaml
from pods.runs.checkpoints import complete_checkpoints, first_readable, latest_checkpoint
from pods.runs.metrics import truncate_metrics
from pods.train.loop import Curve, Run
from pods.train.resumes import anchored, checkpoint_config, describe, record_resume, resume_config
from pods.train.trainer import Trainer


def train(config: TrainConfig, log=print, curve: Curve | None = None) -> Path:
    """Train a new run into ``out_dir/run_name`` and return the run folder. ``curve``
    draws its learning curve at the end (`pods train` passes
    ``pods.experiments.plots.plot_run``: curve.png)."""
    config = anchored(config)  # config.yaml names the same files from any folder
    out_dir, name = Path(config.run.out_dir), config.run.run_name
    if name:
        _check_new(out_dir / name)
    trainer = Trainer(config, log=log)  # model and data first: a failure writes nothing
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    s = config.selection
    name = trainer.dist.broadcast_object(  # rank 0's clock names the run on every rank
        name or f"{stamp}-n{config.rollout.n}-m{s.m}-{s.rule}")
    run_dir = out_dir / name
    _check_new(run_dir)
    trainer.dist.barrier()  # every rank has checked before rank 0 writes
    if trainer.dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_yaml(config, run_dir / "config.yaml")
    trainer.log(f"run folder: {run_dir}")
    Run(trainer, run_dir, curve).run()
    return run_dir


def _check_new(run_dir: Path) -> None:
    if (run_dir / "metrics.jsonl").exists():
        raise ValueError(f"run folder {run_dir} already holds a run; continue it with "
                         f"`pods train --resume {run_dir}` or pick another --run-name.")


def train_or_resume(config: TrainConfig, log=print, curve: Curve | None = None) -> Path:
    """``train``, or continue the run folder it would write if one was left unfinished
    (used by ``pods compare`` so that an interrupted comparison picks up where it stopped).
    A folder holding no checkpoint yet is set aside, never deleted, and the run restarts."""
    name = config.run.run_name
    run_dir = Path(config.run.out_dir) / (name or "")
    if name and (run_dir / "metrics.jsonl").exists():
        if latest_checkpoint(run_dir) is not None:
            return resume(run_dir, log=log, curve=curve)
        aside = run_dir.with_name(f"{run_dir.name}.incomplete-{datetime.now():%Y%m%d-%H%M%S}")
        run_dir.rename(aside)
        log(f"{run_dir} had no checkpoint; moved it to {aside} and starting over")
    return train(config, log=log, curve=curve)


def resume(run_dir: str | Path, overrides: dict | None = None, log=print,
           curve: Curve | None = None) -> Path:
    """Continue a run from its newest readable checkpoint: same clock, optimizer and RNG
    streams; a folder with no checkpoint yet (stopped before its first) starts over, as a new
    run with its config would. ``overrides`` (flat keys) may change only what does not
    change how steps are made, such as a larger max_steps (pods.train.resumes). Run folders
    of every earlier pods version hold flat config files, read here."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ValueError(f"{run_dir} is not a run folder (no config.yaml).")
    checkpoints = complete_checkpoints(run_dir)
    written_with = next((checkpoint_config(c) for c in checkpoints
                         if (c / "config.yaml").is_file()), None)
    config, changed = resume_config(run_dir, written_with, overrides or {})
    config = anchored(config)
    run = Run(Trainer(config, log=log), run_dir, curve)
    # the newest readable one; an unreadable one (truncated, a piece missing) is passed over
    checkpoint = first_readable(checkpoints, run.restore, run.log)[0] if checkpoints else None
    if run.dist.is_main:  # only once the run can go on, as in train()
        save_yaml(config, run_dir / "config.yaml")
        record_resume(run_dir, checkpoint, run.t.step_count, run.t.seconds, changed)
        run.records = truncate_metrics(run_dir / "metrics.jsonl", run.records,
                                       run.t.step_count)
    run.records = run.dist.broadcast_object(run.records)  # records kept
    where = f"{checkpoint.name} (step {run.t.step_count}, {run.t.seconds:.1f} " \
            f"training seconds)" if checkpoint else "the start (no checkpoint was written)"
    run.log(f"resuming {run_dir} from {where}" +
            (f"; changed: {describe(changed)}" if changed else ""))
    run.run()
    return run_dir
