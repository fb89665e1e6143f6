"""The GRPO-PODS training loop.

One step: sample P prompts -> generate n rollouts each -> score -> keep m per group with
``pods.core.downsample`` -> advantages over the kept m -> update on the P*m kept rollouts only.
Selection happens before any training-side forward pass, so update costs scale with m.

The training clock counts generation, scoring, selection and update; evaluation and
checkpointing are excluded (as in the paper), so curves over "training time" compare methods
fairly however often they are evaluated.
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import torch

from pods.config import TrainConfig, from_dict, load_yaml, save_yaml
from pods.evaluation import evaluate
from pods.models.policy import load_policy, load_saved_policy
from pods.rollout import make_engine, resolve_engine, sample_keys
from pods.rollout.prompts import drop_long_prompts, render_prompts
from pods.tasks import get_task
from pods.tasks.math.grader import grading_stats
from pods.tasks.scoring import Scorer
from pods.tracking import Trackers, check_installed
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
from pods.train.distributed import Dist, RankFailure, launched_world_size
from pods.train.metrics import MetricsWriter, run_summary, truncate_metrics
from pods.train.progress import Clock, Progress, plot_curve
from pods.train.schedule import budget_progress, lr_multiplier
from pods.train.selection import rank_batch, select, selection_stats
from pods.train.update import peak_memory_mb, policy_update


class Trainer:
    """One run on this process; under torchrun / accelerate launch, this rank's part of it
    (see pods.train.distributed). Only rank 0 writes logs, metrics and checkpoints."""

    def __init__(self, config: TrainConfig, run_dir: Path, log=print):
        world = launched_world_size()
        if config.prompts_per_step % world:
            raise ValueError(f"prompts_per_step={config.prompts_per_step} does not split over "
                             f"{world} processes (each rank takes whole groups of n); use a "
                             f"multiple of {world}.")
        self.dist = Dist(config.device, timeout_s=config.dist_timeout)
        self.cfg, self.run_dir = config, run_dir
        self.log = log if self.dist.is_main else _silent
        self.device = self.dist.device
        torch.manual_seed(config.seed)
        options = config.model_options()
        resolve_engine(config.engine_options(), self.device, self.dist.sharded)  # fail early
        check_installed(config.report_to)
        with self.dist.main_first():  # rank 0 fills download and warm-up caches first
            self.task = get_task(config.task, config.task_options())
            self.model, self.tokenizer = load_policy(config.model, self.task, self.device,
                                                     options, log=self.log)
        self.model.train()
        self.ref_model = None  # with LoRA the reference is the base model, adapter disabled
        if config.beta > 0 and config.lora_rank == 0:  # else a frozen copy of the start
            self.ref_model = load_policy(config.model, self.task, self.device, options,
                                         log=_silent)[0].eval()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=config.lr,
                                      betas=(config.adam_beta1, config.adam_beta2),
                                      weight_decay=config.weight_decay)
        # wrapped: the model as accelerate wraps it (DDP, FSDP) for the training passes;
        # self.model stays the plain module for generation, evaluation and saving.
        self.wrapped, self.optimizer = self.dist.prepare(self.model, optimizer)
        self.model = self.dist.unwrap(self.wrapped)
        self.rollout = make_engine(config.engine_options(), self.model, self.tokenizer,
                                   self.device, self.dist.world, self.dist.sharded)
        self.train_set, self.test_set, self.dropped = self._datasets()
        self.scorer = Scorer(self.task, config.reward_errors, warn=self.log)
        self.prompt_rng = np.random.default_rng(config.seed)
        self.select_gen = torch.Generator().manual_seed(config.seed)
        self.clock, self.step_count = Clock(), 0
        self.before_step, self.updating = None, False  # a step under way (failures)
        self.outputs, self.records = [], 0  # metrics.jsonl and trackers; records written
        self.checkpointed_step: int | None = None
        self.next_eval, self.next_checkpoint = 0.0, config.checkpoint_every

    def _datasets(self):
        """Train and test problems whose prompts fit ``max_prompt_tokens``; drops counted."""
        cfg, tok, task = self.cfg, self.tokenizer, self.task
        train, dropped_train = drop_long_prompts(tok, task, task.train(), cfg.max_prompt_tokens)
        test, dropped_test = drop_long_prompts(tok, task, task.test(), cfg.max_prompt_tokens)
        if not train:
            raise ValueError(f"no training prompt fits in max_prompt_tokens="
                             f"{cfg.max_prompt_tokens}; raise it.")
        if dropped_train or dropped_test:
            self.log(f"dropped prompts over {cfg.max_prompt_tokens} tokens: {dropped_train} "
                     f"train, {dropped_test} test")
        dropped = {"data/dropped_train": dropped_train, "data/dropped_test": dropped_test}
        return train, test[: cfg.eval_size], dropped

    # ---- one step ---------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        """One step. Under data parallelism this rank generates for its P/W prompts (mine),
        and selection and advantages run on the gathered [P, n] rewards, as on one process."""
        cfg, P, n = self.cfg, self.cfg.prompts_per_step, self.cfg.n
        self.clock.phases = {}
        step_start = self.clock.seconds
        # what a failure mid-step rewinds to (see _stop_with_checkpoint)
        self.before_step = step_start, rng_states(self.prompt_rng, self.select_gen)
        problems = [self.train_set[i] for i in
                    self.prompt_rng.choice(len(self.train_set), size=P, replace=False)]
        mine = self.dist.shard(P)  # this rank's prompts: P_r = P / W of them
        my_problems = problems[mine]
        with self.clock.phase("generate"):
            texts, special = render_prompts(self.tokenizer, self.task, my_problems)
            keys = sample_keys(cfg.seed, self.step_count, torch.arange(P)[mine])  # [P_r]
            rollouts = self.rollout.generate(texts, n, cfg.temperature, cfg.max_new_tokens,
                                             keys, special)
        with self.clock.phase("reward"):
            failures = grading_stats().failures  # answers math-verify could not grade
            local, reward_errors = self.scorer.rewards(rollouts.texts, my_problems, n)
            failures = grading_stats().failures - failures
        with self.clock.phase("select"):
            rewards = self.dist.gather(local)  # [P, n], the same on every rank
            lengths = self.dist.gather(  # [P, n] completion tokens, for the length rules
                rollouts.completion_mask.sum(1).view(-1, n).float().cpu())
            keep, advantages = select(rewards, cfg.m, cfg.rule, scope=cfg.selection,
                                      max_per_group=cfg.max_kept_per_group,
                                      generator=self.select_gen, lengths=lengths,
                                      adv_scale=cfg.adv_scale)  # [P, n] each
            batch, advantages = rank_batch(rollouts, keep, advantages, self.dist.rank,
                                           self.dist.world)  # this rank's kept rows [K]
        self.updating = True  # from here a failure leaves the weights half-updated
        lr = self._set_lr()
        with self.clock.phase("update"), self.rollout.asleep():
            losses = policy_update(self.wrapped, self.ref_model, self.optimizer, batch,
                                   advantages.to(self.device), cfg, self.dist,
                                   kept=int(keep.sum())) if keep.any() else {}
        with self.clock.phase("sync"):  # the engine samples the next step from new weights
            self.rollout.sync_weights(self.model)
        self.step_count += 1
        self.updating, self.before_step = False, None
        slowest = self.dist.reduce({"time": self.clock.seconds, **self.clock.phases,
                                    **peak_memory_mb(self.device)}, "max")  # over ranks
        self.clock.seconds = slowest.pop("time")
        shared = self.dist.reduce({
            "rollout/completion_len": rollouts.completion_mask.sum(1).float().mean().item(),
            "rollout/grading_failures": failures, "rollout/reward_errors": reward_errors},
            "sum")
        return {
            "kind": "step", "step": self.step_count, "time": self.clock.seconds,
            "rollout/reward_mean": rewards.mean().item(), "optim/lr": lr,
            "rollout/completion_len": shared["rollout/completion_len"] / self.dist.world,
            "rollout/grading_failures": int(shared["rollout/grading_failures"]),
            "rollout/reward_errors": int(shared["rollout/reward_errors"]),
            **selection_stats(rewards, keep, lengths, self.dist.world),
            **losses, **slowest, "time/step": self.clock.seconds - step_start,
        }

    def _set_lr(self) -> float:
        """The schedule's lr for the step under way (counted as done), recomputed from the
        step count and clock, so a resumed run needs no scheduler state."""
        cfg = self.cfg
        progress = budget_progress(self.step_count + 1, self.clock.seconds, cfg.max_steps,
                                   cfg.max_time)
        lr = cfg.lr * lr_multiplier(progress, cfg.lr_schedule, cfg.warmup_frac, cfg.lr_floor)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    # ---- the run ----------------------------------------------------------------------
    def run(self) -> None:
        cfg, main = self.cfg, self.dist.is_main
        if main:  # trackers first: if one cannot start, nothing is open yet
            trackers = Trackers(cfg.report_to, self.run_dir, project=cfg.tracker_project,
                                group=cfg.tracker_group, config=cfg.to_dict(),
                                start_step=self.step_count)
            self.outputs = [MetricsWriter(self.run_dir / "metrics.jsonl"), trackers]
        progress = Progress(cfg, self.clock.seconds, self.step_count, enabled=main)
        last: dict[str, float] = {}
        self.dist.on_sigterm()
        try:
            while not self.finished():
                if self.clock.seconds >= self.next_eval:
                    last.update(self.evaluate())
                record = self.step()
                self.report(record)
                progress.update(record, last.get("eval/accuracy"))
                if self.clock.seconds >= self.next_checkpoint:
                    self.checkpoint()
            last.update(self.evaluate())
            self.checkpoint()
            self.report({"kind": "done", "step": self.step_count, "time": self.clock.seconds})
        except KeyboardInterrupt:
            if self.dist.world > 1:  # the ranks cannot agree on a last collective save
                raise RankFailure(self._stopped("interrupted")) from None
            self._stop_with_checkpoint("interrupted")
            raise
        except Exception as error:
            if self.dist.world > 1:
                raise RankFailure(self._stopped(f"{type(error).__name__}: {error}")) from error
            if not isinstance(error, CheckpointWriteError):  # else the same write again
                self._stop_with_checkpoint(type(error).__name__)
            raise
        finally:
            progress.close()
            for output in self.outputs:
                output.close()
            if main:
                plot_curve(self.run_dir, self.log)
        if main:  # only a run that finished gets here
            self.log(run_summary(self.run_dir))

    def _stop_with_checkpoint(self, why: str) -> None:
        """One process stopping mid-run writes a checkpoint of the last completed step: a
        step under way is rewound (clock, prompt and selection streams), never saved half
        done; inside the update the weights already moved, so the last checkpoint stays."""
        if self.updating:
            checkpoint = latest_checkpoint(self.run_dir)
            self.log(f"\nstopped ({why}) inside the update of step {self.step_count + 1}: "
                     f"no checkpoint of a half-updated model; the last one is {checkpoint}.")
            return
        if self.before_step is not None:
            self.clock.seconds, states = self.before_step
            restore_rng_states(states, self.prompt_rng, self.select_gen)
        self.log(f"\nstopped ({why}) after step {self.step_count}: writing a checkpoint")
        try:
            path = self.checkpoint()
        except Exception as error:  # the original error is the one to report
            self.log(f"the checkpoint could not be written ({type(error).__name__}: {error})")
            return
        self.log(f"checkpoint {path} written; continue with `pods train --resume "
                 f"{self.run_dir}`")

    def _stopped(self, why: str) -> str:
        """What a rank of a distributed run says when the run stops early."""
        checkpoint = latest_checkpoint(self.run_dir)
        kept = f"the last complete checkpoint, {checkpoint}, is kept; continue with " \
               f"`torchrun --nproc_per_node {self.dist.world} -m pods -- train --resume " \
               f"{self.run_dir}`" if checkpoint else "no checkpoint was written yet"
        return f"rank {self.dist.rank} of {self.dist.world} stopped at step " \
               f"{self.step_count} ({why}); {kept}."

    def finished(self) -> bool:
        cfg = self.cfg
        return (cfg.max_steps is not None and self.step_count >= cfg.max_steps) or \
               (cfg.max_time is not None and self.clock.seconds >= cfg.max_time)

    def report(self, record: dict) -> None:
        """One record to metrics.jsonl and the trackers (rank 0); every rank counts it."""
        for output in self.outputs:
            output.write(record)
        self.records += 1

    def evaluate(self) -> dict[str, float]:
        """Test metrics; every rank evaluates its share of the test set."""
        cfg = self.cfg
        result = evaluate(self.rollout, self.task, self.test_set, cfg.eval_temperature,
                          cfg.max_new_tokens, seed=cfg.seed, repeats=cfg.eval_repeats,
                          dist=self.dist, scorer=self.scorer)
        self.report({"kind": "eval", "step": self.step_count, "time": self.clock.seconds,
                     **result, **self.dropped})
        while self.next_eval <= self.clock.seconds:
            self.next_eval += cfg.eval_every
        return result

    def checkpoint(self) -> Path | None:
        """Rank 0 writes the checkpoint; under FSDP every rank adds its shards. A step that
        has one already keeps it (a resume from it redoes what came after, as after a kill)."""
        dist, step = self.dist, self.step_count
        if self.checkpointed_step == step:
            return latest_checkpoint(self.run_dir)
        state = {"optimizer": None if dist.sharded else self.optimizer.state_dict(),
                 "metrics_records": self.records,
                 "step": step, "clock": self.clock.seconds, "next_eval": self.next_eval,
                 "rng": rng_states(self.prompt_rng, self.select_gen),
                 "torch_rng_per_rank": dist.gather_objects(torch.get_rng_state())}
        weights = dist.full_state_dict(self.wrapped)  # None unless sharded
        try:
            if dist.is_main:
                start_checkpoint(self.run_dir, step)
            dist.barrier()
            dist.save_engine_state(staging_dir(self.run_dir, step) / "engine")
            path = None
            if dist.is_main:
                path = finish_checkpoint(self.run_dir, step, self.model, self.tokenizer,
                                         state, weights)
        except WRITE_ERRORS as error:  # a full disk, say: drop the partial copy, keep the last
            shutil.rmtree(staging_dir(self.run_dir, step), ignore_errors=True)
            why = getattr(error, "strerror", None) or f"{type(error).__name__}: {error}"
            raise CheckpointWriteError(
                f"could not write the checkpoint of step {step} in {self.run_dir} "
                f"({why}); the previous checkpoint, {latest_checkpoint(self.run_dir)}, "
                f"is intact.") from error
        dist.barrier()
        self.checkpointed_step = step
        while self.next_checkpoint <= self.clock.seconds:
            self.next_checkpoint += self.cfg.checkpoint_every
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
        state = torch.load(checkpoint / "state.pt", weights_only=False)
        if self.dist.sharded:  # weights and optimizer from the ranks' shards
            self.dist.load_engine_state(checkpoint / "engine")
        else:
            self._load_weights(checkpoint)
            if state["optimizer"] is None:
                raise ValueError(f"{checkpoint} was written under FSDP; resume it "
                                 f"with the same accelerate config.")
            self.optimizer.load_state_dict(state["optimizer"])
        self.step_count, self.clock.seconds = state["step"], state["clock"]
        self.records, self.checkpointed_step = state.get("metrics_records"), self.step_count
        self.next_eval = state["next_eval"]
        self.next_checkpoint = self.clock.seconds + self.cfg.checkpoint_every
        self.rollout.sync_weights(self.model)  # the engine generates from the restored weights
        restore_rng_states(state["rng"], self.prompt_rng, self.select_gen)
        per_rank = state.get("torch_rng_per_rank", [])
        if len(per_rank) == self.dist.world:  # dropout streams; others only matter for it
            torch.set_rng_state(per_rank[self.dist.rank])

    def _load_weights(self, checkpoint: Path) -> None:
        saved = load_saved_policy(checkpoint / "model", self.cfg.model, self.task,
                                  self.device, self.cfg.model_options())[0]
        missing = self.model.load_state_dict(saved.state_dict(), strict=False).missing_keys
        if any(p.requires_grad for n, p in self.model.named_parameters() if n in missing):
            raise ValueError(f"{checkpoint} does not match this run's model; resume it with "
                             f"the config it was trained with.")


def _silent(*args, **kwargs) -> None:
    """The log of ranks other than 0."""


def train(config: TrainConfig, log=print) -> Path:
    """Train a new run into ``out_dir/run_name`` and return the run folder."""
    if config.run_name:
        _check_new(Path(config.out_dir) / config.run_name)
    trainer = Trainer(config, Path(), log=log)  # model and data first: a failure writes nothing
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    name = trainer.dist.broadcast_object(  # rank 0's clock names the run on every rank
        config.run_name or f"{stamp}-n{config.n}-m{config.m}-{config.rule}")
    trainer.run_dir = run_dir = Path(config.out_dir) / name
    _check_new(run_dir)
    trainer.dist.barrier()  # every rank has checked before rank 0 writes
    if trainer.dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_yaml(config, run_dir / "config.yaml")
    trainer.log(f"run folder: {run_dir}")
    trainer.run()
    return run_dir


def _check_new(run_dir: Path) -> None:
    if (run_dir / "metrics.jsonl").exists():
        raise ValueError(f"run folder {run_dir} already holds a run; continue it with "
                         f"`pods train --resume {run_dir}` or pick another --run-name.")


def train_or_resume(config: TrainConfig, log=print) -> Path:
    """``train``, or continue the run folder it would write if one was left unfinished
    (used by ``pods compare`` so that an interrupted comparison picks up where it stopped).
    A folder holding no checkpoint yet is set aside, never deleted, and the run restarts."""
    run_dir = Path(config.out_dir) / (config.run_name or "")
    if config.run_name and (run_dir / "metrics.jsonl").exists():
        if latest_checkpoint(run_dir) is not None:
            return resume(run_dir, log=log)
        aside = run_dir.with_name(f"{run_dir.name}.incomplete-{datetime.now():%Y%m%d-%H%M%S}")
        run_dir.rename(aside)
        log(f"{run_dir} had no checkpoint; moved it to {aside} and starting over")
    return train(config, log=log)


def resume(run_dir: str | Path, overrides: dict | None = None, log=print) -> Path:
    """Continue a run from its newest checkpoint: same clock, optimizer and RNG streams.
    ``overrides`` may change fields such as max_time or max_steps (a larger budget)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ValueError(f"{run_dir} is not a run folder (no config.yaml).")
    checkpoints = complete_checkpoints(run_dir)
    if not checkpoints:
        raise ValueError(f"{run_dir} has no complete checkpoint to resume from; "
                         f"start a new run instead.")
    config = from_dict({**load_yaml(run_dir / "config.yaml"), **(overrides or {})})
    trainer = Trainer(config, run_dir, log=log)
    checkpoint = trainer.restore_newest(checkpoints)
    if trainer.dist.is_main:  # only once the run can go on, as in train()
        save_yaml(config, run_dir / "config.yaml")
        trainer.records = truncate_metrics(run_dir / "metrics.jsonl", trainer.records,
                                           trainer.step_count)
    trainer.records = trainer.dist.broadcast_object(trainer.records)  # records kept
    trainer.log(f"resuming {run_dir} from {checkpoint.name} (step {trainer.step_count}, "
        f"{trainer.clock.seconds:.1f} training seconds)")
    trainer.run()
    return run_dir
