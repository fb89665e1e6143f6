"""How the update lays out the kept rollouts of a step for its forward passes.

    padded         each micro-batch [b, Lp + Lc]: rows left-padded to the batch's longest
                   prompt, right-padded to its longest completion (micro-batches of rows)
    packed         each micro-batch one stream of its rows' tokens, no padding
    shared_prompt  packed, each distinct prompt once: the m rows kept from a group attend
                   to one copy of its prompt (pods.models.packing)

``choose`` resolves ``--update-layout auto`` for a model by what was measured on its device
kind (``auto_layout``: shared_prompt on a CPU where its attention allows, padded on CUDA
until a packed layout was measured faster there, with the reason); ``micro_batches`` cuts
the kept batch into ``Part``s: rows for padded, whole groups under a token budget for the
packed layouts (a group split over parts only when it alone exceeds the budget);
``positions`` counts what one pass over the parts processes, and what padded would have.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pods.models.packing import Packing, pack, prompt_groups
from pods.rollout import Rollouts

SHARES = {"packed": False, "shared_prompt": True}  # the packed layouts: prompts shared?


# A packed layout's update time against padded's on a CUDA GPU with its FlexAttention
# kernel, as the GPU check (benchmarks/gpu/check.py) measured it; None: not yet measured.
# With the SDPA kernel an H200 took 1.72x (shared_prompt) and 1.84x (packed) padded's time
# at the paper's GSM8K shape on Qwen2.5-1.5B's architecture (docs/results/gpu.md).
CUDA_MEASURED: dict[str, float | None] = {"shared_prompt": None, "packed": None}
WHAT = {"packed": "each row's tokens once, no padding",
        "shared_prompt": "each prompt once a group, no padding"}


def auto_layout(device: str, flex: bool, rows_per_group: int,
                refused: str | None) -> tuple[str, str]:
    """What ``--update-layout auto`` takes on a ``device`` kind ("cpu", "cuda", ...) and
    why: padded where the packed layouts cannot compute the model's attention
    (``refused``: pods.models.packed_attention.refusal); on CUDA a packed layout only with
    the FlexAttention kernel (``flex``) and only once it was measured faster than padded
    there (``CUDA_MEASURED``): shared_prompt where groups keep ``rows_per_group`` > 1 rows
    of one prompt, packed where each row is its own group; elsewhere shared_prompt (on a
    CPU it took 0.44x padded's update time at the paper's GSM8K shape, docs/results.md)."""
    if refused is not None:
        return "padded", f"the packed layouts do not compute {refused}"
    if device != "cuda":
        return "shared_prompt", WHAT["shared_prompt"]
    layout = "shared_prompt" if rows_per_group > 1 else "packed"
    ratio = CUDA_MEASURED[layout]
    if not flex:
        return "padded", "this torch has no FlexAttention, the packed layouts' CUDA kernel"
    if ratio is None:
        return "padded", (f"{layout} has not been measured faster than padded on a CUDA GPU "
                          f"with its FlexAttention kernel (with SDPA's it took 1.7-1.8x "
                          f"padded's update time on an H200; docs/results/gpu.md)")
    if ratio >= 1:
        return "padded", f"{layout} took {ratio:.2f}x padded's update time on a CUDA GPU"
    return layout, f"{WHAT[layout]}; {ratio:.2f}x padded's update time on a CUDA GPU"


def choose(requested: str, model, rows_per_group: int = 2, attempt=None) -> tuple[str, str]:
    """The layout of ``requested`` for ``model`` (auto: ``auto_layout`` on the model's
    device, its groups of ``rows_per_group`` kept rows) and the start-up line that says
    which, why and with which attention kernel. A packed layout asked on CUDA needs its
    FlexAttention kernel. ``attempt(layout)``, where given, runs the packed layout on the
    model and says why it cannot be used (None: it can; pods.train.layout_check.
    start_problem): tried where the model's config allows the layout."""
    from pods.models.packed_attention import refusal
    from pods.models.packed_flex import ENV, kernel_for

    if requested == "padded":
        return "padded", "update layout: padded (--update-layout padded)"
    why = refusal(getattr(model, "config", None))
    device = _device(model)
    kernel = kernel_for(device)
    if requested == "auto":
        layout, reason = auto_layout(device.type, kernel == "flex", rows_per_group, why)
        problem = attempt(layout) if layout != "padded" and attempt is not None else None
        if problem is not None:
            layout, reason = "padded", f"the packed layouts do not compute {problem}"
        return layout, f"update layout: auto chose {layout} ({reason}{_checked(layout, kernel)})"
    if device.type == "cuda" and kernel != "flex":
        raise ValueError(f"--update-layout {requested} on a CUDA GPU needs its FlexAttention "
                         f"kernel (torch >= 2.5, {ENV} unset or flex): with SDPA's it was "
                         f"slower than padded there. Use --update-layout padded or auto.")
    if why is None and attempt is not None:
        why = attempt(requested)
    if why is not None:
        raise ValueError(f"--update-layout {requested} cannot compute this model's "
                         f"attention exactly ({why}); use --update-layout padded or auto.")
    return requested, f"update layout: {requested} (--update-layout {requested}; " \
                      f"{WHAT[requested]}" \
                      f"{_checked(requested, kernel)})"


