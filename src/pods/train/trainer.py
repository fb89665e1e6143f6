"""The GRPO-PODS training step, and the trainer that holds what it needs.

One step: sample P prompts -> generate n rollouts each -> score -> select (keep m per group
and advantages over the kept m, one call to ``pods.core.selection.select``) -> cut this
rank's kept rows (``pods.train.selection.rank_batch``) -> update on the P*m kept rollouts
only. Selection happens before any training-side forward pass, so update costs scale with m.

The training clock counts generation, scoring, selection and update; evaluation and
checkpointing are excluded (as in the paper), so curves over "training time" compare methods
fairly however often they are evaluated. The run around the steps (evaluation schedule,
checkpoints, stopping on a failure): ``pods.train.loop``; start and resume: ``pods.train.run``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pods.config import TrainConfig
from pods.core.rollout_inputs import completion_lengths, rule_inputs
from pods.core.selection import select
from pods.evaluation import Sampling, eval_slice, evaluate
from pods.models.kernels import update_kernels
from pods.models.policy import load_policy, load_reference
from pods.models.precision import autocast, plan
from pods.models.source import check_source
from pods.rollout import EngineSpec, make_engine, resolve_engine, sample_keys
from pods.rollout.prompts import fitting_splits, render_prompts
from pods.runtime import fsdp
from pods.runtime.distributed import Dist, launched_world_size
from pods.runtime.speed import keep_freed_memory
from pods.tasks import get_task
from pods.tasks.scoring import Scorer
from pods.tracking import check_installed
from pods.train.checkpoint import (
    load_weights,
    read_state,
    restore_rng_states,
    rng_states,
    write_model,
    write_state,
)
from pods.train.checks import check
from pods.train.compute import Compute, with_compute
from pods.train.layout_check import check_once
from pods.train.optimizer import run_optimizer
from pods.train.progress import Clock, over_ranks, silent
from pods.train.sampling import INPUT, Round, assemble, enough, varied
from pods.train.schedule import budget_progress, lr_multiplier
from pods.train.selection import Sampled, rank_batch, selection_spec
from pods.train.start import check_world, data_notes, start_notes
from pods.train.update import UpdateSpec, policy_update


class Trainer:
    """One run's model, optimizer, engine, data and random streams on this process; under
    torchrun / accelerate launch, this rank's part of them (see pods.runtime.distributed).
    ``step()`` advances the run by one optimizer step (``num_iterations`` with reuse)."""

    def __init__(self, config: TrainConfig, log=print):
        check(config)  # the rule, task, engine and trackers name what their registries hold
        check_world(config.rollout.prompts_per_step, launched_world_size())
        self.dist = Dist(config.run.device, timeout_s=config.run.dist_timeout,
                         parallelism=config.run.parallelism)
        self.cfg = config
        self.log = log if self.dist.is_main else silent
        self.device = self.dist.device
        # storage and compute here ("gpu", "auto" resolved; cfg keeps them for a resume)
        self.precision = plan(config.model, self.device, self.dist.sharded)
        for line in start_notes(config, self.device, self.precision):
            self.log(line)  # the recipe's settings, the device auto chose, the precision
        kernels = update_kernels(config.model.update_kernels, self.device, self.dist.sharded)
        torch.manual_seed(config.run.seed)
        keep_freed_memory()  # freed activations reused by the next update (pods.runtime.speed)
        resolve_engine(config.rollout, self.device, self.dist.sharded)  # fail early
        check_installed(config.tracking.report_to)
        check_source(config.model.name, config.model.gguf_file)  # a missing path, say
        with self.dist.main_first():  # rank 0 fills download and warm-up caches first
            self.task = get_task(config.task.name, config.task, config.run.seed)
            self.model, self.tokenizer = load_policy(config.model.name, self.device,
                                                     config.model, log=self.log)
        self.model.train()
        self.ref_model = self._reference_model()
        self.wrapped, self.optimizer = self.dist.prepare(self.model, self._optimizer(),
                                                         self.precision.shards)
        # wrapped: the model as accelerate wraps it (DDP, FSDP) for the training passes;
        # self.model stays the plain module for generation, evaluation and saving.
        self.model = self.dist.unwrap(self.wrapped)
        self.engine = make_engine(EngineSpec(
            config.rollout, self.device,
            max_model_len=config.task.max_prompt_tokens + config.rollout.max_new_tokens,
            seed=config.run.seed, world=self.dist.world, sharded=self.dist.sharded,
            dtype=self.precision.sampling), self.model, self.tokenizer)
        limit = config.task.max_prompt_tokens
        self.train_set, test, self.dropped = fitting_splits(self.tokenizer, self.task, limit)
        self.test_set = eval_slice(test, config.eval.offset, config.eval.size)
        for line in data_notes(config, self.dropped, self.device,
                               (self.tokenizer, self.task, self.train_set)):
            self.log(line)  # the prompts dropped, the update's micro-batch
        self.scorer = Scorer(self.task, config.task.reward_errors, warn=self.log,
                             truncated_reward=config.task.truncated_reward)
        self.prompt_rng = np.random.default_rng(config.run.seed)
        self.select_gen = torch.Generator().manual_seed(config.run.seed)
        self.clock, self.step_count = Clock(), 0
        self.before_step, self.updating = None, False  # a step under way (failures)
        self.update_spec = with_compute(
            UpdateSpec(config.optim, config.loss, config.rollout.temperature,
                       config.rollout.max_new_tokens, layout=config.optim.update_layout,
                       auto_checkpointing=config.model.gradient_checkpointing == "auto"),
            self.model, self.ref_model, Compute(
                self.precision.cast == "step", kernels, config.model.update_kernels == "liger",
                config.selection.m, config.kept_per_step // self.dist.world,
                config.task.max_prompt_tokens + config.rollout.max_new_tokens),
            log=self.log, dist=self.dist)
        self.layout_checked = False  # the layout is checked against padded once, at first

    def _reference_model(self):
        """The KL reference: a frozen copy of the start in the policy's compute precision
        (sharded like it under FSDP2), or None (no KL, or LoRA, whose reference is the base
        model with the adapter disabled)."""
        cfg = self.cfg
        if cfg.loss.beta == 0 or cfg.model.lora_rank > 0:
            return None
        ref = load_reference(cfg.model.name, self.device, cfg.model, self.precision.reference)
        if self.dist.sharded:
            fsdp.shard_frozen(ref, self.device, self.dist.world, self.precision.shards)
        return ref

    def _optimizer(self) -> torch.optim.Optimizer:
        """AdamW over the trainable weights (pods.train.optimizer.run_optimizer)."""
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        return run_optimizer(trainable, self.cfg.optim, self.dist.sharded, self.log)

    # ---- one step: sample (generate, score, select), then update on what was kept -------
    def step(self) -> dict[str, float]:
        """One step; its metrics record."""
        return self.update(self.sample())

    def sample(self) -> Sampled:
        """Draw P prompts, generate n rollouts each and score them (with dynamic sampling,
        more rounds until the groups carry signal: pods.train.sampling), then keep m per
        group. Nothing is trained yet: a failure or Ctrl-C here is undone by ``rewind``.
        Under data parallelism this rank generates for its P/W prompts, and selection and
        advantages run on the gathered [P, n] rewards, as on one process."""
        s = self.cfg.selection
        self.clock.phases = {}
        # what a failure before the update rewinds to (rewind)
        self.before_step = self.clock.seconds, rng_states(self.prompt_rng, self.select_gen)
        rounds = [self._round(0)]
        while s.dynamic_sampling and len(rounds) < s.max_sampling_rounds and \
                not enough(varied(rounds, self.dist.world)):
            rounds.append(self._round(len(rounds)))
        with self.clock.phase("select"):
            pool = assemble(rounds, self.dist.rank, self.dist.world)
            g = pool.gathered  # [P, n] each, the same on every rank
            inputs = {k.removeprefix(INPUT): v for k, v in g.items() if k.startswith(INPUT)}
            chosen = select(g["rewards"], inputs, selection_spec(s), self.select_gen,
                            g["lengths"])  # keep, advantages [P, n], metrics
            kept = rank_batch(pool.rollouts, chosen, self.dist.rank, self.dist.world,
                              self.device)  # this rank's kept rows [K]
        signal = bool(chosen.advantages.any()) or (kept.kept > 0 and self.cfg.loss.beta > 0)
        metrics = {**pool.metrics, **chosen.metrics, **kept.metrics,
                   **getattr(self.engine, "metrics", {})}  # hf/decode_fallbacks
        return Sampled(kept, metrics, pool.lengths, pool.scores, signal)

    def _round(self, index: int) -> Round:
        """Round ``index`` of the step: P prompts drawn, this rank's generated and scored,
        the rewards, lengths and the rule's inputs gathered over the ranks."""
        r, P = self.cfg.rollout, self.cfg.rollout.prompts_per_step
        problems = [self.train_set[i] for i in
                    self.prompt_rng.choice(len(self.train_set), size=P, replace=False)]
        mine = self.dist.shard(P)  # this rank's prompts: P_r = P / W of them
        with self.clock.phase("generate"):
            texts, special = render_prompts(self.tokenizer, self.task, problems[mine])
            ids = index * P + torch.arange(P)[mine]  # round 0: the prompts' own indices
            keys = sample_keys(self.cfg.run.seed, self.step_count, ids)
            rollouts = self.engine.generate(texts, r.n, r.temperature, r.max_new_tokens,
                                            keys, special)  # P_r * n rows
        with self.clock.phase("reward"):
            scores = self.scorer.rewards(rollouts.texts, problems[mine], r.n,
                                         rollouts.finished)  # rewards [P_r, n]
        with self.clock.phase("select"):
            lengths = completion_lengths(rollouts.completion_mask).view(-1, r.n).float().cpu()
            local = {"rewards": scores.rewards, "lengths": lengths,
                     **{INPUT + name: value.view(-1, r.n).cpu() for name, value in
                        rule_inputs(self.cfg.selection.rule, **rollouts.sources()).items()}}
            gathered = {k: self.dist.gather(v) for k, v in local.items()}  # [P, n] each
        return Round(rollouts, scores, lengths, gathered)

    def update(self, sampled: Sampled) -> dict[str, float]:
        """Train on what ``sample`` kept (one optimizer step, ``num_iterations`` with reuse),
        hand the new weights to the engine, and return the step's metrics record. A failure
        from here on leaves the weights half-updated (``rewind`` says so)."""
        self.updating = True
        losses, lr = {}, self._set_lr()
        if sampled.signal:  # else every kept advantage is 0: no update (optim/skipped 1)
            check_once(self, sampled.kept.rows)  # the layout gives padded's log-probs, else
            # padded (once, untimed: pods.train.layout_check)
            with self.clock.phase("update"), self.engine.asleep(), \
                    autocast(self.device, self.precision.update):
                losses = policy_update(self.wrapped, self.ref_model, self.optimizer,
                                       sampled.kept, self.update_spec, self.dist)
            with self.clock.phase("sync"):  # the engine samples from the new weights
                self.engine.sync_weights(self.model)
        step_start = self.before_step[0]
        self.step_count += 1
        self.updating, self.before_step = False, None
        slowest, counts = over_ranks(self.dist, self.clock, self.device,
                                     sampled.lengths, sampled.scores)
        self.clock.seconds = slowest["time"]  # every rank keeps the slowest rank's clock
        return {"kind": "step", "step": self.step_count, **slowest, **counts,
                **sampled.metrics, "optim/lr": lr, "optim/skipped": int(not sampled.signal),
                **losses,
                "time/step": self.clock.seconds - step_start}

    def rewind(self) -> bool:
        """Undo the step under way, if any, so that the trainer's state is that of its last
        completed step (what a checkpoint may hold): its clock time and its draws of prompts
        and selections, so that a resume redoes it the same. False when that cannot be: a
        failure inside the update left the weights half-updated."""
        if self.updating:
            return False
        if self.before_step is not None:
            self.clock.seconds, states = self.before_step
            restore_rng_states(states, self.prompt_rng, self.select_gen)
            self.before_step = None
        return True

    # ---- evaluation and checkpoints: what the run schedules ----------------------------
    @property
    def seconds(self) -> float:
        """Training seconds so far (generation, scoring, selection and update only)."""
        return self.clock.seconds

    def evaluate(self) -> dict[str, float]:
        """Test-set metrics of the current weights; every rank evaluates its share."""
        e, r = self.cfg.eval, self.cfg.rollout
        sampling = Sampling(e.temperature, r.max_new_tokens, seed=self.cfg.run.seed,
                            repeats=e.repeats)
        return {**evaluate(self.engine, self.task, self.test_set, sampling, dist=self.dist,
                           scorer=self.scorer), **self.dropped}

    def save(self, folder: Path, extra: dict) -> None:
        """This trainer's checkpoint into the (staging) ``folder``: weights, optimizer, step
        count, clock and random streams, with ``extra`` (the run's schedule) in state.pt.
        Every rank calls it: under FSDP2 the full weights are gathered and every rank adds
        its shards; rank 0 writes the model and state.pt."""
        state = {**self.state_dict(), **extra}  # a collective (every rank's torch stream)
        weights = self.dist.full_state_dict(self.wrapped)  # None unless sharded
        self.dist.save_shards(folder / fsdp.SHARDS)
        if self.dist.is_main:
            write_model(folder, self.model, self.tokenizer, weights)
            write_state(folder, state)

    def load(self, checkpoint: Path) -> dict:
        """Restore the trainer from ``checkpoint`` (written by ``save``); returns its
        state.pt, where the run finds what it added."""
        state = read_state(checkpoint)
        self.load_state_dict(state, checkpoint)
        return state

    # ---- the trainer's state, for checkpoints and stopping (pods.train.loop) ------------
    def state_dict(self) -> dict:
        """What a checkpoint holds of the trainer besides the weights: optimizer (None
        under FSDP2: the ranks' shards hold it), step count, clock and random streams."""
        return {"optimizer": None if self.dist.sharded else self.optimizer.state_dict(),
                "step": self.step_count, "clock": self.clock.seconds,
                "rng": rng_states(self.prompt_rng, self.select_gen),
                "torch_rng_per_rank": self.dist.gather_objects(torch.get_rng_state())}

    def load_state_dict(self, state: dict, checkpoint: Path) -> None:
        """Weights from ``checkpoint`` and the rest from its ``state`` (``state_dict``)."""
        if self.dist.sharded:  # weights and optimizer from the ranks' shards
            self.dist.load_shards(fsdp.shards_dir(checkpoint))
        else:
            load_weights(self.model, checkpoint, self.cfg.model, self.device)
            if state["optimizer"] is None:
                raise ValueError(f"{checkpoint} was written under FSDP2; resume it with as "
                                 f"many processes as it ran on (its shards in {fsdp.SHARDS}/).")
            self.optimizer.load_state_dict(state["optimizer"])
        self.step_count, self.clock.seconds = state["step"], state["clock"]
        self.engine.sync_weights(self.model)  # the engine generates from the restored weights
        restore_rng_states(state["rng"], self.prompt_rng, self.select_gen)
        per_rank = state.get("torch_rng_per_rank", [])
        if len(per_rank) == self.dist.world:  # dropout streams; others only matter for it
            torch.set_rng_state(per_rank[self.dist.rank])

    def _set_lr(self) -> float:
        """The schedule's lr for the step under way (counted as done), recomputed from the
        step count and clock, so a resumed run needs no scheduler state."""
        o, budget = self.cfg.optim, self.cfg.run
        progress = budget_progress(self.step_count + 1, self.clock.seconds, budget.max_steps,
                                   budget.max_time)
        lr = o.lr * lr_multiplier(progress, o.lr_schedule, o.warmup_frac, o.lr_floor)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr
