"""No host synchronisation a layer in the packed layouts' update: what the layers share
(masks, slot indices, the block mask) is made once a micro-batch, so a model of 4 layers
reads the device as often as one of 2. On a GPU each such read stalls the queue of kernels
(``.item()``, a boolean mask's ``nonzero``); counted here at the dispatcher on a CPU."""

import traceback
import warnings
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, LlamaConfig

import pods.models.packed_flex as packed_flex
from layout_cases import kept_rows
from pods.config import LossConfig, OptimConfig
from pods.models.logprobs import packed_logprobs
from pods.models.packed_attention import packed_attention
from pods.models.packing import pack
from pods.train.selection import KeptBatch
from pods.train.update import UpdateSpec, policy_update

# operators whose result the host must wait for: a scalar read, or an output whose size
# depends on the data
READS = {"_local_scalar_dense", "nonzero", "masked_select", "masked_scatter", "_unique2",
         "unique_dim", "unique_consecutive", "repeat_interleave"}


class HostReads(TorchDispatchMode):
    """Counts the operators that synchronise the host with the device (``READS``, and
    indexing by a boolean mask, which takes its nonzero)."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        boolean = name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if
            i is not None)
        repeat_sized = name == "repeat_interleave" and (kwargs or {}).get("output_size")
        if (name in READS and not repeat_sized) or boolean:
            self.counts[f"{func}{'[bool]' if boolean else ''}"] += 1
        return func(*args, **(kwargs or {}))


def model(layers: int):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=layers,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64)).train()


def update_reads(layers: int, layout: str) -> Counter:
    """The host reads of one policy_update (forward, backward, optimizer step)."""
    policy = model(layers)
    spec = UpdateSpec(OptimConfig(), LossConfig(), 0.8, 9, layout=layout)
    sgd = torch.optim.SGD(policy.parameters(), lr=0.1)
    kept = KeptBatch(kept_rows(), torch.linspace(-1, 1, 7), kept=6, pad_rows=1)
    with HostReads() as reads:
        policy_update(policy, None, sgd, kept, spec)
    return reads.counts


def test_the_counter_sees_host_reads():
    x = torch.arange(4.0)
    with HostReads() as reads:
        x.sum().item()
        x[x > 1].sum()
        x.repeat_interleave(2, output_size=8)  # sized by the caller: no read
    assert sum(reads.counts.values()) == 2, reads.counts


@pytest.mark.parametrize("layout", ["packed", "shared_prompt"])
def test_a_packed_update_reads_the_host_as_often_with_4_layers_as_with_2(layout):
    two, four = update_reads(2, layout), update_reads(4, layout)
    assert sum(two.values()) > 0  # the update's own reads: its metrics, the step's norm
    assert four == two, (two, four)


def test_flex_attentions_forward_reads_no_host_a_layer(monkeypatch):
    """The forward FlexAttention runs on a CPU (torch has no backward there): its labels
    and block mask are made once a micro-batch too."""
    from torch.utils._python_dispatch import _disable_current_modes

    monkeypatch.setenv(packed_flex.ENV, "flex")
    flex = packed_flex._flex(torch.device("cpu"))

    def uncounted(*args, **kwargs):  # FlexAttention itself outside the counter (its
        with _disable_current_modes():  # operator of operators takes no dispatch mode)
            return flex(*args, **kwargs)
    monkeypatch.setattr(packed_flex, "_flex", lambda device: uncounted)
    data = kept_rows()
    counts = []
    for layers in (2, 4):
        policy, packing = model(layers), pack(data.prompt_ids, data.prompt_mask,
                                              data.completion_ids, data.completion_mask, True)
        with HostReads() as reads, torch.no_grad(), packed_attention(policy), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")  # flex_attention uncompiled
            packed_logprobs(policy, packing, data.completion_ids, data.completion_mask, 1.0)
        assert packing.cached("kernel", lambda: None) == "flex"
        counts.append(reads.counts)
    assert counts[0] == counts[1], counts


class UpdateReads(HostReads):
    """Scalar reads (``.item()``, ``float()``) made by the update's own code
    (pods.train), not by the model it calls."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ == "_local_scalar_dense":
            ours = [f for f in traceback.extract_stack() if "/pods/" in f.filename]
            if ours and "/pods/train/" in ours[-1].filename:
                self.counts[f"{ours[-1].filename.split('/pods/')[-1]}:{ours[-1].lineno}"] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("layout", ["padded", "shared_prompt"])
def test_the_updates_own_reads_do_not_grow_with_its_micro_batches(layout):
    """Each part's loss and metrics are read in one transfer after the last backward."""
    counts = []
    for rows in (None, 1):  # one pass, or seven
        policy = model(2)
        spec = UpdateSpec(OptimConfig(micro_batch_size=rows), LossConfig(), 0.8, 9,
                          layout=layout)
        kept = KeptBatch(kept_rows(), torch.linspace(-1, 1, 7), kept=6, pad_rows=1)
        with UpdateReads() as reads:
            policy_update(policy, None, torch.optim.SGD(policy.parameters(), lr=0.1), kept,
                          spec)
        counts.append(sum(reads.counts.values()))
    assert 0 < counts[0] == counts[1] <= 4, counts  # the normaliser's two, the step's norm
