"""The check that a run's packed layout gives the padded layout's log-probs on its own
model (as Unsloth checks its shared-prefix forward at first use), made twice:

    at start-up      ``start_problem``: a few made-up rows (two groups of two) through the
                     model as loaded. A model whose decoder layers do not hand the
                     ``pods_packing`` keyword to attention (StableLM, Falcon), whose attention
                     does not go through transformers' attention interface (MPT), or that
                     computes something the packed attention does not, runs padded from its
                     first step, and the start-up line says why (pods.train.layout.choose).
    before the first ``checked_layout``: rows of the run's first kept batch (from up to
    update           ``GROUPS`` groups, at least two where it has them), in the update's
                     compute (the bf16 working copy, autocast): a difference the made-up
                     rows did not show (long rows, bf16) falls back to padded with a
                     warning instead of training on wrong log-probs.

Both run the model in eval mode (dropout would draw other masks in the two passes: GPT-2's
0.1 differs by about a nat a token), each module's mode restored after; any exception of
the packed pass counts as a difference, its message in the verdict; the verdict is the
same on every rank (the largest differences over the ranks).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from pods.models.logprobs import completion_logprobs, packed_logprobs
from pods.models.packed_attention import packed_attention
from pods.models.packing import pack, prompt_groups
from pods.rollout import Rollouts
from pods.runtime.distributed import Dist
from pods.train.layout import SHARES
from pods.train.passes import compute_bytes as _compute_bytes
from pods.train.update import UpdateSpec, _compute

ROWS = 16  # rows of the batch the check compares, at most
GROUPS = 4  # groups they are taken from, at most (first, last and between)


@dataclass(frozen=True)
class Tolerance:
    """The largest |log-prob difference| between the layouts that is float rounding: of
    one token, and of a row's mean over its tokens."""

    token: float
    row: float


# by bytes of an activation: float32 sums in another order differ by ~2e-6 a token at
# most (~3e-7 a row); bf16 activations by ~1e-2 a token (~4e-3 a row) on small random
# models, more with the sharper logits of trained ones. A layout error (a wrong mask, a
# missed window, dropout) moves whole rows by tenths of a nat or more.
TOLERANCE = {4: Tolerance(token=1e-3, row=1e-4), 2: Tolerance(token=0.5, row=5e-2)}


@dataclass(frozen=True)
class Verdict:
    """The largest differences between the layouts (inf where the packed pass failed)."""

    token: float  # over the compared tokens
    row: float  # over the compared rows, of each row's mean
    error: str | None = None  # the packed pass's exception, if it raised

    def within(self, tolerance: Tolerance) -> bool:
        return self.token <= tolerance.token and self.row <= tolerance.row

    def says(self) -> str:
        if self.error is not None:
            return f"the packed pass failed: {self.error.rstrip('.')}"
        return f"largest |difference| {self.token:.1e} a token, {self.row:.1e} a row"


