"""Activation checkpointing switched through whichever name the installed transformers
has (``activation_checkpointing_*`` from 5.25, ``gradient_checkpointing_*`` before), with
no deprecation warning, and read back from the modules it marks."""

import warnings

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from pods.models.checkpointing import checkpointed, set_checkpointing


def tiny():
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1)).train()


def test_on_and_off_without_a_deprecation_warning():
    model = tiny()
    assert not checkpointed(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # transformers' FutureWarning for the old name
        set_checkpointing(model, True)
        assert checkpointed(model)
        set_checkpointing(model, False)
    assert not checkpointed(model)


def test_a_transformers_with_only_the_old_name_is_switched_by_it():
    class Old(torch.nn.Module):  # transformers before 5.25: gradient_checkpointing_* only
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def gradient_checkpointing_enable(self):
            self.layer.gradient_checkpointing = True

        def gradient_checkpointing_disable(self):
            self.layer.gradient_checkpointing = False

    model = Old()
    set_checkpointing(model, True)
    assert checkpointed(model)
    set_checkpointing(model, False)
    assert not checkpointed(model)


def test_the_checkpointed_model_computes_the_same_gradients():
    ids = torch.tensor([[1, 5, 7, 3, 2]])
    grads = []
    for on in (False, True):
        model = tiny()
        set_checkpointing(model, on)
        model(ids).logits.float().logsumexp(-1).sum().backward()
        grads.append(model.model.layers[0].mlp.up_proj.weight.grad)
    torch.testing.assert_close(grads[0], grads[1])
