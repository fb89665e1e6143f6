"""Where a bf16 pods update's time goes on SmolLM2-135M, beside this machine's matmul rate.

The limit: the matmuls one update must do, each timed alone with torch.matmul in bf16 on
its own shapes (every linear layer's forward, input-gradient and weight-gradient products
at rows x (160 + 128) tokens, the output head's at rows x 128 completion tokens), as
GFLOP/s. The work: those FLOPs plus the causal attention's score and value products (about
4% more). An update's rate is the work over its seconds; "of limit" is that rate over the
matmul rate measured in the same run: 100% would be an update that does nothing but its
matmuls, each at the speed it reaches alone.

Each variant runs in a fresh process (warm-up call, then the median of --repeats calls):
  pods update          pods.train.update.policy_update under bf16 autocast, with what pods
                       train sets: the fused AdamW and glibc keeping freed memory
                       (pods.runtime.speed)
  pods update, before  the same call with the per-tensor AdamW and glibc's defaults
                       (PODS_KEEP_FREED_MEMORY=0): pods before this benchmark
  bare fwd+bwd+AdamW   model(ids).logits -> log_softmax -> gather -> mean -> backward ->
                       step, with pods's settings (it takes the head over all 288 tokens)
Then one profiled pods update: its operators' own CPU time summed by kind, and the
attention's forward and backward timed alone per layer with torch's flash and math kernels.

    .venv/bin/python benchmarks/update/update_profile.py                  # rows 4 and 16
    .venv/bin/python benchmarks/update/update_profile.py --rows 4 --repeats 1
    .venv/bin/python benchmarks/update/update_profile.py --quick  # a tiny Qwen2, 2 rows
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402

PROMPT, NEW, T = 160, 128, 0.9
VARIANTS = ("pods update", "pods update, before", "bare fwd+bwd+AdamW")
KINDS = {  # operator name fragments -> kind (the first match wins)
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attention (flash kernel)": ("scaled_dot_product", "flash_attention"),
    "dtype casts (autocast)": ("aten::_to_copy", "aten::copy_", "aten::to"),
    "log-softmax over the vocabulary": ("logsumexp", "log_softmax", "gather", "aten::exp",
                                        "aten::sub"),
    "AdamW": ("_fused_adamw", "Optimizer", "_foreach", "addcdiv", "addcmul", "lerp",
              "aten::sqrt"),
}
OTHER = "the rest (norms, activations, rotary, residuals, zeroing)"


def load(model_name: str):
    from transformers import AutoModelForCausalLM

    from pods.models.source import resolve

    folder = str(resolve(model_name, None, log=lambda *a: None))
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).train()


def linear_shapes(config, rows: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of every matmul of one update: each linear's forward, input gradient and
    weight gradient, over all layers, and the head's on the completion tokens."""
    H, F, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = H * config.num_key_value_heads // config.num_attention_heads
    layer = [(H, H), (H, kv), (H, kv), (H, H), (H, F), (H, F), (F, H)]  # q k v o gate up down
    tokens, completion = rows * (PROMPT + NEW), rows * NEW
    shapes = [s for _ in range(L) for K, N in layer
              for s in ((tokens, K, N), (tokens, N, K), (K, tokens, N))]
    V = config.vocab_size
    return shapes + [(completion, H, V), (completion, V, H), (H, completion, V)]


def attention_flops(config, rows: int) -> float:
    """Scores and values, forward (x1) and backward (x2), causal: half the T x T products."""
    L, H, length = config.num_hidden_layers, config.hidden_size, PROMPT + NEW
    return 3 * 2 * (2 * rows * length * length * H) / 2 * L


def batch_of(rows: int, vocab: int):
    from pods.rollout import Rollouts
    from pods.train.selection import KeptBatch

    gen = torch.Generator().manual_seed(rows)
    prompt = torch.randint(100, vocab, (rows, PROMPT), generator=gen)  # [B, Lp]
    completion = torch.randint(100, vocab, (rows, NEW), generator=gen)  # [B, Lc]
    batch = Rollouts(prompt, torch.ones_like(prompt), completion, torch.ones_like(completion),
                     [""] * rows)
    return KeptBatch(batch, torch.randn(rows, generator=gen), kept=rows, pad_rows=0)


def update_fn(variant: str, model, kept):
    """The one-step function ``variant`` times (its optimizer made here)."""
    from pods.config import from_dict
    from pods.models.precision import autocast
    from pods.runtime.speed import adamw
    from pods.train.update import UpdateSpec, policy_update

    cpu = torch.device("cpu")
    if variant == "pods update, before":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7, fused=False)
    else:
        optimizer = adamw(model.parameters(), lr=1e-7, betas=(0.9, 0.999), weight_decay=0.0)
    cfg = from_dict({"max_new_tokens": NEW})
    spec = UpdateSpec(cfg.optim, cfg.loss, T, NEW)
    if variant.startswith("pods update"):
        def step():
            with autocast(cpu, "bf16"):
                policy_update(model, None, optimizer, kept, spec)
        return step
    rows = kept.rows
    return lambda: suite.bare_step(model, optimizer, rows.prompt_ids, rows.completion_ids,
                                   kept.advantages, T, "bf16")


