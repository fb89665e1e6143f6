"""Seconds per optimizer step: the native pods trainer against TRL's GRPOTrainer and the
PODS adapter (pods.integrations.trl), on the same model, task and settings.

Two set-ups (``--model``). ``tiny`` (the default): the embedded tiny model (the SFT-warmed
Qwen2 of ``pods.models.tiny``, from the same cache folder), the arithmetic task's train
prompts, 8 new tokens at temperature 1.0, AdamW at lr 3e-4, float32, P = 8:

    pods GRPO           pods.train.trainer.Trainer, n = m = 16
    pods GRPO-PODS      pods.train.trainer.Trainer, n = 64, m = 16, max-variance
    TRL GRPOTrainer     trl.GRPOTrainer, num_generations = 16
    TRL PODSGRPOTrainer pods.integrations.trl, num_generations = 64, pods_m = 16

``smollm2``: SmolLM2-135M-Instruct (``pods fetch smollm2``), the word problems (levels 1
and 2) with the paper's chat prompt, 200 new tokens at temperature 0.5, lr 2e-5, bf16
compute over float32 weights (pods: mixed_precision bf16; TRL: bf16=True, accelerate's
autocast), P = 1, at the paper's MATH sizes: GRPO 8/8 and PODS 32/8 on each side. Both
generate with transformers' ``generate`` on the training module (pods' hf engine; TRL
without vLLM, which TRL cannot run on a CPU).

``smollm2-gpu``: the anchor of the GPU check (benchmarks/gpu/check.py): the same model and
prompts on a CUDA GPU, the settings of configs/smollm2_gpu.yaml (P = 16, n = 16, 200 new
tokens at temperature 0.5, lr 2e-5, bf16 compute over float32 weights) and its update size
(64 rows an optimizer step): stock TRL trains on all P x n = 256 rollouts of a generation
batch in 4 optimizer steps of 64 rows (``generation_batch_size`` = P x n), pods on the 64
it keeps.

Common to both: the task's reward, no KL, gradient-norm clipping at 1.0, per-sequence loss
normalisation. Each runs in its own process with the same torch thread count; a step is
timed from before generation to after the optimizer step (pods's ``Trainer.step()``, TRL's
on_step_begin/on_step_end), printed as it ends; the table reports the median over the
steps after the warm-up, split into generate (the ``generate`` call), reward, select/score
(selection, advantages, padding, TRL's bookkeeping) and update (fwd, bwd, optimizer step).

    python benchmarks/integrations/trl_vs_native.py          # about 1.5 minutes on 2 cores
    python benchmarks/integrations/trl_vs_native.py --steps 20 --warmup 3 --prompts 16
    python benchmarks/integrations/trl_vs_native.py --model smollm2 --threads 2 --steps 5 --warmup 1
    python benchmarks/integrations/trl_vs_native.py --quick  # the rehearsal: 1 step, P = 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402

SEED = 0
SETUPS = {  # --model: the run's settings and the methods, name: (implementation, n, m), m
    # the rows an optimizer step trains on per prompt (stock TRL: all n, m at a time)
    "tiny": {"task": "arithmetic", "prompts": 8, "max_new_tokens": 8, "temperature": 1.0,
             "lr": 3e-4, "bf16": False, "device": "cpu",
             "methods": {"pods GRPO": ("native", 16, 16), "pods GRPO-PODS": ("native", 64, 16),
                         "TRL GRPOTrainer": ("trl", 16, 16),
                         "TRL PODSGRPOTrainer": ("trl-pods", 64, 16)}},
    "smollm2": {"task": "wordproblems", "prompts": 1, "max_new_tokens": 200,
                "temperature": 0.5, "lr": 2e-5, "bf16": True, "device": "cpu",
                "methods": {"pods GRPO": ("native", 8, 8), "pods GRPO-PODS": ("native", 32, 8),
                            "TRL GRPOTrainer": ("trl", 8, 8),
                            "TRL PODSGRPOTrainer": ("trl-pods", 32, 8)}},
    "smollm2-gpu": {"task": "wordproblems", "prompts": 16, "max_new_tokens": 200,
                    "temperature": 0.5, "lr": 2e-5, "bf16": True, "device": "cuda",
                    "model": "smollm2",
                    "methods": {"pods GRPO-PODS": ("native", 16, 4),
                                "TRL GRPOTrainer": ("trl", 16, 4),
                                "TRL PODSGRPOTrainer": ("trl-pods", 16, 4)}},
}
METHODS = sorted({name for setup in SETUPS.values() for name in setup["methods"]})
PHASES = ("generate", "reward", "select", "update")


def native(model: str, P: int, n: int, m: int, steps: int, beta: float = 0.0) -> list[dict]:
    from pods.config import from_dict
    from pods.train.trainer import Trainer

    setup = SETUPS[model]
    config = from_dict(dict(model=setup.get("model", model), task=setup["task"],
                            prompts_per_step=P, n=n, m=m,
                            lr=setup["lr"], max_new_tokens=setup["max_new_tokens"],
                            temperature=setup["temperature"], engine="hf",
                            mixed_precision="bf16" if setup["bf16"] else "no",
                            max_steps=steps, max_time=None, device=setup["device"],
                            progress=False, seed=SEED, beta=beta, lr_schedule="constant",
                            warmup_frac=0.0,
                            recipe="embedded"))  # the settings it was measured with
    trainer = Trainer(config, log=lambda *args, **kwargs: None)
    records = []
    for _ in range(steps):
        start = time.perf_counter()
        out = trainer.step()
        record = {"step": time.perf_counter() - start, "updated": "time/update" in out}
        record.update({phase: out.get(f"time/{phase}", 0.0) for phase in PHASES})
        records.append(record)
        print("STEP " + json.dumps(record), flush=True)
    return records


def model_folder(model: str, task) -> str:
    """The folder both sides load: the tiny model's cache, or a fetched model's."""
    if model == "tiny":
        from pods.models.tiny import tiny_model_path

        return str(tiny_model_path(task, log=lambda *args: None))
    from pods.models.source import resolve

    return str(resolve(model, None, log=lambda *args: None))


def trl(model: str, P: int, n: int, m: int, steps: int, pods: bool, beta: float = 0.0
        ) -> list[dict]:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from pods.rollout.prompts import render_prompts
    from pods.tasks import get_task

    setup = SETUPS[model]
    task = get_task(setup["task"])
    model_dir = model_folder(setup.get("model", model), task)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    problems = task.train()
    texts, _ = render_prompts(tokenizer, task, problems)  # rendered: TRL adds no template
    by_prompt = dict(zip(texts, problems, strict=True))

    def reward(prompts, completions, **kwargs):
        return [task.reward(c, by_prompt[p]) for p, c in zip(prompts, completions, strict=True)]

    if pods:
        from pods.integrations.trl import PODSGRPOConfig as Config
        from pods.integrations.trl import PODSGRPOTrainer as Trainer
        extra = {"pods_m": m, "pods_rule": "max_variance"}
    else:
        from trl import GRPOConfig as Config
        from trl import GRPOTrainer as Trainer
        extra = {}
    # per_device_train_batch_size: the rows of an optimizer step, P x m, in one micro-batch;
    # stock TRL trains on every rollout of its generation batch (P x n: n/m optimizer steps
    # a generation), the PODS adapter on the kept ones (one step a generation).
    sizes = {} if pods else {"generation_batch_size": P * n}
    args = Config(output_dir=tempfile.mkdtemp(), num_generations=n, max_steps=steps,
                  per_device_train_batch_size=P * m, gradient_accumulation_steps=1, **sizes,
                  max_completion_length=setup["max_new_tokens"],
                  temperature=setup["temperature"], learning_rate=setup["lr"],
                  lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
                  weight_decay=0.0, max_grad_norm=1.0, beta=beta, loss_type="grpo",
                  scale_rewards="group", bf16=setup["bf16"],
                  use_cpu=setup["device"] == "cpu", report_to="none",
                  save_strategy="no", logging_steps=steps, disable_tqdm=True, seed=SEED,
                  **extra)
    records: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            records.append({phase: 0.0 for phase in ("generate", "reward", "score")})
            self.start = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            r = records[-1]
            r["step"] = time.perf_counter() - self.start
            # score includes generate and reward; the rest of the step is the update
            r["select"] = r["score"] - r["generate"] - r["reward"]
            r["update"] = r["step"] - r["score"]
            print("STEP " + json.dumps(r), flush=True)

    trainer = Trainer(model=model_dir, reward_funcs=reward, args=args,
                      train_dataset=Dataset.from_dict({"prompt": texts}),
                      processing_class=tokenizer, callbacks=[StepTimer()])
    for method, phase in [("_generate_single_turn", "generate"),
                          ("_calculate_rewards", "reward"),
                          ("_generate_and_score_completions", "score")]:
        setattr(trainer, method, _timed(getattr(trainer, method), records, phase))
    trainer.train()
    return records


def _timed(method, records: list[dict], phase: str):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            records[-1][phase] += time.perf_counter() - start
    return timed


def worker(model: str, name: str, prompts: int, steps: int, beta: float) -> None:
    kind, n, m = SETUPS[model]["methods"][name]
    if kind == "native":  # each step printed as it ends (STEP lines)
        native(model, prompts, n, m, steps, beta)
    else:
        trl(model, prompts, n, m, steps, pods=kind == "trl-pods", beta=beta)


def run(name: str, cli, timeout: float | None = None) -> dict:
    """One method in a fresh process: medians over its timed steps (those it finished, with
    ``stopped``, if ``timeout`` cut it short), or a RuntimeError saying why not."""
    env = {**os.environ, "OMP_NUM_THREADS": str(cli.threads), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, __file__, "--worker", name, "--model", cli.model,
               "--prompts", str(cli.prompts), "--steps", str(cli.warmup + cli.steps),
               "--threads", str(cli.threads), "--beta", str(cli.beta),
               "--max-new-tokens", str(SETUPS[cli.model]["max_new_tokens"])]
    stopped = None
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode:
            raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
        out = done.stdout
    except subprocess.TimeoutExpired as expired:  # the output so far (bytes on POSIX)
        out, stopped = expired.stdout, f"{name} stopped after {timeout:.0f} s"
    timed = steps_of(out)[cli.warmup:]
    if not timed:
        raise RuntimeError(stopped or f"{name} printed no step")
    # pods runs no update on a step without reward variance (TRL does): such steps are
    # left out of the medians, and counted
    updated = [r for r in timed if r.get("updated", True)]
    medians = {key: statistics.median(r[key] for r in updated or timed)
               for key in ("step", *PHASES)}
    return {**medians, "skipped": len(timed) - len(updated), "records": timed,
            **({"stopped": stopped} if stopped else {})}


def steps_of(output: str | bytes | None) -> list[dict]:
    """The step records a worker printed (``STEP {...}`` lines), in order."""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output or ""
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("STEP ")]


def main() -> None:
    parser = suite.parser(__doc__, "the tiny set-up, P = 2, 1 step, no warm-up")
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--model", choices=SETUPS, default="tiny",
                        help="tiny (embedded, arithmetic) or smollm2 (pods fetch smollm2; the "
                             "word problems): see the docstring")
    parser.add_argument("--prompts", type=int, default=None,
                        help="P, prompts per step (default: tiny 8, smollm2 1)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads in every run (1: tiny ops gain nothing from more)")
    parser.add_argument("--beta", type=float, default=0.0,
                        help="KL weight in every run (> 0: reference log-probs; TRL computes "
                             "them on all n, pods on the m kept)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="completion limit (default: tiny 8, smollm2 200)")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.quick:
        cli.model, cli.prompts, cli.steps, cli.warmup = "tiny", 2, 1, 0
    setup = SETUPS[cli.model]
    setup["max_new_tokens"] = cli.max_new_tokens or setup["max_new_tokens"]
    cli.prompts = cli.prompts or setup["prompts"]
    torch.set_num_threads(cli.threads)
    if cli.worker:
        worker(cli.model, cli.worker, cli.prompts, cli.steps, cli.beta)
        return
    import transformers
    import trl as trl_module

    P = cli.prompts
    print(f"machine: {suite.machine()}, transformers {transformers.__version__}, trl "
          f"{trl_module.__version__}")
    print(f"model {cli.model}, task {setup['task']}, P={P}, {setup['max_new_tokens']} new "
          f"tokens, temperature {setup['temperature']}, lr {setup['lr']}, "
          f"{'bf16 compute over float32 weights' if setup['bf16'] else 'float32'}, beta "
          f"{cli.beta}; median over {cli.steps} steps after {cli.warmup} warm-up steps\n")
    print("| method | P | n | m | s/step | rollouts/s | generate | reward | select/score | "
          "update | steps without an update (left out) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    start, (busy, ours) = time.perf_counter(), suite.cpu_seconds()
    rows = []
    for name, (_, n, m) in setup["methods"].items():
        try:
            t = run(name, cli)
        except RuntimeError as error:
            sys.exit(str(error))
        rows.append({"method": name, "P": P, "n": n, "m": m,
                     **{k: v for k, v in t.items() if k != "records"}})
        print(f"| {name} | {P} | {n} | {m} | {t['step']:.3f} | {P * n / t['step']:.2f} | "
              + " | ".join(f"{t[phase]:.3f}" for phase in PHASES)
              + f" | {t['skipped']} |", flush=True)
    wall, (busy_end, ours_end) = time.perf_counter() - start, suite.cpu_seconds()
    other = max(0.0, (busy_end - busy) - (ours_end - ours)) / wall
    print(f"\nother load during the runs: {other:.2f} of {os.cpu_count()} cores busy on "
          f"average (not these benchmarks); timings are only comparable when it is near 0.")
    suite.write_json(cli.json, rows)


if __name__ == "__main__":
    main()
