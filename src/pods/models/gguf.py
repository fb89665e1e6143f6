"""GGUF files (llama.cpp's format, often quantized) as a model source.

transformers reads a GGUF file (``from_pretrained(folder, gguf_file=NAME)``, with the
``gguf`` package) and dequantizes its weights to float, but the model it returns stays
marked as quantized and ``save_pretrained`` refuses it. So a GGUF file is converted once:
the dequantized weights go into a fresh model of the same class, saved in float32 (the
dequantized values exactly) with the tokenizer and chat template read from the file, into
``<pods cache>/gguf/<file stem>-<first 12 hex of its sha256>``. Every later load, the
checkpoints and the exports read that ordinary safetensors folder (seconds, no gguf needed).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from pods.models.cache import cache_dir


def find_gguf(name: str, gguf_file: str | None) -> Path:
    """The local GGUF file of ``--model name`` (a .gguf path) or ``--model name
    --gguf-file FILE`` (a folder, or a hub repo: the file is downloaded into HF_HOME)."""
    if name.endswith(".gguf"):
        return Path(name).expanduser()
    folder = Path(name).expanduser()
    if folder.is_dir():
        return folder / gguf_file
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(name, gguf_file))
    except Exception as error:  # not on the hub, no such file, or offline
        raise ValueError(f"could not get {gguf_file} from the hub repo {name!r}: "
                         f"{str(error).splitlines()[0]}") from None


def digest(path: Path) -> str:
    """The first 12 hex digits of the file's sha256 (names its converted folder)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


def dequantized(path: Path, cache: Path | None = None, log=print) -> Path:
    """The folder of ``path``'s dequantized model in ``cache`` (default: the pods cache);
    converted on first use (about 20 s for a 135M-parameter model on a CPU), then reused."""
    out = (cache or cache_dir()) / "gguf" / f"{path.stem}-{digest(path)}"
    if (out / "config.json").is_file():
        return out
    log(f"converting {path.name} to a safetensors folder (first use only): {out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".convert-"))
    model, tokenizer = read_gguf(path)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "source.txt").write_text(f"dequantized from {path.resolve()}\n")
    try:
        tmp.rename(out)  # atomic: a concurrent or killed conversion never leaves half a model
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first
    return out


def read_gguf(path: Path):
    """(model, tokenizer) of a GGUF file, the model an ordinary float32 one that
    ``save_pretrained`` writes (tied embeddings stay tied)."""
    import torch

    try:
        import gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError:
        raise ValueError(f"reading {path.name} needs the gguf package: pip install gguf "
                         f"(or pip install -e '.[train]').") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    read = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = read.config
    del config.quantization_config  # the weights below are plain floats
    config._is_quantized = False
    with torch.device("meta"):  # no random initialisation: every weight is assigned
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(read.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = read.generation_config
    return model.eval(), tokenizer
