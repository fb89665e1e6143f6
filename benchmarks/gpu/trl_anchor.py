"""Section trl of the GPU check (benchmarks/gpu/check.py): an anchor. TRL's ``GRPOTrainer`` (its
own generation, no vLLM) on the same GPU, model (SmolLM2-135M-Instruct), prompts (the word
problems), n, completion length and update size as pods's step in configs/smollm2_gpu.yaml:
the ``smollm2-gpu`` setup of benchmarks/integrations/trl_vs_native.py, where stock TRL trains
on every rollout of its generation batch (P x n = 256) in optimizer steps of 64 rows. Its
seconds per generation batch (one generation and its optimizer steps, after a warm-up batch)
and per optimizer step, beside pods's seconds a step (256 rollouts, the 64 kept trained on)
from the recipe section's run of that config: the median of its steps of one round, after the
first."""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
from pathlib import Path

from gpucommon import emit, left, read_rows, section_args, suite_script
from recipe import smollm2_ready

METHOD = "TRL GRPOTrainer"


def trl_vs_native():
    return suite_script("benchmarks/integrations/trl_vs_native.py", "trl_vs_native")


def pods_row(run: Path) -> dict:
    """pods's seconds a step from a recipe run's metrics.jsonl."""
    steps = [r for r in read_rows(run / "metrics.jsonl") if r.get("kind") == "step"][1:]
    single = [r for r in steps if r.get("rollout/rounds", 1) == 1] or steps
    if not single:
        return {"method": "pods", "error": f"no steps after the first in {run}"}
    return {"method": "pods", "run": run.name, "steps": len(single),
            "s_step": statistics.median(r["time/step"] for r in single),
            "generate": statistics.median(r.get("time/generate", 0.0) for r in single),
            "update": statistics.median(r.get("time/update", 0.0) for r in single)}


def trl_row(args) -> dict:
    if importlib.util.find_spec("trl") is None or importlib.util.find_spec("datasets") is None:
        return {"method": METHOD, "error": "trl or datasets not installed"}
    module = trl_vs_native()
    setup = "tiny" if args.quick else "smollm2-gpu"
    _, n, m = module.SETUPS[setup]["methods"][METHOD]
    per = 1 if args.quick else n // m  # optimizer steps a generation batch
    prompts = 2 if args.quick else module.SETUPS[setup]["prompts"]
    cli = argparse.Namespace(model=setup, prompts=prompts, steps=per, warmup=per,
                             threads=1 if args.quick else os.cpu_count(), beta=0.0)
    try:
        t = module.run(METHOD, cli, timeout=max(1.0, left(args) - 2))
    except RuntimeError as error:
        return {"method": METHOD, "error": str(error)[-800:]}
    records = t["records"]
    whole = len(records) >= per  # a whole generation batch: its n/m optimizer steps
    return {"method": METHOD, "prompts": prompts, "n": n, "m": m, "steps": len(records),
            "s_generation": sum(r["step"] for r in records[:per]) if whole else None,
            "s_step": t["step"],
            "generate": sum(r["generate"] for r in records[:per]),
            "update": sum(r["update"] for r in records[:per]),
            **({"note": f"{t['stopped']}: the {len(records)} timed steps it finished"}
               if "stopped" in t else {})}


def main() -> None:
    def extra(parser):
        parser.add_argument("--run", default="recipes/smollm2_gpu",
                            help="pods's recipe run, under --out")

    args = section_args(__doc__.splitlines()[0], extra)
    emit(args, pods_row(Path(args.out) / args.run))
    why = None if args.quick else smollm2_ready()
    emit(args, {"method": METHOD, "error": why} if why else trl_row(args))


if __name__ == "__main__":
    main()
