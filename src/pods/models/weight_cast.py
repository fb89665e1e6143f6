"""The update's forward and backward passes on a bfloat16 copy of float32 weights, cast once
an optimizer step (``--weight-cast step``), instead of autocast casting every weight again
at every matmul of every micro-batch and of every recompute (``--weight-cast matmul``).

Why: autocast keeps no cast across micro-batches and checkpointed recomputes, and its
casts (``copy`` kernels) and the float32 copies of their gradients were 13% of an update's
device time for Qwen2.5-1.5B's architecture on an H200; the weights' cast is once a step
here. How: ``WeightCast.module`` is a plain model of the same config in bfloat16
(``refresh`` copies the float32 masters in); each of its parameters hands its gradient to
its master as soon as a backward pass has accumulated it (a post-accumulate-grad hook adds
it into the master's float32 ``.grad`` and frees the bf16 one), so micro-batches accumulate
in float32 as under autocast and torch's AdamW steps the float32 masters.

What differs from autocast: activations between the matmuls are bfloat16 too (the residual
stream, as in a bfloat16 model: the hf engine's sampling copy computes the same way); the
log-softmax and the loss stay float32 (pods.models.logprobs upcasts the logits). Used where
a run computes in bf16 with float32 weights, without LoRA and without FSDP2 (whose
mixed-precision policy gathers bf16 weights itself): ``pods.models.precision.plan``.
Memory: 2 bytes a parameter beside the float32 masters, shared with the hf engine's
bfloat16 sampling copy (``pods.models.precision.copy_module``: one module), which then
samples from exactly the weights and kernels the update computes with; the engine's sync
after each step and the update's refresh before it are one cast each."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from pods.models.checkpointing import checkpointed, set_checkpointing
from pods.runtime.grad_buckets import GradBuckets


class WeightCast:
    """A ``dtype`` copy of ``model`` (a transformers causal LM, float32 weights) to train
    through: ``refresh`` before each optimizer step's passes, ``module`` in them; the
    gradients land in float32 on ``model``'s parameters. Its parameters take gradients
    where the masters do (the sampling copy it may share generates without them).
    ``shared`` False: a module of its own, not the sampling copy (liger's kernels go on
    the update's module, and the sampler's compiled forward keeps torch's)."""

    def __init__(self, model, dtype: torch.dtype = torch.bfloat16, shared: bool = True):
        from pods.models.precision import copy_module

        self.model = model
        self.module = copy_module(model, dtype, shared)  # shared: the hf engine's sampling
        # copy, if it has one
        if checkpointed(model):
            set_checkpointing(self.module, True)
        masters = dict(model.named_parameters())
        ours = dict(self.module.named_parameters())
        if ours.keys() != masters.keys():
            raise ValueError(f"the bf16 working copy does not match the model: "
                             f"{sorted(ours.keys() ^ masters.keys())[:3]}; use "
                             f"--weight-cast matmul.")
        self.pairs = [(p, masters[name]) for name, p in ours.items()]  # (bf16, float32)
        self.buckets = GradBuckets([m for _, m in self.pairs if m.requires_grad])
        for p, master in self.pairs:
            p.requires_grad_(master.requires_grad)
            if master.requires_grad:  # the hook holds the master and the buckets, never
                # ``self``: the copy lives in a weak-keyed table whose key is ``model``
                # (pods.models.precision.copy_module), which ``self`` would keep alive
                p.register_post_accumulate_grad_hook(partial(to_master, master, self.buckets))
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the masters in (one cast a weight: one multi-tensor copy, not a kernel
        launch a weight on a GPU), in the model's train/eval mode."""
        if self.pairs:
            torch._foreach_copy_([p for p, _ in self.pairs], [m for _, m in self.pairs])
        self.module.train(self.model.training)

    def arm_reduce(self, world: int) -> None:
        """Under DDP: the next backward (the last micro-batch's) makes the final gradients;
        average them over ``world`` ranks in buckets as they come (pods.runtime.grad_buckets:
        DDP does not see gradients made on the copy), overlapping the backward."""
        self.buckets.arm(world)

    def all_reduce(self, world: int) -> None:
        """After that backward: the buckets not yet launched, then every average in place."""
        if not self.buckets.armed:
            self.buckets.arm(world)
        self.buckets.finish()

def to_master(master: Tensor, buckets: GradBuckets, p: Tensor) -> None:
    """``p``'s accumulated (bf16) gradient added into ``master``'s float32 one, and freed;
    under an armed reduce, ``master``'s gradient is then final."""
    if master.grad is None:
        master.grad = p.grad.to(master.dtype)
    else:
        master.grad.add_(p.grad)
    p.grad = None
    buckets.ready(master)
