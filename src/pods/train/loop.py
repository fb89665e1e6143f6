"""The loop of a run: steps until the budget is spent, evaluations and checkpoints on their
schedule (in training seconds), every record to metrics.jsonl and the trackers, and
stopping on a failure without losing what was written.

Only rank 0 writes logs, metrics and checkpoints (see ``pods.runtime.distributed``). Ctrl-C
stops at once, except inside the update and a checkpoint write, which are finished first
(``pods.train.interrupts``); either way the run folder resumes as if never stopped.
Starting a run folder and resuming one: ``pods.train.run``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from pods.config import save_yaml
from pods.runs.checkpoints import (
    WRITE_ERRORS,
    CheckpointWriteError,
    latest_checkpoint,
    publish_checkpoint,
    staging_dir,
    start_checkpoint,
)
from pods.runs.metrics import MetricsWriter, run_summary
from pods.runtime.distributed import RankFailure
from pods.runtime.machine import machine_fields
from pods.tracking import Trackers
from pods.train.interrupts import Interrupts
from pods.train.progress import Progress
from pods.train.trainer import Trainer

Curve = Callable[[Path], object]  # draws a run folder's learning curve (pods train: plot_run)


class Run:
    """Steps ``trainer`` until the budget is spent, evaluating every ``eval_every`` and
    checkpointing every ``checkpoint_every`` training seconds (and both at the end). The
    run deals in times, paths and signals; what is trained, evaluated, saved and loaded is
    the trainer's. ``curve``, if given, draws the learning curve when the run ends."""

    def __init__(self, trainer: Trainer, run_dir: Path, curve: Curve | None = None):
        self.t, self.cfg, self.dist, self.run_dir = trainer, trainer.cfg, trainer.dist, run_dir
        self.log, self.curve = trainer.log, curve
        self.interrupts = Interrupts(self.log)  # Ctrl-C: held in the update and the writes
        self.outputs, self.records = [], 0  # metrics.jsonl and trackers; records written
        self.checkpointed_step: int | None = None
        self.evaluated_step: int | None = None
        self.next_eval, self.next_checkpoint = 0.0, self.cfg.run.checkpoint_every

    def run(self) -> None:
        t, main = self.t, self.dist.is_main
        if main:  # trackers first: if one cannot start, nothing is open yet
            tracking = self.cfg.tracking
            trackers = Trackers(tracking.report_to, self.run_dir, project=tracking.project,
                                group=tracking.group, config=self.cfg.to_dict(),
                                start_step=t.step_count)
            self.outputs = [MetricsWriter(self.run_dir / "metrics.jsonl"), trackers]
        self.report({"kind": "machine", "step": t.step_count, "time": t.seconds,
                     **machine_fields(t.device)})  # where its times were measured (runtime.machine)
        progress = Progress(self.cfg.run, t.seconds, t.step_count, enabled=main)
        last: dict[str, float] = {}
        self.dist.on_sigterm()
        with self.interrupts.installed():  # also over the checkpoint written on stopping
            try:
                self.steps(progress, last)
            except KeyboardInterrupt:
                if self.dist.world > 1:  # the ranks cannot agree on a last collective save
                    raise RankFailure(self.stopped("interrupted")) from None
                self.stop_with_checkpoint("interrupted")
                raise
            except Exception as error:
                if self.dist.world > 1:
                    raise RankFailure(self.stopped(f"{type(error).__name__}: {error}")) \
                        from error
                if not isinstance(error, CheckpointWriteError):  # else the same write again
                    self.stop_with_checkpoint(type(error).__name__)
                raise
            finally:
                progress.close()
                for output in self.outputs:
                    output.close()
                if main:
                    self.draw_curve()
        if main:  # only a run that finished gets here
            self.log(run_summary(self.run_dir))

    def draw_curve(self) -> None:
        if self.curve is None:
            return
        try:
            self.curve(self.run_dir)
        except Exception as error:  # a plot must never cost the run its checkpoint
            self.log(f"could not draw the learning curve: {error}")

    def steps(self, progress: Progress, last: dict[str, float]) -> None:
        """The steps, evaluations and checkpoints until the budget is spent; a Ctrl-C in
        them ends here (as KeyboardInterrupt) and leaves the stopping to ``run``."""
        t = self.t
        while not self.finished():
            if t.seconds >= self.next_eval:
                last.update(self.evaluate())
            sampled = t.sample()  # Ctrl-C here: the step is rewound (stop_with_checkpoint)
            with self.interrupts.held(f"the update of step {t.step_count + 1}"):
                record = t.update(sampled)  # the weights move: finish and record the step
                self.report(record)
            progress.update(record, last.get("eval/accuracy"))
            if t.seconds >= self.next_checkpoint:
                self.checkpoint()
        if self.evaluated_step != t.step_count:  # else resumed after the final evaluation
            last.update(self.evaluate())
        self.checkpoint()
        self.report({"kind": "done", "step": t.step_count, "time": t.seconds})

    def finished(self) -> bool:
        budget, t = self.cfg.run, self.t
        return (budget.max_steps is not None and t.step_count >= budget.max_steps) or \
               (budget.max_time is not None and t.seconds >= budget.max_time)

    def report(self, record: dict) -> None:
        """One record to metrics.jsonl and the trackers (rank 0); every rank counts it.
        Ctrl-C waits for the record to be written and counted (a checkpoint counts it)."""
        with self.interrupts.held("a metrics record"):
            for output in self.outputs:
                output.write(record)
            self.records += 1

    def evaluate(self) -> dict[str, float]:
        """Test metrics; every rank evaluates its share of the test set."""
        t = self.t
        result = t.evaluate()
        with self.interrupts.held("an evaluation record"):  # recorded and scheduled, or not
            self.report({"kind": "eval", "step": t.step_count, "time": t.seconds, **result})
            while self.next_eval <= t.seconds:
                self.next_eval += self.cfg.eval.every
            self.evaluated_step = t.step_count
        return result

    # ---- stopping on a failure ---------------------------------------------------------
    def stop_with_checkpoint(self, why: str) -> None:
        """One process stopping mid-run writes a checkpoint of the last completed step: a
        step under way is rewound (clock, prompt and selection streams), never saved half
        done; inside the update the weights already moved, so the last checkpoint stays."""
        t = self.t
        if not t.rewind():
            checkpoint = latest_checkpoint(self.run_dir)
            kept = f"the last one, {checkpoint.name}, is kept" if checkpoint else \
                "the run folder resumes from the start"
            self.log(f"\nstopped ({why}) inside the update of step {t.step_count + 1}: "
                     f"no checkpoint of a half-updated model; {kept} (`pods train --resume "
                     f"{self.run_dir}`).")
            return
        written = self.checkpointed_step == t.step_count  # e.g. Ctrl-C in its write
        self.log(f"\nstopped ({why}) after step {t.step_count}: "
                 f"{'its checkpoint is written' if written else 'writing a checkpoint'}")
        try:
            with self.interrupts.held("the checkpoint written on stopping", raise_after=False):
                path = self.checkpoint()  # Ctrl-C: stopping already
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
        step = self.t.step_count
        if self.checkpointed_step == step:
            return latest_checkpoint(self.run_dir)
        schedule = {"metrics_records": self.records, "evaluated_step": self.evaluated_step,
                    "next_eval": self.next_eval}
        with self.interrupts.held(f"the checkpoint of step {step}"):  # written and counted
            path = self._write_checkpoint(step, schedule)
            self.checkpointed_step = step
            while self.next_checkpoint <= self.t.seconds:
                self.next_checkpoint += self.cfg.run.checkpoint_every
        return path

    def _write_checkpoint(self, step: int, schedule: dict) -> Path | None:
        """Staged, written by the trainer, then renamed into place (pods.runs.checkpoints);
        with the config it was written with, which a resume compares (pods.train.resumes)."""
        dist, staging = self.dist, staging_dir(self.run_dir, step)
        try:
            if dist.is_main:
                save_yaml(self.cfg, start_checkpoint(self.run_dir, step) / "config.yaml")
            dist.barrier()
            self.t.save(staging, schedule)
            path = publish_checkpoint(self.run_dir, step, self.cfg.run.keep_checkpoints) \
                if dist.is_main else None
        except WRITE_ERRORS as error:  # a full disk, say: drop the partial copy, keep the last
            shutil.rmtree(staging, ignore_errors=True)
            why = getattr(error, "strerror", None) or f"{type(error).__name__}: {error}"
            raise CheckpointWriteError(
                f"could not write the checkpoint of step {step} in {self.run_dir} "
                f"({why}); the previous checkpoint, {latest_checkpoint(self.run_dir)}, "
                f"is intact.") from error
        dist.barrier()
        return path

    def restore(self, checkpoint: Path) -> None:
        """The trainer's state (weights, optimizer, clock, streams), then the schedule's."""
        state = self.t.load(checkpoint)
        self.records, self.checkpointed_step = state.get("metrics_records"), self.t.step_count
        self.evaluated_step = state.get("evaluated_step")
        self.next_eval = state["next_eval"]
        self.next_checkpoint = self.t.seconds + self.cfg.run.checkpoint_every
