"""Section decode of the GPU check (benchmarks/gpu/check.py): milliseconds a decoding step
of the hf engine, as a run builds it (``pods.rollout.make_engine`` from the rollout config
with some flat keys, sampling in pods's default sampling dtype), on SmolLM2-135M's
architecture (random weights), 40-token prompts and 128 new tokens, at 64, 256 and 1024
rows, for each decoding path of ``PATHS``. A call's seconds over its decoding steps (the
completions' width: a row ends early only on eos, 1 in V a token); the first call of a
shape (the compile, on a static cache) is timed apart. Cells run in ``ORDER`` (the new
path at the comparison's 256 rows first), each only with time left of the section's share.
On the static paths each row also counts what only a GPU shows: the graphs of each kept
shape's step, the shapes that fell back, dynamo's graph breaks (with liger-kernel's modules
on the model: ``loop+liger``), and the static caches' GiB held before and during an update.
"""

from __future__ import annotations

import time

import torch
from gpucommon import (
    UNAVAILABLE,
    build,
    device,
    emit,
    failure,
    left,
    missing_keys,
    release,
    section_args,
    sync,
    word_tokenizer,
)

PATHS = {  # name: the rollout config's flat keys
    "dynamic": {"hf_compile": "off"},  # transformers' generate on the dynamic cache
    "static generate": {"hf_compile": "on", "hf_decode": "generate"},  # generate on the
    # static cache, its decoding step compiled to CUDA graphs
    "loop": {"hf_compile": "on", "hf_decode": "loop"},  # pods's own decode loop, one
    # captured graph a step
    "loop+liger": {"hf_compile": "on", "hf_decode": "loop"},  # the same, on a model with
    # liger-kernel's RMSNorm, SwiGLU and RoPE (as the update patches the sampling copy)
}
ORDER = [("loop", 256), ("dynamic", 256), ("static generate", 256), ("loop+liger", 256),
         ("loop", 1024),
         ("loop", 64), ("dynamic", 64), ("dynamic", 1024), ("static generate", 64),
         ("static generate", 1024)]
PROMPT, NEW = 40, 128
MIN_LEFT = 10.0  # seconds of the share below which no further cell starts (quick: 0)


def engine_for(model, tokenizer, keys: dict, rows: int, new: int, prompt: int, dev):
    """The engine a run with ``keys`` builds, ``rows`` rows a call."""
    from pods.config import ModelConfig, from_dict
    from pods.models.precision import plan
    from pods.rollout import EngineSpec, make_engine

    cfg = from_dict({"gen_batch_size": rows, "max_new_tokens": new, **keys})
    sampling = plan(ModelConfig(name="SmolLM2-135M"), dev).sampling  # a real model's
    spec = EngineSpec(cfg.rollout, dev, max_model_len=prompt + new, dtype=sampling)
    return make_engine(spec, model, tokenizer)


def cell(path: str, rows: int, model, tokenizer, dev, args) -> dict:
    """One path at ``rows`` rows: first call and steady-state ms a decoding step."""
    from pods.rollout import sample_keys

    keys = PATHS[path]
    if missing_keys(keys):
        return {"error": f"{UNAVAILABLE} (no {', '.join(missing_keys(keys))})"}
    if path == "loop+liger":
        import copy
        import importlib.util

        if dev.type != "cuda" or importlib.util.find_spec("liger_kernel") is None:
            return {"error": "needs a CUDA GPU and liger-kernel"}
        from pods.models.kernels import use_kernels

        model = copy.deepcopy(model)
        use_kernels(model, "liger", strict=True)
    engine = engine_for(model, tokenizer, keys, rows, args.new, args.prompt, dev)
    ids = torch.randint(2, model.config.vocab_size, (rows, args.prompt),
                        generator=torch.Generator().manual_seed(rows))
    texts = [" ".join(f"t{i}" for i in row) for row in ids.tolist()]
    seeds = sample_keys(0, 0, torch.arange(rows))

    def call() -> tuple[float, int]:
        sync(dev)
        start = time.perf_counter()
        out = engine.generate(texts, 1, 1.0, args.new, seeds, False)
        sync(dev)
        return time.perf_counter() - start, out.completion_ids.shape[1]

    from torch._dynamo.utils import counters

    counters.clear()
    first, steps = call()  # the first call of this shape: the compile, then the call
    seconds, steps = call()
    return {"first_s": first, "ms_step": 1000 * seconds / max(steps, 1), "steps": steps,
            "tok_s": rows * steps / seconds, **static_facts(engine, counters)}


def static_facts(engine, counters) -> dict:
    """What only a GPU shows of the static path, counted: the compiled graphs of each kept
    shape's step (1 each: none ran eagerly), the shapes that fell back, dynamo's graph
    breaks, and the GiB of static caches held before and after ``asleep`` (the update)."""
    static = getattr(engine, "static", None)
    if static is None:
        return {}
    graphs = [loop.graphs() for loop in static.kept.values() if hasattr(loop, "graphs")]
    held = cache_bytes(static) / 2**30
    static.used = set()  # as after a step that sampled at none of these shapes
    with engine.asleep():  # the update: what the engine still holds
        parked = cache_bytes(static) / 2**30
    return {"graphs": graphs, "fallbacks": static.fallbacks,
            "graph_breaks": sum(counters["graph_break"].values()),
            "held_gib": held, "held_in_update_gib": parked}


def cache_bytes(static) -> int:
    """Bytes of the static KV caches the kept shapes hold."""
    total = 0
    for kept in static.kept.values():
        cache = getattr(kept, "cache", kept)
        for layer in getattr(cache, "layers", []):
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                total += t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
    return total


def main() -> None:
    args = section_args(__doc__.splitlines()[0])
    dev = device()
    args.prompt, args.new = (8, 8) if args.quick else (PROMPT, NEW)
    order = ORDER[:3] if args.quick else ORDER  # quick: one row count, every path
    from pods.config import ModelConfig
    from pods.models.precision import plan

    model = build("SmolLM2-135M", dev, plan(ModelConfig(name="SmolLM2-135M"), dev).weights,
                  args.quick).eval()
    tokenizer = word_tokenizer(model.config.vocab_size)
    floor = 0.0 if args.quick else MIN_LEFT
    for path, rows in order:
        rows = 4 if args.quick else rows
        row = {"path": path, "rows": rows}
        if left(args) < floor:
            emit(args, {**row, "error": "not measured: the section's share was spent"})
            continue
        try:
            emit(args, {**row, **cell(path, rows, model, tokenizer, dev, args)})
        except torch.OutOfMemoryError:
            emit(args, {**row, "error": "out of memory"})
        except Exception as error:  # the next cell still runs
            emit(args, {**row, "error": failure(error)})
        release(dev)


if __name__ == "__main__":
    main()