def _checked(layout: str, kernel: str) -> str:
    return "" if layout == "padded" else f"; attention: {kernel}; checked against padded " \
                                         f"before the first update"


def _device(model) -> torch.device:
    parameter = next(model.parameters(), None) if hasattr(model, "parameters") else None
    return parameter.device if parameter is not None else torch.device("cpu")


@dataclass(frozen=True)
class Part:
    """One micro-batch: rows of the kept batch, and their stream (None: padded)."""

    rows: slice | Tensor  # [b] the kept batch's rows (a slice for padded)
    packing: Packing | None  # the packed layouts' stream of these rows
    width: int  # the padded layout's positions a row: Lp + Lc of the batch
    live: bool = True  # False: a pass that only keeps ranks in step (trains nothing)

    def tokens(self, batch: Rollouts) -> int:
        """Positions one pass of this part of ``batch`` processes."""
        if self.packing is not None:
            return self.packing.tokens
        return self.count(batch) * self.width

    def count(self, batch: Rollouts) -> int:
        """Rows of ``batch`` this part holds (a last slice may reach past its end)."""
        if isinstance(self.rows, slice):
            return len(range(batch.completion_ids.shape[0])[self.rows])
        return self.rows.numel()

    def take(self, tensor: Tensor) -> Tensor:
        """``tensor``'s rows of this part (0 where the part is not live)."""
        rows = tensor[self.rows]
        return rows if self.live else torch.zeros_like(rows)


def micro_batches(batch: Rollouts, layout: str, rows: int | None,
                  tokens: int | None) -> list[Part]:
    """The parts of ``batch`` (B kept rows) for ``layout``: ``rows`` a part
    (--micro-batch-size), else parts of at most ``tokens`` positions, else one part."""
    B, width = batch.completion_ids.shape[0], batch.prompt_ids.shape[1] + \
        batch.completion_ids.shape[1]
    if layout == "padded":
        step = rows or (max(1, tokens // width) if tokens else B)
        return [Part(slice(i, i + step), None, width) for i in range(0, B, step)]
    if rows is not None:
        chunks = [torch.arange(i, min(i + rows, B)) for i in range(0, B, rows)]
    else:
        chunks = _by_tokens(batch, SHARES[layout], tokens)
    return [_packed(batch, chunk, layout, width) for chunk in chunks]


def _packed(batch: Rollouts, rows: Tensor, layout: str, width: int, live: bool = True) -> Part:
    device = batch.prompt_ids.device
    rows = rows.to(device)
    mask = batch.completion_mask[rows] * live
    return Part(rows, pack(batch.prompt_ids[rows], batch.prompt_mask[rows],
                           batch.completion_ids[rows], mask, SHARES[layout]), width, live)


def idle_part(batch: Rollouts, layout: str) -> Part:
    """A part that trains nothing (the first row, its completion masked out): a rank with
    fewer parts than another runs such passes, as DDP and FSDP need every rank's."""
    width = batch.prompt_ids.shape[1] + batch.completion_ids.shape[1]
    if layout == "padded":
        return Part(slice(0, 1), None, width, live=False)
    return _packed(batch, torch.zeros(1, dtype=torch.long), layout, width, live=False)


def _by_tokens(batch: Rollouts, share: bool, budget: int | None) -> list[Tensor]:
    """Rows in parts of at most ``budget`` positions: whole groups in order, a group alone
    over the budget split into runs of rows (each reading the prompt again)."""
    B = batch.completion_ids.shape[0]
    if budget is None:
        return [torch.arange(B)]
    group = prompt_groups(batch.prompt_ids, batch.prompt_mask, share).cpu()  # [B]
    plen = batch.prompt_mask.sum(1).cpu()  # [B]
    clen = batch.completion_mask.sum(1).cpu()  # [B]
    parts, current, used = [], [], 0
    for g in range(int(group.max()) + 1 if B else 0):
        members = (group == g).nonzero().flatten()
        cost = int(plen[members[0]]) * (1 if share else len(members)) + int(clen[members].sum())
        if cost > budget:  # alone over the budget: runs of its rows
            parts += [torch.tensor(current)] if current else []
            current, used = [], 0
            parts += _split(members, int(plen[members[0]]), clen, budget, share)
            continue
        if used + cost > budget and current:
            parts.append(torch.tensor(current))
            current, used = [], 0
        current += members.tolist()
        used += cost
    return parts + ([torch.tensor(current)] if current else [])


def _split(members: Tensor, prompt: int, clen: Tensor, budget: int,
           share: bool) -> list[Tensor]:
    """One group's rows in runs that fit ``budget`` (at least one row a run)."""
    runs, run, used = [], [], prompt if share else 0
    for row in members.tolist():
        cost = int(clen[row]) + (0 if share else prompt)
        if run and used + cost > budget:
            runs.append(torch.tensor(run))
            run, used = [], prompt if share else 0
        run.append(row)
        used += cost
    return runs + [torch.tensor(run)]


def positions(parts: list[Part], batch: Rollouts) -> tuple[int, int]:
    """Positions one pass over ``parts`` processes, and what one padded pass over the
    batch would: B * (Lp + Lc)."""
    padded = batch.completion_ids.shape[0] * (batch.prompt_ids.shape[1] +
                                              batch.completion_ids.shape[1])
    return sum(part.tokens(batch) for part in parts), padded
