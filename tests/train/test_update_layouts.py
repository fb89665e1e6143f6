"""The update's layouts (pods.train.layout): micro-batches by tokens, one update equal to
padded's in every pass and combination, the check before the first update, and a step
record of the embedded default equal to padded's."""

import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from pods.config import LossConfig, OptimConfig
from pods.rollout import Rollouts
from pods.train.compute import Compute, with_compute
from pods.train.layout import choose, micro_batches, positions
from pods.train.selection import KeptBatch
from pods.train.update import UpdateSpec, policy_update


def kept_rows(vocabulary=64, seed=0):
    """P = 3 groups kept 3, 2 and 1 rows (batch-level selection keeps unequal numbers), a
    rank's padding row at the end (completion mask 0), prompts and completions ragged."""
    g = torch.Generator().manual_seed(seed)
    plen = torch.tensor([4, 4, 4, 7, 7, 2, 4])
    clen = torch.tensor([3, 9, 1, 6, 2, 9, 0])
    Lp, Lc = 7, 9
    prompts = torch.randint(3, vocabulary, (3, Lp), generator=g)[[0, 0, 0, 1, 1, 2, 0]]
    prompt_mask = (torch.arange(Lp) >= Lp - plen[:, None]).long()
    completion_mask = (torch.arange(Lc) < clen[:, None]).long()
    completions = torch.randint(3, vocabulary, (7, Lc), generator=g) * completion_mask
    logprobs = -torch.rand(7, Lc, generator=g) * completion_mask  # the engine's
    return Rollouts(prompts * prompt_mask, prompt_mask, completions, completion_mask,
                    [""] * 7, logprobs=logprobs)


def llama():
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True)).train()


def test_groups_are_packed_whole_under_the_token_budget():
    batch = kept_rows()
    rows = lambda parts: [p.rows.tolist() for p in parts]  # noqa: E731
    # shared: group costs 4+13 = 17, 7+8 = 15, 2+9 = 11 (the padding row joins group 0)
    assert rows(micro_batches(batch, "shared_prompt", None, 32)) == [[0, 1, 2, 6, 3, 4],
                                                                      [5]]
    assert rows(micro_batches(batch, "shared_prompt", None, 17)) == [[0, 1, 2, 6], [3, 4],
                                                                      [5]]
    # a group alone over the budget is split, its prompt read again in each run: group 0
    # as 4+3 | 4+9+1+0, group 1 as 7+6 | 7+2; group 2 (11) fits
    assert rows(micro_batches(batch, "shared_prompt", None, 14)) == [[0], [1, 2, 6], [3],
                                                                      [4], [5]]
    assert rows(micro_batches(batch, "shared_prompt", 3, None)) == [[0, 1, 2], [3, 4, 5],
                                                                     [6]]
    assert rows(micro_batches(batch, "shared_prompt", None, None)) == [list(range(7))]
    # padded: rows of the batch's width (16 positions), as many as the budget holds
    assert [p.rows for p in micro_batches(batch, "padded", None, 40)] == \
        [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]


def test_each_layout_counts_its_positions():
    batch = kept_rows()
    padded, _ = positions(micro_batches(batch, "padded", None, None), batch)
    packed, full = positions(micro_batches(batch, "packed", None, None), batch)
    shared, _ = positions(micro_batches(batch, "shared_prompt", None, None), batch)
    assert padded == full == 7 * 16
    assert packed == (4 + 3) + (4 + 9) + (4 + 1) + (7 + 6) + (7 + 2) + (2 + 9)  # 58
    assert shared == 4 + 7 + 2 + 3 + 9 + 1 + 6 + 2 + 9  # 43


