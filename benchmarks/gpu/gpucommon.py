"""What the sections of the GPU check share: the architectures, timing, the rows a section
writes (one JSON line each, so a section stopped at its share keeps what it measured) and
the flat config keys a row needs (a key this checkout does not know marks the row "not
available in this checkout" instead of failing)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import torch

ARCHITECTURES = {  # from the models' config.json files on the hub
    "SmolLM2-135M": dict(model_type="llama", vocab_size=49152, hidden_size=576,
                         intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, tie_word_embeddings=True, rope_theta=100000.0,
                         max_position_embeddings=8192, rms_norm_eps=1e-5),
    "Qwen2.5-1.5B": dict(model_type="qwen2", vocab_size=151936, hidden_size=1536,
                         intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1e6,
                         max_position_embeddings=32768, rms_norm_eps=1e-6),
}
UNAVAILABLE = "not available in this checkout"


def section_args(description: str, extra=None) -> argparse.Namespace:
    """The arguments every section takes (--out, --seconds, --quick), and ``extra``'s."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, help="folder for the section's rows")
    parser.add_argument("--seconds", type=float, required=True, help="the section's share")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a CPU rehearsal")
    parser.add_argument("--section", required=True, help="the name its rows are written under")
    if extra:
        extra(parser)
    args = parser.parse_args()
    args.deadline = time.monotonic() + args.seconds
    return args


def left(args) -> float:
    """Seconds left of the section's share."""
    return args.deadline - time.monotonic()


def run_capped(command: list[str], seconds: float, interrupt: float = 0.0,
               **popen) -> int | None:
    """Run ``command`` in a process group of its own (its children, compile workers among
    them, go with it) for at most ``seconds``: its exit code, or None where it was stopped
    there. With ``interrupt``, it is first interrupted as Ctrl-C would (pytest then writes
    what it ran so far) and killed that many seconds later; else killed at once."""
    proc = subprocess.Popen(command, start_new_session=True, **popen)
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        if interrupt:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=interrupt)
                return None
            except subprocess.TimeoutExpired:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def emit(args, row: dict) -> None:
    """One measured (or skipped) row of the section, appended at once."""
    with (Path(args.out) / f"{args.section}.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")


def failure(error: BaseException) -> str:
    """A row's note for a measurement that raised (its traceback goes to the section's
    log): the next measurement still runs."""
    import traceback

    traceback.print_exc()
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]


def read_rows(path: Path) -> list[dict]:
    """The rows of a JSON-lines file so far (a line still being written left out)."""
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # the writer was stopped mid-line
    return rows


def missing_keys(keys: dict) -> list[str]:
    """The flat config keys of ``keys`` this checkout's config does not have."""
    from pods.config import LEAVES

    return [key for key in keys if key not in LEAVES]


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up call."""
    fn()
    seconds = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def release(device: torch.device) -> None:
    """Free what a measurement's model and optimizer held before the next one builds."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build(name: str, device: torch.device, dtype: torch.dtype, quick: bool):
    """A randomly initialised model of architecture ``name`` (with ``quick``: 2 layers, a
    vocabulary of 4096 and heads of 16 dimensions, the rest as the architecture's)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(ARCHITECTURES[name])
    if quick:
        hidden = 16 * values["num_attention_heads"]
        values.update(num_hidden_layers=2, vocab_size=4096, hidden_size=hidden,
                      intermediate_size=4 * hidden)
    config = AutoConfig.for_model(**values)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).train()


def word_tokenizer(vocab_size: int):
    """A tokenizer whose tokens are "t0".."t{V-1}" (pad t0, eos t1): prompts of random ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1",
                                   padding_side="left")


ROOT = Path(__file__).resolve().parents[2]


def suite_script(relative: str, name: str):
    """A script of the benchmark suite (``relative`` to the repository, e.g.
    "benchmarks/update/layouts.py") imported as module ``name``, to reuse its code."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