def child(args) -> None:
    """One variant in this process: {"seconds": [...], "kinds": {...}} as JSON on stdout."""
    from pods.runtime.speed import keep_freed_memory

    if args.child != "pods update, before":
        keep_freed_memory()
    model = load(args.model)
    step = update_fn(args.child, model, batch_of(args.rows, model.config.vocab_size))
    step()  # warm-up: AdamW's state, the allocator
    seconds = [suite.timed(step, 1, 0) for _ in range(args.repeats)]
    out = {"seconds": seconds}
    if args.child == "pods update":
        out["kinds"] = profile(step)
    print(json.dumps(out))


def profile(step) -> dict[str, float]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    kinds: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        label = next((k for k, frags in KINDS.items() if any(f in event.key for f in frags)),
                     OTHER)
        kinds[label] += event.self_cpu_time_total / 1e6
    return dict(kinds)


def attention_ms(config, rows: int) -> dict[str, float]:
    """Milliseconds of one layer's causal attention, forward and backward, with each of
    torch's CPU kernels (bf16, the model's heads)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    heads, kv = config.num_attention_heads, config.num_key_value_heads
    D, length = config.hidden_size // heads, PROMPT + NEW
    q = torch.randn(rows, heads, length, D, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(rows, kv, length, D, dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    out = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("math", SDPBackend.MATH)):
        def run(backend=backend):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=True).sum().backward()
        run()
        out[name] = 1000 * min(suite.timed(run, 1, 0) for _ in range(3))
    return out


def run_child(variant: str, rows: int, args) -> dict:
    env = {**os.environ}
    if variant == "pods update, before":
        env["PODS_KEEP_FREED_MEMORY"] = "0"
    out = subprocess.run([sys.executable, __file__, "--child", variant, "--rows", str(rows),
                          "--repeats", str(args.repeats), "--model", args.model],
                         capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"{variant} at {rows} rows failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(config, rows: int, args) -> list[dict]:
    """The table's rows at ``rows`` kept rollouts: the matmul limit, then each variant."""
    shapes = linear_shapes(config, rows)
    rate, matmul_s = suite.matmul_rate(shapes)
    work = sum(2 * M * K * N for M, K, N in shapes) + attention_flops(config, rows)
    results = {v: run_child(v, rows, args) for v in VARIANTS}
    bare = statistics.median(results["bare fwd+bwd+AdamW"]["seconds"])
    out = [{"rows": rows, "what": "matmuls alone (the limit)", "seconds": matmul_s,
            "gflops": rate, "rate": rate}]
    for variant, result in results.items():
        seconds = statistics.median(result["seconds"])
        out.append({"rows": rows, "what": variant, "seconds": seconds, "gflops": work / seconds
                    / 1e9, "rate": rate, "vs_bare": seconds / bare, "kinds": result.get("kinds")})
    return out


def print_profiles(config, table: list[dict]) -> None:
    """Per row count: the profiled pods update's operator time by kind, and attention alone."""
    for r in (r for r in table if r["what"] == "pods update"):
        kinds, attention = r["kinds"], attention_ms(config, r["rows"])
        total = sum(kinds.values())
        print(f"\n{r['rows']} rows, one profiled pods update (operator self time, {total:.2f} s):")
        print(suite.markdown(["kind", "seconds", "share"], [
            [label, f"{value:.2f}", f"{100 * value / total:.0f}%"]
            for label, value in sorted(kinds.items(), key=lambda kv: -kv[1])]))
        layers = config.num_hidden_layers
        print(f"attention alone, forward + backward over {layers} layers: flash kernel "
              f"{attention['flash'] * layers / 1000:.2f} s, math kernel "
              f"{attention['math'] * layers / 1000:.2f} s; its matmuls at the limit: "
              f"{attention_flops(config, r['rows']) / 1e9 / r['rate']:.2f} s (causal half)")


def main() -> None:
    parser = suite.parser(__doc__, "a tiny random Qwen2, 2 rows, 1 call")
    parser.add_argument("--model", default="smollm2", help="smollm2, or a local folder")
    parser.add_argument("--rows", default="4,16", help="kept rollouts per update")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per variant")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.rows = int(args.rows)
        return child(args)
    scratch = tempfile.TemporaryDirectory(prefix="pods-bench-")
    if args.quick:
        args.model, args.rows, args.repeats = suite.tiny_qwen2(scratch.name), "2", 1
    from transformers import AutoConfig

    from pods.models.source import resolve

    config = AutoConfig.from_pretrained(str(resolve(args.model, None, log=lambda *a: None)))
    print(f"# {suite.machine()}; {args.model}, {PROMPT}+{NEW} tokens a row; median of "
          f"{args.repeats} calls per variant\n")
    table = [r for rows in args.rows.split(",") for r in measure(config, int(rows), args)]
    print(suite.markdown(["rows", "what", "seconds", "tokens/s", "GFLOP/s", "of limit",
                          "vs bare"], [
        [r["rows"], r["what"], f"{r['seconds']:.2f}",
         f"{r['rows'] * (PROMPT + NEW) / r['seconds']:.0f}", f"{r['gflops']:.0f}",
         f"{100 * r['gflops'] / r['rate']:.0f}%",
         f"{r['vs_bare']:.2f}x" if "vs_bare" in r else ""] for r in table], "rlrrrrr"))
    print_profiles(config, table)
    suite.write_json(args.json, table)


if __name__ == "__main__":
    main()
