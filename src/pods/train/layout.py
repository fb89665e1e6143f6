"""How the update lays out the kept rollouts of a step for its forward passes.

    padded         each micro-batch [b, Lp + Lc]: rows left-padded to the batch's longest
                   prompt, right-padded to its longest completion (micro-batches of rows)
    packed         each micro-batch one stream of its rows' tokens, no padding
    shared_prompt  packed, each distinct prompt once: the m rows kept from a group attend
                   to one copy of its prompt (pods.models.packing)

``choose`` resolves ``--update-layout auto`` for a model (shared_prompt where its attention
allows, else padded, with the reason); ``micro_batches`` cuts the kept batch into ``Part``s:
rows for padded, whole groups under a token budget for the packed layouts (a group split
over parts only when it alone exceeds the budget); ``positions`` counts what one pass over
the parts processes, and what the padded layout would have.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pods.models.packing import Packing, pack, prompt_groups
from pods.rollout import Rollouts

SHARES = {"packed": False, "shared_prompt": True}  # the packed layouts: prompts shared?


def choose(requested: str, model) -> tuple[str, str]:
    """The layout of ``requested`` for ``model`` (auto: shared_prompt where the model's
    attention allows it, else padded) and the start-up line that says which and why."""
    from pods.models.packed_attention import refusal

    why = refusal(getattr(model, "config", None))
    if requested == "padded":
        return "padded", "update layout: padded (--update-layout padded)"
    if why is not None:
        if requested != "auto":
            raise ValueError(f"--update-layout {requested} cannot compute this model's "
                             f"attention exactly ({why}); use --update-layout padded or auto.")
        return "padded", f"update layout: auto chose padded (the packed layouts do not " \
                         f"compute {why})"
    layout = "shared_prompt" if requested == "auto" else requested
    what = {"packed": "each row's tokens once, no padding",
            "shared_prompt": "each prompt once a group, no padding"}[layout]
    if requested == "auto":
        return layout, f"update layout: auto chose {layout} (this model's attention allows " \
                       f"it; {what}; checked against padded before the first update)"
    return layout, f"update layout: {layout} (--update-layout {layout}; {what}; checked " \
                   f"against padded before the first update)"


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
        return batch.completion_ids[self.rows].shape[0] * self.width  # a last slice may
        # reach past the batch's end

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
