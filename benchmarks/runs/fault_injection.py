"""Fault injection: SIGKILL a short CPU run at random points, resume it each time, check it.

    python benchmarks/runs/fault_injection.py [--kills 20] [--steps 2000] [--seed 0]

Trains a small untrained model on the arithmetic task (a few ms a step) with frequent
checkpoints. Of every 4 kills, one lands inside a checkpoint write (up to 3 ms after its
staging folder appears; the process is frozen with SIGSTOP to check that the write is still
under way, else let go until the next one), one at a random moment of start-up (imports,
model load, restore) and two at a random moment of training. After each kill the run is resumed with
`pods train --resume`. At the end it checks, against an uninterrupted run of the same
config: every resume started, the training time lost per kill is at most one checkpoint
interval plus one step, metrics.jsonl stayed readable with no step or evaluation twice, and
the final step count, per-step rewards and final weights are the same. Prints a table.
tests/train/test_faults.py runs it with 12 kills.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ["--max-time", "none", "--prompts-per-step", "2", "--n", "4", "--m", "2",
         "--eval-size", "8", "--max-new-tokens", "4", "--progress", "false",
         "--eval-every", "1.0", "--lr", "1e-2", "--recipe", "embedded"]
RESUMED = re.compile(r"resuming .* from (step_\d+) \(step (\d+),")
# Its CI-sized run is a test of resumes, not a rehearsal: 12 kills in tests/train/test_faults.py
REHEARSAL = "tests/train/test_faults.py"


@dataclass
class Report:
    steps: int
    checkpoint_every: float
    kills: list[dict] = field(default_factory=list)  # where, step resumed at, time lost
    problems: list[str] = field(default_factory=list)
    max_step_time: float = 0.0
    seconds: float = 0.0

    @property
    def max_lost(self) -> float:
        return max((k["lost"] for k in self.kills if k["lost"] is not None), default=0.0)

    def table(self) -> str:
        where = {w: sum(k["where"] == w for k in self.kills)
                 for w in ("checkpoint write", "training", "start-up")}
        rows = [("kills (SIGKILL)", str(len(self.kills))),
                *((f"  in {w}", str(c)) for w, c in where.items()),
                *((f"resumes: {n}", str(sum(k["next"] == n for k in self.kills)))
                  for n in ("restored", "killed in start-up", "failed")),
                ("training time lost per kill, most", f"{self.max_lost:.3f} s"),
                ("  bound: checkpoint interval + one step",
                 f"{self.checkpoint_every + self.max_step_time:.3f} s"),
                ("final step count (uninterrupted run)", f"{self.steps}"),
                ("problems", str(len(self.problems))), ("wall seconds", f"{self.seconds:.0f}")]
        width = max(len(r[0]) for r in rows)
        return "\n".join(f"| {a:<{width}} | {b:>10} |" for a, b in rows)


def pods_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pods", *args]


def checked_metrics(path: Path) -> list[dict]:
    """The records of metrics.jsonl; every line but a last one cut by a kill must parse."""
    lines = path.read_text().splitlines() if path.exists() else []
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise AssertionError(f"{path} line {i + 1} is broken: {line[:80]!r}") from None
    return records


def run_faults(model: str, out: Path, kills: int = 20, steps: int = 2000,
               checkpoint_every: float = 0.25, seed: int = 0, log=print) -> Report:
    started, rng = time.time(), random.Random(seed)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    common = ["--model", model, *FLAGS, "--max-steps", str(steps), "--checkpoint-every",
              str(checkpoint_every), "--out-dir", str(out)]
    report = Report(steps=steps, checkpoint_every=checkpoint_every)
    reference = subprocess.run(pods_command("train", *common, "--run-name", "uninterrupted"),
                               env=env, capture_output=True, text=True, timeout=600)
    if reference.returncode:
        raise RuntimeError(f"the uninterrupted run failed:\n{reference.stderr[-3000:]}")
    run = out / "killed"
    command = pods_command("train", *common, "--run-name", "killed")
    for i in range(kills + 1):
        output = out / f"attempt{i:02d}.log"
        with output.open("w") as sink:
            proc = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
            mode = ("training", "start-up", "training", "checkpoint")[i % 4] if i else \
                "training"
            where = _kill_at_random(proc, run, rng, mode) if i < kills else None
            proc.wait(timeout=600)
        text = output.read_text()
        if i > 0:  # the previous kill's resume: did it start, and how much was lost?
            _account_resume(report, text, i)
        if where is None:  # the last attempt runs to the end
            if proc.returncode:
                report.problems.append(f"the final resume failed:\n{text[-2000:]}")
            break
        before = checked_metrics(run / "metrics.jsonl")
        report.kills.append({"where": where, "next": None, "lost": None,
                             "last_time": max((r["time"] for r in before
                                               if r.get("kind") == "step"), default=0.0),
                             "times": {r["step"]: r["time"] for r in before
                                       if r.get("kind") == "step"}})
        if proc.returncode is not None and proc.returncode != -signal.SIGKILL:
            report.problems.append(f"attempt {i} ended with {proc.returncode} before the "
                                   f"kill:\n{text[-2000:]}")
            break
        command = pods_command("train", "--resume", str(run))
        log(f"kill {i + 1}/{kills}: {where}")
    _compare_with_reference(report, out / "uninterrupted", run)
    report.seconds = time.time() - started
    return report


def _kill_at_random(proc: subprocess.Popen, run: Path, rng: random.Random, mode: str) -> str:
    """Kill ``proc`` at a random moment of its ``mode``: "checkpoint" (within 3 ms of a
    checkpoint's staging folder appearing, if the write is still under way), "start-up"
    (within 3 s of launch: imports, model load, restore) or "training" (within 1.5 s once
    it has restored and written to metrics.jsonl; on the first start, once a checkpoint
    exists). Returns where it was."""
    launched, checkpoints, metrics = time.time(), run / "checkpoints", run / "metrics.jsonl"
    stale = set(checkpoints.glob(".tmp_step_*"))  # left by earlier kills
    deadline = launched + 300

    def wait(ready) -> None:
        while not ready() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.001)

    if mode == "checkpoint":  # writes take a few ms: freeze the process, kill it if caught
        while proc.poll() is None and time.time() < deadline:  # inside one, else go on
            wait(lambda: set(checkpoints.glob(".tmp_step_*")) - stale)
            time.sleep(rng.uniform(0, 0.003))
            proc.send_signal(signal.SIGSTOP)
            if set(checkpoints.glob(".tmp_step_*")) - stale:
                break
            proc.send_signal(signal.SIGCONT)
    elif mode == "start-up":
        time.sleep(rng.uniform(0, 3.0))
    else:
        wait(lambda: (checkpoints / "latest").exists() and metrics.exists()
             and metrics.stat().st_mtime > launched)
        time.sleep(rng.uniform(0, 1.5))
    logged = metrics.exists() and metrics.stat().st_mtime > launched
    writing = bool(set(checkpoints.glob(".tmp_step_*")) - stale)
    proc.send_signal(signal.SIGKILL)
    return "checkpoint write" if writing else "training" if logged else "start-up"


def _account_resume(report: Report, text: str, attempt: int) -> None:
    """What the resume after the last kill did: restored (and from which step), killed
    before it could, or failed (a problem)."""
    kill = report.kills[-1]
    found = RESUMED.search(text)
    if found is None:
        kill["next"] = "killed in start-up"
        if "Traceback" in text or "error:" in text:
            kill["next"] = "failed"
            report.problems.append(f"resume {attempt} failed:\n{text[-2000:]}")
        return
    kill["next"] = "restored"
    kill["lost"] = max(0.0, kill["last_time"] - kill["times"].get(int(found.group(2)), 0.0))


def _compare_with_reference(report: Report, reference: Path, run: Path) -> None:
    import torch
    from safetensors.torch import load_file

    ref, got = checked_metrics(reference / "metrics.jsonl"), checked_metrics(
        run / "metrics.jsonl")
    steps = [r for r in got if r["kind"] == "step"]
    report.max_step_time = max((r["time/step"] for r in steps), default=0.0)
    if [r["step"] for r in steps] != list(range(1, report.steps + 1)):
        report.problems.append("the step records are not 1..steps, each once")
    evals = [r["step"] for r in got if r["kind"] == "eval"]
    if len(evals) != len(set(evals)):
        report.problems.append(f"an evaluation appears twice: steps {evals}")
    rewards = {r["step"]: r["rollout/reward_mean"] for r in ref if r["kind"] == "step"}
    if any(rewards[r["step"]] != r["rollout/reward_mean"] for r in steps):
        report.problems.append("per-step rewards differ from the uninterrupted run")
    name = f"checkpoints/step_{report.steps:06d}/model/model.safetensors"
    a, b = load_file(reference / name), load_file(run / name)
    if any(not torch.equal(a[k], b[k]) for k in a):
        report.problems.append("the final weights differ from the uninterrupted run")
    bound = report.checkpoint_every + report.max_step_time
    for i, kill in enumerate(report.kills):
        if kill["lost"] is not None and kill["lost"] > bound + 1e-6:
            report.problems.append(f"kill {i + 1} lost {kill['lost']:.3f} s > {bound:.3f} s")
    if report.kills and report.kills[-1]["next"] != "restored":
        report.problems.append("the run was not resumed after the last kill")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--checkpoint-every", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from pods.models.tiny import TinyRecipe, build_model, build_tokenizer
    from pods.tasks.arithmetic import Arithmetic

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        tokenizer = build_tokenizer(Arithmetic.alphabet)
        recipe = TinyRecipe(alphabet=Arithmetic.alphabet, hidden_size=32, layers=1, heads=2)
        build_model(recipe, tokenizer).save_pretrained(model)
        tokenizer.save_pretrained(model)
        report = run_faults(str(model), Path(tmp), args.kills, args.steps,
                            args.checkpoint_every, args.seed)
    print(report.table())
    for problem in report.problems:
        print("PROBLEM:", problem)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
