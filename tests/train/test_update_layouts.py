"""The update's layouts (pods.train.layout): micro-batches by tokens, one update equal to
padded's in every pass and combination, the self-check (pods.train.layout_check); whole
runs of each architecture are in test_layout_models.py."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from layout_cases import assert_same_steps, kept_rows, llama
from pods.config import LossConfig, OptimConfig
from pods.models.packed_attention import refusal
from pods.rollout import Rollouts
from pods.train.compute import Compute, with_compute
from pods.train.layout import choose, micro_batches, positions
from pods.train.selection import KeptBatch
from pods.train.update import UpdateSpec, policy_update


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


def test_each_part_counts_its_rows():
    batch = kept_rows()  # 7 rows
    assert [p.count(batch) for p in micro_batches(batch, "padded", 3, None)] == [3, 3, 1]
    assert [p.count(batch) for p in micro_batches(batch, "packed", 4, None)] == [4, 3]
    for layout in ("padded", "packed", "shared_prompt"):
        for part in micro_batches(batch, layout, None, 40):
            assert part.count(batch) == len(part.take(batch.completion_ids))


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


def test_the_bf16_working_copy_is_within_bf16_rounding():
    model = llama()
    _, want = update("padded", model, weight_cast=True)
    _, got = update("shared_prompt", model, weight_cast=True)
    assert_same_steps(model, want, got, tolerance=3e-2)  # bf16 activations


def test_auto_takes_shared_prompt_where_the_attention_allows_and_says_why_not():
    layout, line = choose("auto", llama())
    assert layout == "shared_prompt" and line.startswith("update layout: auto chose "
                                                         "shared_prompt (")
    assert "attention: sdpa" in line
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
    from transformers import MistralConfig

    windowed = MistralConfig(sliding_window=4, num_hidden_layers=2,
                             layer_types=["full_attention"] * 2)
    assert "sliding_window 4" in refusal(windowed)  # Mistral windows every layer regardless


def check(model, spec=None, dist=None):
    """checked_layout of shared_prompt on kept_rows: (the layout kept, the lines said)."""
    from pods.runtime.distributed import Dist
    from pods.train.layout_check import checked_layout

    spec = spec or UpdateSpec(OptimConfig(), LossConfig(), 1.0, 9, layout="shared_prompt")
    said = []
    return checked_layout(model, kept_rows(), spec, dist or Dist(world=1),
                          said.append).layout, said


MEASURED = {"shared_prompt": 0.5, "packed": 1.2}  # a GPU check's figures (x padded's time)
AUTO = [  # device, FlexAttention, rows per group, refusal, measured -> layout, reason
    ("cpu", False, 16, None, None, "shared_prompt", "each prompt once"),
    ("cpu", False, 1, None, None, "shared_prompt", "each prompt once"),  # as before
    ("cpu", False, 16, "sliding-window attention", None, "padded", "sliding-window"),
    ("cuda", True, 16, None, None, "padded", "not been measured faster"),
    ("cuda", True, 1, None, None, "padded", "packed has not been measured"),
    ("cuda", False, 16, None, MEASURED, "padded", "no FlexAttention"),
    ("cuda", True, 16, "layers of type linear", MEASURED, "padded", "linear"),
    ("cuda", True, 16, None, MEASURED, "shared_prompt", "0.50x padded's"),
    ("cuda", True, 1, None, MEASURED, "padded", "packed took 1.20x"),  # rows share no prompt
    ("cuda", True, 1, None, {"packed": 0.9}, "packed", "0.90x padded's"),
]


@pytest.mark.parametrize("device,flex,rows,refused,measured,layout,reason", AUTO)
def test_auto_takes_what_was_measured_on_the_device_kind(monkeypatch, device, flex, rows,
                                                         refused, measured, layout, reason):
    import pods.train.layout as layouts

    if measured is not None:
        monkeypatch.setattr(layouts, "CUDA_MEASURED", {**layouts.CUDA_MEASURED, **measured})
    chosen, why = layouts.auto_layout(device, flex, rows, refused)
    assert chosen == layout and reason in why, why


def test_a_packed_layout_asked_on_cuda_needs_its_flex_kernel(monkeypatch):
    import pods.models.packed_flex as packed_flex
    import pods.train.layout as layouts

    monkeypatch.setattr(layouts, "_device", lambda model: torch.device("cuda"))
    monkeypatch.delenv(packed_flex.ENV, raising=False)
    layout, line = choose("auto", llama())
    assert layout == "padded" and line.startswith("update layout: auto chose padded (") \
        and "docs/results/gpu.md" in line
    assert "attention: flex" in choose("shared_prompt", llama())[1]
    monkeypatch.setenv(packed_flex.ENV, "sdpa")
    with pytest.raises(ValueError, match="needs its FlexAttention kernel"):
        choose("packed", llama())


def test_a_layout_that_differs_from_padded_falls_back_before_the_first_update(monkeypatch):
    import pods.models.packing as packing

    model = llama()
    layout, said = check(model)
    assert layout == "shared_prompt" and "gives padded's log-probs on rows of 3 groups" in \
        said[-1]
    real = packing.Packing.masks
    monkeypatch.setattr(packing.Packing, "masks", lambda self: (
        real(self)[0], torch.ones_like(real(self)[1])))  # completions see every row
    with pytest.warns(RuntimeWarning, match="a token.*falls back to --update-layout padded"):
        assert check(model)[0] == "padded"


def test_a_packed_pass_that_raises_falls_back_with_its_error_and_modes_restored():
    from transformers import StableLmConfig

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(StableLmConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2)).train()
    model.model.layers[0].mlp.eval()  # a module the run keeps in eval mode stays so
    with pytest.warns(RuntimeWarning, match="failed: RuntimeError: attention 'pods_packed' "
                                            "was called without pods_packing="):
        assert check(model)[0] == "padded"  # its decoder layer drops the keyword
    assert model.training and model.model.layers[0].self_attn.training
    assert not model.model.layers[0].mlp.training


def test_the_check_runs_without_dropout_and_restores_train_mode():
    from transformers import GPT2Config

    torch.manual_seed(0)
    gpt2 = AutoModelForCausalLM.from_config(GPT2Config(
        vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=64)).train()  # dropout 0.1
    assert check(gpt2)[0] == "shared_prompt" and gpt2.training
    model = llama()
    spec = with_compute(UpdateSpec(OptimConfig(), LossConfig(), 1.0, 9, layout="shared_prompt"),
                        model, None, Compute(cast=True), log=lambda line: None)
    assert check(model, spec)[0] == "shared_prompt"
    assert all(m.training for m in spec.cast.module.modules())  # refreshed, then restored


class OtherRank:
    """A second rank for the check's reductions: its packed pass raised."""

    world = 2

    def unwrap(self, model):
        return model

    def reduce(self, values, op):
        return {k: max(v, float("inf")) for k, v in values.items()}

    def gather_objects(self, obj):
        return [obj, "ValueError: on rank 1"]


