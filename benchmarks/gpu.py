"""The prepared GPU check: one script, one table, within 8 minutes on one H100 or H200.

Every session that finds a GPU lent runs it first and puts its table, the device and the
date on the results page ("pods on a GPU"). Models are built from their configs with random
weights (SmolLM2-135M's and Qwen2.5-1.5B's architectures, written below), so no weights
travel; pods runs from this checkout (PYTHONPATH=src). Sections:

  matmul      the device's bf16 matmul rate, 8192^3 (the reference for "share")
  update      pods's update (pods.train.update.policy_update, the default precision) against
              a bare fwd+bwd+AdamW step in the same precision, at 16 and 64 rows x (160 + 128)
              tokens: tokens/s, share of the matmul rate (6 x non-embedding parameters per
              token + 6 x vocabulary x hidden per completion token), peak memory
  generate    the hf engine (dynamic cache, and static cache: --hf-compile, compiled to CUDA
              graphs at its first call, timed apart) against raw ``model.generate``
              (dynamic cache), 64 and 256 rows x 128 new tokens from 40-token prompts,
              SmolLM2's architecture: tokens/s
  profile     one pods update (Qwen2.5-1.5B, 64 rows) under torch.profiler: its operators by
              their own device time, in profile.txt beside the table
  head        the same update with the output head's chunk size and recompute varied
              (pods.models.logprobs patched): tokens/s and peak memory of each, so that the
              call that finds the head in the profile also measures what changing it gives
  default     the embedded default (``pods train``, device auto): wall time, accuracy
  tests       the test files that exercise the device (device auto is CUDA there)

    PYTHONPATH=src python benchmarks/gpu.py --out $OUT              # on the lent GPU
    PYTHONPATH=src python benchmarks/gpu.py --quick --budget 900 --out /tmp/gpu  # on a CPU

``--budget`` (default 480 s) bounds the whole: the embedded default and the tests get what
the sections before them left, and gpu.json is written after each section.

``--quick`` shrinks every size (2 layers, a vocabulary of 4096, a few rows and tokens) so
the whole path runs on a CPU in a few minutes; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

PROMPT, NEW, T = 160, 128, 0.9
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
TEST_FILES = ["tests/models/test_precision.py", "tests/train/test_optimizer.py",
              "tests/train/test_update.py", "tests/train/test_trainer.py",
              "tests/train/test_resumes.py", "tests/train/test_sampling.py",
              "tests/train/test_mixed_precision.py", "tests/rollout"]


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


def matmul_tflops(device: torch.device, size: int) -> float:
    a, b = (torch.randn(size, size, dtype=torch.bfloat16, device=device) for _ in range(2))
    return 2 * size**3 / timed(lambda: a @ b, device, 10) / 1e12


def build(name: str, device: torch.device, dtype: torch.dtype, quick: bool):
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(ARCHITECTURES[name])
    if quick:
        values.update(num_hidden_layers=2, vocab_size=4096)
    config = AutoConfig.for_model(**values)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).train()


def work_flops(model, rows: int, prompt: int, new: int) -> float:
    """6 x non-embedding parameters per token + 6 x V x H per completion token."""
    c = model.config
    embedding = c.vocab_size * c.hidden_size
    body = sum(p.numel() for p in model.parameters()) - embedding  # tied: counted once
    return 6 * body * rows * (prompt + new) + 6 * embedding * rows * new


def default_precision(name: str, device: torch.device):
    """What pods's defaults store and compute in for the architecture ``name`` on ``device``
    (named: the embedded model's float32 compute must not stand in for it)."""
    from pods.config import ModelConfig
    from pods.models.precision import plan

    return plan(ModelConfig(name=name), device)


def update_row(name: str, rows: int, device, args) -> dict:
    """pods's update and the bare step on ``rows`` kept rows, each on a fresh model."""
    precision = default_precision(name, device)
    result = {"model": name, "rows": rows, "precision": precision.short}
    for variant in ("pods", "bare"):
        try:
            result[variant] = measure_update(variant, name, rows, precision, device, args)
        except torch.OutOfMemoryError:
            result[variant] = {"error": "out of memory"}
        release(device)  # the model and optimizer went with the call
    return result


def release(device: torch.device) -> None:
    """Free what a measurement's model and optimizer held before the next one builds."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_update(variant: str, name: str, rows: int, precision, device, args) -> dict:
    """tokens/s, share of the matmul rate and peak memory of ``variant``'s step."""
    step, model = update_step(variant, name, rows, precision, device, args)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = timed(step, device, args.repeats)
    prompt, new = args.prompt, args.new
    return {"tok_s": rows * (prompt + new) / seconds,
            "share": work_flops(model, rows, prompt, new) / seconds / 1e12 / args.tflops,
            "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30
            if device.type == "cuda" else None}


def update_step(variant: str, name: str, rows: int, precision, device, args):
    """(step, model): one call of ``step`` is one update of ``variant`` ("pods": the
    trainer's policy_update; "bare": fwd+bwd+AdamW) on a fresh model of ``name``, on
    ``rows`` random rows, in ``precision``."""
    from pods.config import from_dict
    from pods.models.precision import autocast
    from pods.rollout import Rollouts
    from pods.train.optimizer import make_optimizer
    from pods.train.selection import KeptBatch
    from pods.train.update import UpdateSpec, policy_update

    prompt, new = args.prompt, args.new
    model = build(name, device, precision.weights, args.quick)
    optimizer = make_optimizer(model.parameters(), 1e-7, (0.9, 0.999), 0.0)
    gen = torch.Generator().manual_seed(rows)
    ids = torch.randint(100, model.config.vocab_size, (rows, prompt + new), generator=gen)
    ids = ids.to(device)
    advantages = torch.randn(rows, generator=gen).to(device)
    ones = torch.ones_like(ids)
    kept = KeptBatch(Rollouts(ids[:, :prompt], ones[:, :prompt], ids[:, prompt:],
                              ones[:, prompt:], [""] * rows), advantages, kept=rows, pad_rows=0)
    cfg = from_dict({"max_new_tokens": new})
    spec = UpdateSpec(cfg.optim, cfg.loss, T, new)

    def pods_step():
        with autocast(device, precision.update):
            policy_update(model, None, optimizer, kept, spec)

    def bare_step():
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision.update):
            logits = model(ids).logits
        logits = logits[:, prompt - 1:-1].float() / T  # [B, Lc, V]
        logp = logits.log_softmax(-1).gather(-1, ids[:, prompt:, None])[..., 0]
        (-(logp * advantages[:, None]).mean()).backward()
        optimizer.step()

    return (pods_step if variant == "pods" else bare_step), model


