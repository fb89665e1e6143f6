"""Generation engines on this machine: hf (transformers generate) against vllm (vLLM's CPU
build in process), and what each does to a PODS step against a GRPO step.

Two model sizes, both built locally:
  tiny  the embedded model (pods.models.tiny: 2 layers, hidden 64) on its arithmetic
        prompts, P=8, up to 8 new tokens (the default run's shape);
  25M   a Qwen2 of ~26M parameters (8 layers, hidden 512, head size 64, vocabulary 4096)
        with random weights, P=4 prompts of 96 tokens, 32 new tokens.
For each engine and n in {16, 64}: rollouts/s and generated tokens/s of one step's
generation (the median of --repeats calls after a warm-up call); then the update on P*16
kept rollouts (one AdamW step through pods.train.update) and, for vllm, the weight sync; and the
step-time ratio PODS 64/16 : GRPO 16/16 = (gen(64) + update + sync) / (gen(16) + update +
sync), where both update on P*16 rollouts. hf is measured before vLLM starts (vLLM binds
the process's threads to cores); where vLLM is not installed, its rows are left out.

    .venv-vllm/bin/python benchmarks/generation/engines_cpu.py        # make vllm-env first
    .venv-vllm/bin/python benchmarks/generation/engines_cpu.py --sizes tiny --repeats 5
    .venv/bin/python benchmarks/generation/engines_cpu.py --quick     # tiny, hf only
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
PROMPT, NEW = 96, 32  # the 25M size's prompt and completion tokens


def build_25m(folder: str) -> str:
    """A ~26M-parameter Qwen2 with a digits-plus-filler word-level tokenizer (random init:
    eos is 1 of 4096 tokens, so completions run to the token limit)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    words = ["<pad>", "<bos>", "<eos>"] + list("0123456789")
    words += [f"w{i}" for i in range(4096 - len(words))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                        bos_token="<bos>", eos_token="<eos>",
                                        padding_side="left")
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=4096, hidden_size=512, intermediate_size=1280,
                         num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8,
                         max_position_embeddings=256, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def setting(size: str, folder: str):
    """(model path, prompts, max new tokens, P) of one size."""
    import numpy as np

    if size == "tiny":
        from pods.models.tiny import tiny_model_path
        from pods.tasks.arithmetic import Arithmetic

        task = Arithmetic()
        return str(tiny_model_path(task)), [p.prompt for p in task.test()[:8]], 8, 8
    rng = np.random.default_rng(0)
    prompts = ["".join(map(str, rng.integers(0, 10, PROMPT - 1))) for _ in range(4)]
    return build_25m(os.path.join(folder, "qwen2-25m")), prompts, NEW, 4


def time_generation(engine, prompts, n, new, repeats) -> tuple[float, float]:
    """(rollouts/s, generated tokens/s), median over ``repeats`` calls after a warm-up."""
    from pods.rollout import sample_keys

    engine.generate(prompts, n, 1.0, new, sample_keys(99, torch.arange(len(prompts))))
    runs = []
    for r in range(repeats):
        keys = sample_keys(r, torch.arange(len(prompts)))
        start = time.perf_counter()
        out = engine.generate(prompts, n, 1.0, new, keys)
        seconds = time.perf_counter() - start
        runs.append((seconds, out.completion_mask.sum().item()))
    seconds = statistics.median(s for s, _ in runs)
    tokens = statistics.median(t for _, t in runs)
    return len(prompts) * n / seconds, tokens / seconds


def time_update(model, engine, prompts, new, m=16) -> float:
    """Seconds of one pods.train.update step on P*m kept rollouts (after a warm-up step)."""
    from pods.config import from_dict
    from pods.rollout import sample_keys
    from pods.train.selection import KeptBatch
    from pods.train.update import UpdateSpec, policy_update

    batch = engine.generate(prompts, m, 1.0, new, sample_keys(7, torch.arange(len(prompts))))
    cfg = from_dict(dict(prompts_per_step=len(prompts), n=64, m=m, max_new_tokens=new))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    advantages = torch.randn(len(batch.texts))

    def update(cfg):
        kept = KeptBatch(batch, advantages, kept=len(advantages), pad_rows=0)
        spec = UpdateSpec(cfg.optim, cfg.loss, cfg.rollout.temperature,
                          cfg.rollout.max_new_tokens)
        policy_update(model, None, optimizer, kept, spec)

    model.train()
    update(cfg)
    start = time.perf_counter()
    update(cfg)
    seconds = time.perf_counter() - start
    model.eval()
    return seconds


