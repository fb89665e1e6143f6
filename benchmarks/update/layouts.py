"""The update's layouts side by side: padded, packed and shared_prompt (--update-layout), with
TRL's GRPOTrainer loss on the same batch as the anchor: positions through the layers,
seconds of one update (forward, backward, optimizer step) and peak memory above the start.

Shapes (the kept batch of one step; random weights, random token ids):

    embedded   the embedded model (Qwen2, 2 layers of 64), P = 8, m = 16: prompts of 6-9
               tokens, completions of 2-8 (max_new_tokens 8)
    showcase   SmolLM2-135M's architecture, P = 4, m = 4 (n = 16): prompts of 110-150
               tokens, completions ~ N(110, 40) in [10, 200], a tenth cut at 200
    gsm8k      SmolLM2-135M's architecture, P = 1, m = 16 (n = 64): a prompt of 150-250
               tokens, completions ~ N(250, 80) in [20, 512], a tenth cut at 512
    math       as gsm8k with P = 1, m = 8 (n = 32)

The lengths are drawn once a shape from a fixed seed (``batch``), so every layout and the
anchor update the same rows. Each (shape, method) runs in its own process: float32 compute
on the CPU (pods's default there), gradient checkpointing on SmolLM2's architecture (the
padded gsm8k update without it needs over 24 GB: the language-model recipe's auto turns it
on for such a pass on a 24 GB machine), one
warm-up update on two rows (AdamW's state), then ``--repeats``
timed updates (median, and min-max); peak memory is the resident high-water mark of the
timed updates above the resident memory before them (reset through /proc/self/clear_refs,
after glibc's malloc_trim gave back what the warm-up freed).
TRL: ``GRPOTrainer._compute_loss`` (TRL 1.16, loss_type "grpo", its padded batch as its
trainer builds it), its backward and the same AdamW step.

    python benchmarks/update/layouts.py                     # every shape, 3 repeats
    python benchmarks/update/layouts.py --shapes gsm8k --repeats 5
    python benchmarks/update/layouts.py --quick             # tiny sizes, 1 repeat
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
EMBEDDED = dict(vocab_size=15, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
QUICK = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
SHAPES = {  # name: (architecture, P, m, prompt range, completion mean, sd, limit)
    "embedded": (EMBEDDED, 8, 16, (6, 9), 5, 2, 8),
    "showcase": (SMOLLM2, 4, 4, (110, 150), 110, 40, 200),
    "gsm8k": (SMOLLM2, 1, 16, (150, 250), 250, 80, 512),
    "math": (SMOLLM2, 1, 8, (150, 250), 250, 80, 512),
}
METHODS = ("padded", "packed", "shared_prompt", "TRL")
CUT = 0.1  # the share of completions cut at the limit


def batch(shape: str, quick: bool):
    """The shape's kept rows: prompts left-padded [B, Lp], completions right-padded [B, Lc]
    (a tenth of them as long as the limit, the rest ~ N(mean, sd))."""
    from pods.rollout import Rollouts

    arch, P, m, (low, high), mean, sd, limit = SHAPES[shape]
    if quick:
        arch, (low, high), mean, sd, limit = QUICK, (4, 12), 10, 4, 24
    g = torch.Generator().manual_seed(0)
    plen = torch.randint(low, high + 1, (P,), generator=g).repeat_interleave(m)  # [B]
    clen = (torch.randn(P * m, generator=g) * sd + mean).round().clamp(2, limit).long()
    clen[torch.rand(P * m, generator=g) < CUT] = limit
    B, Lp, Lc = P * m, int(plen.max()), int(clen.max())
    prompts = torch.randint(3, arch["vocab_size"], (P, Lp), generator=g).repeat_interleave(m, 0)
    prompt_mask = (torch.arange(Lp) >= Lp - plen[:, None]).long()  # [B, Lp] left-padded
    completion_mask = (torch.arange(Lc) < clen[:, None]).long()  # [B, Lc]
    completions = torch.randint(3, arch["vocab_size"], (B, Lc), generator=g)
    return arch, Rollouts(prompts * prompt_mask, prompt_mask, completions * completion_mask,
                          completion_mask, [""] * B)


def measure(shape: str, method: str, repeats: int, quick: bool) -> dict:
    """One (shape, method) in this process: seconds of each timed update, peak MB."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from pods.models.checkpointing import set_checkpointing

    arch, rows = batch(shape, quick)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(max_position_embeddings=1024, **arch)).train()
    if arch is SMOLLM2:  # as auto would choose here (and padded fits in memory)
        set_checkpointing(model, True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    advantages = torch.randn(rows.completion_ids.shape[0])
    make = _trl if method == "TRL" else \
        (lambda *a: _pods(*a, method))  # noqa: E731
    update, positions = make(model, optimizer, rows, advantages)
    first = torch.arange(2)  # the warm-up: AdamW's state, on two rows (TRL needs 2)
    make(model, optimizer, rows.select(first), advantages[first])[0]()
    before = _reset_peak()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        update()
        times.append(time.perf_counter() - start)
    return {"shape": shape, "method": method, "seconds": times, "positions": positions,
            "peak_mb": _peak_mb() - before, "rows": rows.completion_ids.shape[0],
            "tokens": int(rows.completion_mask.sum())}


def _pods(model, optimizer, rows, advantages, layout: str):
    from pods.config import from_dict
    from pods.train.layout import micro_batches, positions
    from pods.train.selection import KeptBatch
    from pods.train.update import UpdateSpec, policy_update

    cfg = from_dict(dict(update_layout=layout, max_new_tokens=rows.completion_ids.shape[1]))
    spec = UpdateSpec(cfg.optim, cfg.loss, 1.0, cfg.rollout.max_new_tokens, layout=layout)
    kept = KeptBatch(rows, advantages, kept=len(advantages), pad_rows=0)
    done, _ = positions(micro_batches(rows, layout, None, None), rows)
    return (lambda: policy_update(model, None, optimizer, kept, spec)), done


def _trl(model, optimizer, rows, advantages):
    """TRL's loss on the same rows: its GRPOTrainer built around the model (no training
    loop), then ``_compute_loss``, backward and the optimizer step."""
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    from pods.models.tiny import shipped_model_path

    tokenizer = PreTrainedTokenizerFast.from_pretrained(shipped_model_path())
    B, Lc = rows.completion_ids.shape
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=B,
                      num_generations=B, max_completion_length=Lc, loss_type="grpo",
                      report_to=[], use_cpu=True, beta=0.0, logging_steps=10**9)
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] *
                                                     len(completions)],
                          args=args, train_dataset=Dataset.from_dict({"prompt": ["x"] * B}),
                          processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1
    inputs = {"prompt_ids": rows.prompt_ids, "prompt_mask": rows.prompt_mask,
              "completion_ids": rows.completion_ids, "completion_mask": rows.completion_mask,
              "advantages": advantages, "num_items_in_batch": rows.completion_mask.sum()}

    def update():
        optimizer.zero_grad(set_to_none=True)
        trainer._compute_loss(model, inputs).backward()
        optimizer.step()

    return update, int(rows.prompt_ids.shape[1] + Lc) * B