def profiled(step, device: torch.device, rows: int = 20) -> str:
    """torch.profiler's table of one call of ``step``: the operators by their own time on
    the device (CUDA) or the CPU, the most expensive ``rows``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows)


def profile_update(device, args) -> str:
    """Where pods's update spends its time: one profiled call (after a warm-up call) on the
    larger architecture at the larger row count (where it is furthest from the matmul
    rate)."""
    try:
        step, _ = update_step("pods", "Qwen2.5-1.5B", args.rows[-1],
                              default_precision("Qwen2.5-1.5B", device), device, args)
        step()
        return profiled(step, device)
    except torch.OutOfMemoryError:
        return "out of memory"
    finally:
        release(device)


HEAD_VARIANTS = {  # label: (HEAD_CHUNK, recomputed in the backward)
    "chunks of 2^25 floats, recomputed (pods)": (2**25, True),
    "chunks of 2^27 floats, recomputed": (2**27, True),
    "chunks of 2^25 floats, kept (no recompute)": (2**25, False),
}


def head_rows(device, args, measured: dict | None) -> list[dict]:
    """pods's update on Qwen2.5-1.5B's architecture at the larger row count, once per
    ``HEAD_VARIANTS`` entry: tokens/s and peak memory. ``measured``: the update section's
    pods result at that size, pods's own head (not measured again); None: measure it."""
    from unittest import mock

    from pods.models import logprobs

    rows = []
    for label, (chunk, recompute) in HEAD_VARIANTS.items():
        if (chunk, recompute) == (logprobs.HEAD_CHUNK, True) and measured is not None:
            rows.append({"variant": label, **measured})
            continue
        with contextlib.ExitStack() as patches:
            patches.enter_context(mock.patch.object(logprobs, "HEAD_CHUNK", chunk))
            if not recompute:
                patches.enter_context(mock.patch.object(logprobs, "checkpoint", _kept))
            try:
                row = measure_update("pods", "Qwen2.5-1.5B", args.rows[-1],
                                     default_precision("Qwen2.5-1.5B", device), device, args)
            except torch.OutOfMemoryError:
                row = {"error": "out of memory"}
        rows.append({"variant": label, **row})
        release(device)
    return rows


