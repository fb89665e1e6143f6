"""The recipes (pods.config.recipes): the embedded model keeps the field defaults, every
other model gets language-model values, and a key the user sets always wins."""

import argparse

import pytest

from pods.config import TrainConfig, add_config_flags, config_from_args, from_dict, save_yaml
from pods.config.files import load_run_config
from pods.config.recipes import COMPLETION_TOKENS, KEYS, describe
from pods.tasks import TASKS

HUB = "Qwen/Qwen2.5-3B-Instruct"
EMBEDDED = {key: TrainConfig().to_dict()[key] for key in KEYS}  # the toy's settings


def _real(task: str, lora_rank: int, model: str = HUB, **keys) -> TrainConfig:
    extra = {"data_file": "problems.jsonl"} if task == "custom" else {}
    return from_dict({"model": model, "task": task, "lora_rank": lora_rank, **extra, **keys})


@pytest.mark.parametrize("lora_rank", [0, 64])
@pytest.mark.parametrize("task", sorted(set(TASKS) - {"even_start"}))  # (a test's own task)
def test_no_toy_setting_reaches_a_hub_model(task, lora_rank):
    values = _real(task, lora_rank).to_dict()
    toy = {key: values[key] for key in KEYS if values[key] == EMBEDDED[key]}
    assert toy == {}, f"{task} (lora_rank {lora_rank}) kept the embedded model's {toy}"
    assert values["max_new_tokens"] == COMPLETION_TOKENS[task]  # every task has its length
    assert values["lr"] == (5e-6 if lora_rank else 1e-6)
    assert (values["prompts_per_step"], values["n"], values["m"]) == (1, 64, 16)
    assert (values["temperature"], values["lr_schedule"]) == (0.9, "constant")
    assert (values["adam_beta2"], values["weight_decay"], values["max_grad_norm"]) == \
        (0.99, 0.1, 0.1)
    assert (values["eval_every"], values["eval_size"], values["checkpoint_every"]) == \
        (600.0, None, 1800.0)
    assert values["gradient_checkpointing"] == "auto"  # chosen from free memory


def test_every_model_but_the_embedded_one_is_a_language_model(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    for model in (HUB, str(folder), str(tmp_path / "m.gguf"), "smollm2"):
        assert from_dict({"model": model, "task": "gsm8k"}).rollout.max_new_tokens == 512
    assert from_dict({"model": "smollm2", "task": "mbpp"}).rollout.max_new_tokens == 1024
    assert from_dict({"model": HUB, "task": "my_task"}).rollout.max_new_tokens == 512


def test_the_embedded_model_runs_as_before():
    """`pods train` with no arguments, and TrainConfig() built directly: the field
    defaults (the run the baseline's step records were made with)."""
    assert from_dict({}) == from_dict({"model": "tiny"}) == TrainConfig()
    assert {key: from_dict({}).to_dict()[key] for key in KEYS} == {
        "max_new_tokens": 8, "lr": 6e-4, "lr_schedule": "cosine", "prompts_per_step": 8,
        "temperature": 1.0, "adam_beta2": 0.999, "weight_decay": 0.0, "max_grad_norm": 1.0,
        "eval_every": 5.0, "eval_size": 500, "checkpoint_every": 60.0,
        "gradient_checkpointing": False}


def test_keys_the_user_sets_win_in_python_yaml_and_flags(tmp_path):
    mine = {"lr": 3e-5, "max_new_tokens": 64, "prompts_per_step": 4, "eval_size": 10,
            "temperature": 0.5, "gradient_checkpointing": False}
    assert {k: _real("gsm8k", 64, **mine).to_dict()[k] for k in mine} == mine
    config = tmp_path / "my.yaml"
    config.write_text(f"model: {HUB}\ntask: math\nlr: 3.0e-5\nmax_new_tokens: 64\n")
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_config_flags(parser)
    cfg = config_from_args(parser.parse_args(["--config", str(config), "--eval-size", "7"]))
    assert (cfg.optim.lr, cfg.rollout.max_new_tokens, cfg.eval.size) == (3e-5, 64, 7)
    assert cfg.rollout.prompts_per_step == 1  # the rest from the recipe
    # flags alone, as `pods train --model ... --task ...`
    cfg = config_from_args(parser.parse_args(["--model", HUB, "--task", "code"]))
    assert (cfg.rollout.max_new_tokens, cfg.optim.lr) == (1024, 1e-6)


def test_the_recipe_can_be_named():
    assert from_dict({"model": HUB, "task": "gsm8k", "recipe": "embedded"}).rollout \
        .max_new_tokens == 8
    named = from_dict({"recipe": "language_model"})  # the embedded model, a language model's
    assert (named.rollout.max_new_tokens, named.optim.lr) == (32, 1e-6)
    with pytest.raises(ValueError, match="unknown recipe 'toy'; use one of auto, embedded, "
                                         "language_model"):
        from_dict({"model": HUB, "recipe": "toy"})


def test_a_saved_config_never_takes_a_recipe(tmp_path):
    """A run folder's config.yaml holds every resolved value; one written before a key
    existed takes that key's default (how the run trained), not the recipe's value."""
    path = tmp_path / "config.yaml"
    save_yaml(_real("gsm8k", 0, lr=2e-6), path)
    assert from_dict(load_run_config(path)) == _real("gsm8k", 0, lr=2e-6)
    path.write_text(f"model: {HUB}\ntask: gsm8k\nlr: 2.0e-6\n")  # an older pods's file
    old = from_dict(load_run_config(path))
    assert (old.rollout.max_new_tokens, old.rollout.prompts_per_step) == (8, 8)
    assert old.optim.lr_schedule == "constant"  # before schedules existed


def test_the_printed_line_names_the_recipe_and_its_settings():
    assert describe(_real("gsm8k", 0)) == (
        "recipe: language model on gsm8k: max_new_tokens 512, lr 1e-06 (full, constant), "
        "P=1 n=64 m=16, temperature 0.9, eval every 600 s on the whole test split")
    assert describe(from_dict({})).startswith(
        "recipe: embedded model on arithmetic: max_new_tokens 8, lr 0.0006 (full, cosine), "
        "P=8 n=64 m=16")
    assert "lr 5e-06 (LoRA, constant)" in describe(_real("math", 16))


def test_pods_eval_of_a_model_takes_its_recipe():
    from pods.cli.evaluate import EvalRequest, _config

    _, cfg = _config(EvalRequest(HUB, ("math", "amc23")))
    assert cfg.rollout.max_new_tokens == 512
    _, cfg = _config(EvalRequest(HUB, ("humaneval",), fields={"max_new_tokens": 300}))
    assert cfg.rollout.max_new_tokens == 300


def test_help_and_reference_show_both_values():
    from pods.config import describe_fields

    rows = {row["key"]: row for row in describe_fields()}
    assert rows["lr"]["default"] == 6e-4
    assert rows["lr"]["language_model"] == "1e-06 (full fine-tune), 5e-06 (LoRA)"
    assert "gsm8k math amc23 chemistry custom 512" in rows["max_new_tokens"]["language_model"]
    assert rows["n"]["language_model"] is None  # the recipe keeps n's default
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    text = parser.format_help()
    assert "default: 0.0006 for the embedded model; language models: 1e-06" in \
        " ".join(text.split())
