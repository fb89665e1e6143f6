"""Section decode of the GPU check (benchmarks/gpu/check.py): milliseconds a decoding step
of the hf engine, as a run builds it (``pods.rollout.make_engine`` from the rollout config
with some flat keys, sampling in pods's default sampling dtype), on SmolLM2-135M's
architecture (random weights), 40-token prompts and 128 new tokens, at 64, 256 and 1024
rows, for each decoding path of ``PATHS``. A call's seconds over its decoding steps (the
completions' width: a row ends early only on eos, 1 in V a token); the first call of a
shape (the compile, on a static cache) is timed apart. Each path runs in its own process
(``ROWS``: its 256 rows first), capped at an even part of the share that is left, so that
a compile that never ends costs its own path and never the next one: every path is
reached, and the cell a cap cut short says so. On the static paths each row also counts
what only a GPU shows: the graphs of each kept shape's step, the shapes that fell back,
dynamo's graph breaks (with liger-kernel's modules on the model: ``loop+liger``), and the
static caches' GiB held before and during an update.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from gpucommon import (
    UNAVAILABLE,
    build,
    device,
    emit,
    failure,
    left,
    missing_keys,
    read_rows,
    release,
    run_capped,
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
ROWS = {"loop": [256, 1024, 64], "dynamic": [256, 64, 1024],  # each path's cells, in order
        "static generate": [256, 64, 1024], "loop+liger": [256]}
QUICK_PATHS = ["loop", "dynamic", "static generate"]  # quick: 4 rows each
PROMPT, NEW = 40, 128
MIN_LEFT = 5.0  # seconds of a path's cap below which no further cell starts (quick: 0)
SLACK = 4.0  # seconds of the share kept back: the last path's process (its own session, so
# that its compile workers go with it) is ended before the check ends this one


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


def measure(args) -> None:
    """The cells of ``args.paths`` (one path: a process of its own), in this process."""
    dev = device()
    args.prompt, args.new = (8, 8) if args.quick else (PROMPT, NEW)
    from pods.config import ModelConfig
    from pods.models.precision import plan

    model = build("SmolLM2-135M", dev, plan(ModelConfig(name="SmolLM2-135M"), dev).weights,
                  args.quick).eval()
    tokenizer = word_tokenizer(model.config.vocab_size)
    floor = 0.0 if args.quick else MIN_LEFT
    for path, rows in cells(args):
        row = {"path": path, "rows": rows}
        if left(args) < floor:
            emit(args, {**row, "error": "not measured: the path's cap was spent"})
            continue
        try:
            emit(args, {**row, **cell(path, rows, model, tokenizer, dev, args)})
        except torch.OutOfMemoryError:
            emit(args, {**row, "error": "out of memory"})
        except Exception as error:  # the next cell still runs
            emit(args, {**row, "error": failure(error)})
        release(dev)


def cells(args) -> list[tuple[str, int]]:
    return [(path, 4 if args.quick else rows) for path in args.paths.split(",")
            for rows in (ROWS[path][:1] if args.quick else ROWS[path])]


def run_path(path: str, args) -> None:
    """``path``'s cells in a fresh process, stopped at an even part of the share left; the
    cells it did not write are noted (the first: cut short by the cap)."""
    cap = max(1.0, (left(args) - SLACK) / (len(args.order) - args.order.index(path)))
    command = [sys.executable, __file__, "--out", args.out, "--seconds", str(cap - 1),
               "--section", args.section, "--paths", path, *(["--quick"] if args.quick else [])]
    code = run_capped(command, cap)  # None: stopped at the cap
    done = {(r["path"], r["rows"]) for r in read_rows(Path(args.out) / f"{args.section}.jsonl")}
    missing = [c for c in cells(argparse.Namespace(paths=path, quick=args.quick))
               if c not in done]
    for k, (path, rows) in enumerate(missing):
        why = "not reached: the path's cap was spent" if k else \
            f"stopped at the path's cap ({cap:.0f} s), still in this cell" \
            if code is None else f"its process ended (exit {code}) in this cell"
        emit(args, {"path": path, "rows": rows, "error": why})


def main() -> None:
    def extra(parser):
        parser.add_argument("--paths", default="", help="these paths in this process")

    args = section_args(__doc__.splitlines()[0], extra)
    if args.paths:
        measure(args)
        return
    args.order = QUICK_PATHS if args.quick else list(ROWS)
    for path in args.order:
        run_path(path, args)


if __name__ == "__main__":
    main()
