"""How much of an AdamW update reaches the weights, by how the weights are kept, and what
each way costs in bytes a parameter.

For each learning rate and each way of keeping the weights, one AdamW step (betas 0.9,
0.999, no weight decay) from the model's real weights, with the loss of a causal LM on
random token ids (2 x 32), as a new user would try it; then the share of the trained
parameters whose value changed. For the exact bf16 updates the value is the float32
master (the bf16 weight joined with its low 16 bits, pods.train.optimizer.SplitAdamW).

    float32 (the default)   float32 weights, torch's AdamW: pods's default on every device
    bf16, plain AdamW       bfloat16 weights and moments, torch's AdamW: pods's GPU default
                            before this change
    bf16, exact updates     bfloat16 weights, SplitAdamW (--dtype bfloat16)
    bf16, measured loss     pods.models.precision.lost_share on the bf16 weights: what the
                            run's start-up warning reports, without a step

Bytes a parameter are measured after the step: weights, gradients and the optimizer's
state, summed over the trained tensors.

    .venv/bin/python benchmarks/update/update_precision.py                    # SmolLM2 (pods fetch)
    .venv/bin/python benchmarks/update/update_precision.py --random-init --device cuda
    .venv/bin/python benchmarks/update/update_precision.py --quick   # a tiny Qwen2, lr 1e-6, 1e-2
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402

# tests/models/test_precision.py runs --quick and checks the figures it prints
REHEARSAL = "tests/models/test_precision.py"


def load(model: str, random_init: bool, dtype: torch.dtype, device: torch.device):
    from transformers import AutoConfig, AutoModelForCausalLM

    from pods.models.source import resolve

    folder = resolve(model, None, log=lambda *a: None)
    if random_init:  # the architecture only: where the weights are not at hand
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder),
                                                dtype=dtype).to(device)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device)


def one_step(model, lr: float, exact: bool) -> tuple[float, float]:
    """(share of parameters changed, bytes a parameter) after one AdamW step."""
    from pods.train.optimizer import join, make_optimizer

    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    optimizer = make_optimizer(params, lr, (0.9, 0.999), 0.0, exact_bf16=exact)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (2, 32), generator=torch.Generator().manual_seed(0))
    ids = ids.to(params[0].device)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    changed = numel = size = 0
    for p, b in zip(params, before, strict=True):
        state = optimizer.state[p]
        value = join(p.detach(), state["low"]) if "low" in state else p.detach()
        changed += int((value.float() != b.float()).sum())
        numel += p.numel()
        size += p.numel() * p.element_size() + p.grad.numel() * p.grad.element_size()
        size += sum(t.numel() * t.element_size() for t in state.values()
                    if torch.is_tensor(t) and t.dim() > 0)
    return changed / numel, size / numel


def main() -> None:
    parser = suite.parser(__doc__, "a tiny random Qwen2, lr 1e-6 and 1e-2")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--random-init", action="store_true",
                        help="the model's architecture with random weights")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-6, 5e-6, 2e-5])
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="pods-bench-")
    if args.quick:
        args.model, args.lrs = suite.tiny_qwen2(scratch.name), [1e-6, 1e-2]
        args.random_init = True
    from pods.models.precision import lost_share
    from pods.runtime.machine import cpu_name

    device = torch.device(args.device)
    ways = [("float32 (the default)", torch.float32, True),
            ("bf16, plain AdamW", torch.bfloat16, False),
            ("bf16, exact updates", torch.bfloat16, True)]
    rows, size = {}, {}
    for name, dtype, exact in ways:
        rows[name] = []
        for lr in args.lrs:
            share, size[name] = one_step(load(args.model, args.random_init, dtype, device),
                                         lr, exact)
            rows[name].append(f"{share:.1%}")
    weights = list(load(args.model, args.random_init, torch.bfloat16, device).parameters())
    rows["bf16, measured loss (1 - share lost)"] = [f"{1 - lost_share(weights, lr):.1%}"
                                                    for lr in args.lrs]
    kind = "random init" if args.random_init else "real weights"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    print(f"{args.model} ({kind}) on {device.type} ({name}), "
          f"torch {torch.__version__}: share of parameters changed by one AdamW step\n")
    head = ["weights", *(f"lr {lr:g}" for lr in args.lrs), "bytes/param"]
    table = [[label, *cells, _bytes(size.get(label))] for label, cells in rows.items()]
    print(suite.markdown(head, table, "l" * len(head)))
    suite.write_json(args.json, [dict(zip(head, row, strict=True)) for row in table])


def _bytes(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    main()
