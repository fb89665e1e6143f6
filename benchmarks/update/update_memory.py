"""Update-phase memory and time: PODS (n=64, m=16) against GRPO on all 64 and GRPO-GA,
with the output head applied in chunks (pods.models.logprobs) and, for comparison, on the
model's full logits.

The point of PODS: the update runs on the m kept rollouts, so its memory depends on m, not
n. Each variant runs in a fresh process (so the peak of one cannot hide in another's), on a
small locally built Qwen2 (4 layers, hidden 256, vocabulary --vocab) and synthetic rollouts
of P=2 prompts x n=64 completions, prompt 64 + completion 192 tokens, then measures one
``pods.train.update.policy_update`` call: wall time, and peak memory above what the process
held before the update (resident memory on CPU, allocated memory on CUDA). "logits": the
size of the [rows x 192 x vocabulary] float32 logits the full path makes.

    python benchmarks/update/update_memory.py            # the table, vocabulary 4096
    python benchmarks/update/update_memory.py --vocab 49152 --variants "16 rows;64 rows"
    python benchmarks/update/update_memory.py --device cuda
    python benchmarks/update/update_memory.py --quick    # "16 rows", a 1-layer model
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402

VARIANTS = {  # name: (prompts P, kept per prompt m, micro-batch size or None)
    "PODS n=64, m=16": (2, 16, None),
    "GRPO n=64, m=64": (2, 64, None),
    "GRPO-GA n=64, m=64, micro-batch 32": (2, 64, 32),
    "16 rows": (1, 16, None),
    "64 rows": (1, 64, None),
}
N, PROMPT, COMPLETION = 64, 64, 192
HEADS = ("chunked", "full")  # pods.models.logprobs: the head a chunk at a time, or the logits


def measure(P: int, m: int, micro: int | None, vocab: int, head: str, device: str,
            hidden: int = 256, layers: int = 4) -> dict:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import pods.models.logprobs
    from pods.config import from_dict
    from pods.rollout import Rollouts
    from pods.train.selection import KeptBatch
    from pods.train.update import UpdateSpec, policy_update

    if head == "full":
        pods.models.logprobs.output_head = lambda model: None  # the model's own logits
    torch.manual_seed(0)
    dev = torch.device(device)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=512)
    model = Qwen2ForCausalLM(config).to(dev).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    B = P * m  # the kept rollouts: the update never sees the other n - m
    batch = Rollouts(prompt_ids=torch.randint(0, vocab, (B, PROMPT), device=dev),
                     prompt_mask=torch.ones(B, PROMPT, dtype=torch.long, device=dev),
                     completion_ids=torch.randint(0, vocab, (B, COMPLETION), device=dev),
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
    parser = suite.parser(__doc__, 'the "16 rows" variant, 1 layer of 64, vocabulary 512')
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--vocab", type=int, default=4096, help="the model's vocabulary")
    parser.add_argument("--variants", default=";".join(list(VARIANTS)[:3]),
                        help=f"separated by ;, of: {'; '.join(VARIANTS)}")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one variant, print JSON
    parser.add_argument("--head", default="chunked", help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--hidden", type=int, default=256, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*VARIANTS[args.one], args.vocab, args.head, args.device,
                                 args.hidden, args.layers)))
        return
    if args.quick:
        args.variants, args.vocab, args.hidden, args.layers = "16 rows", 512, 64, 1
    print(f"{suite.machine()}; {args.device}; n={N}, {PROMPT}+{COMPLETION} tokens per "
          f"sequence, vocabulary {args.vocab}")
    rows = []
    for name in args.variants.split(";"):
        r = {head: _one(name, head, args) for head in HEADS}
        rows.append({"variant": name, **r, "logits_mb": r["full"]["sequences"] * COMPLETION
                     * args.vocab * 4 / 2**20})
    print(suite.markdown(
        ["variant", "sequences in the update", "logits (MB)",
         "update time (s), chunked head", "full logits",
         "peak memory above start (MB), chunked head", "full logits"],
        [[r["variant"], r["full"]["sequences"], f"{r['logits_mb']:.0f}",
          f"{r['chunked']['seconds']:.2f}", f"{r['full']['seconds']:.2f}",
          f"{r['chunked']['peak_mb']:.0f}", f"{r['full']['peak_mb']:.0f}"] for r in rows]))
    suite.write_json(args.json, rows)


def _one(name: str, head: str, args) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", name, "--head", head, "--device",
                          args.device, "--vocab", str(args.vocab), "--hidden", str(args.hidden),
                          "--layers", str(args.layers)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
