import json
from dataclasses import asdict

from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.models.tiny import TinyRecipe, build_tokenizer, tiny_model_path
from pods.tasks.arithmetic import Arithmetic


def test_character_tokenizer_round_trip():
    tok = build_tokenizer(Arithmetic.alphabet)
    ids = tok("12+3=")["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == 6
    assert tok.decode(ids, skip_special_tokens=True) == "12+3="


def test_tiny_model_is_built_once_and_loads_like_a_hub_model(tmp_path, monkeypatch):
    monkeypatch.setenv("PODS_CACHE", str(tmp_path))
    task = Arithmetic()
    recipe = TinyRecipe(alphabet=task.alphabet, hidden_size=16, layers=1, heads=2,
                        sft_steps=3, sft_batch_size=4)
    logs = []
    path = tiny_model_path(task, recipe, log=logs.append)
    assert path.parent == tmp_path and any("building" in line for line in logs)
    assert tiny_model_path(task, recipe, log=logs.append) == path  # cached
    assert sum("building" in line for line in logs) == 1
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "qwen2" and model.config.hidden_size == 16
    assert tokenizer.decode(tokenizer("5+5=")["input_ids"], skip_special_tokens=True) == "5+5="
    assert json.loads((path / "recipe.json").read_text())["recipe"] == asdict(recipe)
    assert TinyRecipe(alphabet="01").key() != TinyRecipe(alphabet="01", sft_steps=1).key()
