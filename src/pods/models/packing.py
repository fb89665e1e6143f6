"""The update's token stream without padding: the kept rows of a micro-batch as one
sequence, each distinct prompt once (``shared_prompt``) or each row whole (``packed``).

The padded layout runs the model on ``[b, Lp + Lc]``: every row left-padded to the longest
prompt and right-padded to the longest completion, and every row reads its prompt again,
though the m rows kept from one group share it token for token. Here the b rows become one
stream of ``T`` tokens:

    [prompt of group 0 | prompt of group 1 | ... | completion of row 0 | row 1 | ...]

with each token's position id as ``generate`` numbered it (a prompt's tokens 0..p-1, its
completions' p..p+l-1). Which tokens a token may attend to is not a [T, T] mask but two
dense, small problems (``pods.models.packed_attention``):

    prompts      [G, Pmax] queries over their own prompt, causal
    completions  [R, Cmax] queries over their group's prompt [Pmax] and their own
                 completion [Cmax], causal

(G groups, R rows with completion tokens, Pmax / Cmax the longest prompt / completion).
So a completion sees its own prompt and its own earlier tokens and nothing else, as in
the padded layout, and the linear layers (most of the compute) see no padding at all.

Exact: the same keys and values reach every query as in the padded layout; only the order
of floating-point sums differs (tests/models/test_packing.py).
"""

from __future__ import annotations

import torch
from torch import Tensor


class Packing:
    """The stream of one micro-batch and the indices its attention and head need. A plain
    class (not a dataclass): DDP and FSDP pass it to the model untouched."""

    def __init__(self, stream: tuple[Tensor, Tensor], prompts: tuple[Tensor, Tensor],
                 rows: tuple[Tensor, Tensor, Tensor], predictors: Tensor):
        self.input_ids, self.position_ids = stream  # [1, T] the stream and its positions
        self.prompt_index, self.prompt_valid = prompts  # [G, Pmax] stream index of each
        # prompt token (0 at padding), and whether it is one (bool)
        self.row_index, self.row_valid, self.row_group = rows  # [R, Cmax] stream index of
        # each completion token, whether it is one; [R] the group whose prompt row r continues
        self.predictors = predictors  # [N] the stream position whose output predicts each
        # completion token, in row-major order of the micro-batch's completion mask
        self._made: dict[str, object] = {}  # what the layers share, made once (``cached``)

    @property
    def tokens(self) -> int:
        """T: the positions one pass through the layers processes."""
        return self.input_ids.shape[1]

    def cached(self, name: str, make):
        """``make()`` the first time ``name`` is asked, the same object after: what every
        layer of a pass (and the recomputing backward) shares is built once a micro-batch."""
        if name not in self._made:
            self._made[name] = make()
        return self._made[name]

    def masks(self) -> tuple[Tensor, Tensor]:
        """The two attention masks (True: may attend), made once and shared by the layers:
        prompts [G, 1, Pmax, Pmax], completions [R, 1, Cmax, Pmax + Cmax]. A padding query
        may attend its own (padding) key, so that no row of a softmax is empty."""
        return self.cached("masks", self._masks)

    def _masks(self) -> tuple[Tensor, Tensor]:
        P, C = self.prompt_valid.shape[1], self.row_valid.shape[1]
        device = self.prompt_valid.device
        causal_p = torch.ones(P, P, dtype=torch.bool, device=device).tril()  # [P, P]
        causal_c = torch.ones(C, C, dtype=torch.bool, device=device).tril()  # [C, C]
        prompts = causal_p & self.prompt_valid[:, None, :]  # [G, P, P]
        prompts |= ~self.prompt_valid[:, :, None] & torch.eye(P, dtype=torch.bool, device=device)
        own = causal_c & self.row_valid[:, None, :]  # [R, C, C]
        own |= ~self.row_valid[:, :, None] & torch.eye(C, dtype=torch.bool, device=device)
        prefix = self.prompt_valid[self.row_group][:, None, :].expand(-1, C, -1)  # [R, C, P]
        return prompts.unsqueeze(1), torch.cat([prefix, own], dim=2).unsqueeze(1)

    def slots(self) -> tuple[Tensor, Tensor]:
        """The two problems' slots (prompts' G * Pmax, then rows' R * Cmax: S) and the
        stream, made once: ``order`` [S] the stream position each slot reads, a padding
        slot one of the spare positions T, T + 1, ... past the stream (so no position is
        read twice, and the backward of the gather adds no duplicates), and ``inverse``
        [T] the slot of each stream position."""
        return self.cached("slots", self._slots)

    def _slots(self) -> tuple[Tensor, Tensor]:
        index = torch.cat([self.prompt_index.flatten(), self.row_index.flatten()])  # [S]
        valid = torch.cat([self.prompt_valid.flatten(), self.row_valid.flatten()])  # [S]
        order = torch.where(valid, index, self.tokens + (~valid).cumsum(0) - 1)  # [S]
        inverse = torch.empty_like(order).scatter_(
            0, order, torch.arange(len(order), device=order.device))  # [S] a permutation
        return order, inverse[:self.tokens]


