"""SmolLM2-135M-Instruct on this machine: pods's engines and update against their raw
libraries, float32 and bf16.

Generation: P x n rollouts of wordproblems prompts (the showcase's chat-templated prompts,
P = rows / 16 distinct prompts, n = 16), 128 new tokens at T = 0.9; tokens/s counts every
row's positions up to the batch's longest completion (what the batch computed). Each cell
is the median of --repeats calls (default 1) after one short warm-up call per model.
  hf engine         pods.rollout.HFEngine (keyed sampler; under bf16 its bf16 copy)
  raw transformers  model.generate(do_sample=True, top_k=0) on the same batch and model
  vllm engine       pods.rollout.vllm.VLLMEngine in bf16: one request per rollout with
                    log-probs; --seeded: each request seeded with its key (pods's default)
  raw vLLM          LLM.generate on the same prompts, SamplingParams(n=16), no log-probs
Update: one optimizer step on B kept rollouts of 160 prompt + 128 completion tokens (a
first pass on the smallest B warms up, not reported):
  pods update         pods.train.update.policy_update (log-probs, loss, clipping, AdamW),
                      the output head applied a chunk of tokens at a time
                      (pods.models.logprobs); "full logits": the model's own logits
  bare fwd+bwd+AdamW  model(ids).logits -> log_softmax -> gather -> mean -> backward -> step
mixed = float32 weights under torch.autocast(bfloat16) (pods's --mixed-precision bf16). Both
take pods train's settings: the fused AdamW, glibc keeping freed memory (pods.runtime.speed).

    .venv/bin/python benchmarks/smollm2_speed.py --part hf          # the hf engine
    .venv/bin/python benchmarks/smollm2_speed.py --part update      # the update
    .venv-vllm/bin/python benchmarks/smollm2_speed.py --part vllm   # make vllm-env first
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
NEW, T, N = 128, 0.9, 16  # new tokens, temperature, rollouts per prompt
PROMPT = 160  # prompt tokens of the update benchmark's rows


def prompts(tokenizer, P: int) -> list[str]:
    from pods.config import from_dict
    from pods.rollout.prompts import render_prompts
    from pods.tasks import get_task

    task = get_task("wordproblems", from_dict({"model": "smollm2", "task": "wordproblems"}).task)
    return render_prompts(tokenizer, task, task.train()[:P])[0]


def timed(fn, repeats: int, *args) -> tuple[float, object]:
    """The median seconds of ``repeats`` calls, and the last call's result (the caller has
    warmed the model up once; a warm-up per cell would double the 256-row cells)."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def engine_generate(engine, texts: list[str], keys) -> torch.Tensor:
    return engine.generate(texts, N, T, NEW, keys, False).completion_ids  # [P*n, Lc]


def raw_hf_generate(model, tokenizer, texts: list[str]) -> torch.Tensor:
    enc = tokenizer([t for t in texts for _ in range(N)], return_tensors="pt", padding=True,
                    add_special_tokens=False)
    with torch.no_grad():
        ids = model.generate(**enc, max_new_tokens=NEW, do_sample=True, temperature=T,
                             top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id)
    return ids[:, enc["input_ids"].shape[1]:]  # [P*n, Lc]


def raw_vllm_generate(llm, tokenizer, texts: list[str]) -> torch.Tensor:
    from vllm import SamplingParams

    params = SamplingParams(n=N, temperature=T, top_k=0, top_p=1.0, max_tokens=NEW)
    requests = [{"prompt_token_ids": tokenizer(t, add_special_tokens=False)["input_ids"]}
                for t in texts]
    outputs = llm.generate(requests, params, use_tqdm=False)
    width = max(len(c.token_ids) for r in outputs for c in r.outputs)
    return torch.zeros(len(texts) * N, width)  # the shape of what was computed


def row(what: str, dtype: str, rows: int, seconds: float, tokens: int) -> dict:
    out = {"what": what, "dtype": dtype, "rows": rows, "seconds": seconds,
           "tok/s": tokens / seconds}
    print(out, flush=True)
    return out


