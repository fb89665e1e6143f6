"""Update-phase memory and time: PODS (n=64, m=16) against GRPO on all 64 and GRPO-GA.

The point of PODS: the update runs on the m kept rollouts, so its memory depends on m, not
n. Each variant runs in a fresh process (so the peak of one cannot hide in another's), on a
small locally built Qwen2 (4 layers, hidden 256, vocabulary 4096) and synthetic rollouts of
P=2 prompts x n=64 completions, prompt 64 + completion 192 tokens, then measures one
``pods.train.update.policy_update`` call: wall time, and peak memory above what the process held
before the update (resident memory on CPU, allocated memory on CUDA).

    python benchmarks/update_memory.py            # the table
    python benchmarks/update_memory.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time

import torch

VARIANTS = {  # name: (kept per prompt m, micro-batch size or None)
    "PODS n=64, m=16": (16, None),
    "GRPO n=64, m=64": (64, None),
    "GRPO-GA n=64, m=64, micro-batch 32": (64, 32),
}
P, N, PROMPT, COMPLETION = 2, 64, 64, 192


def measure(m: int, micro: int | None, device: str) -> dict:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from pods.config import from_dict
    from pods.rollout import Rollouts
    from pods.train.selection import KeptBatch
    from pods.train.update import UpdateSpec, policy_update

    torch.manual_seed(0)
    dev = torch.device(device)
    config = Qwen2Config(vocab_size=4096, hidden_size=256, intermediate_size=1024,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=512)
    model = Qwen2ForCausalLM(config).to(dev).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    B = P * m  # the kept rollouts: the update never sees the other n - m
    batch = Rollouts(prompt_ids=torch.randint(0, 4096, (B, PROMPT), device=dev),
                     prompt_mask=torch.ones(B, PROMPT, dtype=torch.long, device=dev),
                     completion_ids=torch.randint(0, 4096, (B, COMPLETION), device=dev),
                     completion_mask=torch.ones(B, COMPLETION, dtype=torch.long, device=dev),
                     texts=[""] * B)
    cfg = from_dict(dict(prompts_per_step=P, n=N, m=m, micro_batch_size=micro,
                      max_new_tokens=COMPLETION, device=device))
    advantages = torch.randn(B, device=dev)

    def update(cfg):
        kept = KeptBatch(batch, advantages, kept=len(advantages), pad_rows=0)
        spec = UpdateSpec(cfg.optim, cfg.loss, cfg.rollout.temperature,
                          cfg.rollout.max_new_tokens)
        policy_update(model, None, optimizer, kept, spec)

    update(cfg)  # warm-up: optimizer state
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
    else:
        before = _rss_mb()
    start = time.perf_counter()
    update(cfg)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated(dev) - before) / 2**20
    else:
        peak = _peak_rss_mb() - before
    return {"seconds": time.perf_counter() - start, "peak_mb": peak, "sequences": B}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # Linux: KB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one variant, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*VARIANTS[args.one], args.device)))
        return
    print(f"torch {torch.__version__}, {args.device}, {platform.machine()}; P={P}, n={N}, "
          f"{PROMPT}+{COMPLETION} tokens per sequence")
    print("| variant | sequences in the update | update time (s) | peak memory above start (MB) |")
    print("|---|---:|---:|---:|")
    for name in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--one", name, "--device", args.device],
                             capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"| {name} | {r['sequences']} | {r['seconds']:.2f} | {r['peak_mb']:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