def prompt_groups(prompt_ids: Tensor, prompt_mask: Tensor, share: bool) -> Tensor:
    """[b] the group of each row: rows whose prompts are the same tokens share one (their
    first row's order), or each row its own where not ``share``."""
    b = prompt_ids.shape[0]
    if not share or b == 0:
        return torch.arange(b, device=prompt_ids.device)
    keys = torch.cat([prompt_ids * prompt_mask, prompt_mask], dim=1)  # [b, 2 Lp]
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)  # [b] sorted order
    first = torch.full((b,), b, dtype=torch.long, device=prompt_ids.device)
    first = first.scatter_reduce(0, inverse, torch.arange(b, device=prompt_ids.device),
                                 "amin")  # [U] the first row of each distinct prompt
    order = torch.empty_like(first)
    ranked = first.argsort()  # distinct prompts in order of their first row
    order[ranked] = torch.arange(len(ranked), device=prompt_ids.device)
    return order[inverse]  # [b]


def pack(prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
         completion_mask: Tensor, share: bool) -> Packing:
    """The stream of the b rows given (prompts left-padded [b, Lp], completions right-padded
    [b, Lc]); each distinct prompt once where ``share``. Rows without completion tokens (a
    rank's padding rows) add nothing; a micro-batch of only such rows keeps its first
    row's prompt, so that the model still runs (DDP and FSDP need every rank's pass)."""
    device = prompt_ids.device
    plen = prompt_mask.sum(1)  # [b]
    clen = completion_mask.sum(1)  # [b]
    rows = (clen > 0).nonzero().flatten()  # [R] rows that add tokens
    live = clen > 0  # [b] the rows whose prompts the stream holds
    if not len(rows):
        live[:1] = True  # the first row's prompt alone
    group = prompt_groups(prompt_ids, prompt_mask, share)  # [b]
    used = torch.unique(group[live])  # [G] groups with a live row
    remap = torch.full((int(group.max()) + 1,), -1, dtype=torch.long, device=device)
    remap[used] = torch.arange(len(used), device=device)
    group = torch.where(live, remap[group], -1)  # [b] -1: a row the stream leaves out
    firsts = _first_rows(group, len(used))  # [G]
    glen = plen[firsts]  # [G]
    prompt_tokens = prompt_ids[firsts][prompt_mask[firsts].bool()]  # [Tp] group by group
    completion_tokens = completion_ids[completion_mask.bool()]  # [Tc] row-major
    Tp = int(glen.sum())
    gstart = glen.cumsum(0) - glen  # [G] stream start of each prompt
    prompt_index, prompt_valid = _ranges(gstart, glen)  # [G, Pmax]
    rlen = clen[rows]  # [R]
    rstart = Tp + rlen.cumsum(0) - rlen  # [R]
    row_index, row_valid = _ranges(rstart, rlen)  # [R, Cmax]
    row_group = group[rows]  # [R]
    positions = torch.cat([
        torch.arange(Tp, device=device) - gstart.repeat_interleave(glen),  # 0..p-1
        (torch.arange(int(rlen.sum()), device=device) - (rstart - Tp).repeat_interleave(rlen)
         + plen[rows].repeat_interleave(rlen))])  # p..p+l-1
    last_prompt = (gstart + glen - 1)[row_group]  # [R] stream index of each row's last
    # prompt token: it predicts the completion's first token
    predict = torch.where(row_index > rstart[:, None], row_index - 1, last_prompt[:, None])
    return Packing((torch.cat([prompt_tokens, completion_tokens]).unsqueeze(0),
                    positions.unsqueeze(0)), (prompt_index, prompt_valid),
                   (row_index, row_valid, row_group), predict[row_valid])


def _first_rows(group: Tensor, groups: int) -> Tensor:
    """[G] the first row of each group 0..G-1 (``group`` [b], -1: no group)."""
    b = group.shape[0]
    rows = torch.arange(b, device=group.device)
    first = torch.full((groups + 1,), b, dtype=torch.long, device=group.device)
    slot = torch.where(group < 0, groups, group)
    return first.scatter_reduce(0, slot, rows, "amin")[:groups]


def _ranges(starts: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """[k, max length] ``starts[i] + j`` and whether ``j < lengths[i]`` (index 0 where not)."""
    width = max(int(lengths.max()), 1) if lengths.numel() else 1
    offsets = torch.arange(width, device=starts.device)  # [W]
    valid = offsets < lengths[:, None]  # [k, W]
    return torch.where(valid, starts[:, None] + offsets, 0), valid
