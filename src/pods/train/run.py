"""A run around the training steps: start, resume, the evaluation and checkpoint schedule,
and stopping on a failure without losing what was written.

    train(config)          a new run folder: config.yaml, metrics.jsonl, checkpoints/
    resume(run_dir)        continue from the newest readable checkpoint
    train_or_resume(cfg)   either, for ``pods compare``'s restartable comparisons

Only rank 0 writes logs, metrics and checkpoints (see ``pods.train.distributed``).
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import torch

from pods.config import TrainConfig, from_dict, load_run_config, save_yaml
from pods.evaluation import evaluate
from pods.models.policy import load_saved_policy
from pods.tracking import Trackers
from pods.train.checkpoint import (
    WRITE_ERRORS,
    CheckpointWriteError,
    complete_checkpoints,
    finish_checkpoint,
    latest_checkpoint,
    restore_rng_states,
    rng_states,
    staging_dir,
    start_checkpoint,
)
from pods.train.distributed import RankFailure
from pods.train.metrics import MetricsWriter, run_summary, truncate_metrics
from pods.train.progress import Progress, plot_curve
from pods.train.trainer import Trainer


class Run:
    """Steps ``trainer`` until the budget is spent, evaluating every ``eval_every`` and
    checkpointing every ``checkpoint_every`` training seconds (and both at the end)."""

    def __init__(self, trainer: Trainer):
        self.t, self.cfg, self.dist = trainer, trainer.cfg, trainer.dist
        self.log = trainer.log
        self.outputs, self.records = [], 0  # metrics.jsonl and trackers; records written
        self.checkpointed_step: int | None = None
        self.next_eval, self.next_checkpoint = 0.0, self.cfg.run.checkpoint_every

    @property
    def run_dir(self) -> Path:
        return self.t.run_dir

    def run(self) -> None:
        t, main = self.t, self.dist.is_main
        if main:  # trackers first: if one cannot start, nothing is open yet
            tracking = self.cfg.tracking
            trackers = Trackers(tracking.report_to, self.run_dir, project=tracking.project,
                                group=tracking.group, config=self.cfg.to_dict(),
                                start_step=t.step_count)
            self.outputs = [MetricsWriter(self.run_dir / "metrics.jsonl"), trackers]
        progress = Progress(self.cfg.run, t.clock.seconds, t.step_count, enabled=main)
        last: dict[str, float] = {}
        self.dist.on_sigterm()
        try:
            while not self.finished():
                if t.clock.seconds >= self.next_eval:
                    last.update(self.evaluate())
                record = t.step()
                self.report(record)
                progress.update(record, last.get("eval/accuracy"))
                if t.clock.seconds >= self.next_checkpoint:
                    self.checkpoint()
            last.update(self.evaluate())
            self.checkpoint()
            self.report({"kind": "done", "step": t.step_count, "time": t.clock.seconds})
        except KeyboardInterrupt:
            if self.dist.world > 1:  # the ranks cannot agree on a last collective save
                raise RankFailure(self.stopped("interrupted")) from None
            self.stop_with_checkpoint("interrupted")
            raise
        except Exception as error:
            if self.dist.world > 1:
                raise RankFailure(self.stopped(f"{type(error).__name__}: {error}")) from error
            if not isinstance(error, CheckpointWriteError):  # else the same write again
                self.stop_with_checkpoint(type(error).__name__)
            raise
        finally:
            progress.close()
            for output in self.outputs:
                output.close()
            if main:
                plot_curve(self.run_dir, self.log)
        if main:  # only a run that finished gets here
            self.log(run_summary(self.run_dir))

    def finished(self) -> bool:
        budget, t = self.cfg.run, self.t
        return (budget.max_steps is not None and t.step_count >= budget.max_steps) or \
               (budget.max_time is not None and t.clock.seconds >= budget.max_time)

    def report(self, record: dict) -> None:
        """One record to metrics.jsonl and the trackers (rank 0); every rank counts it."""
        for output in self.outputs:
            output.write(record)
        self.records += 1

    def evaluate(self) -> dict[str, float]:
        """Test metrics; every rank evaluates its share of the test set."""
        t, e = self.t, self.cfg.eval
        result = evaluate(t.rollout, t.task, t.test_set, e.temperature,
                          self.cfg.rollout.max_new_tokens, seed=self.cfg.run.seed,
                          repeats=e.repeats, dist=self.dist, scorer=t.scorer)
        self.report({"kind": "eval", "step": t.step_count, "time": t.clock.seconds,
                     **result, **t.dropped})
        while self.next_eval <= t.clock.seconds:
            self.next_eval += e.every
        return result

    # ---- stopping on a failure ---------------------------------------------------------
    def stop_with_checkpoint(self, why: str) -> None:
        """One process stopping mid-run writes a checkpoint of the last completed step: a
        step under way is rewound (clock, prompt and selection streams), never saved half
        done; inside the update the weights already moved, so the last checkpoint stays."""
        t = self.t
        if t.updating:
            checkpoint = latest_checkpoint(self.run_dir)
            self.log(f"\nstopped ({why}) inside the update of step {t.step_count + 1}: "
                     f"no checkpoint of a half-updated model; the last one is {checkpoint}.")
            return
        if t.before_step is not None:
            t.clock.seconds, states = t.before_step
            restore_rng_states(states, t.prompt_rng, t.select_gen)
        self.log(f"\nstopped ({why}) after step {t.step_count}: writing a checkpoint")
        try:
            path = self.checkpoint()
        except Exception as error:  # the original error is the one to report
            self.log(f"the checkpoint could not be written ({type(error).__name__}: {error})")
            return
        self.log(f"checkpoint {path} written; continue with `pods train --resume "
                 f"{self.run_dir}`")

    def stopped(self, why: str) -> str:
        """What a rank of a distributed run says when the run stops early."""
        checkpoint = latest_checkpoint(self.run_dir)
        kept = f"the last complete checkpoint, {checkpoint}, is kept; continue with " \
               f"`torchrun --nproc_per_node {self.dist.world} -m pods -- train --resume " \
               f"{self.run_dir}`" if checkpoint else "no checkpoint was written yet"
        return f"rank {self.dist.rank} of {self.dist.world} stopped at step " \
               f"{self.t.step_count} ({why}); {kept}."

    # ---- checkpoints -------------------------------------------------------------------
    def checkpoint(self) -> Path | None:
        """Rank 0 writes the checkpoint; under FSDP every rank adds its shards. A step that
        has one already keeps it (a resume from it redoes what came after, as after a kill)."""
        t, dist, step = self.t, self.dist, self.t.step_count
        if self.checkpointed_step == step:
            return latest_checkpoint(self.run_dir)
        state = {"optimizer": None if dist.sharded else t.optimizer.state_dict(),
                 "metrics_records": self.records,
                 "step": step, "clock": t.clock.seconds, "next_eval": self.next_eval,
                 "rng": rng_states(t.prompt_rng, t.select_gen),
                 "torch_rng_per_rank": dist.gather_objects(torch.get_rng_state())}
        weights = dist.full_state_dict(t.wrapped)  # None unless sharded
        try:
            if dist.is_main:
                start_checkpoint(self.run_dir, step)
            dist.barrier()
            dist.save_engine_state(staging_dir(self.run_dir, step) / "engine")
            path = None
            if dist.is_main:
                path = finish_checkpoint(self.run_dir, step, t.model, t.tokenizer, state,
                                         weights)
        except WRITE_ERRORS as error:  # a full disk, say: drop the partial copy, keep the last
            shutil.rmtree(staging_dir(self.run_dir, step), ignore_errors=True)
            why = getattr(error, "strerror", None) or f"{type(error).__name__}: {error}"
            raise CheckpointWriteError(
                f"could not write the checkpoint of step {step} in {self.run_dir} "
                f"({why}); the previous checkpoint, {latest_checkpoint(self.run_dir)}, "
                f"is intact.") from error
        dist.barrier()
        self.checkpointed_step = step
        while self.next_checkpoint <= t.clock.seconds:
            self.next_checkpoint += self.cfg.run.checkpoint_every
        return path

    def restore_newest(self, checkpoints: list[Path]) -> Path:
        """Restore the newest of ``checkpoints`` that can be read; an unreadable one (a
        truncated file, a missing piece) is passed over, and that is said."""
        for i, checkpoint in enumerate(checkpoints):
            if i > 0:
                self.log(f"falling back to {checkpoint.name}")
            try:
                self.restore(checkpoint)
                return checkpoint
            except Exception as error:  # torch.load and safetensors raise many kinds
                problem = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                self.log(f"checkpoint {checkpoint} cannot be read ({problem})")
        raise ValueError(f"none of the checkpoints of {self.run_dir} can be read "
                         f"({', '.join(c.name for c in checkpoints)}); see above why.")

    def restore(self, checkpoint: Path) -> None:
        t = self.t
        state = torch.load(checkpoint / "state.pt", weights_only=False)
        if self.dist.sharded:  # weights and optimizer from the ranks' shards
            self.dist.load_engine_state(checkpoint / "engine")
        else:
            self._load_weights(checkpoint)
            if state["optimizer"] is None:
                raise ValueError(f"{checkpoint} was written under FSDP2; resume it with "
                                 f"as many processes as it ran on (its shards in engine/).")
            t.optimizer.load_state_dict(state["optimizer"])
        t.step_count, t.clock.seconds = state["step"], state["clock"]
        self.records, self.checkpointed_step = state.get("metrics_records"), t.step_count
        self.next_eval = state["next_eval"]
        self.next_checkpoint = t.clock.seconds + self.cfg.run.checkpoint_every
        t.rollout.sync_weights(t.model)  # the engine generates from the restored weights
        restore_rng_states(state["rng"], t.prompt_rng, t.select_gen)
        per_rank = state.get("torch_rng_per_rank", [])
        if len(per_rank) == self.dist.world:  # dropout streams; others only matter for it
            torch.set_rng_state(per_rank[self.dist.rank])

    def _load_weights(self, checkpoint: Path) -> None:
        t = self.t
        saved = load_saved_policy(checkpoint / "model", self.cfg.model.name, t.task,
                                  t.device, self.cfg.model)[0]
        missing = t.model.load_state_dict(saved.state_dict(), strict=False).missing_keys
        if any(p.requires_grad for n, p in t.model.named_parameters() if n in missing):
            raise ValueError(f"{checkpoint} does not match this run's model; resume it with "
                             f"the config it was trained with.")


def train(config: TrainConfig, log=print) -> Path:
    """Train a new run into ``out_dir/run_name`` and return the run folder."""
    out_dir, name = Path(config.run.out_dir), config.run.run_name
    if name:
        _check_new(out_dir / name)
    trainer = Trainer(config, Path(), log=log)  # model and data first: a failure writes nothing
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    s = config.selection
    name = trainer.dist.broadcast_object(  # rank 0's clock names the run on every rank
        name or f"{stamp}-n{config.rollout.n}-m{s.m}-{s.rule}")
    trainer.run_dir = run_dir = out_dir / name
    _check_new(run_dir)
    trainer.dist.barrier()  # every rank has checked before rank 0 writes
    if trainer.dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_yaml(config, run_dir / "config.yaml")
    trainer.log(f"run folder: {run_dir}")
    Run(trainer).run()
    return run_dir


def _check_new(run_dir: Path) -> None:
    if (run_dir / "metrics.jsonl").exists():
        raise ValueError(f"run folder {run_dir} already holds a run; continue it with "
                         f"`pods train --resume {run_dir}` or pick another --run-name.")


def train_or_resume(config: TrainConfig, log=print) -> Path:
    """``train``, or continue the run folder it would write if one was left unfinished
    (used by ``pods compare`` so that an interrupted comparison picks up where it stopped).
    A folder holding no checkpoint yet is set aside, never deleted, and the run restarts."""
    name = config.run.run_name
    run_dir = Path(config.run.out_dir) / (name or "")
    if name and (run_dir / "metrics.jsonl").exists():
        if latest_checkpoint(run_dir) is not None:
            return resume(run_dir, log=log)
        aside = run_dir.with_name(f"{run_dir.name}.incomplete-{datetime.now():%Y%m%d-%H%M%S}")
        run_dir.rename(aside)
        log(f"{run_dir} had no checkpoint; moved it to {aside} and starting over")
    return train(config, log=log)


def resume(run_dir: str | Path, overrides: dict | None = None, log=print) -> Path:
    """Continue a run from its newest checkpoint: same clock, optimizer and RNG streams.
    ``overrides`` (flat keys) may change fields such as max_time or max_steps (a larger
    budget). Run folders of every earlier pods version hold flat config files, read here."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ValueError(f"{run_dir} is not a run folder (no config.yaml).")
    checkpoints = complete_checkpoints(run_dir)
    if not checkpoints:
        raise ValueError(f"{run_dir} has no complete checkpoint to resume from; "
                         f"start a new run instead.")
    config = from_dict({**load_run_config(run_dir / "config.yaml"), **(overrides or {})})
    run = Run(Trainer(config, run_dir, log=log))
    checkpoint = run.restore_newest(checkpoints)
    if run.dist.is_main:  # only once the run can go on, as in train()
        save_yaml(config, run_dir / "config.yaml")
        run.records = truncate_metrics(run_dir / "metrics.jsonl", run.records,
                                       run.t.step_count)
    run.records = run.dist.broadcast_object(run.records)  # records kept
    run.log(f"resuming {run_dir} from {checkpoint.name} (step {run.t.step_count}, "
            f"{run.t.clock.seconds:.1f} training seconds)")
    run.run()
    return run_dir
