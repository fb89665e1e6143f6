"""The embedded policy: a tiny Qwen2 model with a character tokenizer, warmed up with SFT.

It is built locally (no download), saved with ``save_pretrained`` and then loaded through
the same ``from_pretrained`` path as any hub model. The supervised warm-up stops early on
purpose: like an instruct model before RL, the starting policy solves some test problems
but not most, so RL has something to improve.

**The shipped model.** The warm-up stops on a steep part of its loss curve, so CPUs whose
float kernels round differently (AVX-512 or AVX2, another torch) end it in different
models: built on first use, the default run started anywhere from 16% to 33% test accuracy
depending on the machine, and every figure downstream moved with it. So the model the
default recipe built once (on the machine named in its ``recipe.json``) ships inside the
package (``tiny-qwen2-arithmetic/``, about 0.5 MB), and ``--model tiny`` loads it from
there, every file checked against the sha256 pinned in ``SHIPPED_SHA256``: every machine
starts from the same weights. Nothing is copied to the cache.

Any other recipe (the tests' smaller ones, another alphabet) is still built on first use
and cached in the pods cache (``$PODS_CACHE``, default ``~/.cache/pods``) in a folder named
by a hash of everything that shapes it, so a change of recipe builds a new one.

To rebuild the shipped model after changing the recipe (or to see what this machine
builds: tests/models/test_shipped_model.py compares the two)::

    python -m pods.models.tiny --rebuild       # rewrites tiny-qwen2-arithmetic/ in place
                                               # and prints the SHIPPED_SHA256 to paste here
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from pods.models.cache import cache_dir

SPECIALS = ("<pad>", "<bos>", "<eos>")
SHIPPED_DIR = Path(__file__).with_name("tiny-qwen2-arithmetic")
# sha256 of every file of SHIPPED_DIR, as `python -m pods.models.tiny --rebuild` prints them
SHIPPED_SHA256 = {
    "config.json": "b3f8d1d6eba7f91e46e0ad06c3f548d092de067b9eb4dc248c51524b5bf3945e",
    "generation_config.json": "b3774c2596ef62cd2f3a08561715f3c8b423448d4f03f89fc62181c461218360",
    "model.safetensors": "053440f1bb56069866f4de937f9b783b604296073d5d7b26f63ea1b2a173cd70",
    "recipe.json": "e8247297f2d28a61cf5e1beed639fbbb1c739e5133899c5f2acf610f7df74a55",
    "tokenizer.json": "349612a5a3fab860f02f43a9e028e82ede2147140df76e4d11725378e4985c06",
    "tokenizer_config.json": "530b09236d91da9df980b86ebff568b030ab84eff7258e057888330b5f0a95e9",
}


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
    version: int = 2  # 2: the arithmetic model of this recipe ships in SHIPPED_DIR

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


def shipped_recipe() -> TinyRecipe:
    """The recipe of the shipped model: the default one for the embedded arithmetic task."""
    from pods.tasks.arithmetic import Arithmetic

    return TinyRecipe(alphabet=Arithmetic.alphabet, task=Arithmetic.name)


def build(task, recipe: TinyRecipe, path: Path, log=print) -> Path:
    """Build and warm up the model of ``recipe`` on ``task`` into the new folder ``path``,
    with a ``recipe.json`` saying the recipe and the machine that built it."""
    from pods.models.warmup import WarmupPlan, supervised_warmup
    from pods.runtime.machine import machine_fields

    tokenizer = build_tokenizer(recipe.alphabet)
    model = build_model(recipe, tokenizer)
    plan = WarmupPlan(recipe.sft_steps, recipe.sft_batch_size, recipe.sft_lr, recipe.seed)
    supervised_warmup(model, tokenizer, task.train(), plan, log=log)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".build-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    built_on = {**machine_fields(torch.device("cpu")), "transformers": transformers.__version__,
                "threads": torch.get_num_threads()}
    (tmp / "recipe.json").write_text(json.dumps(
        {"recipe": asdict(recipe), "built_on": built_on}, indent=1) + "\n")
    try:
        tmp.rename(path)  # atomic: a concurrent or killed build never leaves half a model
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first
    return path


def tiny_model_path(task, recipe: TinyRecipe | None = None, log=print) -> Path:
    """Folder of the warmed-up tiny model of ``recipe`` (default: ``task``'s) for ``task``:
    the shipped one for the shipped recipe; any other is built on first use (seconds to a
    minute on a laptop CPU), then reused from the cache."""
    recipe = recipe or TinyRecipe(alphabet=task.alphabet, task=task.name)
    if recipe == shipped_recipe():
        return shipped_model_path()
    path = cache_dir() / f"tiny-qwen2-{recipe.task}-{recipe.key()}"
    if (path / "config.json").is_file():
        return path
    log(f"building the embedded model (first use only): {path}")
    return build(task, recipe, path, log=log)


def embedded_model_path(log=print) -> Path:
    """``--model tiny``: the embedded model, warmed up on the embedded arithmetic task,
    whose characters are its vocabulary (the shipped one)."""
    from pods.tasks.arithmetic import Arithmetic

    return tiny_model_path(Arithmetic(), log=log)


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file in ``folder``, by name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def shipped_model_path() -> Path:
    """``SHIPPED_DIR``, once it holds exactly the pinned files with their pinned sha256; else
    a ValueError saying which file is wrong, and how to get the shipped model back."""
    found = file_hashes(SHIPPED_DIR) if SHIPPED_DIR.is_dir() else {}
    names = sorted(found.keys() | SHIPPED_SHA256.keys())
    wrong = [f"{name} " + ("missing" if name not in found else
                           "changed" if name in SHIPPED_SHA256 else "not shipped")
             for name in names if found.get(name) != SHIPPED_SHA256.get(name)]
    if wrong:
        raise ValueError(
            f"the shipped embedded model in {SHIPPED_DIR} is damaged ({', '.join(wrong)}; "
            f"pods.models.tiny.SHIPPED_SHA256 pins every file). Reinstall pods (`pip install "
            f"--force-reinstall pods-rl`; in a clone, `git checkout -- src/pods/models/"
            f"tiny-qwen2-arithmetic` and delete any other file there). A model rebuilt with "
            f"`python -m pods.models.tiny --rebuild` loads once its hashes are pinned there.")
    return SHIPPED_DIR


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rebuild the shipped embedded model.")
    parser.add_argument("--rebuild", action="store_true", required=True,
                        help=f"warm up the default recipe on this machine into {SHIPPED_DIR}")
    parser.parse_args(argv)
    from pods.tasks.arithmetic import Arithmetic

    rebuilt = SHIPPED_DIR.with_name(".rebuilt")
    shutil.rmtree(rebuilt, ignore_errors=True)
    build(Arithmetic(), shipped_recipe(), rebuilt)
    shutil.rmtree(SHIPPED_DIR, ignore_errors=True)
    rebuilt.rename(SHIPPED_DIR)
    print(f"rebuilt {SHIPPED_DIR}; pin its files in pods/models/tiny.py:\nSHIPPED_SHA256 = {{")
    for name, sha in file_hashes(SHIPPED_DIR).items():
        print(f'    "{name}": "{sha}",')
    print("}")


if __name__ == "__main__":
    main()
