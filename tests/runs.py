"""Small training runs for the tests: a config on the toy task and a saved model's weights."""

import torch
from transformers import AutoModelForCausalLM

from pods.config import TrainConfig, from_dict


def config(model_dir, tmp_path, **overrides) -> TrainConfig:
    # recipe embedded: the small test models train as the embedded one does (not as a
    # language model: 512 tokens, P=1, ...)
    base = dict(model=model_dir, task="even_start", prompts_per_step=3, n=6, m=2, max_new_tokens=4,
                max_steps=2, max_time=None, eval_every=1e9, eval_size=12,
                checkpoint_every=1e9, out_dir=str(tmp_path), run_name="run", progress=False,
                lr=1e-2, lr_schedule="constant",  # budgets vary between a test's runs
                recipe="embedded")
    return from_dict({**base, **overrides})


def weights(path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def task_config(**flat):
    """The task group of a config given flat keys (``data_dir=...``, ``correctness_weight=...``)."""
    return from_dict(flat).task


def flat(config):
    """A config's flat keys as attributes (``flat(c).n``), for asserting many at once."""
    from types import SimpleNamespace

    return SimpleNamespace(**config.to_dict())


def train_interrupted(config, after: int) -> None:
    """``train(config)`` with Ctrl-C pressed once ``after`` steps are done: the run writes
    its checkpoint and the interrupt reaches the caller (asserted here)."""
    import pytest

    from pods.train.run import train
    from pods.train.trainer import Trainer

    real_sample = Trainer.sample

    def sample_then_interrupt(self):
        if self.step_count == after:
            raise KeyboardInterrupt
        return real_sample(self)

    with pytest.MonkeyPatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(Trainer, "sample", sample_then_interrupt)
        train(config)


def varied_rewards(monkeypatch) -> None:
    """Every group's rewards 0, 1, 0, 1, ...: each step has signal and so updates (a step
    whose kept rewards are all equal skips its update, and with it the weight sync and the
    log-prob gap). For tests of the update's path on a real model, whose rewards at tiny
    budgets are all 0."""
    from pods.tasks.scoring import Scorer, Scores

    def rewards(self, texts, problems, n, finished=None):
        return Scores((torch.arange(n) % 2).float().expand(len(problems), n).clone(), 0, 0)

    monkeypatch.setattr(Scorer, "rewards", rewards)