def _kept(function, *args, use_reentrant=None):
    """In place of torch.utils.checkpoint.checkpoint: autograd keeps the chunk's logits."""
    return function(*args)


def word_tokenizer(vocab_size: int):
    """A tokenizer whose tokens are "t0".."t{V-1}" (pad t0, eos t1): prompts of random ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1",
                                   padding_side="left")


def generation_row(rows: int, device, args) -> dict:
    """The hf engine (keyed sampler) and raw ``generate`` (multinomial) on ``rows`` rows,
    in the dtype the hf engine samples in by default (bf16 on a GPU: its sampling copy)."""
    from pods.rollout.hf import SamplingRequest, generate
    from pods.rollout.hf_decode import StaticDecoding

    precision = default_precision("SmolLM2-135M", device)
    model = build("SmolLM2-135M", device, precision.sampling or precision.weights,
                  args.quick).eval()
    tokenizer = word_tokenizer(model.config.vocab_size)
    ids = torch.randint(2, model.config.vocab_size, (rows, args.gen_prompt),
                        generator=torch.Generator().manual_seed(0))
    texts = [" ".join(f"t{i}" for i in row) for row in ids.tolist()]
    request = SamplingRequest(texts, 1, 1.0, args.gen_new, torch.arange(rows),
                              add_special_tokens=False)
    ids = ids.to(device)

    def engine():
        generate(model, tokenizer, request, chunk=rows)

    kept = StaticDecoding(args.gen_prompt)  # its cache and compiled step kept across calls

    def static():  # --hf-compile: the static cache, compiled on CUDA at the first call
        generate(model, tokenizer, request, chunk=rows, static=kept)

    def raw():
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                           max_new_tokens=args.gen_new, min_new_tokens=args.gen_new,
                           pad_token_id=0)

    tokens = rows * args.gen_new  # a row ends early only on eos, 1 in V a token
    start = time.perf_counter()
    static()  # the first call of this shape: the compile (on CUDA), then the call
    first = time.perf_counter() - start
    return {"rows": rows, "dtype": str(model.dtype).removeprefix("torch."),
            "engine_tok_s": tokens / timed(engine, device, 1),
            "static_tok_s": tokens / timed(static, device, 1), "static_first_s": first,
            "raw_tok_s": tokens / timed(raw, device, 1)}


def default_run(args) -> dict:
    """``pods train`` with the embedded default (device auto) in a fresh process."""
    out = Path(args.out) / "default-run"
    command = [sys.executable, "-m", "pods", "train", "--out-dir", str(out),
               "--run-name", "default", "--progress", "false"]
    if args.quick:
        command += ["--max-steps", "3", "--eval-size", "20"]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=args.default_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {args.default_timeout:.0f} s (--budget)"}
    wall = time.perf_counter() - start
    if done.returncode:
        return {"error": done.stderr[-500:]}
    records = [json.loads(line) for line in (out / "default" / "metrics.jsonl").open()]
    evals = [r for r in records if r.get("kind") == "eval"]
    steps = [r for r in records if r.get("kind") == "step"]
    return {"wall_s": wall, "train_s": steps[-1]["time"] if steps else None,
            "steps": len(steps), "start": evals[0]["eval/accuracy"],
            "best": max(r["eval/accuracy"] for r in evals), "end": evals[-1]["eval/accuracy"]}


def device_tests(args) -> dict:
    """The test files that exercise the device, with what time is left."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
               *TEST_FILES]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=args.tests_timeout)
        tail = done.stdout.strip().splitlines()[-1:] or ["no output"]
    except subprocess.TimeoutExpired:
        return {"summary": f"stopped after {args.tests_timeout:.0f} s (--budget)"}
    return {"summary": tail[0], "returncode": done.returncode}


