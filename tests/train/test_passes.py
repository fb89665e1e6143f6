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
