"""The embedded policy: a tiny Qwen2 model with a character tokenizer, warmed up with SFT.

It is built locally (no download), saved with ``save_pretrained`` and then loaded through
the same ``from_pretrained`` path as any hub model. The supervised warm-up stops early on
purpose: like an instruct model before RL, the starting policy solves some test problems
but not most, so RL has something to improve. The result is cached in the pods cache
(``$PODS_CACHE``, default ``~/.cache/pods``) in a folder named by a hash of everything
that shapes it, so a change of recipe builds a new one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from pods.models.cache import cache_dir

SPECIALS = ("<pad>", "<bos>", "<eos>")


@dataclass(frozen=True)
class TinyRecipe:
    """Everything that shapes the embedded model (hashed into its cache folder name)."""

    alphabet: str
    hidden_size: int = 64
    layers: int = 2
    heads: int = 2  # head size 32: the smallest that vLLM's CPU attention supports
    sft_steps: int = 340
    sft_batch_size: int = 64
    sft_lr: float = 1e-3
    seed: int = 0
    task: str = "arithmetic"
    version: int = 1

    def key(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """One token per character of ``alphabet``, plus pad, bos and eos; bos is prepended."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + tuple(alphabet))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", padding_side="left")


def build_model(recipe: TinyRecipe, tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    torch.manual_seed(recipe.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=recipe.hidden_size,
        intermediate_size=4 * recipe.hidden_size, num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads, num_key_value_heads=recipe.heads,
        max_position_embeddings=64, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    return Qwen2ForCausalLM(config)


def tiny_model_path(task, recipe: TinyRecipe | None = None, log=print) -> Path:
    """Folder of the warmed-up embedded model for ``task``; built on first use (a minute
    or two on a laptop CPU), then reused."""
    from pods.models.warmup import WarmupPlan, supervised_warmup

    recipe = recipe or TinyRecipe(alphabet=task.alphabet, task=task.name)
    path = cache_dir() / f"tiny-qwen2-{recipe.task}-{recipe.key()}"
    if (path / "config.json").is_file():
        return path
    log(f"building the embedded model (first use only): {path}")
    tokenizer = build_tokenizer(recipe.alphabet)
    model = build_model(recipe, tokenizer)
    plan = WarmupPlan(recipe.sft_steps, recipe.sft_batch_size, recipe.sft_lr, recipe.seed)
    supervised_warmup(model, tokenizer, task.train(), plan, log=log)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".build-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "recipe.json").write_text(json.dumps(asdict(recipe), indent=1))
    try:
        tmp.rename(path)  # atomic: a concurrent or killed build never leaves half a model
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first
    return path


def embedded_model_path(log=print) -> Path:
    """``--model tiny``: the embedded model, built for (and warmed up on) the embedded
    arithmetic task, whose characters are its vocabulary."""
    from pods.tasks.arithmetic import Arithmetic

    return tiny_model_path(Arithmetic(), log=log)
