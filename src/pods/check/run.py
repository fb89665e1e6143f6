"""`pods check`: the one command to run first on a new machine.

Every mode this machine can run (pods.check.modes) trains a few steps of the same small
run, each in its own process (``python -m pods.check.worker``; torchrun for the data
parallel modes), through the public API: ``train(from_dict(config))``. Each run's
metrics.jsonl gives the row: passed or failed (and why), phase times, peak memory and the
engine/trainer log-prob gap. The PODS n/m mode's step time against a GRPO m/m run's gives
the step-time ratio (the paper: 10.1 s : 7.5 s, 1.35, on one L40S-class GPU).

Writes OUT/check.md and OUT/check.json, each mode's run in OUT/runs/MODE and its output in
OUT/logs/MODE.log. Exit status 1 when any mode failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from pods.check.env import sandbox_memory, sandbox_modes
from pods.check.modes import Machine, Mode, fsdp2_support, plan, pods_mode
from pods.check.report import markdown, measure

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def add_parser(sub) -> None:
    about = "train a few steps in every mode this machine can run (engines, LoRA, data " \
            "parallel): pass/fail, times, memory"
    p = sub.add_parser("check", help=about, description=about[0].upper() + about[1:] +
                       "; the first command to run on a new machine. Writes check.md and "
                       "check.json under --out.",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="hub id, folder, .gguf file, "
                   "smollm2 (pods fetch), or 'tiny' (the embedded model: offline, with the "
                   "arithmetic task)")
    p.add_argument("--gguf-file", default=None, help="GGUF file to read inside the --model "
                   "folder or hub repo (as pods train --gguf-file)")
    p.add_argument("--task", default=None, help="the task; None: arithmetic for tiny, else gsm8k")
    p.add_argument("--data-dir", default=None, help="local data files (offline machines)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, mps or auto (a GPU "
                   "where one is visible)")
    p.add_argument("--dtype", default="auto", help="weights dtype of every mode")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per mode")
    p.add_argument("--n", type=int, default=64, help="rollouts generated per prompt (PODS)")
    p.add_argument("--m", type=int, default=16, help="rollouts kept; the GRPO baseline "
                   "generates m")
    p.add_argument("--prompts-per-step", type=int, default=1, help="P (the paper: 1)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="completion length; None: 8 for tiny, else 256 (a short "
                   "check; a run takes its recipe's, gsm8k: 512)")
    p.add_argument("--eval-size", type=int, default=8, help="test problems evaluated")
    p.add_argument("--only", default=None, help="comma-separated modes to run (default all)")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per mode")
    p.add_argument("--out", default=None, help="folder for the table and the runs "
                   "(default: runs/check-TIMESTAMP)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from pods.models.source import is_builtin, is_local, source_problem

    problem = source_problem(args.model, args.gguf_file)  # before any mode starts its process
    if problem:
        raise ValueError(problem)
    if not is_builtin(args.model) and not is_local(args.model):
        from pods.runtime.hub import check_hub_model

        check_hub_model(args.model, print)  # no hub: its cache (the modes' processes
        # inherit HF_HUB_OFFLINE), or one error now rather than a minute of retries a mode
    tiny = args.model == "tiny"
    settings = {"model": args.model, "gguf_file": args.gguf_file,
                "task": args.task or ("arithmetic" if tiny else "gsm8k"),
                "data_dir": args.data_dir, "device": args.device, "dtype": args.dtype,
                "steps": args.steps, "n": args.n, "m": args.m,
                "prompts_per_step": args.prompts_per_step, "eval_size": args.eval_size,
                "max_new_tokens": args.max_new_tokens or (8 if tiny else 256)}
    out = Path(args.out or f"runs/check-{datetime.now():%Y%m%d-%H%M%S}")
    if (out / "check.json").exists():
        raise ValueError(f"{out} already holds a check; pass another --out.")
    report = run_check(settings, out, only=args.only, timeout=args.timeout)
    print(markdown(report))
    print(f"wrote {out / 'check.md'} and {out / 'check.json'}")
    return 1 if any(row["status"] == "failed" for row in report["modes"]) else 0


def this_machine(device: str) -> Machine:
    """The device kind and GPU count (without creating a CUDA context here: the modes'
    processes need the memory), whether vLLM and FSDP2 are available."""
    import importlib.util

    import torch

    gpus = torch.cuda.device_count() if device in ("auto", "cuda") or \
        device.startswith("cuda") else 0
    kind = "cuda" if gpus and device != "cpu" else "cpu"
    return Machine(device=kind, gpus=gpus, fsdp2=fsdp2_support(),
                   vllm=importlib.util.find_spec("vllm") is not None)


def run_check(settings: dict[str, Any], out: Path, only: str | None = None,
              timeout: float = 1200.0) -> dict[str, Any]:
    """Run every planned mode (or those named in ``only``); write and return the report."""
    machine = this_machine(settings["device"])
    modes = plan(machine, settings["n"], settings["m"])
    if only:
        wanted = [name.strip() for name in only.split(",") if name.strip()]
        unknown = sorted(set(wanted) - {mode.name for mode in modes})
        if unknown:
            raise ValueError(f"unknown mode(s) {', '.join(unknown)} in --only; the modes: "
                             f"{', '.join(mode.name for mode in modes)}.")
        modes = [mode for mode in modes if mode.name in wanted]
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in modes:
        if not mode.skip:
            print(f"pods check: {mode.name} ...", flush=True)
        rows.append(run_mode(mode, settings, out, timeout))
        print(f"pods check: {mode.name} {rows[-1]['status']} "
              f"{rows[-1].get('reason') or ''}".rstrip(), flush=True)
    report = {"machine": vars(machine), "settings": settings, "modes": rows,
              "ratio": step_time_ratio(rows, machine, settings),
              "sandbox": {"modes": sandbox_modes(), "memory": sandbox_memory()}}
    (out / "check.json").write_text(json.dumps(report, indent=1))
    (out / "check.md").write_text(markdown(report))
    return report


def mode_config(mode: Mode, settings: dict[str, Any], out: Path) -> dict[str, Any]:
    """The mode's training config as flat keys: a few steps, no time budget, one
    evaluation at the start and one at the end, a checkpoint at the end."""
    prompts = settings["prompts_per_step"]
    prompts = -(-prompts // mode.procs) * mode.procs  # whole groups on every rank
    values = {"model": settings["model"], "gguf_file": settings.get("gguf_file"),
              "task": settings["task"], "data_dir": settings["data_dir"],
              "device": settings["device"],
              "dtype": settings["dtype"], "n": settings["n"], "m": settings["m"],
              "prompts_per_step": prompts, "max_new_tokens": settings["max_new_tokens"],
              "eval_size": settings["eval_size"], "max_steps": settings["steps"],
              "max_time": None, "eval_every": 1e9, "checkpoint_every": 1e9,
              "out_dir": str(out / "runs"), "run_name": mode.name.replace("/", "_"),
              "progress": False}
    return {**values, **mode.overrides}


def run_mode(mode: Mode, settings: dict[str, Any], out: Path, timeout: float) -> dict[str, Any]:
    """One row: skipped with the reason, or the mode trained in its own process(es)."""
    row: dict[str, Any] = {"mode": mode.name, "procs": mode.procs}
    if mode.skip:
        return {**row, "status": "skipped", "reason": mode.skip}
    values = mode_config(mode, settings, out)
    run_dir = Path(values["out_dir"]) / values["run_name"]
    result_path = out / "logs" / f"{values['run_name']}.result.json"
    log_path = result_path.with_name(f"{values['run_name']}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    code, timed_out = _launch(mode.procs, [json.dumps(values), str(result_path)], log_path,
                              timeout)
    row.update(seconds=round(time.monotonic() - start, 1), log=str(log_path),
               **_worker_result(result_path), **measure(run_dir))
    reason = row.pop("error", None)
    if timed_out:
        reason = f"timed out after {timeout:.0f} s (see {log_path})"
    elif code != 0 and not reason:
        reason = f"exit status {code}: {_last_line(log_path)} (see {log_path})"
    elif code == 0 and row["steps"] < settings["steps"]:
        reason = f"finished with {row['steps']} of {settings['steps']} steps in {run_dir}"
    return {**row, "status": "failed" if reason else "passed", "reason": reason}


def _launch(procs: int, argv: list[str], log_path: Path, timeout: float) -> tuple[int, bool]:
    """Run the worker (under torchrun for procs > 1) with this pods first on the path;
    (exit status, timed out). Output goes to ``log_path``."""
    import pods

    command = [sys.executable, "-m", "pods.check.worker", *argv]
    if procs > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={procs}", "-m", "pods.check.worker", *argv]
    source = str(Path(pods.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (source, os.environ.get("PYTHONPATH")) if p)}
    with log_path.open("w") as log:
        try:
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return -9, True
    return done.returncode, False


def _worker_result(path: Path) -> dict[str, Any]:
    """What the worker wrote: rank 0's file, or the first rank's error."""
    result: dict[str, Any] = {}
    for file in sorted(path.parent.glob(path.name + "*")):  # rank 0's first
        for key, value in json.loads(file.read_text()).items():
            result.setdefault(key, value)
    return result


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[-300:] if lines else "no output"


def step_time_ratio(rows: list[dict[str, Any]], machine: Machine,
                    settings: dict[str, Any]) -> dict[str, Any] | None:
    """PODS n/m seconds per step : GRPO m/m seconds per step, same engine, full tuning."""
    n, m = settings["n"], settings["m"]
    by_name = {row["mode"]: row for row in rows}
    pods_row, grpo_row = by_name.get(pods_mode(machine)), by_name.get(f"grpo-{m}/{m}")
    if not (pods_row and grpo_row) or "failed" in (pods_row["status"], grpo_row["status"]) \
            or not (pods_row.get("step_s") and grpo_row.get("step_s")):
        return None
    return {"pods": f"{n}/{m}", "grpo": f"{m}/{m}", "mode": pods_row["mode"],
            "pods_s": pods_row["step_s"], "grpo_s": grpo_row["step_s"],
            "value": pods_row["step_s"] / grpo_row["step_s"]}