def vllm_rows(model, tokenizer, prompts, new, repeats, size, sync) -> list[dict]:
    """The vllm engine's rows (vLLM's CPU build in this process); its weight sync's median
    seconds into ``sync``."""
    from pods.config import RolloutConfig
    from pods.rollout import EngineSpec, make_engine

    spec = EngineSpec(RolloutConfig(engine="vllm", gen_batch_size=512), torch.device("cpu"),
                      max_model_len=len(tokenizer(prompts[0])["input_ids"]) + new)
    vllm = make_engine(spec, model, tokenizer)
    rows = [{"size": size, "engine": "vllm", "n": n,
             **dict(zip(("rollouts_s", "tokens_s"),
                        time_generation(vllm, prompts, n, new, repeats), strict=True))}
            for n in (16, 64)]
    sync["vllm"] = suite.timed(lambda: vllm.sync_weights(model), max(repeats, 3), warmup=0)
    return rows


def measure(size: str, folder: str, repeats: int) -> list[dict]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pods.rollout import HFEngine

    path, prompts, new, P = setting(size, folder)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    hf = HFEngine(model, tokenizer, chunk=512)
    rows = [{"size": f"{size} ({params:.1f}M)", "engine": "hf", "n": n,
             **dict(zip(("rollouts_s", "tokens_s"),
                        time_generation(hf, prompts, n, new, repeats), strict=True))}
            for n in (16, 64)]
    update = time_update(model, hf, prompts, new)
    sync = {"hf": 0.0}
    if importlib.util.find_spec("vllm") is None:
        print("vllm is not installed here: its rows are left out (make vllm-env)")
    else:
        rows += vllm_rows(model, tokenizer, prompts, new, repeats, rows[0]["size"], sync)
    for row in rows:
        gen = {r["n"]: P * r["n"] / r["rollouts_s"] for r in rows
               if r["engine"] == row["engine"]}
        s = sync[row["engine"]]
        row.update(gen_s=P * row["n"] / row["rollouts_s"], update_s=update, sync_s=s,
                   step_s=gen[row["n"]] + update + s,
                   pods_grpo=(gen[64] + update + s) / (gen[16] + update + s))
    return rows


def main() -> None:
    import tempfile

    parser = suite.parser(__doc__, "the tiny size, one call a cell")
    parser.add_argument("--sizes", nargs="+", default=["tiny", "25m"],
                        choices=["tiny", "25m"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeats = ["tiny"], 1
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for size in args.sizes:
            rows += measure(size, folder, args.repeats)
    print(f"# {suite.machine()}, python {sys.version.split()[0]}")
    print(suite.markdown(
        ["model", "engine", "n", "rollouts/s", "tokens/s", "generate s", "update s (P*16)",
         "sync s", "sync / step", "PODS 64/16 : GRPO 16/16 step"],
        [[r["size"], r["engine"], r["n"], f"{r['rollouts_s']:.0f}", f"{r['tokens_s']:.0f}",
          f"{r['gen_s']:.3f}", f"{r['update_s']:.3f}", f"{r['sync_s']:.4f}",
          f"{100 * r['sync_s'] / r['step_s']:.1f}%", f"{r['pods_grpo']:.2f}x"] for r in rows],
        "llrrrrrrrr"))
    for size in dict.fromkeys(r["size"] for r in rows):
        speed = {r["engine"]: r["rollouts_s"] for r in rows if r["size"] == size
                 and r["n"] == 64}
        if "vllm" in speed:
            print(f"{size}: vllm / hf throughput at n=64: {speed['vllm'] / speed['hf']:.2f}x")
    suite.write_json(args.json, rows)


if __name__ == "__main__":
    main()