def table(report: dict) -> str:
    lines = [f"# pods on a GPU: {report['device']}, {report['date']}",
             f"torch {report['torch']}, transformers {report['transformers']}; "
             f"command: `{report['command']}`", "",
             f"bf16 matmul {report['matmul_size']}^3: {report['tflops']:.3g} TFLOP/s", "",
             "| update | rows | precision | pods tok/s | bare tok/s | pods / bare | pods share "
             "| bare share | pods peak GiB | bare peak GiB |", "|---|" + "---|" * 9]
    for r in report["update"]:
        p, b = r["pods"], r["bare"]
        ratio = f"{p['tok_s'] / b['tok_s']:.2f}x" if "tok_s" in p and "tok_s" in b else "-"
        cells = [r["model"], r["rows"], r["precision"], _n(p, "tok_s"), _n(b, "tok_s"), ratio,
                 _n(p, "share", "{:.0%}"), _n(b, "share", "{:.0%}"),
                 _n(p, "peak_gib", "{:.1f}"), _n(b, "peak_gib", "{:.1f}")]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    if report.get("head"):
        lines += ["", f"| output head (Qwen2.5-1.5B arch., {report['rows'][-1]} rows) | pods "
                  "tok/s | share | peak GiB |", "|---|---|---|---|"]
        for r in report["head"]:
            lines.append(f"| {r['variant']} | {_n(r, 'tok_s')} | {_n(r, 'share', '{:.0%}')} "
                         f"| {_n(r, 'peak_gib', '{:.1f}')} |")
    lines += ["", "| generation (SmolLM2-135M arch.) | rows | dtype | hf engine tok/s "
              "| hf engine, static cache tok/s (first call s) | raw generate tok/s |",
              "|---|---|---|---|---|---|"]
    for r in report["generate"]:
        lines.append(f"| {report['gen_new']} new tokens | {r['rows']} | {r['dtype']} | "
                     f"{r['engine_tok_s']:,.0f} | {r['static_tok_s']:,.0f} "
                     f"({r['static_first_s']:.0f} s) | {r['raw_tok_s']:,.0f} |")
    d = report["default"]
    lines += ["", "embedded default (`pods train`): " + (
        f"{d['steps']} steps, {d['train_s']:.1f} training s, {d['wall_s']:.0f} s wall, "
        f"accuracy {d['start']:.1%} -> best {d['best']:.1%}, end {d['end']:.1%}"
        if "wall_s" in d else d["error"] if d["error"] == "skipped" else
        f"failed: {d['error']}"),
        f"device tests ({', '.join(TEST_FILES)}): {report['tests']['summary']}",
        "the update's profile (Qwen2.5-1.5B, the larger row count): profile.txt"]
    return "\n".join(lines)


def _n(values: dict, key: str, fmt: str = "{:,.0f}") -> str:
    value = values.get(key)
    return values.get("error", "-") if value is None else fmt.format(value)


def save(report: dict, out: str) -> None:
    (Path(out) / "gpu.json").write_text(json.dumps(report, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/gpu-check", help="folder for gpu.json, gpu.md")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a CPU rehearsal")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip")
    parser.add_argument("--budget", type=float, default=480,
                        help="seconds for the whole check: the default run and the tests get "
                        "what the sections before them left (the lent GPU's one call: 10 min)")
    args = parser.parse_args()
    started = time.perf_counter()

    def left() -> float:
        return args.budget - (time.perf_counter() - started)

    quick = args.quick
    args.rows = (2,) if quick else (16, 64)
    args.gen_rows = (4,) if quick else (64, 256)
    args.prompt, args.new = (8, 8) if quick else (PROMPT, NEW)
    args.gen_prompt, args.gen_new = (8, 8) if quick else (40, 128)
    args.repeats = 1 if quick else 3
    skip = set(args.skip.split(","))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    import transformers

    size = 512 if quick else 8192
    args.tflops = matmul_tflops(device, size)
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else
              "cpu", "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "transformers": transformers.__version__, "command": " ".join(sys.argv),
              "matmul_size": size, "tflops": args.tflops, "gen_new": args.gen_new,
              "rows": list(args.rows)}
    report["update"] = [] if "update" in skip else [
        update_row(name, rows, device, args) for name in ARCHITECTURES for rows in args.rows]
    if "profile" not in skip:  # the full table in profile.txt; gpu.md names the file
        (Path(args.out) / "profile.txt").write_text(profile_update(device, args) + "\n")
    measured = next((r["pods"] for r in report["update"]
                     if (r["model"], r["rows"]) == ("Qwen2.5-1.5B", args.rows[-1])), None)
    report["head"] = [] if "head" in skip else head_rows(device, args, measured)
    report["generate"] = [] if "generate" in skip else [
        generation_row(rows, device, args) for rows in args.gen_rows]
    save(report, args.out)  # what is measured so far, should the call be cut short
    args.default_timeout = max(30.0, min(240.0, left() - 90))  # leaves the tests 90 s
    report["default"] = {"error": "skipped"} if "default" in skip else default_run(args)
    save(report, args.out)
    args.tests_timeout = max(20.0, left() - 5)
    report["tests"] = {"summary": "skipped"} if "tests" in skip else device_tests(args)
    save(report, args.out)
    text = table(report)
    (Path(args.out) / "gpu.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