def update(layout, model, ref=None, lora=False, **fields):
    """One policy_update on kept_rows in ``layout`` with SGD at lr 1 (a step is minus the
    gradient, so the weights compare the gradients); the trained weights after it."""
    model = copy.deepcopy(model)
    optim = OptimConfig(**{"max_grad_norm": 1.0,
                           **{k: v for k, v in fields.items() if k in OptimConfig.__match_args__}})
    loss = LossConfig(**{k: v for k, v in fields.items() if k in LossConfig.__match_args__})
    spec = UpdateSpec(optim, loss, 0.8, 9, layout=layout)
    if fields.get("weight_cast"):
        spec = with_compute(spec, model, ref, Compute(cast=True), log=lambda line: None)
    sgd = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    advantages = torch.tensor([1.0, -0.5, 0.3, -1.0, 0.7, 0.2, 0.0])
    stats = policy_update(model, ref, sgd, KeptBatch(kept_rows(), advantages, kept=6,
                                                      pad_rows=1), spec)
    return stats, {k: p.detach().clone() for k, p in model.named_parameters()
                   if p.requires_grad}


COMBINATIONS = {
    "plain": {},
    "two iterations": {"num_iterations": 2},
    "token micro-batches": {"micro_batch_tokens": 14},
    "row micro-batches": {"micro_batch_size": 2},
    "KL to a frozen copy": {"beta": 0.1, "ref": True},
    "token mask correction": {"is_correction": "token_mask", "is_cap": 1.5},
    "sequence truncate": {"is_correction": "sequence_truncate"},
    "token norm": {"norm": "token"},
}


@pytest.mark.parametrize("layout", ["packed", "shared_prompt"])
@pytest.mark.parametrize("case", COMBINATIONS)
def test_an_update_equals_padded(layout, case):
    fields = dict(COMBINATIONS[case])
    model = llama()
    ref = copy.deepcopy(model).eval() if fields.pop("ref", False) else None
    want_stats, want = update("padded", model, ref, **fields)
    got_stats, got = update(layout, model, ref, **fields)
    assert_same_steps(model, want, got)
    for key, value in want_stats.items():  # a token budget cuts padded rows, packed groups
        if key != "update/positions" and not key.startswith(("optim/micro_batch",
                                                             "update/micro_batches")):
            assert got_stats[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert got_stats["update/positions"] < want_stats["update/positions"]


def test_lora_with_its_base_as_the_kl_reference_equals_padded():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(llama(), LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                               target_modules=["q_proj", "v_proj"]))
    _, want = update("padded", model, beta=0.1)
    _, got = update("shared_prompt", model, beta=0.1)
    assert_same_steps(model, want, got)


def assert_same_steps(model, want, got, tolerance=1e-4):
    """The steps from ``model``'s weights to ``want`` and to ``got`` agree within
    ``tolerance`` of the largest step of each tensor (and the weights' float32 rounding)."""
    start = {k: p.detach() for k, p in model.named_parameters()}
    assert want.keys() == got.keys()
    for name, weight in want.items():
        step = weight - start[name]
        scale = step.abs().max().clamp(min=1e-12)
        assert (got[name] - weight).abs().max() <= tolerance * scale + 1e-8, name


def test_the_bf16_working_copy_is_within_bf16_rounding():
    model = llama()
    _, want = update("padded", model, weight_cast=True)
    _, got = update("shared_prompt", model, weight_cast=True)
    assert_same_steps(model, want, got, tolerance=3e-2)  # bf16 activations


def test_auto_takes_shared_prompt_where_the_attention_allows_and_says_why_not():
    layout, line = choose("auto", llama())
    assert layout == "shared_prompt" and line.startswith("update layout: auto chose "
                                                         "shared_prompt (this model's")
    sliding = AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=1,
        num_attention_heads=6, num_key_value_heads=2, attn_logit_softcapping=30.0))
    layout, line = choose("auto", sliding)
    assert layout == "padded" and "attn_logit_softcapping" in line
    assert line.startswith("update layout: auto chose padded (")
    with pytest.raises(ValueError, match="--update-layout padded or auto"):
        choose("shared_prompt", sliding)
    assert choose("padded", llama()) == ("padded", "update layout: padded (--update-layout "
                                                   "padded)")
    assert choose("packed", llama())[1].startswith("update layout: packed (--update-layout "
                                                   "packed; ")


