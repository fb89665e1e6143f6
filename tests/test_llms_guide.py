"""The llms guide's commands for a hub model give the settings a user expects: each `pods
train` / `pods eval` of Qwen2.5-3B-Instruct in its first block runs here, as written, for one
step on a tiny local stand-in with a chat template (tests/conftest.py's chat_model_dir) and
the fixture data, and prints the recipe line the guide shows; its run folder's config.yaml
holds the language-model values, not the embedded model's."""

import json
import re
import shlex
from pathlib import Path

from pods.cli import main
from pods.config import load_yaml

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "llms.md"
DATA = Path(__file__).parent / "fixtures" / "data"
HUB = "Qwen/Qwen2.5-3B-Instruct"


def _guide_commands() -> tuple[list[list[str]], str]:
    """(the first block's pods commands that name the hub model, the recipe line shown)."""
    text = GUIDE.read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1).replace("\\\n", " ")
    commands = [shlex.split(line.split("#")[0])[1:] for line in block.splitlines()
                if line.startswith("pods ") and HUB in line]
    shown = re.search(r"```text\n(recipe: .*)\n```", text).group(1)
    return commands, shown


def test_the_guides_hub_commands_resolve_to_the_language_model_recipe(chat_model_dir,
                                                                       tmp_path, capsys):
    commands, shown = _guide_commands()
    assert [c[0] for c in commands] == ["train", "eval"]
    train, evaluate = ([chat_model_dir if a == HUB else a for a in c] for c in commands)
    assert main([*train, "--data-dir", str(DATA), "--max-steps", "1", "--progress", "false",
                 "--out-dir", str(tmp_path), "--run-name", "qwen"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert shown in printed  # the line the guide shows is the one the command prints
    saved = load_yaml(tmp_path / "qwen" / "config.yaml")
    assert {k: saved[k] for k in ("max_new_tokens", "lr", "lr_schedule", "prompts_per_step",
                                  "n", "m", "lora_rank", "lora_alpha", "temperature",
                                  "adam_beta2", "weight_decay", "max_grad_norm",
                                  "gradient_checkpointing", "eval_every", "eval_size",
                                  "checkpoint_every", "recipe")} == {
        "max_new_tokens": 512, "lr": 5e-6, "lr_schedule": "constant", "prompts_per_step": 1,
        "n": 64, "m": 16, "lora_rank": 64, "lora_alpha": 64.0, "temperature": 0.9,
        "adam_beta2": 0.99, "weight_decay": 0.1, "max_grad_norm": 0.1,
        "gradient_checkpointing": True, "eval_every": 600.0, "eval_size": None,
        "checkpoint_every": 1800.0, "recipe": "auto"}
    # pods eval of the model: the recipe's 512 new tokens (the untrained stand-in rarely
    # stops before them), on every test problem of both sets
    assert main([*evaluate, "--data-dir", str(DATA), "--repeats", "1", "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    for task in ("math", "amc23"):
        assert result[task]["eval/problems"] == len((DATA / task / "test.jsonl").read_text()
                                                    .splitlines())
        assert 8 < result[task]["eval/completion_len"] <= 512
