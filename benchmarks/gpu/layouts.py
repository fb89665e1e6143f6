"""Section layouts of the GPU check (benchmarks/gpu/check.py): the update's layouts side by
side (--update-layout padded, packed, shared_prompt), as the trainer runs them on the GPU
(its default compute: float32 weights, the bf16 working copy, the micro-batch from free
memory), at the paper's GSM8K and MATH shapes (P = 1, m = 16 and 8; the ragged lengths of
benchmarks/update/layouts.py: a prompt of 150-250 tokens, completions ~ N(250, 80) in
[20, 512], a tenth cut at 512), on Qwen2.5-1.5B's architecture (random weights). Each row:
seconds of one update (median of 3 after a warm-up), peak GiB allocated during it, the
positions the passes processed and what padded would have, and the micro-batch chosen from
free memory at step 1 and at a later step (the same where the optimizer's state is not
counted twice).
Each row runs in a fresh process (``--row shape,layout,kernel``), so that no row inherits
another's memory or compiled kernels, stopped at an even part of the share that is left.
The packed layouts' attention kernel is pinned per row (PODS_PACKED_KERNEL,
pods.models.packed_flex): on CUDA FlexAttention (what they run there) and, for
shared_prompt, the SDPA path beside it; on a CPU the SDPA path alone (FlexAttention has
no backward there)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
from gpucommon import (
    device,
    emit,
    failure,
    left,
    missing_keys,
    read_rows,
    release,
    run_capped,
    section_args,
    suite_script,
    timed,
)

from update import sampled, save_architecture, trainer_for, trainer_step

SHAPES = ("gsm8k", "math")
MODEL = "Qwen2.5-1.5B"
ENV = "PODS_PACKED_KERNEL"  # pods.models.packed_flex.ENV


def rows_of(dev: torch.device) -> list[tuple[str, str, str]]:
    """(shape, layout, kernel) of each row: padded, then the packed layouts on the kernel
    they run on this device, and shared_prompt on the SDPA path beside FlexAttention."""
    kernels = [("packed", "flex"), ("shared_prompt", "flex"), ("shared_prompt", "sdpa")] \
        if dev.type == "cuda" else [("packed", "sdpa"), ("shared_prompt", "sdpa")]
    return [(shape, layout, kernel) for shape in SHAPES
            for layout, kernel in [("padded", "-"), *kernels]]


def row(trainer, rows, dev, args) -> dict:
    """One layout's update on ``rows``: seconds, peak GiB, positions, micro-batch."""
    batch = sampled(torch.cat([rows.prompt_ids, rows.completion_ids], 1).to(dev),
                    torch.randn(rows.completion_ids.shape[0], device=dev),
                    rows.prompt_ids.shape[1])
    kept = batch.kept.rows  # the random ids, with the shape's ragged masks
    kept.prompt_mask, kept.completion_mask = rows.prompt_mask.to(dev), \
        rows.completion_mask.to(dev)
    step = trainer_step(trainer, batch)
    trainer.before_step = (trainer.clock.seconds, None)
    first = trainer.update(batch)  # step 1: the micro-batch before the optimizer's state
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    seconds = timed(step, dev, args.repeats)
    trainer.before_step = (trainer.clock.seconds, None)
    record = trainer.update(batch)  # a later step (5 and up): the micro-batch beside it
    return {"seconds": seconds, "positions": record.get("update/positions"),
            "padded_positions": record.get("update/padded_positions"),
            "micro_batch_tokens": record.get("optim/micro_batch_tokens"),
            "micro_batch_size": record.get("optim/micro_batch_size"),
            "micro_batch_step1": first.get("optim/micro_batch_tokens",
                                           first.get("optim/micro_batch_size")),
            "peak_gib": torch.cuda.max_memory_allocated(dev) / 2**30
            if dev.type == "cuda" else None}


def one_row(args, dev) -> None:
    """The row ``args.row`` (shape,layout,kernel), measured in this process."""
    shape, layout, kernel = args.row.split(",")
    head = {"model": MODEL, "shape": shape, "layout": layout, "kernel": kernel}
    if kernel != "-":
        os.environ[ENV] = kernel
    shapes = suite_script("benchmarks/update/layouts.py", "update_layouts")
    _, rows = shapes.batch(shape, args.quick)
    args.new = rows.completion_ids.shape[1]
    try:
        trainer = trainer_for(args.folder, {"update_layout": layout,
                                            "gradient_checkpointing": True},
                              rows.completion_ids.shape[0], args)
        emit(args, {**head, **row(trainer, rows, dev, args)})
    except Exception as error:
        emit(args, {**head, "error": failure(error)})


def each_row(args, dev, folder: str) -> None:
    """Every row in a fresh process of its own, capped at an even part of what is left of
    the section's share (a row that runs long, a compile that never ends, costs its own
    cap: the rows after it are still reached)."""
    todo = rows_of(dev)
    for k, (shape, layout, kernel) in enumerate(todo):
        head = {"model": MODEL, "shape": shape, "layout": layout, "kernel": kernel}
        cap = (left(args) - 2) / (len(todo) - k)
        if cap < 3:
            emit(args, {**head, "error": "no time left in the section's share"})
            continue
        before = len(read_rows(Path(args.out) / f"{args.section}.jsonl"))
        command = [sys.executable, __file__, "--out", args.out, "--seconds",
                   str(cap), "--section", args.section, "--folder", folder, "--row",
                   f"{shape},{layout},{kernel}"] + (["--quick"] if args.quick else [])
        code = run_capped(command, cap)  # its compile workers stopped with it
        why = f"stopped at its cap ({cap:.0f} s, an even part of the share left)" \
            if code is None else f"its process exited {code} (see the section's log)"
        if len(read_rows(Path(args.out) / f"{args.section}.jsonl")) == before:
            emit(args, {**head, "error": why})
        release(dev)


def main() -> None:
    def extra(parser):
        parser.add_argument("--row", default=None, help="shape,layout,kernel: one row here")
        parser.add_argument("--folder", default=None, help="the saved architecture")

    args = section_args(__doc__.splitlines()[0], extra)
    dev = device()
    args.repeats = 1 if args.quick else 3
    if args.row:
        return one_row(args, dev)
    if missing_keys({"update_layout": "padded"}):
        emit(args, {"model": MODEL, "error": "no update_layout in this checkout"})
        return
    with tempfile.TemporaryDirectory() as tmp:
        each_row(args, dev, save_architecture(MODEL, dev, args, tmp))


if __name__ == "__main__":
    main()
