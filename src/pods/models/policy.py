"""Loading the policy from its source (pods.models.source: a hub id, a folder, a GGUF file,
the embedded model), in its dtype, with LoRA; and a checkpoint's model folder (full
weights, or an adapter on the base)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch

from pods.config.groups import ModelConfig
from pods.models.checkpointing import set_checkpointing
from pods.models.precision import weights_dtype
from pods.models.source import resolve

DEFAULT_MODEL = ModelConfig()


def load_policy(model: str, device: torch.device, options: ModelConfig = DEFAULT_MODEL,
                log=print):
    """(model, tokenizer) from any source pods.models.source knows (a hub id, a folder, a
    GGUF file with ``options.gguf_file``, 'tiny', a fetched model's short name), in the
    requested dtype, wrapped in a LoRA adapter when ``options.lora_rank`` > 0."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = resolve(model, options.gguf_file, log=log)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
    except (OSError, ValueError) as error:  # not a folder, not on the hub, or offline
        raise ValueError(
            f"could not load the model {model!r}: {str(error).splitlines()[0]} Pass a local "
            f"folder made with save_pretrained, or a hub id on a machine that can reach the "
            f"hub (downloads go to HF_HOME).") from None
    tokenizer.padding_side = "left"  # generation continues every prompt at the same column
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    policy = AutoModelForCausalLM.from_pretrained(
        model, dtype=weights_dtype(options, device)).to(device)
    if options.gradient_checkpointing is True:  # auto: chosen by the trainer
        set_checkpointing(policy, True)
        policy.config.use_cache = False  # generate() turns the KV cache back on per call
    if options.lora_rank > 0:
        policy = add_lora(policy, options)
    return policy, tokenizer


def add_lora(model, options: ModelConfig):
    """Wrap ``model`` in a trainable LoRA adapter; the base weights are frozen."""
    from peft import LoraConfig, get_peft_model

    modules = [m.strip() for m in options.lora_target_modules.split(",") if m.strip()]
    config = LoraConfig(r=options.lora_rank, lora_alpha=options.lora_alpha,
                        lora_dropout=options.lora_dropout, target_modules=modules,
                        task_type="CAUSAL_LM")
    if options.gradient_checkpointing is not False:  # on, or auto's choice may be
        model.enable_input_require_grads()  # checkpointed blocks need a grad-carrying input
    with peft_reading_old_names():
        return get_peft_model(model, config)


@contextmanager
def peft_reading_old_names():
    """Without the FutureWarning transformers (5.25 on) gives each time peft, wrapping a
    model, reads ``is_gradient_checkpointing`` (renamed ``is_activation_checkpointing``):
    nothing a user of pods can change."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated",
                                FutureWarning)
        yield


def is_adapter(path: str | Path) -> bool:
    """Whether a saved model folder holds a LoRA adapter rather than full weights."""
    return (Path(path) / "adapter_config.json").is_file()


def load_saved_policy(path: str | Path, base: str, device: torch.device,
                      options: ModelConfig = DEFAULT_MODEL):
    """(model, tokenizer) of a checkpoint's model folder: full weights, or a LoRA adapter
    put on ``base`` (the run's --model, with its ``options.gguf_file``). The weights take
    the dtype the run trained them in (a LoRA run's frozen base: bfloat16 on a GPU with
    bf16), chosen before the adapter is set aside."""
    path = Path(path)
    options = replace(options, dtype=dtype_name(weights_dtype(options, device)))
    if not is_adapter(path):  # a plain safetensors folder, whatever the run's source was
        return load_policy(str(path), device,
                           replace(options, lora_rank=0, gguf_file=None))
    from peft import PeftModel

    model, tokenizer = load_policy(base, device, replace(options, lora_rank=0))
    with peft_reading_old_names():
        return PeftModel.from_pretrained(model, path).to(device), tokenizer


def load_reference(model: str, device: torch.device, options: ModelConfig,
                   dtype: torch.dtype):
    """The frozen reference model of a full fine-tune with a KL term: the policy's source
    in ``dtype`` (pods.models.precision.Precision.reference), in eval mode, no gradients."""
    options = replace(options, dtype=dtype_name(dtype), gradient_checkpointing=False)
    reference = load_policy(model, device, options, log=lambda *args: None)[0]
    return reference.eval().requires_grad_(False)


def dtype_name(dtype: torch.dtype) -> str:
    """``dtype`` as --dtype names it (torch.bfloat16: "bfloat16")."""
    return str(dtype).removeprefix("torch.")
