"""Run under torchrun (2 CPU processes, gloo) by test_grad_buckets.py: the bf16 working
copy's gradients averaged in buckets during the backward against one all-reduce of each
gradient after it; prints OK (and how many buckets were launched before the backward
ended) or raises."""

import sys

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM

from pods.models.weight_cast import WeightCast
from pods.runtime.distributed import leave


def grads(model_dir: str, rank: int, bucketed: bool) -> tuple[dict, int]:
    model = AutoModelForCausalLM.from_pretrained(model_dir).train()
    cast = WeightCast(model)
    if bucketed:
        cast.buckets.__init__([m for _, m in cast.pairs if m.requires_grad],
                              bucket_bytes=4096)  # many small buckets
    generator = torch.Generator().manual_seed(rank)
    early = 0
    for micro in range(2):  # gradient accumulation: only the last backward is final
        ids = torch.randint(3, model.config.vocab_size, (3, 7), generator=generator)
        loss = cast.module(ids).logits.float().logsumexp(-1).mean()
        if bucketed and micro == 1:
            cast.arm_reduce(2)
        loss.backward()
        if bucketed and micro == 1:
            early = len(cast.buckets.launched)  # launched while the backward ran
    if bucketed:
        cast.all_reduce(2)
    else:  # the reference: each gradient reduced on its own after the backward
        for m in model.parameters():
            dist.all_reduce(m.grad)
            m.grad /= 2
    return {k: p.grad.clone() for k, p in model.named_parameters()}, early


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    want, _ = grads(sys.argv[1], rank, bucketed=False)
    got, early = grads(sys.argv[1], rank, bucketed=True)
    for name, grad in want.items():
        torch.testing.assert_close(got[name], grad, rtol=0, atol=0, msg=name)
    sys.stdout.write(f"OK {early}\n")  # one write: the ranks' lines never interleave
    dist.destroy_process_group()
    leave(0)  # as pods's CLI does: no interpreter teardown under torchrun


if __name__ == "__main__":
    main()
