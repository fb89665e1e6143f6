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
The kernel under the packed layouts is torch's scaled_dot_product_attention on the two
dense problems of pods.models.packing (flash or memory-efficient attention on CUDA)."""

from __future__ import annotations

import tempfile

import torch
from gpucommon import (
    device,
    emit,
    failure,
    left,
    missing_keys,
    release,
    section_args,
    suite_script,
    timed,
)

from update import sampled, save_architecture, trainer_for, trainer_step

LAYOUTS = ("padded", "packed", "shared_prompt")
SHAPES = ("gsm8k", "math")
MODEL = "Qwen2.5-1.5B"


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


def main() -> None:
    args = section_args(__doc__.splitlines()[0])
    dev = device()
    args.repeats = 1 if args.quick else 3
    shapes = suite_script("benchmarks/update/layouts.py", "update_layouts")
    if missing_keys({"update_layout": "padded"}):
        emit(args, {"model": MODEL, "error": "no update_layout in this checkout"})
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_architecture(MODEL, dev, args, tmp)
        for shape in SHAPES:
            _, rows = shapes.batch(shape, args.quick)
            args.new = rows.completion_ids.shape[1]
            for layout in LAYOUTS:
                if left(args) < 5:
                    emit(args, {"model": MODEL, "shape": shape, "layout": layout,
                                "error": "no time left in the section's share"})
                    continue
                try:
                    trainer = trainer_for(folder, {"update_layout": layout,
                                                   "gradient_checkpointing": True},
                                          rows.completion_ids.shape[0], args)
                    emit(args, {"model": MODEL, "shape": shape, "layout": layout,
                                **row(trainer, rows, dev, args)})
                except Exception as error:  # the next layout still runs
                    emit(args, {"model": MODEL, "shape": shape, "layout": layout,
                                "error": failure(error)})
                trainer = None
                release(dev)


if __name__ == "__main__":
    main()
