"""Sections matmul and update of the GPU check (benchmarks/gpu/check.py).

matmul: the device's bf16 matmul rate, 8192^3 (the reference for "share").

update: pods's update, as the trainer runs it (``Trainer.update`` on a kept batch of random
token ids: the micro-batches, the loss, the optimizer step and the sampling copy's refresh),
against a bare fwd+bwd+AdamW step in the same precision, at 16 and 64 rows x (160 + 128)
tokens, on SmolLM2-135M's and Qwen2.5-1.5B's architectures (random weights, saved once to
a folder that pods loads as any local model). Each pods variant is the trainer built with
some flat config keys (``VARIANTS``), its layout pinned (padded: each row its own prompt,
as in the bare step), and "pods-groups" the same rows as PODS keeps them, groups of 16
sharing a prompt, with shared_prompt: tokens/s, share of the matmul rate (6 x
non-embedding parameters per token + 6 x vocabulary x hidden per completion token) and
peak memory. pods's variants take the recipe's gradient checkpointing for a real model,
``auto`` (chosen from free memory when the trainer is built; each row says what it ran
with);
"bare-ckpt" is the bare step with it, so that "x bare" of a checkpointed pods variant
splits into what checkpointing costs and what pods adds.
"""

from __future__ import annotations

import importlib.util
import tempfile

import torch
from gpucommon import (
    ARCHITECTURES,
    UNAVAILABLE,
    build,
    device,
    emit,
    failure,
    missing_keys,
    release,
    section_args,
    timed,
    word_tokenizer,
)

PROMPT, NEW, T = 160, 128, 0.9
PADDED = {"update_layout": "padded"}  # every row its own prompt here: pinned, not auto's
VARIANTS = {  # name: pods's flat config keys (None: the bare step, no pods code)
    "bare": None,  # fwd+bwd+AdamW in pods's default precision
    "bare-ckpt": None,  # the same with gradient checkpointing (transformers', as pods's)
    "pods": PADDED,  # pods's defaults
    "cast-matmul": {"weight_cast": "matmul", "update_kernels": "torch", **PADDED},  #
    # autocast's cast of the float32 weights at every matmul
    "cast-step": {"weight_cast": "step", "update_kernels": "torch", **PADDED},  # bf16
    # weights cast once a step
    "liger": {"weight_cast": "step", "update_kernels": "liger", **PADDED},  # liger-kernel's
    "pods-groups": {"update_layout": "shared_prompt"},  # PODS's kept rows: groups of
    # GROUP rows share a prompt, each read once (tok/s counts every row's prompt)
}
CHECKPOINTED = {"bare": False, "bare-ckpt": True}  # the bare steps: checkpointing or not
GROUP = 16  # rows kept from one prompt in "pods-groups" (the paper's m at GSM8K)


def matmul_tflops(dev: torch.device, size: int) -> float:
    a, b = (torch.randn(size, size, dtype=torch.bfloat16, device=dev) for _ in range(2))
    return 2 * size**3 / timed(lambda: a @ b, dev, 10) / 1e12


def work_flops(model, rows: int, prompt: int, new: int) -> float:
    """6 x non-embedding parameters per token + 6 x V x H per completion token."""
    c = model.config
    embedding = c.vocab_size * c.hidden_size
    body = sum(p.numel() for p in model.parameters()) - embedding  # tied: counted once
    return 6 * body * rows * (prompt + new) + 6 * embedding * rows * new


def default_precision(name: str, dev: torch.device):
    """What pods's defaults store and compute in for the architecture ``name`` on ``dev``
    (named: the embedded model's float32 compute must not stand in for it)."""
    from pods.config import ModelConfig
    from pods.models.precision import plan

    return plan(ModelConfig(name=name), dev)


def unavailable(keys: dict | None, dev: torch.device) -> str | None:
    """Why a variant cannot run here, or None."""
    if keys is None:
        return None
    if missing_keys(keys):
        return f"{UNAVAILABLE} (no {', '.join(missing_keys(keys))})"
    if keys.get("update_kernels") == "liger":
        if dev.type != "cuda":
            return "needs a CUDA GPU"
        if importlib.util.find_spec("liger_kernel") is None:
            return "liger-kernel not installed"
    return None


