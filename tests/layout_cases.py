"""A kept batch, a model and a comparison shared by the update layouts' tests on the CPU
(tests/train) and on a GPU (tests/gpu)."""

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from pods.rollout import Rollouts


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


def assert_same_steps(model, want, got, tolerance=1e-4):
    """The steps from ``model``'s weights to ``want`` and to ``got`` agree within
    ``tolerance`` of the largest step of each tensor (and the weights' float32 rounding)."""
    start = {k: p.detach() for k, p in model.named_parameters()}
    assert want.keys() == got.keys()
    for name, weight in want.items():
        step = weight - start[name]
        scale = step.abs().max().clamp(min=1e-12)
        assert (got[name] - weight).abs().max() <= tolerance * scale + 1e-8, name
