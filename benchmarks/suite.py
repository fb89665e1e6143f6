"""What the benchmark scripts share: the machine line, timing with warm-up and repeats, the
matmul rate, the bare fwd+bwd+AdamW step, markdown tables and JSON output, the parser with
``--quick``, and the small model a ``--quick`` rehearsal runs on.

The suite's layout: one folder per thing measured (``selection/``, ``update/``,
``generation/``, ``runs/``, ``tasks/``, ``sandbox/``), one script per published table,
named after it.
Each script prints its table and takes ``--quick``: the same code on sizes a CPU runs in
seconds, so that tests/benchmarks/test_quick.py can rehearse every script in CI and none
rots. A script that the rehearsal must leave out says why in a module-level string
``REHEARSAL`` (it needs a GPU, or its own test runs it), and a folder whose own test
rehearses it (``gpu/``, the GPU check) is named in that test's ``ELSEWHERE``; every other
script is rehearsed.

A script in a group folder imports this module with its folder's parent on the path:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
    import suite
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import torch


def parser(doc: str, quick: str) -> argparse.ArgumentParser:
    """An ArgumentParser described by the first paragraph of ``doc``, with ``--quick``
    (help: ``quick``, what the rehearsal shrinks) and ``--json`` (the rows, also as JSON)."""
    out = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    out.add_argument("--quick", action="store_true", help=f"a CPU rehearsal in seconds: {quick}")
    out.add_argument("--json", type=Path, metavar="PATH", help="also write the rows here")
    return out


def machine() -> str:
    """One line naming what the numbers were measured on: CPU, cores, torch and its
    threads, the load average (a shared machine reads as one)."""
    from pods.runtime.machine import cpu_name

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (f"{os.cpu_count()} CPUs ({cpu_name()}){gpu}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} torch threads, load average {load}")


def timed(fn: Callable[[], object], repeats: int = 3, warmup: int = 1,
          min_seconds: float = 0.0, max_repeats: int = 200) -> float:
    """The median seconds of ``fn()`` over ``repeats`` calls after ``warmup`` untimed
    ones; with ``min_seconds``, repeated further until the calls add up to that (at most
    ``max_repeats``; a call over 2 s is not repeated past ``repeats``)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    while len(times) < max_repeats and (len(times) < repeats or (
            sum(times) < min_seconds and times[-1] < 2.0)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_rate(shapes: Sequence[tuple[int, int, int]],
                dtype: torch.dtype = torch.bfloat16) -> tuple[float, float]:
    """(GFLOP/s, seconds) of ``torch.matmul`` over the (M, K, N) ``shapes``: each distinct
    shape timed alone (best of 3 after a warm-up) and counted as often as it occurs. The
    limit a model's own work is measured against, in the same run as that work."""
    counts: dict[tuple[int, int, int], int] = defaultdict(int)
    for s in shapes:
        counts[s] += 1
    seconds = 0.0
    for (M, K, N), count in counts.items():
        a, b = torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)
        torch.matmul(a, b)  # warm-up
        best = min(timed(lambda a=a, b=b: torch.matmul(a, b), 1, 0) for _ in range(3))
        seconds += count * best
    flops = sum(2 * M * K * N for M, K, N in shapes)
    return flops / seconds / 1e9, seconds


def bare_step(model, optimizer, prompt_ids: torch.Tensor, completion_ids: torch.Tensor,
              advantages: torch.Tensor, temperature: float = 1.0,
              precision: str = "no") -> None:
    """The update with nothing of pods's: model(ids).logits -> log_softmax at the sampling
    temperature -> gather -> mean advantage-weighted loss -> backward -> optimizer step,
    under ``precision`` autocast ("no" or "bf16"). The yardstick a pods update is timed
    against (it takes the head over every position: no chunking, no masking)."""
    from pods.models.precision import autocast

    optimizer.zero_grad(set_to_none=True)
    device = prompt_ids.device
    with autocast(device, precision):
        logits = model(torch.cat([prompt_ids, completion_ids], 1)).logits  # [B, L, V]
    logits = logits[:, prompt_ids.shape[1] - 1:-1].float() / temperature  # [B, Lc, V]
    logp = logits.log_softmax(-1).gather(-1, completion_ids[..., None])[..., 0]  # [B, Lc]
    (-(logp * advantages[:, None]).mean()).backward()
    optimizer.step()


def markdown(head: Sequence[str], rows: Sequence[Sequence[object]],
             align: str | None = None) -> str:
    """A markdown table; ``align``: one character per column, "l" or "r" (default: the
    first column left, the rest right)."""
    align = align or "l" + "r" * (len(head) - 1)
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    lines = ["| " + " | ".join(head) + " |", rule]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def write_json(path: Path | None, rows: object) -> None:
    """``rows`` as JSON at ``path`` (nothing when None), with the machine line."""
    if path is not None:
        path.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1) + "\n")


def tiny_qwen2(folder: Path | str, vocab: int = 512, hidden: int = 64, layers: int = 2) -> str:
    """A Qwen2 of random weights saved in ``folder`` (config and weights, no tokenizer):
    the model a ``--quick`` rehearsal of a model benchmark runs on instead of a download."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return str(folder)


def cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process's children)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait, in clock ticks
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy / os.sysconf("SC_CLK_TCK"), children.ru_utime + children.ru_stime
