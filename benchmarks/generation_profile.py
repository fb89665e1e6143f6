"""Where the vllm engine's generation time goes on SmolLM2-135M, beside the matmul rate.

The showcase's generation: P x 16 rollouts of chat-templated word problems, up to 128 new
tokens at T = 0.9, the vllm engine in bf16 with the trainer's weights synced in, unseeded
(as the showcase runs it). After a warm-up call, one timed call and one under
torch.profiler (vLLM runs in this process, so its operators are seen), summed by kind.

The limit: one full-width decode step's matmuls (each linear of the 30 layers and the head
at [rows x hidden]), each timed alone with torch.matmul in bf16, times the generated tokens
over the rows: the seconds the batch's decoding would take if it did nothing but its
matmuls at full width. Prefill (the prompts once each, prefix-cached) is left out of it.

    .venv-vllm/bin/python benchmarks/generation_profile.py               # 256 rows
    .venv-vllm/bin/python benchmarks/generation_profile.py --rows 64
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections import defaultdict

import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # its operators in this process
NEW, T, N = 128, 0.9, 16
KINDS = {  # operator name fragments -> kind (the first match wins)
    "matmul (linear layers, head)": ("aten::mm", "aten::addmm", "aten::linear", "onednn",
                                     "mkldnn", "_mm", "gemm"),
    "attention (paged KV cache)": ("attention", "attn", "paged", "sdpa", "reshape_and_cache"),
    "sampling and log-probs over the vocabulary": (
        "softmax", "exponential", "argmax", "topk", "sort", "gather", "div", "log",
        "multinomial", "aten::max", "aten::exp"),
}
OTHER = "the rest: vLLM's compiled graphs (norms, rotary, activations), copies, indexing"


def kind(name: str) -> str:
    low = name.lower()
    return next((k for k, frags in KINDS.items() if any(f.lower() in low for f in frags)),
                OTHER)


def decode_limit(config, rows: int) -> float:
    """Seconds of one decode step's matmuls at ``rows`` sequences, bf16, best of 3 each."""
    H, F, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = H * config.num_key_value_heads // config.num_attention_heads
    layer = [(H, H), (H, kv), (H, kv), (H, H), (H, F), (H, F), (F, H)]
    seconds = 0.0
    for (K, Nn), count in [*[(s, L) for s in layer], ((H, config.vocab_size), 1)]:
        a, b = torch.randn(rows, K, dtype=torch.bfloat16), torch.randn(K, Nn, dtype=torch.bfloat16)
        torch.matmul(a, b)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            torch.matmul(a, b)
            best = min(best, time.perf_counter() - start)
        seconds += count * best
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256, help="P x n rollouts (n = 16)")
    parser.add_argument("--top", type=int, default=12, help="operators listed by name")
    args = parser.parse_args()
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pods.config import RolloutConfig
    from pods.models.source import resolve
    from pods.rollout import EngineSpec, sample_keys
    from pods.rollout.vllm import VLLMEngine
    from smollm2_speed import prompts

    folder = str(resolve("smollm2", None, log=lambda *a: None))
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    options = RolloutConfig(engine="vllm", gen_batch_size=args.rows, vllm_seeded=False)
    engine = VLLMEngine(EngineSpec(options, torch.device("cpu"), max_model_len=1024,
                                   dtype=torch.bfloat16), model, tokenizer)
    texts = prompts(tokenizer, args.rows // N)
    keys = sample_keys(0, 0, torch.arange(len(texts)))

    def generate():
        return engine.generate(texts, N, T, NEW, keys, False)

    generate()  # warm-up
    start = time.perf_counter()
    out = generate()
    seconds = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        generate()
    generated = int(out.completion_mask.sum())
    width = out.completion_ids.shape[1]
    limit = decode_limit(model.config, args.rows) * generated / args.rows
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
          f"{torch.__version__}; vllm engine, bf16, unseeded; {args.rows} rows "
          f"({args.rows // N} prompts x {N}), up to {NEW} new tokens at T={T}")
    print(f"\n{args.rows} rows: {seconds:.1f} s, {generated} tokens generated "
          f"({generated / seconds:.0f} tokens/s; {args.rows * width / seconds:.0f} counting "
          f"every row up to the longest, {width}); the decode's matmuls alone at full width: "
          f"{limit:.1f} s ({100 * limit / seconds:.0f}% of the call)")
    kinds: dict[str, float] = defaultdict(float)
    names = []
    for event in prof.key_averages():
        kinds[kind(event.key)] += event.self_cpu_time_total / 1e6
        names.append((event.self_cpu_time_total / 1e6, event.key, event.count))
    total = sum(kinds.values())
    print(f"\none profiled call (operator self time, {total:.1f} s):\n"
          f"| kind | seconds | share |\n|---|---:|---:|")
    for label, value in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {value:.2f} | {100 * value / total:.0f}% |")
    print("\n| operator | seconds | calls | kind |\n|---|---:|---:|---|")
    for value, name, count in sorted(names, reverse=True)[:args.top]:
        print(f"| {name[:60]} | {value:.2f} | {count} | {kind(name)} |")


if __name__ == "__main__":
    main()
