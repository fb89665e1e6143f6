"""The update's compute, chosen once a run: the bf16 working copy, the kernels, the layout
of its passes and gradient checkpointing's ``auto``, as the ``UpdateSpec`` the update runs
with."""

from __future__ import annotations

from dataclasses import dataclass

from pods.models.weight_cast import WeightCast
from pods.runtime.distributed import Dist
from pods.train.layout import choose
from pods.train.passes import choose_checkpointing
from pods.train.update import UpdateSpec


@dataclass(frozen=True)
class Compute:
    """What the update computes with: a bf16 working copy cast once a step (``cast``:
    Precision.cast "step"), and ``kernels`` ("liger" or "torch"); an architecture liger
    does not patch is refused where ``strict`` (--update-kernels liger), else computes with
    torch's (pods.models.kernels); the layout's choice by groups of ``rows_per_group`` kept
    rows (m: pods.train.layout.auto_layout); checkpointing's ``auto`` for ``rows`` kept rows
    of this rank a step, of ``width`` tokens at most (pods.train.passes)."""

    cast: bool = False
    kernels: str = "torch"
    strict: bool = False
    rows_per_group: int = 2
    rows: int = 2
    width: int = 16


def with_compute(spec: UpdateSpec, model, ref_model, compute: Compute,
                 log=print, dist=None) -> UpdateSpec:
    """``spec`` with the run's update compute (``Compute``: liger's kernels put on the
    module the passes run through and on ``ref_model``) and its layout (``spec.layout``,
    --update-layout as asked) resolved for the model and its groups of
    ``compute.rows_per_group`` kept rows (m), said in one line to ``log``
    (pods.train.layout.choose; a packed layout tried on a few made-up rows first, on every
    rank of ``dist``, a pods.runtime.distributed.Dist: pods.train.layout_check); with
    ``spec.auto_checkpointing``, gradient checkpointing chosen, before anything compiles a
    sampler sharing the module (its compiled step would trace the switch again), and said."""
    from dataclasses import replace

    from pods.models.kernels import use_kernels
    from pods.train.layout_check import start_problem

    # with liger's kernels the working copy is not the sampling copy: the sampler's forward
    # (compiled on CUDA) keeps torch's modules
    copy = WeightCast(model, shared=compute.kernels != "liger") if compute.cast else None
    trained = copy.module if copy is not None else \
        model.get_base_model() if hasattr(model, "peft_config") else model  # LoRA: its base
    kernels = use_kernels(trained, compute.kernels, compute.strict)  # a FusedHead with liger
    if ref_model is not None:
        use_kernels(ref_model, kernels, compute.strict)
    layout, note = choose(spec.layout, trained, compute.rows_per_group,
                          attempt=lambda layout: start_problem(trained, layout, dist))
    log(note)
    if spec.auto_checkpointing:
        log(choose_checkpointing(trained, compute.rows, compute.width, spec,
                                 dist or Dist(world=1)))
    return replace(spec, cast=copy, layout=layout)