def test_a_layout_that_differs_from_padded_falls_back_before_the_first_update(monkeypatch):
    import pods.models.packing as packing
    from pods.runtime.distributed import Dist
    from pods.train.layout_check import checked_layout

    model = llama()
    spec = UpdateSpec(OptimConfig(), LossConfig(), 1.0, 9, layout="shared_prompt")
    kept = KeptBatch(kept_rows(), torch.zeros(7), kept=6, pad_rows=1)
    said = []
    assert checked_layout(model, None, kept, spec, Dist(world=1), said.append) is spec
    assert "gives padded's log-probs" in said[-1]
    real = packing.Packing.masks
    monkeypatch.setattr(packing.Packing, "masks", lambda self: (
        real(self)[0], torch.ones_like(real(self)[1])))  # completions see every row
    with pytest.warns(RuntimeWarning, match="falls back to --update-layout padded"):
        assert checked_layout(model, None, kept, spec, Dist(world=1),
                              said.append).layout == "padded"


def test_a_step_of_the_embedded_default_equals_padded(tmp_path):
    """Two steps of `pods train` with each layout: every field of the records equal but
    times and the positions (float32 rounding: the loss and gradient norm to 1e-4)."""
    from pods.cli import main

    for layout in ("padded", "shared_prompt"):
        main(["train", "--max-steps", "2", "--eval-every", "1e9", "--update-layout", layout,
              "--out-dir", str(tmp_path), "--run-name", layout, "--progress", "false",
              "--checkpoint-every", "1e9"])
    records = {layout: [r for r in map(json.loads, (tmp_path / layout / "metrics.jsonl")
                                       .read_text().splitlines()) if r["kind"] == "step"]
               for layout in ("padded", "shared_prompt")}
    for want, got in zip(records["padded"], records["shared_prompt"], strict=True):
        for key, value in want.items():
            if key.startswith(("time", "mem/")) or key == "update/positions":
                continue
            if isinstance(value, str):
                assert got[key] == value, key
            else:
                assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
        assert got["update/positions"] < 0.5 * want["update/positions"]
        assert got["update/padded_positions"] == want["update/positions"]


def test_the_micro_batch_from_free_memory_is_tokens_under_the_packed_layouts(monkeypatch):
    """On a CUDA GPU with no micro-batch set, the estimate of pods.train.micro_batch gives
    the packed layouts a token budget (rows of one token) and padded rows of its width."""
    import pods.train.update as update_module
    from pods.runtime.distributed import Dist

    calls = []

    def fake(model, rows, row_tokens, compute_bytes, device, optimizer=None):
        calls.append((rows, row_tokens))
        return 20 if row_tokens == 1 else 3
    monkeypatch.setattr(update_module, "auto_micro_batch", fake)
    batch, optim = kept_rows(), OptimConfig()
    parts, chosen = update_module._parts(llama(), batch, optim, "shared_prompt", Dist(world=1))
    assert calls[-1] == (7 * 16, 1) and chosen == {"optim/micro_batch_tokens": 20.0}
    assert all(p.tokens(batch) <= 20 for p in parts if len(p.rows) > 1)  # whole groups, or one row
    parts, chosen = update_module._parts(llama(), batch, optim, "padded", Dist(world=1))
    assert calls[-1] == (7, 16) and chosen == {"optim/micro_batch_size": 3.0}
    assert [p.rows for p in parts] == [slice(0, 3), slice(3, 6), slice(6, 9)]


def test_the_micro_batch_asked_is_recorded_on_every_device():
    """Not only a CUDA GPU's choice: on a CPU the record says the rows a pass (all 7 without
    a flag; a token budget of 40 over padded rows of 16 positions: 2) or the token budget."""
    from pods.runtime.distributed import Dist
    from pods.train.update import _parts

    batch = kept_rows()  # 7 rows of 16 positions
    for layout, fields, want, count in (
            ("padded", {}, {"optim/micro_batch_size": 7.0}, 1),
            ("padded", {"micro_batch_tokens": 40}, {"optim/micro_batch_size": 2.0}, 4),
            ("shared_prompt", {"micro_batch_size": 3}, {"optim/micro_batch_size": 3.0}, 3),
            ("shared_prompt", {"micro_batch_tokens": 40}, {"optim/micro_batch_tokens": 40.0},
             None)):
        parts, chosen = _parts(llama(), batch, OptimConfig(**fields), layout, Dist(world=1))
        assert chosen == want, (layout, fields)
        assert count is None or len(parts) == count, (layout, fields)
