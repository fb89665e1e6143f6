"""Loading the policy, and the per-token log-probs the loss needs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass(frozen=True)
class ModelOptions:
    """How to load the policy (see TrainConfig for each field's meaning)."""

    dtype: str = "auto"
    lora_rank: int = 0  # 0: full fine-tuning
    lora_alpha: float = 64.0
    lora_dropout: float = 0.0
    lora_target_modules: str = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    gradient_checkpointing: bool = False


DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """auto: bfloat16 on a GPU that supports it, else float32 (CPU training stays exact)."""
    if name == "auto":
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else torch.float32
    return getattr(torch, name)


def load_policy(model: str, task, device: torch.device, options: ModelOptions = ModelOptions(),
                log=print):
    """(model, tokenizer) from a hub id, a local folder, or 'tiny' (the embedded model),
    in the requested dtype, wrapped in a LoRA adapter when ``options.lora_rank`` > 0."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model == "tiny":
        from pods.models.tiny import tiny_model_path

        model = str(tiny_model_path(task, log=log))
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
        model, dtype=resolve_dtype(options.dtype, device)).to(device)
    if options.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
        policy.config.use_cache = False  # generate() turns the KV cache back on per call
    if options.lora_rank > 0:
        policy = add_lora(policy, options)
    return policy, tokenizer


def add_lora(model, options: ModelOptions):
    """Wrap ``model`` in a trainable LoRA adapter; the base weights are frozen."""
    from peft import LoraConfig, get_peft_model

    modules = [m.strip() for m in options.lora_target_modules.split(",") if m.strip()]
    config = LoraConfig(r=options.lora_rank, lora_alpha=options.lora_alpha,
                        lora_dropout=options.lora_dropout, target_modules=modules,
                        task_type="CAUSAL_LM")
    if options.gradient_checkpointing:
        model.enable_input_require_grads()  # checkpointed blocks need a grad-carrying input
    return get_peft_model(model, config)


def is_adapter(path: str | Path) -> bool:
    """Whether a saved model folder holds a LoRA adapter rather than full weights."""
    return (Path(path) / "adapter_config.json").is_file()


def load_saved_policy(path: str | Path, base: str, task, device: torch.device,
                      options: ModelOptions = ModelOptions()):
    """(model, tokenizer) of a checkpoint's model folder: full weights, or a LoRA adapter
    put on ``base`` (the run's --model)."""
    path = Path(path)
    if not is_adapter(path):
        return load_policy(str(path), task, device, replace(options, lora_rank=0))
    from peft import PeftModel

    model, tokenizer = load_policy(base, task, device, replace(options, lora_rank=0))
    return PeftModel.from_pretrained(model, path).to(device), tokenizer


def completion_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor, temperature: float) -> Tensor:
    """log pi(token) of each completion token under the sampling distribution
    softmax(logits / temperature). Prompts left-padded [B, Lp], completions right-padded
    [B, Lc]; returns [B, Lc] (values at padding are meaningless: mask them).

    Memory: logits are computed only for the completion positions (``logits_to_keep``), and
    the float32 log-softmax is taken a few sequences at a time (at most ``LOGSOFTMAX_CHUNK``
    floats), so the [B, Lc, V] float32 tensor of a large vocabulary never exists at once.

    Precision: the result is float32 whatever the weights' dtype. bf16 logits are upcast
    before the log-softmax: a bf16 log-softmax rounds each log-prob by up to ~4e-3 relative,
    which would bias the ratio, the KL term and ``rollout/logprob_gap`` (tests/train/test_bf16)."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, Lp+Lc]
    attention = torch.cat([prompt_mask, completion_mask], dim=1)  # [B, Lp+Lc]
    positions = (attention.cumsum(1) - 1).clamp(min=0)  # as generate() numbers them
    width = completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions,
                   logits_to_keep=width + 1).logits[:, :-1]  # [B, Lc, V] predicting Lc tokens
    step = max(1, LOGSOFTMAX_CHUNK // max(logits.shape[1] * logits.shape[2], 1))
    parts = []
    for start in range(0, logits.shape[0], step):
        chunk = logits[start : start + step].float() / temperature  # [b, Lc, V]
        ids_chunk = completion_ids[start : start + step].unsqueeze(-1)  # [b, Lc, 1]
        parts.append(chunk.gather(-1, ids_chunk).squeeze(-1) - chunk.logsumexp(-1))
    return torch.cat(parts)  # [B, Lc]


LOGSOFTMAX_CHUNK = 2**27  # floats (512 MB) of float32 logits per log-softmax chunk
