"""The GRPO-PODS training loop.

One step: sample P prompts -> generate n rollouts each -> score -> keep m per group with
``pods.downsample`` -> advantages over the kept m -> update on the P*m kept rollouts only.
Selection happens before any training-side forward pass, so update costs scale with m.

The training clock counts generation, scoring, selection and update; evaluation and
checkpointing are excluded (as in the paper), so curves over "training time" compare methods
fairly however often they are evaluated.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import numpy as np
import torch

from pods.advantages import group_advantages
from pods.checkpoint import latest_checkpoint, restore_rng_states, rng_states, save_checkpoint
from pods.config import TrainConfig, from_dict, load_yaml, save_yaml
from pods.downsample import downsample
from pods.evaluation import evaluate
from pods.grading import grading_stats
from pods.metrics import MetricsWriter, truncate_metrics
from pods.policy import load_policy, load_saved_policy, resolve_device
from pods.prompts import drop_long_prompts, render_prompts
from pods.rollout import generate
from pods.tasks import get_task
from pods.update import peak_memory_mb, policy_update


class Clock:
    """Training seconds, with the time of each phase of the current step."""

    def __init__(self, seconds: float = 0.0):
        self.seconds = seconds
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            self.phases[f"time/{name}"] = self.phases.get(f"time/{name}", 0.0) + spent
            self.seconds += spent


class Trainer:
    def __init__(self, config: TrainConfig, run_dir: Path, log=print):
        self.cfg, self.run_dir, self.log = config, run_dir, log
        self.task = get_task(config.task, config.task_options())
        self.device = resolve_device(config.device)
        torch.manual_seed(config.seed)
        options = config.model_options()
        self.model, self.tokenizer = load_policy(config.model, self.task, self.device, options,
                                                 log=log)
        self.model.train()
        self.ref_model = None  # with LoRA the reference is the base model, adapter disabled
        if config.beta > 0 and config.lora_rank == 0:  # else a frozen copy of the start
            self.ref_model = load_policy(config.model, self.task, self.device, options,
                                         log=log)[0].eval()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=config.lr,
                                           betas=(config.adam_beta1, config.adam_beta2),
                                           weight_decay=config.weight_decay)
        self.train_set, self.test_set, self.dropped = self._datasets()
        self.prompt_rng = np.random.default_rng(config.seed)
        self.select_gen = torch.Generator().manual_seed(config.seed)
        self.clock, self.step_count = Clock(), 0
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
        cfg, P, n = self.cfg, self.cfg.prompts_per_step, self.cfg.n
        self.clock.phases = {}
        step_start = self.clock.seconds
        problems = [self.train_set[i] for i in
                    self.prompt_rng.choice(len(self.train_set), size=P, replace=False)]
        with self.clock.phase("generate"):
            texts, special = render_prompts(self.tokenizer, self.task, problems)
            rollouts = generate(self.model, self.tokenizer, texts, n, cfg.temperature,
                                cfg.max_new_tokens, cfg.gen_batch_size, special)
        with self.clock.phase("reward"):
            failures = grading_stats().failures  # answers math-verify could not grade
            rewards = torch.tensor([self.task.reward(text, problems[i // n])
                                    for i, text in enumerate(rollouts.texts)]).view(P, n)
            failures = grading_stats().failures - failures
        with self.clock.phase("select"):
            idx = downsample(rewards, cfg.m, cfg.rule, generator=self.select_gen)  # [P, m]
            kept = rewards.gather(1, idx)  # [P, m]
            advantages = group_advantages(kept, scale=cfg.adv_scale)  # [P, m]
            rows = (torch.arange(P).unsqueeze(1) * n + idx).flatten()  # [P*m] into P*n
            batch = rollouts.select(rows)
        with self.clock.phase("update"):
            losses = policy_update(self.model, self.ref_model, self.optimizer, batch,
                                   advantages.flatten().to(self.device), cfg)
        self.step_count += 1
        return {
            "kind": "step", "step": self.step_count, "time": self.clock.seconds,
            "rollout/reward_mean": rewards.mean().item(),
            "rollout/completion_len": rollouts.completion_mask.sum(1).float().mean().item(),
            "rollout/grading_failures": failures,
            "select/reward_mean": kept.mean().item(),
            "select/var_full": rewards.var(dim=1, correction=0).mean().item(),
            "select/var_kept": kept.var(dim=1, correction=0).mean().item(),
            "select/zero_var_frac_full": (rewards.amax(1) == rewards.amin(1)).float().mean().item(),
            "select/zero_var_frac": (kept.amax(1) == kept.amin(1)).float().mean().item(),
            **losses, **self.clock.phases, "time/step": self.clock.seconds - step_start,
            **peak_memory_mb(self.device),
        }

    # ---- the run ----------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        metrics = MetricsWriter(self.run_dir / "metrics.jsonl")
        progress = _Progress(cfg, self.clock.seconds, self.step_count)
        last: dict[str, float] = {}
        try:
            while not self.finished():
                if self.clock.seconds >= self.next_eval:
                    last.update(self.evaluate(metrics))
                record = self.step()
                metrics.write(record)
                progress.update(record, last.get("eval/accuracy"))
                if self.clock.seconds >= self.next_checkpoint:
                    self.checkpoint()
            last.update(self.evaluate(metrics))
            self.checkpoint()
            metrics.write({"kind": "done", "step": self.step_count, "time": self.clock.seconds})
        except KeyboardInterrupt:
            self.log(f"\ninterrupted at step {self.step_count}: writing a checkpoint")
            self.checkpoint()
            raise
        finally:
            progress.close()
            metrics.close()
            _plot(self.run_dir, self.log)

    def finished(self) -> bool:
        cfg = self.cfg
        return (cfg.max_steps is not None and self.step_count >= cfg.max_steps) or \
               (cfg.max_time is not None and self.clock.seconds >= cfg.max_time)

    def evaluate(self, metrics: MetricsWriter) -> dict[str, float]:
        cfg = self.cfg
        result = evaluate(self.model, self.tokenizer, self.task, self.test_set,
                          cfg.eval_temperature, cfg.max_new_tokens, cfg.gen_batch_size,
                          seed=cfg.seed, repeats=cfg.eval_repeats)
        metrics.write({"kind": "eval", "step": self.step_count, "time": self.clock.seconds,
                       **result, **self.dropped})
        while self.next_eval <= self.clock.seconds:
            self.next_eval += cfg.eval_every
        return result

    def checkpoint(self) -> Path:
        state = {"optimizer": self.optimizer.state_dict(), "step": self.step_count,
                 "clock": self.clock.seconds, "next_eval": self.next_eval,
                 "rng": rng_states(self.prompt_rng, self.select_gen)}
        path = save_checkpoint(self.run_dir, self.step_count, self.model, self.tokenizer, state)
        while self.next_checkpoint <= self.clock.seconds:
            self.next_checkpoint += self.cfg.checkpoint_every
        return path

    def restore(self, checkpoint: Path) -> None:
        saved = load_saved_policy(checkpoint / "model", self.cfg.model, self.task,
                                  self.device, self.cfg.model_options())[0]
        missing = self.model.load_state_dict(saved.state_dict(), strict=False).missing_keys
        if any(p.requires_grad for n, p in self.model.named_parameters() if n in missing):
            raise ValueError(f"{checkpoint} does not match this run's model; resume it with "
                             f"the config it was trained with.")
        state = torch.load(checkpoint / "state.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_count, self.clock.seconds = state["step"], state["clock"]
        self.next_eval = state["next_eval"]
        self.next_checkpoint = self.clock.seconds + self.cfg.checkpoint_every
        restore_rng_states(state["rng"], self.prompt_rng, self.select_gen)


def train(config: TrainConfig, log=print) -> Path:
    """Train a new run into ``out_dir/run_name`` and return the run folder."""
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    name = config.run_name or f"{stamp}-n{config.n}-m{config.m}-{config.rule}"
    run_dir = Path(config.out_dir) / name
    if (run_dir / "metrics.jsonl").exists():
        raise ValueError(f"run folder {run_dir} already holds a run; continue it with "
                         f"`pods train --resume {run_dir}` or pick another --run-name.")
    trainer = Trainer(config, run_dir, log=log)  # model and data first: a failure writes nothing
    run_dir.mkdir(parents=True, exist_ok=True)
    save_yaml(config, run_dir / "config.yaml")
    log(f"run folder: {run_dir}")
    trainer.run()
    return run_dir


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
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ValueError(f"{run_dir} has no complete checkpoint to resume from; "
                         f"start a new run instead.")
    config = from_dict({**load_yaml(run_dir / "config.yaml"), **(overrides or {})})
    trainer = Trainer(config, run_dir, log=log)
    trainer.restore(checkpoint)
    save_yaml(config, run_dir / "config.yaml")  # only once the run can go on, as in train()
    truncate_metrics(run_dir / "metrics.jsonl", trainer.step_count)
    log(f"resuming {run_dir} from {checkpoint.name} (step {trainer.step_count}, "
        f"{trainer.clock.seconds:.1f} training seconds)")
    trainer.run()
    return run_dir


class _Progress:
    """A tqdm bar over steps (with max_steps) or training seconds (with max_time only)."""

    def __init__(self, cfg: TrainConfig, seconds: float, steps: int):
        from tqdm.auto import tqdm

        self.by_steps = cfg.max_steps is not None
        total = cfg.max_steps if self.by_steps else cfg.max_time
        self.bar = tqdm(total=total, initial=steps if self.by_steps else round(seconds),
                        disable=not cfg.progress, unit="step" if self.by_steps else "s",
                        dynamic_ncols=True, mininterval=1.0)  # ~1 redraw/s, short logs

    def update(self, record: dict, accuracy: float | None) -> None:
        if self.by_steps:
            self.bar.update(1)
        else:
            self.bar.update(min(round(record["time"]), self.bar.total) - self.bar.n)
        acc = "-" if accuracy is None else f"{100 * accuracy:.1f}%"
        self.bar.set_postfix_str(f"step {record['step']} reward "
                                 f"{record['rollout/reward_mean']:.3f} test {acc} "
                                 f"train {record['time']:.0f}s")

    def close(self) -> None:
        self.bar.close()


def _plot(run_dir: Path, log) -> None:
    try:
        from pods.plots import plot_run

        plot_run(run_dir)
    except Exception as error:  # a plot must never cost the run its checkpoint
        log(f"could not draw the learning curve: {error}")
