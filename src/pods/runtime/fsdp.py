"""FSDP2 with torch's own ``fully_shard``: parameters, gradients and optimizer state split
over the ranks, on GPUs (NCCL) and on CPUs (gloo) alike. Used by ``pods.runtime.distributed``
for ``--parallelism fsdp2`` (and for accelerate's FSDP2 config, which maps onto it).

Each decoder layer is one shard unit, then the root (embeddings, final norm, head), as
torchtitan does: a forward pass gathers one layer's weights at a time and frees them after.
Every forward pass is therefore a collective: all ranks must make the same number of them
(generation runs with ``synced_gpus``, see pods.rollout.hf), and the update's micro-batches
are equal in number on every rank (pods.train.selection pads the ranks' batches).

What was simplified: every rank loads the whole model before sharding it (no meta-device
initialisation), so a model must fit in one process's memory once, at start-up. The frozen
reference model of ``beta > 0`` (full fine-tuning) is sharded the same way
(``shard_frozen``).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor

LAYOUT = "layout.json"  # in a checkpoint's shards/ folder: how many ranks wrote it
SHARDS = "shards"  # a checkpoint's folder of every rank's shards


def shards_dir(checkpoint: Path) -> Path:
    """Where ``checkpoint`` keeps its FSDP2 shards: shards/, or engine/ in the checkpoints
    of pods versions that named the folder so."""
    shards, earlier = checkpoint / SHARDS, checkpoint / "engine"
    return earlier if earlier.is_dir() and not shards.is_dir() else shards


def check_accelerate_plugin(plugin) -> None:
    """accelerate's FSDP config (configs/accelerate/fsdp2.yaml) maps onto ``shard``; refuse
    the settings it would not honour rather than ignore them."""
    if getattr(plugin, "fsdp_version", 1) != 2:
        raise ValueError("FSDP version 1 is not supported (generation needs the "
                         "unflattened parameters): set fsdp_version: 2 in the accelerate "
                         "config, as in configs/accelerate/fsdp2.yaml.")
    if type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy":
        raise ValueError("pods's FSDP2 does not offload parameters to the CPU: set "
                         "fsdp_offload_params: false in the accelerate config.")
    if plugin.activation_checkpointing:
        raise ValueError("set fsdp_activation_checkpointing: false in the accelerate config "
                         "and use pods's --gradient-checkpointing instead.")


def decoder_layers(model) -> list[torch.nn.Module]:
    """The model's repeated blocks (the classes transformers will not split across devices,
    ``_no_split_modules``), found through a LoRA wrapper too."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"FSDP2 shards a model one decoder layer at a time, but "
                         f"{type(model).__name__} names no layer class "
                         f"(_no_split_modules is {sorted(names)}); use --parallelism ddp.")
    return layers


def root(model) -> torch.nn.Module:
    """The transformers model itself, inside a LoRA wrapper: the root shard unit must be
    the module whose forward ``generate`` calls (PEFT's generate skips its own forward)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def shard(model, optimizer: torch.optim.Optimizer, device: torch.device, world: int,
          compute: torch.dtype | None = None) -> None:
    """Shard ``model`` in place over ``world`` ranks and point ``optimizer`` (built on the
    unsharded parameters, no state yet) at the sharded ones.

    ``compute`` bfloat16 (mixed precision bf16, the default on a GPU; or bf16 weights) or
    float16 (float16 weights): the shards are kept in float32 (the optimizer's master copy,
    so no update is rounded away) and each forward pass gathers them in ``compute``
    (``MixedPrecisionPolicy``); gradients are reduced in float32. None: the weights compute
    as stored."""
    names = {id(p): name for name, p in model.named_parameters()}
    shard_frozen(model, device, world, compute)
    sharded = dict(model.named_parameters())  # same names, now DTensors
    for group in optimizer.param_groups:
        group["params"] = [sharded[names[id(p)]] for p in group["params"]]


def shard_frozen(model, device: torch.device, world: int,
                 compute: torch.dtype | None = None) -> None:
    """Shard ``model`` in place as ``shard`` does, with no optimizer: the frozen reference
    model of ``beta > 0``, sharded and gathered in ``compute`` like the policy, so that it
    computes what the policy computes at the same weights (a KL of 0 at the start)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy()
    if compute is not None:
        policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
        model.float()  # in place: parameters keep their identity
    mesh = init_device_mesh(device.type, (world,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    # The root too frees its gathered weights after each forward pass (torch keeps them by
    # default, for the backward): after generation and evaluation every rank holds shards.
    fully_shard(root(model), mesh=mesh, mp_policy=policy, reshard_after_forward=True)


@contextmanager
def no_sync(model):
    """Accumulate this micro-batch's gradients unreduced (the last one reduces all)."""
    root(model).set_requires_gradient_sync(False)
    try:
        yield
    finally:
        root(model).set_requires_gradient_sync(True)


def clip_grad_norm(model, max_norm: float) -> Tensor:
    """Clip the sharded gradients by their global norm; returns that norm (a plain tensor)."""
    norm = torch.nn.utils.clip_grad_norm_(
        [p for p in model.parameters() if p.grad is not None], max_norm)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def full_state_dict(model) -> dict[str, Tensor]:
    """The whole model's weights on rank 0's CPU ({} on the others; a collective), each
    tied weight once, as the shards hold them: a bf16 run's checkpoint keeps its float32
    master weights (its config.json says float32; pods loads them in the run's --dtype)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                   cpu_offload=True))
    # The gathered copies no longer share storage, so save_pretrained would write a tied
    # weight twice (lm_head.weight beside the input embeddings): keep it once, as one
    # process's checkpoint does.
    return {name: w for name, w in weights.items() if name not in tied_aliases(model)}


def tied_aliases(model) -> set[str]:
    """Names under which an already-named parameter appears again (tied embeddings)."""
    first: dict[int, str] = {}
    aliases = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            aliases.add(name)
        first.setdefault(id(p), name)
    return aliases


def save(model, optimizer, path: Path, world: int, rank: int) -> None:
    """Every rank writes its shards of the weights and optimizer state into ``path``
    (torch.distributed.checkpoint, one file per rank); rank 0 adds the layout."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": weights, "optimizer": optimizer_state}, checkpoint_id=str(path))
    if rank == 0:
        (path / LAYOUT).write_text(json.dumps({"parallelism": "fsdp2", "world": world}))


def load(model, optimizer, path: Path, world: int) -> None:
    """Read back what ``save`` wrote, on the same number of ranks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    run = path.parent.parent.parent
    if not (path / LAYOUT).is_file():
        raise ValueError(f"{path.parent} was not written under FSDP2 (it has no "
                         f"{SHARDS}/{LAYOUT}); resume it the way it ran (--parallelism ddp).")
    written = json.loads((path / LAYOUT).read_text())["world"]
    if written != world:
        raise ValueError(f"{path.parent} holds FSDP2 shards of {written} processes, but this "
                         f"run has {world}; resume with `torchrun --nproc_per_node {written} "
                         f"-m pods -- train --resume {run}`.")
    weights, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": weights, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])
