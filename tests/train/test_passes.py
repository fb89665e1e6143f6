"""The update's passes over several ranks (pods.train.passes): as many on every rank, from
as few reductions as the layout allows (each is a collective and a host read an update)."""

import pytest

from layout_cases import kept_rows, llama
from pods.config import LossConfig, OptimConfig
from pods.train import passes
from pods.train.update import UpdateSpec


class TwoRanks:
    """This rank of two, the other's values given: ``reduce`` takes the max of both and
    counts its calls."""

    world = 1 + 1

    def __init__(self, other: dict):
        self.other, self.calls = other, []

    def reduce(self, values: dict, op: str) -> dict:
        assert op == "max"
        self.calls.append(sorted(values))
        return {k: max(v, self.other[k]) for k, v in values.items()}


@pytest.mark.parametrize("layout,tokens", [("padded", 40), ("shared_prompt", 40),
                                           ("padded", None)])
def test_every_rank_runs_as_many_passes_from_one_reduction(layout, tokens):
    """kept_rows: 7 rows of width 7 + 9 = 16. The other rank holds 12 rows of width 20:
    padded parts of 40 positions hold 40 // 20 = 2 rows there and here, so 4 passes here
    and 6 there; every other layout's passes are counted after they are cut."""
    batch = kept_rows()
    dist = TwoRanks({"width": 20, "rows": 12, "parts": 6})
    spec = UpdateSpec(OptimConfig(micro_batch_tokens=tokens,
                                  micro_batch_size=None if tokens else 3),
                      LossConfig(), 1.0, 9, layout=layout)
    parts, _ = passes.parts(llama(), batch, spec, dist)
    assert len(parts) == 6 and len(dist.calls) == 1  # idle parts to the busiest's count
    if layout == "padded" and tokens:
        assert dist.calls == [["rows", "width"]]
        assert [p.count(batch) for p in parts if p.live] == [2, 2, 2, 1]
    else:
        assert dist.calls == [["parts"]]


class OneRank:
    world = 1

    def reduce(self, values: dict, op: str) -> dict:
        return values


@pytest.mark.parametrize("available,on", [(64 * 2**30, False), (2**20, True)])
def test_auto_checkpointing_is_chosen_once_from_the_memory_a_pass_needs(monkeypatch,
                                                                        available, on):
    """Off CUDA every row is one pass: checkpointing is on only where that pass would not
    fit in the machine's available memory without it; chosen once (the trainer does, when
    it is built), switched on the module the passes run through, and recorded at every
    update, which reads memory no more for it."""
    from pods.models.checkpointing import checkpointed
    from pods.train import micro_batch

    asked = []
    monkeypatch.setattr(micro_batch, "host_available_bytes",
                        lambda: asked.append(1) or available)
    model, batch = llama(), kept_rows()
    spec = UpdateSpec(OptimConfig(), LossConfig(), 1.0, 9, auto_checkpointing=True)
    said = passes.choose_checkpointing(model, 7, 7 + 9, spec, OneRank())
    assert said.startswith(f"gradient checkpointing (auto): {'on' if on else 'off'}: ")
    assert said.endswith(f"a pass takes {7 * 16} at most")  # 7 rows of 7 + 9, one pass
    for _ in range(2):
        _, chosen = passes.parts(model, batch, spec, OneRank())
        assert checkpointed(model) is on and spec.budget["checkpointing"] is on
        assert chosen["optim/gradient_checkpointing"] == float(on)
    assert len(asked) == 1  # one reading for with and without it, once
    fixed = UpdateSpec(OptimConfig(), LossConfig(), 1.0, 9)  # true or false: not chosen
    assert "optim/gradient_checkpointing" not in passes.parts(model, batch, fixed,
                                                              OneRank())[1]


def test_auto_checkpointing_is_the_same_on_every_rank(monkeypatch):
    """A rank whose memory holds its pass turns checkpointing on where another rank's
    does not: FSDP2's recompute gathers the weights again, on every rank or none."""
    from pods.models.checkpointing import checkpointed
    from pods.train import micro_batch

    monkeypatch.setattr(micro_batch, "host_available_bytes", lambda: 64 * 2**30)
    model, dist = llama(), TwoRanks({"on": 1.0})
    spec = UpdateSpec(OptimConfig(micro_batch_size=3), LossConfig(), 1.0, 9,
                      auto_checkpointing=True)
    said = passes.choose_checkpointing(model, 7, 16, spec, dist)
    assert dist.calls == [["on"]] and checkpointed(model) and spec.budget["checkpointing"]
    assert said.startswith("gradient checkpointing (auto): on: ")


def test_a_pass_has_a_fixed_size_unless_a_gpus_free_memory_cuts_the_passes():
    rows, width = 16, 200 + 512
    assert passes.fixed_pass(OptimConfig(), rows, width, "cuda") is None  # memory cuts
    assert passes.fixed_pass(OptimConfig(), rows, width, "cpu") == 16 * 712  # one pass
    assert passes.fixed_pass(OptimConfig(micro_batch_size=4), rows, width, "cuda") == 4 * 712
    assert passes.fixed_pass(OptimConfig(micro_batch_size=32), rows, width, "cpu") == 16 * 712
    assert passes.fixed_pass(OptimConfig(micro_batch_tokens=5000), rows, width, "cuda") == 5000
