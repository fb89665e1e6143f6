"""Recipes: the values a config takes for the keys it leaves unset, by the kind of model.

Two recipes, chosen by ``recipe: auto`` from the model (or named by ``recipe``):

    embedded        the embedded model ('tiny') on its arithmetic task: the field defaults,
                    so ``TrainConfig()`` and a bare ``pods train`` are the embedded run
                    (8 new tokens, lr 6e-4, P=8, an evaluation every 5 s on 500 problems)
    language_model  every other model (hub id, local folder, .gguf file, smollm2): the
                    values below, chosen from the task where it matters (completion
                    length) and conservative where it does not (the learning rate); the
                    rest are the paper's (arXiv 2504.13818, single-GPU runs)

A key that a YAML file, a flag or ``from_dict`` sets always wins over the recipe; a saved
config (a run folder's config.yaml) holds every key, so a recipe never changes how a run
resumes. Each field keeps one default (the embedded one) and this table the language-model
value of the keys the recipes set; ``pods train --help`` and the configuration reference
show both. This module imports nothing of pods.
"""

from __future__ import annotations

from typing import Any

EMBEDDED_MODEL = "tiny"  # pods.models.tiny: the one model the embedded recipe is for

# new tokens a completion may take, by task: room for a worked solution (the paper: 512),
# a program (1024), a short word-problem answer (200) or a sum (32)
COMPLETION_TOKENS = {"gsm8k": 512, "math": 512, "amc23": 512, "chemistry": 512, "custom": 512,
                     "code": 1024, "mbpp": 1024, "humaneval": 1024, "wordproblems": 200,
                     "arithmetic": 32}
OTHER_TASK_TOKENS = 512  # a task registered by the user
FULL_LR = 1e-6  # a full fine-tune (lora_rank 0): TRL's GRPO default, safe for a 3B model
LORA_LR = 5e-6  # LoRA adapters (the paper's)

# the language-model values of the keys that do not depend on the task or LoRA
LANGUAGE_MODEL: dict[str, Any] = {
    "lr_schedule": "constant",  # the paper's
    "prompts_per_step": 1,  # the paper's single-GPU runs (n 64 and m 16 stay)
    "temperature": 0.9,  # the paper's
    "adam_beta2": 0.99, "weight_decay": 0.1, "max_grad_norm": 0.1,  # the paper's
    "eval_every": 600.0,  # training seconds
    "eval_size": None,  # the whole test split (the paper)
    "checkpoint_every": 1800.0,  # training seconds
    "gradient_checkpointing": "auto",  # on where a real model's activations at 512+
    # tokens would crowd the update out of memory (pods.train.passes)
}
KEYS = ("max_new_tokens", "lr", *LANGUAGE_MODEL)  # every key a recipe sets


def chosen(recipe: str, model: str) -> str:
    """The recipe a config with ``recipe`` and ``model`` takes: ``auto`` is embedded for
    the embedded model and language_model for every other."""
    if recipe != "auto":
        return recipe
    return "embedded" if model == EMBEDDED_MODEL else "language_model"


def language_model(task: str, lora_rank: int) -> dict[str, Any]:
    """The language-model recipe's values for ``task``, full fine-tune or LoRA."""
    return {"max_new_tokens": COMPLETION_TOKENS.get(task, OTHER_TASK_TOKENS),
            "lr": LORA_LR if lora_rank > 0 else FULL_LR, **LANGUAGE_MODEL}


def recipe_values(recipe: str, model: str, task: str, lora_rank: Any) -> dict[str, Any]:
    """The values the recipe gives the keys a config leaves unset; {} for the embedded
    recipe (its values are the field defaults) and for a value the config checks refuse."""
    if chosen(recipe, model) != "language_model" or not isinstance(task, str):
        return {}
    lora = isinstance(lora_rank, int) and not isinstance(lora_rank, bool) and lora_rank > 0
    return language_model(task, int(lora))


def language_model_value(key: str) -> str:
    """How the language-model recipe sets ``key``, for --help and the reference."""
    if key == "max_new_tokens":
        by_length: dict[int, list[str]] = {}
        for task, tokens in COMPLETION_TOKENS.items():
            by_length.setdefault(tokens, []).append(task)
        return "by task: " + ", ".join(f"{' '.join(tasks)} {tokens}"
                                       for tokens, tasks in by_length.items()) + \
            f", other tasks {OTHER_TASK_TOKENS}"
    if key == "lr":
        return f"{FULL_LR:g} (full fine-tune), {LORA_LR:g} (LoRA)"
    return repr(LANGUAGE_MODEL[key])


def describe(config: Any) -> str:
    """One line of the settings a run takes from its recipe (and the user's keys), printed
    when `pods train` starts."""
    r, s, e = config.rollout, config.selection, config.eval
    name = {"embedded": "embedded model", "language_model": "language model"}[
        chosen(config.run.recipe, config.model.name)]
    kind = "LoRA" if config.model.lora_rank > 0 else "full"
    where = "the whole test split" if e.size is None else f"{e.size} test problems"
    return (f"recipe: {name} on {config.task.name}: max_new_tokens {r.max_new_tokens}, "
            f"lr {config.optim.lr:g} ({kind}, {config.optim.lr_schedule}), "
            f"P={r.prompts_per_step} n={r.n} m={s.m}, temperature {r.temperature:g}, "
            f"eval every {e.every:g} s on {where}")
