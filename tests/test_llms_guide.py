"""The llms guide's commands for a hub model give the settings a user expects: each `pods
train` / `pods eval` of Qwen2.5-3B-Instruct in its first block runs here as written, with
`--max-steps 1`, on a tiny local stand-in with a chat template (tests/conftest.py's
chat_model_dir) and the fixture data: the trainer is built (model, LoRA, engine, data), the
run folder written and the recipe line the guide shows printed; the steps themselves, 64
rollouts of 512 tokens, are left out (minutes on a CPU; the training tests run the loop).
`pods eval` resolves its config as it would before generating."""

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
                                                                       tmp_path, capsys,
                                                                       monkeypatch):
    from pods.cli.evaluate import _config
    from pods.train.loop import Run

    commands, shown = _guide_commands()
    assert [c[0] for c in commands] == ["train", "eval"]
    train, evaluate = ([chat_model_dir if a == HUB else a for a in c] for c in commands)
    started = []
    monkeypatch.setattr(Run, "run", lambda run: started.append(run.t.cfg))
    assert main([*train, "--data-dir", str(DATA), "--max-steps", "1", "--progress", "false",
                 "--out-dir", str(tmp_path), "--run-name", "qwen"]) == 0
    assert [cfg.run.max_steps for cfg in started] == [1]  # the loop got the whole config
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
        "gradient_checkpointing": "auto", "eval_every": 600.0, "eval_size": None,
        "checkpoint_every": 1800.0, "recipe": "auto"}
    assert started[0].to_dict() == saved  # config.yaml holds what the run trains with
    # pods eval of the model: the recipe's 512 new tokens, not the embedded model's 8
    requests = []
    monkeypatch.setattr("pods.cli.evaluate.evaluate_path",
                        lambda request: requests.append(request) or {"model": "m"})
    assert main([*evaluate, "--data-dir", str(DATA), "--json"]) == 0
    _, cfg = _config(requests[0])
    assert requests[0].tasks == ("math", "amc23") and cfg.rollout.max_new_tokens == 512
    from pods.cli.evaluate import _protocol

    assert (requests[0].repeats, requests[0].temperature) == (None, None)  # not given: a
    assert _protocol(requests[0], cfg, run=False) == (0.9, 5)  # model, the paper's protocol
