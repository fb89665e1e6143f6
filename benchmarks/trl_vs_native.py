"""Seconds per optimizer step: the native pods trainer against TRL's GRPOTrainer and the
PODS adapter (pods.integrations.trl), on the same model, task and settings.

All four runs use the embedded tiny model (the SFT-warmed Qwen2 of ``pods.models.tiny``,
from the same cache folder), the arithmetic task's train prompts rendered as
``pods.rollout.prompts.render_prompts`` does, its reward, P prompts per step, 8 new tokens at
temperature 1.0, AdamW at lr 3e-4, no KL, float32, gradient-norm clipping at 1.0, per-
sequence loss normalisation and one optimizer step per generation batch:

    pods GRPO           pods.train.trainer.Trainer, n = m = 16
    pods GRPO-PODS      pods.train.trainer.Trainer, n = 64, m = 16, max-variance
    TRL GRPOTrainer     trl.GRPOTrainer, num_generations = 16
    TRL PODSGRPOTrainer pods.integrations.trl, num_generations = 64, pods_m = 16

Each runs in its own process with the same torch thread count; a step is timed from
before generation to after the optimizer step (``Trainer.step()`` for pods, a
TrainerCallback's on_step_begin/on_step_end for TRL), and the table reports the median
over the steps after the warm-up. The phase columns split that time: generate (the
``generate`` call), reward, select/score (everything between generation and the update:
selection, advantages, padding, TRL's bookkeeping) and update (forward, backward,
optimizer step).

    python benchmarks/trl_vs_native.py                       # about 1.5 minutes on 2 cores
    python benchmarks/trl_vs_native.py --steps 20 --warmup 3 --prompts 16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

LR, MAX_NEW_TOKENS, TEMPERATURE, SEED = 3e-4, 8, 1.0, 0
METHODS = {  # name: (implementation, n, m)
    "pods GRPO": ("native", 16, 16),
    "pods GRPO-PODS": ("native", 64, 16),
    "TRL GRPOTrainer": ("trl", 16, 16),
    "TRL PODSGRPOTrainer": ("trl-pods", 64, 16),
}
PHASES = ("generate", "reward", "select", "update")


def native(P: int, n: int, m: int, steps: int, beta: float = 0.0) -> list[dict]:
    from pods.config import from_dict
    from pods.train.trainer import Trainer

    config = from_dict(dict(model="tiny", task="arithmetic", prompts_per_step=P, n=n, m=m,
                         lr=LR, max_new_tokens=MAX_NEW_TOKENS, temperature=TEMPERATURE,
                         max_steps=steps, max_time=None, device="cpu", progress=False,
                         seed=SEED, beta=beta))
    trainer = Trainer(config, log=lambda *args, **kwargs: None)
    records = []
    for _ in range(steps):
        start = time.perf_counter()
        out = trainer.step()
        record = {"step": time.perf_counter() - start}
        record.update({phase: out[f"time/{phase}"] for phase in PHASES})
        records.append(record)
    return records


def trl(P: int, n: int, m: int, steps: int, pods: bool, beta: float = 0.0) -> list[dict]:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from pods.models.tiny import tiny_model_path
    from pods.rollout.prompts import render_prompts
    from pods.tasks import get_task

    task = get_task("arithmetic")
    model_dir = str(tiny_model_path(task, log=lambda *args: None))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    problems = task.train()
    texts, _ = render_prompts(tokenizer, task, problems)  # no chat template: special tokens
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
    # per_device_train_batch_size: every rollout of the step (stock TRL) or every kept one
    # (PODS adapter); one micro-batch, one optimizer step per generation batch.
    args = Config(output_dir=tempfile.mkdtemp(), num_generations=n, max_steps=steps,
                  per_device_train_batch_size=P * m, gradient_accumulation_steps=1,
                  max_completion_length=MAX_NEW_TOKENS, temperature=TEMPERATURE,
                  learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
                  optim="adamw_torch", weight_decay=0.0, max_grad_norm=1.0, beta=beta,
                  loss_type="grpo", scale_rewards="group", bf16=False, use_cpu=True,
                  report_to="none", save_strategy="no", logging_steps=steps,
                  disable_tqdm=True, seed=SEED, **extra)
    records: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            records.append({phase: 0.0 for phase in ("generate", "reward", "score")})
            self.start = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            records[-1]["step"] = time.perf_counter() - self.start

    trainer = Trainer(model=model_dir, reward_funcs=reward, args=args,
                      train_dataset=Dataset.from_dict({"prompt": texts}),
                      processing_class=tokenizer, callbacks=[StepTimer()])
    for method, phase in [("_generate_single_turn", "generate"),
                          ("_calculate_rewards", "reward"),
                          ("_generate_and_score_completions", "score")]:
        setattr(trainer, method, _timed(getattr(trainer, method), records, phase))
    trainer.train()
    for r in records:  # score includes generate and reward; the rest of the step is update
        r["select"] = r["score"] - r["generate"] - r["reward"]
        r["update"] = r["step"] - r["score"]
    return records


def _timed(method, records: list[dict], phase: str):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            records[-1][phase] += time.perf_counter() - start
    return timed


def worker(name: str, prompts: int, steps: int, beta: float) -> None:
    kind, n, m = METHODS[name]
    records = native(prompts, n, m, steps, beta) if kind == "native" else \
        trl(prompts, n, m, steps, pods=kind == "trl-pods", beta=beta)
    print("RESULT " + json.dumps(records))


def run(name: str, cli) -> dict:
    """One method in a fresh process: its medians over the timed steps."""
    env = {**os.environ, "OMP_NUM_THREADS": str(cli.threads), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, __file__, "--worker", name, "--prompts", str(cli.prompts),
               "--steps", str(cli.warmup + cli.steps), "--threads", str(cli.threads),
               "--beta", str(cli.beta)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    timed = json.loads(lines[-1][len("RESULT "):])[cli.warmup :]
    return {key: statistics.median(r[key] for r in timed) for key in ("step", *PHASES)}


def machine(threads: int) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers
    import trl as trl_module

    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} with "
            f"{threads} threads, transformers {transformers.__version__}, trl "
            f"{trl_module.__version__}, Python {platform.python_version()}")


def cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process's children)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait, in clock ticks
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy / os.sysconf("SC_CLK_TCK"), children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--prompts", type=int, default=8, help="P, prompts per step")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads in every run (1: tiny ops gain nothing from more)")
    parser.add_argument("--beta", type=float, default=0.0,
                        help="KL weight in every run (> 0: reference log-probs; TRL computes "
                             "them on all n, pods on the m kept)")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    torch.set_num_threads(cli.threads)
    if cli.worker:
        worker(cli.worker, cli.prompts, cli.steps, cli.beta)
        return
    P = cli.prompts
    print(f"machine: {machine(cli.threads)}")
    print(f"P={P}, {MAX_NEW_TOKENS} new tokens, temperature {TEMPERATURE}, lr {LR}, beta "
          f"{cli.beta}; median "
          f"over {cli.steps} steps after {cli.warmup} warm-up steps\n")
    print("| method | P | n | m | s/step | rollouts/s | generate | reward | select/score | "
          "update |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    start, (busy, ours) = time.perf_counter(), cpu_seconds()
    for name, (_, n, m) in METHODS.items():
        t = run(name, cli)
        print(f"| {name} | {P} | {n} | {m} | {t['step']:.3f} | {P * n / t['step']:.0f} | "
              + " | ".join(f"{t[phase]:.3f}" for phase in PHASES) + " |", flush=True)
    wall, (busy_end, ours_end) = time.perf_counter() - start, cpu_seconds()
    other = max(0.0, (busy_end - busy) - (ours_end - ours)) / wall
    print(f"\nother load during the runs: {other:.2f} of {os.cpu_count()} cores busy on "
          f"average (not these benchmarks); timings are only comparable when it is near 0.")


if __name__ == "__main__":
    main()