def _reset_peak() -> float:
    """Reset the resident high-water mark; the resident MB now, after the C allocator
    returned what it holds unused (else memory the warm-up freed and the allocator kept
    would hide part of a larger update's peak)."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def _peak_mb() -> float:
    return _status("VmHWM")


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise KeyError(key)


def main() -> None:
    parser = suite.parser(__doc__, "the gsm8k shape on a 2-layer model of 64, 1 repeat")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", help=argparse_hidden())
    args = parser.parse_args()
    if args.one:
        shape, method = args.one.split(":")
        print(json.dumps(measure(shape, method, args.repeats, args.quick)))
        return
    if args.quick:
        args.shapes, args.repeats = "gsm8k", 1
    print(suite.machine())
    results = [_one(shape, method, args) for shape in args.shapes.split(",")
               for method in args.methods.split(",")]
    print(suite.markdown(["shape", "method", "positions", "update s (median, min-max)",
                          "x padded", "peak MB", "x padded"], _rows(results)))
    suite.write_json(args.json, results)


def _rows(results: list[dict]) -> list[list]:
    base = {r["shape"]: r for r in results if r["method"] == "padded"}
    out = []
    for r in results:
        s, ref = statistics.median(r["seconds"]), base.get(r["shape"])
        ratio = ("", "") if ref is None else (
            f"{s / statistics.median(ref['seconds']):.2f}",
            f"{r['peak_mb'] / max(ref['peak_mb'], 1e-9):.2f}")
        out.append([r["shape"], r["method"], r["positions"],
                    f"{s:.3f} ({min(r['seconds']):.3f}-{max(r['seconds']):.3f})", ratio[0],
                    f"{r['peak_mb']:.0f}", ratio[1]])
    return out


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


def _one(shape: str, method: str, args) -> dict:
    command = [sys.executable, __file__, "--one", f"{shape}:{method}", "--repeats",
               str(args.repeats)] + (["--quick"] if args.quick else [])
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{shape} {method} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
