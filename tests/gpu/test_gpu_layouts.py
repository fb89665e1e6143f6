"""On a CUDA GPU (make test-gpu): the packed and shared-prompt layouts give padded's update
(the same step, float32; within bf16 rounding on the bf16 working copy), and the automatic
micro-batch records the same keys in every layout (pods.train.passes.parts)."""

import copy

import pytest
import torch

from layout_cases import assert_same_steps, kept_rows, llama
from pods.config import LossConfig, OptimConfig
from pods.rollout import Rollouts
from pods.train.compute import Compute, with_compute
from pods.train.selection import KeptBatch
from pods.train.update import UpdateSpec, policy_update

pytestmark = pytest.mark.gpu


def on_gpu(rows: Rollouts) -> Rollouts:
    return Rollouts(*(t.cuda() if isinstance(t, torch.Tensor) else t
                      for t in (rows.prompt_ids, rows.prompt_mask, rows.completion_ids,
                                rows.completion_mask, rows.texts, rows.logprobs)))


def update(layout: str, model, cast: bool = False, **optim):
    model = copy.deepcopy(model)
    spec = UpdateSpec(OptimConfig(**optim), LossConfig(), 0.8, 9, layout=layout)
    if cast:
        spec = with_compute(spec, model, None, Compute(cast=True), log=lambda line: None)
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    advantages = torch.tensor([1.0, -0.5, 0.3, -1.0, 0.7, 0.2, 0.0], device="cuda")
    stats = policy_update(model, None, sgd, KeptBatch(on_gpu(kept_rows()), advantages, 6, 1),
                          spec)
    return stats, {k: p.detach().clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("layout", ["packed", "shared_prompt"])
def test_an_update_on_the_gpu_equals_padded(layout):
    model = llama().cuda()
    _, want = update("padded", model)
    stats, got = update(layout, model)
    assert_same_steps(model, want, got)
    _, want = update("padded", model, cast=True)
    _, got = update(layout, model, cast=True)
    assert_same_steps(model, want, got, tolerance=3e-2)


def test_the_automatic_micro_batch_has_the_same_keys_in_every_layout():
    model = llama().cuda()
    keys = {layout: {k for k in update(layout, model)[0] if k.startswith("optim/micro")}
            for layout in ("padded", "packed", "shared_prompt")}
    assert keys["padded"] == keys["packed"] == keys["shared_prompt"] == {
        "optim/micro_batch_tokens", "optim/micro_batch_size"}