def check_rows(batch: Rollouts) -> torch.Tensor:
    """[r] up to ``ROWS`` rows of ``batch``: the first rows of up to ``GROUPS`` of its
    groups (the first, the last and evenly between), at least two rows a group where it
    has them, so that a stream holds several prompts and each is shared."""
    group = prompt_groups(batch.prompt_ids, batch.prompt_mask, True).cpu()  # [B]
    count = int(group.max()) + 1 if len(group) else 0
    chosen = torch.linspace(0, max(count - 1, 0), min(count, GROUPS)).round().long().unique()
    per = max(2, ROWS // max(len(chosen), 1))
    return torch.cat([(group == g).nonzero().flatten()[:per] for g in chosen.tolist()] or
                     [torch.zeros(0, dtype=torch.long)])


@contextmanager
def evaluating(module):
    """``module`` in eval mode (no dropout), each submodule's train/eval mode restored."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.train(training)


@torch.no_grad()
def _differences(module, batch: Rollouts, layout: str, temperature: float) -> Verdict:
    """The largest differences between ``layout`` and padded over ``batch``'s completion
    tokens, ``module`` in eval mode."""
    ids, mask = batch.completion_ids, batch.completion_mask  # [r, Lc]
    with evaluating(module):
        want = completion_logprobs(module, batch.prompt_ids, batch.prompt_mask, ids, mask,
                                   temperature)  # [r, Lc]
        packing = pack(batch.prompt_ids, batch.prompt_mask, ids, mask, SHARES[layout])
        with packed_attention(module):
            got = packed_logprobs(module, packing, ids, mask, temperature)  # [r, Lc]
    gap = torch.where(mask.bool(), torch.nan_to_num((got.float() - want.float()).abs(),
                                                    nan=torch.inf), 0.0)  # [r, Lc] NaN: inf
    tokens = mask.sum(1)  # [r]
    if not tokens.any():
        return Verdict(0.0, 0.0)
    return Verdict(float(gap.max()), float((gap.sum(1) / tokens.clamp(min=1)).max()))


def _measure(module, batch: Rollouts, layout: str, temperature: float) -> Verdict:
    """``_differences``, where the packed pass raises the verdict inf with its message."""
    try:
        return _differences(module, batch, layout, temperature)
    except Exception as error:  # noqa: BLE001 - any failure means: not this layout
        _reshard(module)
        return Verdict(torch.inf, torch.inf, f"{type(error).__name__}: {error}".strip())


def _reshard(module) -> None:
    """Under FSDP2, free the weights a failed forward gathered and did not free."""
    from torch.distributed.fsdp import FSDPModule

    for m in module.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def _agreed(verdict: Verdict, dist: Dist) -> Verdict:
    """The verdict of every rank: the largest differences over them; the error of the
    first rank that had one."""
    worst = dist.reduce({"token": verdict.token, "row": verdict.row,
                         "failed": float(verdict.error is not None)}, "max")
    error = verdict.error
    if worst["failed"] and dist.world > 1:
        error = next(e for e in dist.gather_objects(verdict.error) if e is not None)
    return Verdict(worst["token"], worst["row"], error)


def made_up_rows(vocabulary: int, device) -> Rollouts:
    """Two groups of two rows, prompts of 5 and 3 tokens (left-padded), completions of
    4, 2, 3 and 1 (right-padded): the start-up check's batch."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(vocabulary, (2, 5), generator=g)[[0, 0, 1, 1]]  # [4, 5]
    prompt_mask = (torch.arange(5) >= torch.tensor([0, 0, 2, 2])[:, None]).long()
    mask = (torch.arange(4) < torch.tensor([4, 2, 3, 1])[:, None]).long()  # [4, 4]
    ids = torch.randint(vocabulary, (4, 4), generator=g) * mask
    return Rollouts(*(t.to(device) for t in (prompts * prompt_mask, prompt_mask, ids, mask)),
                    [""] * 4)


def start_problem(module, layout: str, dist: Dist | None = None) -> str | None:
    """Why ``layout`` cannot run ``module`` (the model the update's passes go through), as
    the start-up line says it, or None where it gives padded's log-probs on
    ``made_up_rows``."""
    dist = dist or Dist(world=1)
    p = next(module.parameters())
    rows = made_up_rows(module.get_input_embeddings().num_embeddings, p.device)
    verdict = _agreed(_measure(module, rows, layout, 1.0), dist)
    tolerance = TOLERANCE[_compute_bytes(module)]
    if verdict.within(tolerance):
        return None
    return f"this model's attention; tried on made-up rows: {verdict.says()}"


def checked_layout(model, kept_rows: Rollouts, spec: UpdateSpec, dist: Dist,
                   log) -> UpdateSpec:
    """``spec`` where its layout matches padded on ``check_rows`` of this batch (the same
    answer on every rank), else ``spec`` with the padded layout and a warning that says
    how they differed."""
    if spec.layout == "padded":
        return spec
    if spec.cast is not None:
        spec.cast.refresh()  # the weights the first update starts from
    trained = dist.unwrap(model) if spec.cast is None else spec.cast.module
    rows = kept_rows.select(check_rows(kept_rows))
    with _compute(spec):
        verdict = _agreed(_measure(trained, rows, spec.layout, spec.temperature), dist)
    tolerance = TOLERANCE[_compute_bytes(trained)]
    if verdict.within(tolerance):
        log(f"update layout: {spec.layout} gives padded's log-probs on rows of "
            f"{_groups(rows)} groups ({verdict.says()}; at most {tolerance.token:.0e}, "
            f"{tolerance.row:.0e})")
        return spec
    warnings.warn(f"update layout {spec.layout} differs from padded on this model "
                  f"({verdict.says()}; float rounding is at most {tolerance.token:.0e} a "
                  f"token, {tolerance.row:.0e} a row): the update falls back to "
                  f"--update-layout padded. Please report the model.", RuntimeWarning,
                  stacklevel=2)
    return replace(spec, layout="padded")


def _groups(rows: Rollouts) -> int:
    return len(prompt_groups(rows.prompt_ids, rows.prompt_mask, True).unique())


def check_once(trainer, kept_rows: Rollouts) -> None:
    """Before ``trainer``'s first update (once, untimed): its update spec with the layout
    ``checked_layout`` keeps on ``kept_rows`` (this rank's kept rollouts)."""
    from pods.models.precision import autocast

    if trainer.layout_checked:
        return
    trainer.layout_checked = True
    with trainer.engine.asleep(), autocast(trainer.device, trainer.precision.update):
        trainer.update_spec = checked_layout(trainer.wrapped, kept_rows, trainer.update_spec,
                                             trainer.dist, trainer.log)