def hf_rows(folder: str, sizes: list[int], repeats: int, fp32_sizes: list[int]) -> list[dict]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pods.rollout import HFEngine, sample_keys

    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        engine = HFEngine(model, tokenizer, chunk=max(sizes), dtype=dtype)
        raw = model if engine.copy is None else engine.copy.module
        name = str(dtype).removeprefix("torch.")
        warm = prompts(tokenizer, 1)
        engine.generate(warm, N, T, 8, sample_keys(0, 0, torch.arange(1)), False)
        raw_hf_generate(raw, tokenizer, warm)
        for B in sizes if dtype == torch.bfloat16 else fp32_sizes:
            texts = prompts(tokenizer, B // N)
            keys = sample_keys(0, 0, torch.arange(len(texts)))
            seconds, ids = timed(engine_generate, repeats, engine, texts, keys)
            out.append(row("hf engine", name, B, seconds, ids.numel()))
            seconds, ids = timed(raw_hf_generate, repeats, raw, tokenizer, texts)
            out.append(row("raw transformers", name, B, seconds, ids.numel()))
    return out


def vllm_rows(folder: str, sizes: list[int], repeats: int, seeded: bool) -> list[dict]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pods.config import RolloutConfig
    from pods.rollout import EngineSpec, sample_keys
    from pods.rollout.vllm import VLLMEngine

    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    options = RolloutConfig(engine="vllm", gen_batch_size=max(sizes), vllm_seeded=seeded)
    engine = VLLMEngine(EngineSpec(options, torch.device("cpu"), max_model_len=1024,
                                   dtype=torch.bfloat16), model, tokenizer)
    what = "vllm engine" + (" (seeded)" if seeded else "")
    engine_generate(engine, prompts(tokenizer, 1), sample_keys(0, 0, torch.arange(1)))
    out = []
    for B in sizes:
        texts = prompts(tokenizer, B // N)
        keys = sample_keys(0, 0, torch.arange(len(texts)))
        seconds, ids = timed(engine_generate, repeats, engine, texts, keys)
        out.append(row(what, "bfloat16", B, seconds, ids.numel()))
        seconds, ids = timed(raw_vllm_generate, repeats, engine.llm, tokenizer, texts)
        out.append(row("raw vLLM", "bfloat16", B, seconds, ids.numel()))
    return out


def pods_update(model, optimizer, batch, advantages, mixed: str, cfg) -> None:
    from pods.models.precision import autocast
    from pods.train.selection import KeptBatch
    from pods.train.update import UpdateSpec, policy_update

    kept = KeptBatch(batch, advantages, kept=len(advantages), pad_rows=0)
    with autocast(torch.device("cpu"), mixed):
        policy_update(model, None, optimizer, kept, UpdateSpec(cfg.optim, cfg.loss, T, NEW))


def pods_update_full_logits(model, optimizer, batch, advantages, mixed: str, cfg) -> None:
    import pods.models.logprobs as logprobs

    chunked, logprobs.output_head = logprobs.output_head, lambda model: None
    try:
        pods_update(model, optimizer, batch, advantages, mixed, cfg)
    finally:
        logprobs.output_head = chunked


def bare_update(model, optimizer, batch, advantages, mixed: str, cfg) -> None:
    from pods.models.precision import autocast

    optimizer.zero_grad(set_to_none=True)
    prompt, completion = batch.prompt_ids, batch.completion_ids  # [B, Lp], [B, Lc]
    with autocast(torch.device("cpu"), mixed):
        logits = model(torch.cat([prompt, completion], 1)).logits  # [B, L, V]
    logits = logits[:, prompt.shape[1] - 1:-1].float()  # [B, Lc, V]
    logp = logits.log_softmax(-1).gather(-1, completion[..., None])[..., 0]  # [B, Lc]
    (-(logp * advantages[:, None]).mean()).backward()
    optimizer.step()


def update_rows(folder: str, sizes: list[int], repeats: int) -> list[dict]:
    from transformers import AutoModelForCausalLM

    from pods.config import from_dict
    from pods.rollout import Rollouts
    from pods.runtime.speed import adamw, keep_freed_memory

    cfg = from_dict({"model": folder, "task": "wordproblems", "max_new_tokens": NEW,
                     "recipe": "embedded"})  # the settings it was measured with
    keep_freed_memory()  # as pods train does (pods.runtime.speed)
    out = []
    for mixed in ("no", "bf16"):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).train()
        optimizer = adamw(model.parameters(), lr=1e-7, betas=(0.9, 0.999), weight_decay=0.0)
        dtype = "mixed bf16" if mixed == "bf16" else "float32"
        warm = [True] + [False] * len(sizes)  # the first pass: a warm-up, not reported
        for B, warming in zip([sizes[0], *sizes], warm, strict=True):
            gen = torch.Generator().manual_seed(B)
            prompt = torch.randint(100, 40000, (B, PROMPT), generator=gen)  # [B, Lp]
            completion = torch.randint(100, 40000, (B, NEW), generator=gen)  # [B, Lc]
            batch = Rollouts(prompt, torch.ones_like(prompt), completion,
                             torch.ones_like(completion), [""] * B)
            advantages = torch.randn(B, generator=gen)  # [B]
            for what, fn in (("pods update", pods_update),
                             ("pods update, full logits", pods_update_full_logits),
                             ("bare fwd+bwd+AdamW", bare_update)):
                seconds, _ = timed(fn, 1 if warming else repeats, model, optimizer, batch,
                                   advantages, mixed, cfg)
                if not warming:
                    out.append(row(what, dtype, B, seconds, B * (PROMPT + NEW)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("hf", "vllm", "update"), default="hf")
    p.add_argument("--rows", default="16,64,256", help="P x n batches to generate")
    p.add_argument("--fp32-rows", default="16", help="hf: batches also run in float32")
    p.add_argument("--update-rows", default="4,16", help="kept rollouts per update")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seeded", action="store_true", help="vllm: one seed per request")
    args = p.parse_args()
    from pods.models.fetch import fetch

    folder = str(fetch("smollm2"))
    rows = [int(r) for r in args.rows.split(",")]
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    if args.part == "hf":
        table = hf_rows(folder, rows, args.repeats,
                        [int(r) for r in args.fp32_rows.split(",") if r])
    elif args.part == "vllm":
        table = vllm_rows(folder, rows, args.repeats, args.seeded)
    else:
        table = update_rows(folder, [int(r) for r in args.update_rows.split(",")],
                            args.repeats)
    print("\n| what | dtype | rows | seconds | tokens/s |\n|---|---|---|---|---|")
    for r in table:
        print(f"| {r['what']} | {r['dtype']} | {r['rows']} | {r['seconds']:.1f} | "
              f"{r['tok/s']:.0f} |")


if __name__ == "__main__":
    main()
