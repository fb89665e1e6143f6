"""Gradients averaged over data-parallel ranks in buckets, while the backward pass runs.

DDP reduces the gradients of the module it wraps in buckets of about 25 MB, each launched
as soon as every gradient in it is final, so the communication overlaps the rest of the
backward. The update's bf16 working copy (pods.models.weight_cast) makes its gradients on
a module DDP does not wrap: they land on the float32 masters, and without this they would
be reduced one tensor at a time after the whole backward (about 6 GB of float32 a step for
1.5B parameters, none of it overlapped). ``GradBuckets`` does what DDP does for them:
buckets fixed by parameter order (the same on every rank), launched asynchronously in
bucket order (so the ranks' collectives match) as each fills, the rest at ``finish``.
"""

from __future__ import annotations

import torch
from torch import Tensor

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb


class GradBuckets:
    """The float32 gradients of ``masters`` averaged over ``world`` ranks: ``arm`` before
    the backward whose gradients are final (the last micro-batch's), ``ready(master)`` as
    each one is, ``finish`` after it."""

    def __init__(self, masters: list[Tensor], bucket_bytes: int = BUCKET_BYTES):
        self.buckets: list[list[Tensor]] = [[]]
        size = 0
        for m in reversed(masters):  # the backward reaches the last layers first
            if size and size + m.numel() * 4 > bucket_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(m)
            size += m.numel() * 4
        self.of = {id(m): k for k, bucket in enumerate(self.buckets) for m in bucket}
        self.armed, self.world = False, 1
        self.waiting: list[set[int]] = []
        self.launched: list[tuple] = []  # (work, flat buffer, bucket)

    def arm(self, world: int) -> None:
        """The next backward makes the final gradients: reduce them as they come."""
        self.armed, self.world, self.launched = True, world, []
        self.waiting = [{id(m) for m in bucket} for bucket in self.buckets]

    def ready(self, master: Tensor) -> None:
        """``master``'s gradient is final (its post-accumulate hook ran): launch every
        bucket, in order, that is now complete."""
        if self.armed and id(master) in self.of:
            self.waiting[self.of[id(master)]].discard(id(master))
            self._launch()

    def _launch(self) -> None:
        import torch.distributed as dist

        while len(self.launched) < len(self.buckets) and not self.waiting[len(self.launched)]:
            bucket = self.buckets[len(self.launched)]
            for m in bucket:  # a weight no pass reached this step: a zero gradient
                if m.grad is None:
                    m.grad = torch.zeros_like(m)
            flat = torch.cat([m.grad.flatten() for m in bucket])
            self.launched.append((dist.all_reduce(flat, async_op=True), flat, bucket))

    def finish(self) -> None:
        """Launch what is left (weights that got no gradient), wait for every bucket and
        write the averages back into the masters' gradients."""
        if not self.armed:
            self.arm(self.world)
        self.waiting = [set() for _ in self.buckets]
        self._launch()
        for work, flat, bucket in self.launched:
            work.wait()
            flat /= self.world
            offset = 0
            for m in bucket:
                m.grad.copy_(flat[offset:offset + m.numel()].view_as(m.grad))
                offset += m.numel()
        self.armed, self.launched = False, []
