"""Run folders written before the configuration was grouped still load and resume.

``tests/fixtures/runs/v0_flat_config`` was written by pods at commit 1e063d7 (the flat
61-field TrainConfig, modules flat in ``pods/``): 2 steps of a 1-layer tiny model on the
arithmetic task, one checkpoint. Its ``config.yaml`` names the model folder it was trained
from (a temporary path); the test resumes it on the same architecture (``tiny_model_dir``),
whose weights the checkpoint replaces."""

import shutil
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from pods.config import LEAVES, from_dict, load_run_config, load_yaml
from pods.config.files import EARLIER_BEHAVIOUR
from pods.runs.checkpoints import checkpoints_and_config
from pods.runs.metrics import read_metrics
from pods.train.resumes import checkpoint_config, resume_config
from pods.train.run import resume
from pods.train.selection import selection_spec
from runs import varied_rewards

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
OLD = RUNS / "v0_flat_config"


def test_an_old_flat_config_file_reads_into_the_groups():
    config = from_dict(load_run_config(OLD / "config.yaml"))  # as resume and eval read it
    assert (config.rollout.n, config.selection.m, config.rollout.prompts_per_step) == (4, 2, 2)
    assert config.optim.lr == 3e-4 and config.task.code.test_timeout == 2.0
    assert config.task.math.format == 0.1 and config.run.run_name == "v0_flat_config"
    old = yaml.safe_load((OLD / "config.yaml").read_text())
    assert {k: v for k, v in config.to_dict().items() if k in old} == old  # same values
    added = set(config.to_dict()) - set(old)  # the keys added since take their defaults
    assert {"parallelism", "gguf_file", "word_levels"} <= added  # (never a recipe's value)
    assert {k: v for k, v in config.to_dict().items() if k in added} == \
        {k: EARLIER_BEHAVIOUR.get(k, LEAVES[k].default) for k in added}
    # it updated under autocast with torch's kernels, decoded a static cache with generate
    # and padded its update: a resume goes on so, not on the paths added since
    assert (config.model.weight_cast, config.model.update_kernels,
            config.rollout.hf_decode) == ("matmul", "torch", "generate")
    assert config.optim.update_layout == "padded"  # and padded its update's passes


def test_an_old_run_folder_resumes(tiny_model_dir, tmp_path, monkeypatch):
    varied_rewards(monkeypatch)  # step 3 has signal, so its update steps the old optimizer
    run = tmp_path / "v0_flat_config"
    shutil.copytree(OLD, run)
    before = load_file(run / "checkpoints" / "step_000002" / "model" / "model.safetensors")
    resume(run, {"model": tiny_model_dir, "max_steps": 3, "device": "cpu"},
           log=lambda *_: None)
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["step"] for r in steps] == [1, 2, 3]  # the old records kept, one step added
    after = load_file(run / "checkpoints" / "step_000003" / "model" / "model.safetensors")
    assert before.keys() == after.keys()
    old, new = (torch.load(run / "checkpoints" / name / "state.pt", weights_only=False)
                for name in ("step_000002", "step_000003"))
    assert (old["step"], new["step"]) == (2, 3) and new["clock"] >= old["clock"]
    adam = [s["step"].item() for s in new["optimizer"]["state"].values()]
    assert adam and set(adam) == {3.0}  # the old optimizer state went on, not a fresh one
    saved = load_yaml(run / "config.yaml")  # rewritten in today's format, flat
    assert saved["max_steps"] == 3 and saved["n"] == 4
    assert saved["lr_schedule"] == "constant"  # it trained with a constant lr, and goes on
    assert {r["optim/lr"] for r in steps[2:]} == {3e-4}


def test_adv_scale_saved_with_the_loss_reads_into_the_selection(tmp_path):
    """``fixtures/runs/v1_loss_adv_scale/config.yaml`` was written by pods at commit e88fb5a,
    when adv_scale was a field of the loss group (``adv_scale: none`` among the loss's
    keys; run folders have always held flat keys). The key is unchanged, so the value lands
    in the selection group, where evaluation and resume read it."""
    run = tmp_path / "run"
    shutil.copytree(OLD, run)  # a run folder with a checkpoint ...
    shutil.copy(RUNS / "v1_loss_adv_scale" / "config.yaml", run / "config.yaml")  # ... this one's
    checkpoints, config = checkpoints_and_config(run)  # what `pods eval RUN` reads
    assert config.selection.adv_scale == "none" and not hasattr(config.loss, "adv_scale")
    resumed, changed = resume_config(run, checkpoint_config(checkpoints[0]), {"max_steps": 3})
    assert resumed.selection.adv_scale == "none" and changed == {"max_steps": (2, 3)}
    assert selection_spec(resumed.selection).adv_scale == "none"  # what the steps use
