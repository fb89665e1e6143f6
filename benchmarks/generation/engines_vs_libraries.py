"""SmolLM2-135M-Instruct on this machine: pods's generation engines against their raw
libraries, float32 and bf16 (the first table of "Engines and update against their
libraries" on the results page).

P x n rollouts of wordproblems prompts (the showcase's chat-templated prompts, P = rows / 16
distinct prompts, n = 16), 128 new tokens at T = 0.9; tokens/s counts every row's positions
up to the batch's longest completion (what the batch computed). Each cell is the median of
--repeats calls (default 1) after one short warm-up call per model.
  hf engine         pods.rollout.HFEngine (keyed sampler; under bf16 its bf16 copy)
  raw transformers  model.generate(do_sample=True, top_k=0) on the same batch and model
  vllm engine       pods.rollout.vllm.VLLMEngine in bf16: one request per rollout with
                    log-probs; --seeded: each request seeded with its key (pods's default)
  raw vLLM          LLM.generate on the same prompts, SamplingParams(n=16), no log-probs
(The section's update table came from this script's former ``--part update``, retired once
benchmarks/update/update_profile.py measured the same pair, pods's update against the bare
step, with the settings pods trains with.)

    .venv/bin/python benchmarks/generation/engines_vs_libraries.py --part hf
    .venv-vllm/bin/python benchmarks/generation/engines_vs_libraries.py --part vllm
    .venv/bin/python benchmarks/generation/engines_vs_libraries.py --quick   # the embedded
        # model on its arithmetic prompts, 16 rows of 8 new tokens, hf only
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
T, N = 0.9, 16  # temperature, rollouts per prompt


def prompts(tokenizer, P: int, task_name: str = "wordproblems") -> list[str]:
    from pods.config import from_dict
    from pods.rollout.prompts import render_prompts
    from pods.tasks import get_task

    task = get_task(task_name, from_dict({"model": "smollm2", "task": task_name}).task)
    return render_prompts(tokenizer, task, task.train()[:P])[0]


def timed(fn, repeats: int, *args) -> tuple[float, object]:
    """The median seconds of ``repeats`` calls, and the last call's result (the caller has
    warmed the model up once; a warm-up per cell would double the 256-row cells)."""
    out = []
    return suite.timed(lambda: out.append(fn(*args)), repeats, warmup=0), out[-1]


def engine_generate(engine, texts: list[str], keys, new: int) -> torch.Tensor:
    return engine.generate(texts, N, T, new, keys, False).completion_ids  # [P*n, Lc]


def raw_hf_generate(model, tokenizer, texts: list[str], new: int) -> torch.Tensor:
    enc = tokenizer([t for t in texts for _ in range(N)], return_tensors="pt", padding=True,
                    add_special_tokens=False)
    with torch.no_grad():
        ids = model.generate(**enc, max_new_tokens=new, do_sample=True, temperature=T,
                             top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id)
    return ids[:, enc["input_ids"].shape[1]:]  # [P*n, Lc]


def raw_vllm_generate(llm, tokenizer, texts: list[str], new: int) -> torch.Tensor:
    from vllm import SamplingParams

    params = SamplingParams(n=N, temperature=T, top_k=0, top_p=1.0, max_tokens=new)
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


@dataclass(frozen=True)
class Work:
    """What is generated: the model's folder, the task whose prompts it gets, new tokens."""

    folder: str
    task: str = "wordproblems"
    new: int = 128


def hf_rows(work: Work, sizes: list[int], repeats: int, fp32_sizes: list[int]) -> list[dict]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pods.rollout import HFEngine, sample_keys

    tokenizer = AutoTokenizer.from_pretrained(work.folder, padding_side="left")
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(work.folder, dtype=torch.float32).eval()
        engine = HFEngine(model, tokenizer, chunk=max(sizes), dtype=dtype)
        raw = model if engine.copy is None else engine.copy.module
        name = str(dtype).removeprefix("torch.")
        warm = prompts(tokenizer, 1, work.task)
        engine.generate(warm, N, T, 8, sample_keys(0, 0, torch.arange(1)), False)
        raw_hf_generate(raw, tokenizer, warm, 8)
        for B in sizes if dtype == torch.bfloat16 else fp32_sizes:
            texts = prompts(tokenizer, B // N, work.task)
            keys = sample_keys(0, 0, torch.arange(len(texts)))
            seconds, ids = timed(engine_generate, repeats, engine, texts, keys, work.new)
            out.append(row("hf engine", name, B, seconds, ids.numel()))
            seconds, ids = timed(raw_hf_generate, repeats, raw, tokenizer, texts, work.new)
            out.append(row("raw transformers", name, B, seconds, ids.numel()))
    return out


def vllm_rows(work: Work, sizes: list[int], repeats: int, seeded: bool) -> list[dict]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pods.config import RolloutConfig
    from pods.rollout import EngineSpec, sample_keys
    from pods.rollout.vllm import VLLMEngine

    tokenizer = AutoTokenizer.from_pretrained(work.folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(work.folder, dtype=torch.float32)
    options = RolloutConfig(engine="vllm", gen_batch_size=max(sizes), vllm_seeded=seeded)
    engine = VLLMEngine(EngineSpec(options, torch.device("cpu"), max_model_len=1024,
                                   dtype=torch.bfloat16), model, tokenizer)
    what = "vllm engine" + (" (seeded)" if seeded else "")
    engine_generate(engine, prompts(tokenizer, 1, work.task), sample_keys(0, 0, torch.arange(1)),
                    8)
    out = []
    for B in sizes:
        texts = prompts(tokenizer, B // N, work.task)
        keys = sample_keys(0, 0, torch.arange(len(texts)))
        seconds, ids = timed(engine_generate, repeats, engine, texts, keys, work.new)
        out.append(row(what, "bfloat16", B, seconds, ids.numel()))
        seconds, ids = timed(raw_vllm_generate, repeats, engine.llm, tokenizer, texts, work.new)
        out.append(row("raw vLLM", "bfloat16", B, seconds, ids.numel()))
    return out


def main() -> None:
    p = suite.parser(__doc__, "the embedded model, 16 rows of 8 new tokens, hf")
    p.add_argument("--part", choices=("hf", "vllm"), default="hf")
    p.add_argument("--rows", default="16,64,256", help="P x n batches to generate")
    p.add_argument("--fp32-rows", default="16", help="hf: batches also run in float32")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seeded", action="store_true", help="vllm: one seed per request")
    args = p.parse_args()
    if args.quick:
        from pods.models.tiny import embedded_model_path

        work, args.rows, args.part = Work(str(embedded_model_path()), "arithmetic", 8), "16", "hf"
    else:
        from pods.models.fetch import fetch

        work = Work(str(fetch("smollm2")))
    rows = [int(r) for r in args.rows.split(",")]
    print(f"# {suite.machine()}", flush=True)
    if args.part == "hf":
        table = hf_rows(work, rows, args.repeats,
                        [int(r) for r in args.fp32_rows.split(",") if r])
    else:
        table = vllm_rows(work, rows, args.repeats, args.seeded)
    print(suite.markdown(["what", "dtype", "rows", "seconds", "tokens/s"],
                         [[r["what"], r["dtype"], r["rows"], f"{r['seconds']:.1f}",
                           f"{r['tok/s']:.0f}"] for r in table], "lllll"))
    suite.write_json(args.json, table)


if __name__ == "__main__":
    main()