def test_every_rank_falls_back_when_one_rank_failed():
    with pytest.warns(RuntimeWarning, match="failed: ValueError: on rank 1"):
        assert check(llama(), dist=OtherRank())[0] == "padded"


def test_the_check_takes_the_first_rows_of_groups_across_the_batch():
    from pods.train.layout_check import check_rows

    batch = kept_rows()  # groups of 3 (and the padding row), 2 and 1 rows
    assert check_rows(batch).tolist() == [0, 1, 2, 6, 3, 4, 5]
    ten = Rollouts(*(t.repeat_interleave(4, 0) for t in (  # 10 groups of 4 rows
        torch.arange(10)[:, None] + torch.zeros(1, 3, dtype=torch.long),
        torch.ones(10, 3, dtype=torch.long), torch.ones(10, 2, dtype=torch.long),
        torch.ones(10, 2, dtype=torch.long))), [""] * 40)
    assert check_rows(ten).tolist() == [0, 1, 2, 3, 12, 13, 14, 15, 24, 25, 26, 27,
                                         36, 37, 38, 39]  # groups 0, 3, 6 and 9


def test_the_micro_batch_from_free_memory_is_tokens_under_the_packed_layouts(monkeypatch):
    """On a CUDA GPU with no micro-batch set, the estimate of pods.train.micro_batch gives
    a budget of positions a pass: the packed layouts take it as tokens, padded as rows of
    its width. It is measured once a run, not at every update (its memory reads are host
    synchronisations)."""
    import pods.train.passes as passes
    from pods.runtime.distributed import Dist

    calls = []

    def fake(model, rows, row_tokens, compute_bytes, device, optimizer=None):
        calls.append((rows, row_tokens))
        return 50  # positions
    monkeypatch.setattr(passes, "auto_micro_batch", fake)
    batch, spec = kept_rows(), UpdateSpec(OptimConfig(), LossConfig(), 1.0, 9,
                                          layout="shared_prompt")
    parts, chosen = passes.parts(llama(), batch, spec, Dist(world=1))
    assert calls == [(2**62, 1)] and chosen == {  # the same keys in every layout
        "optim/micro_batch_tokens": 50.0,
        "optim/micro_batch_size": max(float(len(p.rows)) for p in parts)}  # rows: tensors
    assert all(p.tokens(batch) <= 50 for p in parts if len(p.rows) > 1)  # whole groups, or one row
    padded = UpdateSpec(OptimConfig(), LossConfig(), 1.0, 9, budget=spec.budget)
    parts, chosen = passes.parts(llama(), batch, padded, Dist(world=1))
    assert chosen == {"optim/micro_batch_tokens": 48.0,  # 50 // 16 = 3 rows of 16 positions
                      "optim/micro_batch_size": 3.0}
    assert [p.rows for p in parts] == [slice(0, 3), slice(3, 6), slice(6, 9)]
    assert len(calls) == 1  # the budget of the first update
    policy = llama()
    for _ in range(2):
        policy_update(policy, None, torch.optim.SGD(policy.parameters(), lr=0.1),
                      KeptBatch(kept_rows(), torch.linspace(-1, 1, 7), kept=6, pad_rows=1),
                      spec)
    assert len(calls) == 1


def test_the_micro_batch_asked_is_recorded_on_every_device():
    """Not only a CUDA GPU's choice: on a CPU the record says the token positions a pass may
    hold and the rows of the largest pass, in every layout (all 7 rows of 16 positions in
    one pass without a flag; a token budget of 40 over padded rows of 16 positions: 2)."""
    import pods.train.passes as passes
    from pods.runtime.distributed import Dist

    batch = kept_rows()  # 7 rows of 16 positions
    for layout, fields, want, count in (
            ("padded", {}, (112.0, 7.0), 1),
            ("padded", {"micro_batch_tokens": 40}, (40.0, 2.0), 4),
            ("shared_prompt", {"micro_batch_size": 3}, (48.0, 3.0), 3),
            ("shared_prompt", {"micro_batch_tokens": 40}, (40.0, None), None)):
        spec = UpdateSpec(OptimConfig(**fields), LossConfig(), 1.0, 9, layout=layout)
        parts, chosen = passes.parts(llama(), batch, spec, Dist(world=1))
        assert chosen["optim/micro_batch_tokens"] == want[0], (layout, fields)
        largest = max(len(p.take(batch.completion_ids)) for p in parts)
        assert chosen["optim/micro_batch_size"] == (want[1] or largest), (layout, fields)
        assert count is None or len(parts) == count, (layout, fields)
