"""Data parallelism under ``torchrun`` or ``accelerate launch``: DDP through accelerate, or
FSDP2 (``--parallelism fsdp2``, or accelerate's FSDP2 config) through torch's ``fully_shard``
(pods.runtime.fsdp) for models that do not fit on one device. One process needs none of it.

How a step is split over W ranks (see pods.train.trainer):
    every rank draws the same P prompts (same seed) and takes its P/W of them;
    it generates and scores their n rollouts each, so a group never leaves its rank;
    rewards [P/W, n] are gathered into [P, n] on every rank, so selection, advantages and
    metrics are computed on the whole batch, identically everywhere, exactly as on one
    process; each rank then updates on the kept rows of its own prompts, and the engine
    averages the gradients.
Sampling is keyed by prompt (pods.rollout), so the rollouts do not depend on W either.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import nullcontext
from datetime import timedelta

import torch
from torch import Tensor

from pods.runtime import fsdp
from pods.runtime.device import resolve_device


class RankFailure(RuntimeError):
    """A distributed run lost a rank (or was stopped by its launcher)."""


def launched_world_size() -> int:
    """Processes in this run, as torchrun / accelerate launch announce it."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class Dist:
    """This process's view of the run: rank, device, and the collectives the trainer uses.
    With one process every collective is the identity and no engine is loaded (a
    ``parallelism`` of fsdp2 has nothing to shard there). accelerate starts the processes'
    group either way; under FSDP2 the model is sharded by pods.runtime.fsdp, not accelerate."""

    def __init__(self, device: str = "auto", timeout_s: float = 1800.0,
                 world: int | None = None, parallelism: str = "ddp"):
        self.world = launched_world_size() if world is None else world
        self.accelerator, self.fsdp2 = None, False
        self.model = self.optimizer = None  # under FSDP2: the sharded ones
        if self.world == 1:
            self.rank, self.device = 0, resolve_device(device)
            return
        from accelerate import Accelerator
        from accelerate.utils import InitProcessGroupKwargs

        cpu = device == "cpu" or not torch.cuda.is_available()
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device={device!r} names one device, but this run has "
                             f"{self.world} processes, each placed by the launcher; use "
                             f"--device auto (or cpu).")
        resolve_device(device)  # cuda asked of a torch without it fails here, before any load
        self.accelerator = Accelerator(cpu=cpu, kwargs_handlers=[
            InitProcessGroupKwargs(timeout=timedelta(seconds=timeout_s))])
        self.rank, self.device = self.accelerator.process_index, self.accelerator.device
        if "DEEPSPEED" in str(self.accelerator.distributed_type):
            raise ValueError("DeepSpeed is not supported: its engine takes over gradient "
                             "accumulation and loss scaling, which pods's update does itself. "
                             "For models that do not fit on one device use FSDP2 "
                             "(configs/accelerate/fsdp2.yaml).")
        accelerate_fsdp = "FSDP" in str(self.accelerator.distributed_type)
        if accelerate_fsdp:  # accelerate's FSDP config: the same sharding as fsdp2
            fsdp.check_accelerate_plugin(self.accelerator.state.fsdp_plugin)
        self.fsdp2 = parallelism == "fsdp2" or accelerate_fsdp

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        """Whether parameters and optimizer state are split over the ranks (FSDP): then
        every forward pass, generation included, is a collective that all ranks make."""
        return self.fsdp2

    def shard(self, count: int) -> slice:
        """This rank's contiguous part of ``count`` items (count divisible by world)."""
        per = count // self.world
        return slice(self.rank * per, (self.rank + 1) * per)

    def main_first(self):
        """Rank 0 runs the block first (downloads, the tiny model's one-off warm-up, which
        write caches), then the others, who find the caches filled."""
        if self.accelerator is None:
            return nullcontext()
        return self.accelerator.main_process_first()

    # ---- the engine ------------------------------------------------------------------
    def prepare(self, model, optimizer, compute: torch.dtype | None = None):
        """The model and optimizer to train: DDP-wrapped, or sharded in place (FSDP2, its
        float32 shards gathered in ``compute`` where given: pods.runtime.fsdp.shard)."""
        if self.fsdp2:
            fsdp.shard(model, optimizer, self.device, self.world, compute)
            self.model, self.optimizer = model, optimizer
            return model, optimizer
        if self.accelerator is None:
            return model, optimizer
        return self.accelerator.prepare(model, optimizer)

    def unwrap(self, model):
        if self.accelerator is None or self.fsdp2:  # fully_shard keeps the module's class
            return model
        return self.accelerator.unwrap_model(model)

    def no_sync(self, model, last: bool):
        """Skip the gradient reduction on all but the last micro-batch."""
        if self.accelerator is None or last:
            return nullcontext()
        return fsdp.no_sync(model) if self.fsdp2 else self.accelerator.no_sync(model)

    def backward(self, loss: Tensor) -> None:
        if self.accelerator is None or self.fsdp2:
            loss.backward()
        else:
            self.accelerator.backward(loss)

    def clip_grad_norm(self, model, max_norm: float) -> Tensor:
        if self.fsdp2:
            return fsdp.clip_grad_norm(model, max_norm)
        if self.accelerator is None:
            return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return self.accelerator.clip_grad_norm_(model.parameters(), max_norm)

    def full_state_dict(self, model):
        """The whole model's weights on rank 0 (a collective under FSDP2), or
        None where ``save_pretrained`` can read them from the module itself."""
        return fsdp.full_state_dict(model) if self.fsdp2 else None

    def save_shards(self, path) -> None:
        """FSDP2 only: every rank writes its weight and optimizer shards."""
        if self.fsdp2:
            fsdp.save(self.model, self.optimizer, path, self.world, self.rank)

    def load_shards(self, path) -> None:
        fsdp.load(self.model, self.optimizer, path, self.world)

    # ---- collectives -------------------------------------------------------------------
    def gather(self, x: Tensor) -> Tensor:
        """Concatenate every rank's ``x`` [k, ...] in rank order: [W*k, ...]."""
        if self.accelerator is None:
            return x
        return self.accelerator.gather(x.to(self.device)).cpu()

    def reduce(self, values: dict[str, float], op: str) -> dict[str, float]:
        """``values`` (same keys on every rank) reduced with op: sum, mean or max."""
        if self.accelerator is None or not values:
            return values
        keys = sorted(values)
        t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64,
                         device=self.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX if op == "max"
                                     else torch.distributed.ReduceOp.SUM)
        if op == "mean":
            t /= self.world
        return dict(zip(keys, t.tolist(), strict=True))

    def gather_objects(self, obj) -> list:
        if self.accelerator is None:
            return [obj]
        out = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj):
        """Rank 0's ``obj`` on every rank."""
        if self.accelerator is None:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()

    # ---- failures ----------------------------------------------------------------------
    def on_sigterm(self) -> None:
        """torchrun sends SIGTERM to the other ranks when one fails: stop with a message."""
        if self.accelerator is None:
            return

        def stop(signum, frame):
            raise RankFailure(f"rank {self.rank} was stopped by the launcher (SIGTERM), "
                              f"most likely because another rank failed")

        signal.signal(signal.SIGTERM, stop)


def close_process_group() -> None:
    """Under torchrun, leave the process group before the process ends (then ``leave``). A
    one-process group is vLLM's own (the vllm engine in process): vLLM closes it at exit,
    and closing it first here makes that fail with a traceback ("Invalid process group
    specified")."""
    if "torch.distributed" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.destroy_process_group()


def leave(code: int) -> None:
    """Under torchrun (more than one process), end the process with ``code`` once its output
    is flushed, without the interpreter's teardown. gloo's worker threads release a
    collective's tensors after its ``wait()`` has returned; releasing a tensor Python knows
    takes the GIL, and a thread that takes it while the interpreter finalizes is ended by
    Python (``pthread_exit``), whose unwinding through gloo's loop aborts the rank with
    "terminate called without an active exception" (SIGABRT) after its work is done and
    written, and torchrun reports the run failed (a backtrace shows
    ``ProcessGroupGloo::runLoop`` -> ``decref_pyobject`` -> ``PyEval_RestoreThread``).
    Everything pods writes (checkpoints, metrics, trackers) is closed before; the exit
    handlers (``atexit``: vLLM's, which stop its engine, and any library's) run first,
    the interpreter still whole."""
    if launched_world_size() > 1:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