def redundant(name: str, dev: torch.device) -> bool:
    """"pods" (the defaults) where it is the weight cast once a step with torch's kernels:
    a checkout that has those keys, with liger-kernel unused (no CUDA, or not installed)."""
    return name == "pods" and unavailable(VARIANTS["cast-step"], dev) is None and \
        unavailable(VARIANTS["liger"], dev) is not None


def random_batch(rows: int, vocab: int, prompt: int, new: int, dev: torch.device):
    """(ids [rows, prompt + new], advantages [rows]): random, the same for every variant."""
    gen = torch.Generator().manual_seed(rows)
    ids = torch.randint(100, vocab, (rows, prompt + new), generator=gen).to(dev)
    return ids, torch.randn(rows, generator=gen).to(dev)


def sampled(ids, advantages, prompt: int):
    """What a step's sampling phase would hand the trainer's update: every row kept."""
    from pods.rollout import Rollouts
    from pods.tasks.scoring import Scores
    from pods.train.selection import KeptBatch, Sampled

    rows, ones = ids.shape[0], torch.ones_like(ids)
    batch = Rollouts(ids[:, :prompt], ones[:, :prompt], ids[:, prompt:], ones[:, prompt:],
                     [""] * rows)
    kept = KeptBatch(batch, advantages, kept=rows, pad_rows=0)
    lengths = torch.full((1, rows), float(ids.shape[1] - prompt))
    return Sampled(kept, {"rollout/reward_mean": 0.0}, lengths,
                   Scores(torch.zeros(1, rows), 0, 0), signal=True)


def trainer_for(folder: str, keys: dict, rows: int, args):
    """pods's trainer on the saved architecture, with the variant's flat keys."""
    from pods.config import from_dict
    from pods.train.trainer import Trainer

    cfg = from_dict({"model": folder, "task": "arithmetic", "prompts_per_step": 1, "n": rows,
                     "m": rows, "temperature": T, "max_new_tokens": args.new, "lr": 1e-7,
                     "max_prompt_tokens": 64, "max_steps": 1000, "device": "auto",
                     "progress": False, **keys})
    return Trainer(cfg, log=lambda *a, **k: None)


def measure(step, model, rows: int, dev: torch.device, args) -> dict:
    """tokens/s, share of the matmul rate and peak memory of ``step``."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    seconds = timed(step, dev, args.repeats)
    return {"tok_s": rows * (args.prompt + args.new) / seconds,
            "share": work_flops(model, rows, args.prompt, args.new) / seconds / 1e12
            / args.tflops,
            "peak_gib": torch.cuda.max_memory_allocated(dev) / 2**30
            if dev.type == "cuda" else None}


def bare_step(model, optimizer, ids, advantages, update: str, dev, prompt: int):
    """One fwd+bwd+AdamW step on ``ids`` with autocast ``update``: the simplest loop."""
    from pods.models.precision import autocast

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast(dev, update):
            logits = model(ids).logits
        logits = logits[:, prompt - 1:-1].float() / T  # [B, Lc, V]
        logp = logits.log_softmax(-1).gather(-1, ids[:, prompt:, None])[..., 0]  # [B, Lc]
        (-(logp * advantages[:, None]).mean()).backward()
        optimizer.step()

    return step


def bare_rows(name: str, labels: list[str], dev, args) -> None:
    """The bare steps ``labels`` (of ``CHECKPOINTED``) on one model of architecture
    ``name``, at each of ``args.rows``."""
    from pods.models.checkpointing import set_checkpointing
    from pods.train.optimizer import make_optimizer

    precision = default_precision(name, dev)
    model = build(name, dev, precision.weights, args.quick)
    optimizer = make_optimizer(model.parameters(), 1e-7, (0.9, 0.999), 0.0)
    for label in labels:
        set_checkpointing(model, CHECKPOINTED[label])
        for rows in args.rows:
            ids, advantages = random_batch(rows, model.config.vocab_size, args.prompt,
                                           args.new, dev)
            step = bare_step(model, optimizer, ids, advantages, precision.update, dev,
                             args.prompt)
            emit(args, {"model": name, "rows": rows, "variant": label,
                        "precision": precision.short, "checkpointing": CHECKPOINTED[label],
                        **guarded(step, model, rows, dev, args)})


def guarded(step, model, rows: int, dev, args) -> dict:
    try:
        return measure(step, model, rows, dev, args)
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}


def trainer_step(trainer, batch):
    """One update as the trainer runs it after ``sample`` (which sets ``before_step``)."""
    def step():
        trainer.before_step = (trainer.clock.seconds, None)
        trainer.update(batch)

    return step


def pods_rows(name: str, folder: str, label: str, keys: dict, dev, args) -> None:
    why = unavailable(keys, dev)
    if why:
        for rows in args.rows:
            emit(args, {"model": name, "rows": rows, "variant": label, "error": why})
        return
    trainer = trainer_for(folder, keys, args.rows[-1], args)
    for rows in args.rows:
        ids, advantages = random_batch(rows, trainer.model.config.vocab_size, args.prompt,
                                       args.new, dev)
        if label == "pods-groups":  # each group's rows continue its first row's prompt
            group = min(GROUP, rows)
            ids[:, :args.prompt] = ids[::group, :args.prompt].repeat_interleave(group, 0)
        step = trainer_step(trainer, sampled(ids, advantages, args.prompt))
        measured = guarded(step, trainer.model, rows, dev, args)
        emit(args, {"model": name, "rows": rows, "variant": label,
                    "precision": trainer.precision.short,
                    "checkpointing": checkpointing(trainer), **measured})


def checkpointing(trainer) -> bool | None:
    """Whether ``trainer``'s update recomputes activations: what ``auto`` chose, or the key
    as set; None where ``auto`` has not chosen."""
    chosen = trainer.update_spec.budget.get("checkpointing")
    asked = trainer.cfg.model.gradient_checkpointing
    return chosen if chosen is not None else None if asked == "auto" else asked


def save_architecture(name: str, dev, args, into: str) -> str:
    """``name``'s random weights and a word tokenizer in a folder pods loads (bf16 on a
    GPU: half the bytes to write; pods loads them into its own weight dtype)."""
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = build(name, dev, dtype, args.quick)
    folder = f"{into}/{name}"
    model.save_pretrained(folder)
    word_tokenizer(model.config.vocab_size).save_pretrained(folder)
    del model
    release(dev)
    return folder


def main() -> None:
    def extra(parser):
        parser.add_argument("--what", choices=("matmul", "update"), default="update")
        parser.add_argument("--variants", default=",".join(VARIANTS),
                            help="comma-separated names of VARIANTS")
        parser.add_argument("--tflops", type=float, default=None,
                            help="the matmul rate the shares are of (matmul's row)")

    args = section_args(__doc__.splitlines()[0], extra)
    dev = device()
    if args.what == "matmul":
        size = 512 if args.quick else 8192
        emit(args, {"size": size, "tflops": matmul_tflops(dev, size)})
        return
    args.rows = (2,) if args.quick else (16, 64)
    args.prompt, args.new = (8, 8) if args.quick else (PROMPT, NEW)
    args.repeats = 1 if args.quick else 2
    args.tflops = args.tflops or matmul_tflops(dev, 512 if args.quick else 8192)
    labels = [v for v in args.variants.split(",") if not redundant(v, dev)]
    bare = [v for v in labels if v in CHECKPOINTED]
    with tempfile.TemporaryDirectory() as tmp:
        for name in ARCHITECTURES:
            folder = None
            if bare:  # one model for the bare steps, with and without checkpointing
                bare_rows(name, bare, dev, args)
                release(dev)
            for label in (v for v in labels if v not in CHECKPOINTED):
                keys = VARIANTS[label]
                try:
                    if folder is None and unavailable(keys, dev) is None:
                        folder = save_architecture(name, dev, args, tmp)
                    pods_rows(name, folder, label, keys, dev, args)
                except Exception as error:  # the next variant still runs
                    emit(args, {"model": name, "variant": label, "rows": "-",
                                "error": failure(error)})
                release(dev)  # the variant's model and optimizer went with the call


if __name__ == "__main__":
    main()
