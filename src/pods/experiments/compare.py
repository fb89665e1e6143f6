"""Compare training variants over seeds: run every variant on every seed, then summarize.

A comparison folder holds ``compare.yaml`` (the spec, pods.experiments.spec), one folder per
variant with one run folder per seed (``grpo/seed0/metrics.jsonl``), ``run_times.jsonl``
(each run's wall-clock seconds, pods.experiments.timebox), and after ``summarize``
(pods.experiments.summary: the protocol and speed-ups) the files ``summary.json``,
``summary.md`` and ``curves.png``. ``pods compare`` trains each run in a fresh process
(``in_fresh_process``), so that one run's memory is not the next one's. A finished run is
read from its records alone (``metrics.jsonl``): its checkpoints may be deleted, and a
folder packed without them (pods.experiments.archive) summarizes and extends elsewhere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pods.config import TrainConfig
from pods.experiments.fresh import in_fresh_process
from pods.experiments.spec import CompareSpec, check_overrides, load_spec, write_spec
from pods.experiments.summary import summarize
from pods.experiments.timebox import TimeBox, record_time
from pods.runs.checkpoints import latest_checkpoint
from pods.runs.metrics import read_metrics
from pods.runtime.distributed import launched_world_size
from pods.runtime.machine import check_same_machine, this_machine

__all__ = ["CompareSpec", "Schedule", "in_fresh_process", "is_finished", "load_spec",
           "run_compare"]

Planned = tuple[int, str, TrainConfig]  # (seed, variant, its config)


@dataclass(frozen=True)
class Schedule:
    """Which of a comparison's runs to train now, and on what machine."""

    only: list[str] | None = None  # just these variants (a comparison run in parts)
    any_machine: bool = False  # also on a machine unlike the folder's runs so far
    time_box: TimeBox | None = None  # only the whole seeds, then runs, that fit its time


def run_compare(spec: CompareSpec, out_dir: str | Path,
                train_fn: Callable[[TrainConfig], Any],
                overrides: dict[str, Any] | None = None,
                schedule: Schedule = Schedule()) -> Path:
    """Train every variant on every seed (seeds outer), skipping finished runs, then summarize.
    ``schedule.only`` trains just these variants now; the summary covers every variant
    that has runs in the folder. Runs are trained only on a machine like the folder's runs
    so far (pods.runtime.machine), unless ``schedule.any_machine``. ``schedule.time_box``
    (pods.experiments.timebox) starts only the whole seeds, and then the runs, that fit
    in the time it has left, and says what it skipped.

    ``train_fn(config)`` trains one run into ``config.out_dir/config.run_name``
    (``out_dir/variant/seed{seed}``). ``overrides`` (e.g. CLI flags) apply to all variants,
    after their own overrides; compare.yaml records the spec with them folded in.
    """
    out_dir = Path(out_dir)
    main = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 writes and reports
    say = print if main else _quiet
    spec = with_overrides(spec, dict(overrides or {}))
    if main:
        write_spec(spec, out_dir / "compare.yaml")
    runs = planned_runs(spec, out_dir, schedule.only)  # all built before any training
    todo = [r for r in runs if not is_finished(_run_dir(out_dir, r))]
    time_box = schedule.time_box
    if not schedule.any_machine and todo:  # before any training
        for device in {config.run.device for _, _, config in todo}:
            check_same_machine(recorded_machines(out_dir), this_machine(device))
    if todo:  # new seeds pool with the old only where they are made the same way
        check_same_configs(out_dir, todo)
    if time_box is not None and todo:
        for _, name, config in todo:  # a run without a time limit fails here, not later
            time_box.estimate(name, config.run.max_time)
        if time_box.untimed_note():
            say(time_box.untimed_note())
    for i, planned in enumerate(runs, 1):
        seed, name, config = planned
        if planned not in todo:
            say(f"[{i}/{len(runs)}] {name}/seed{seed}: already finished, skipped.")
            continue
        if time_box is not None and not agreed(
                partial(_fits, time_box, todo, todo.index(planned)), main):
            break
        say(f"[{i}/{len(runs)}] {name}/seed{seed}: training.")
        _train_timed(train_fn, config, out_dir / name / f"seed{seed}",
                     time_box.clock if time_box is not None else time.monotonic, main)
    if main and any(map(is_finished, out_dir.glob("*/seed*"))):
        summarize(out_dir)  # prints the table
        say(f"summary: {out_dir / 'summary.md'}, curves: {out_dir / 'curves.png'}")
    elif main:  # a time box too short for the first run
        say(f"{out_dir} holds no finished run yet: no summary.")
    if time_box is not None:
        say(time_box.note())
    return out_dir


# what may differ between a comparison's runs of one variant: which run it is and where
# it reports; every other key makes the runs (a default of pods changed since the old
# runs, say) and must be the same for runs to pool
PER_RUN = {"seed", "run_name", "out_dir", "tracker_group", "tracker_project", "report_to",
           "progress", "dist_timeout", "data_dir", "sandbox_workers", "keep_checkpoints",
           "written_for_gpu"}


def check_same_configs(out_dir: Path, todo: list[Planned]) -> None:
    """Refuse to add runs to a variant whose finished runs resolved to another config: the
    spec may be the same while pods's defaults changed (new runs would pool with old ones
    made another way). Names each key that differs, and how to pin it."""
    from pods.config.files import load_run_config

    for _, name, config in todo:
        old = next((d for d in sorted((out_dir / name).glob("seed*"))
                    if is_finished(d) and (d / "config.yaml").is_file()), None)
        if old is None:
            continue
        was = load_run_config(old / "config.yaml")
        now = config.to_dict()
        changed = {k: (was.get(k), v) for k, v in now.items()
                   if k not in PER_RUN and was.get(k) != v}
        if changed:
            keys = "; ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
            pins = ", ".join(f"{k}: {a!r}" for k, (a, _) in changed.items())
            raise ValueError(f"variant {name!r}: its runs in {out_dir} were made with another "
                             f"config than its new runs would be ({keys}; {old.name}'s / "
                             f"now), most likely a default of pods changed since; the runs "
                             f"would not pool. Pin the old values in the spec's base "
                             f"({pins}) or compare in another --out folder.")


def with_overrides(spec: CompareSpec, overrides: dict[str, Any]) -> CompareSpec:
    """The same runs, with ``overrides`` (flags) folded into the base over every variant."""
    check_overrides("the command-line overrides", overrides)
    return CompareSpec(variants={n: {k: v for k, v in o.items() if k not in overrides}
                                 for n, o in spec.variants.items()},
                       seeds=spec.seeds, baseline=spec.baseline,
                       base={**spec.base, **overrides})


def planned_runs(spec: CompareSpec, out_dir: Path, only: list[str] | None) -> list[Planned]:
    """Every (seed, variant, config) to have, seeds outer; ``only`` keeps these variants."""
    unknown = sorted(set(only or ()) - set(spec.variants))
    if unknown:
        raise ValueError(f"--only names variants the spec does not have: {', '.join(unknown)}; "
                         f"its variants are {', '.join(spec.variants)}.")
    return [(seed, name, spec.config(name, seed, out_dir=str(out_dir / name),
                                     run_name=f"seed{seed}",  # trackers: group per variant
                                     tracker_group=f"{out_dir.name}-{name}"))
            for seed in spec.seeds for name in spec.variants
            if only is None or name in only]


def _run_dir(out_dir: Path, planned: Planned) -> Path:
    return out_dir / planned[1] / f"seed{planned[0]}"


def agreed(decide: Callable[[], bool], main: bool) -> bool:
    """``decide()`` as rank 0 makes it, on every rank (under torchrun): each rank's own
    clock and its own read of run_times.jsonl (which rank 0 appends only after its run
    returns) could disagree, and a rank that starts a run the others skip would wait in
    the process group's start-up for ever. One process: ``decide()``."""
    if launched_world_size() == 1:
        return decide()
    return bool(from_main(decide() if main else None))


def from_main(value):
    """Rank 0's ``value`` on every rank, over the process group the runs use (accelerate's,
    started here once per process where no run has started it yet)."""
    import torch.distributed as dist
    from accelerate import PartialState

    PartialState()  # the runs' process group: init_process_group once per process
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _fits(time_box: TimeBox, todo: list[Planned], k: int) -> bool:
    """Whether ``todo[k]`` may start: the first run to do of a seed starts only if all of
    that seed's runs to do fit, a later one if it fits itself; if not, it and every run
    after it are skipped (``time_box.skipped``)."""
    seed = todo[k][0]
    first = k == 0 or todo[k - 1][0] != seed
    group = [r for r in todo[k:] if r[0] == seed] if first else [todo[k]]
    if time_box.admits([(f"{n}/seed{s}", n, c.run.max_time) for s, n, c in group]):
        return True
    time_box.skip([f"{n}/seed{s}" for s, n, _ in todo[k:]])
    return False


def _train_timed(train_fn: Callable[[TrainConfig], Any], config: TrainConfig, run_dir: Path,
                 clock: Callable[[], float], main: bool) -> None:
    """``train_fn(config)``, its wall-clock seconds recorded (rank 0) for time boxes."""
    resumed = (run_dir / "metrics.jsonl").is_file()
    start = clock()
    train_fn(config)
    if main:
        record_time(run_dir.parent.parent, f"{run_dir.parent.name}/{run_dir.name}",
                    clock() - start, config.run.max_time, resumed)


def _quiet(*args, **kwargs) -> None:
    """What ranks other than 0 print."""


def is_finished(run_dir: Path) -> bool:
    """Whether a run folder's metrics.jsonl has the "done" record of a finished run."""
    metrics = run_dir / "metrics.jsonl"
    return metrics.is_file() and bool(read_metrics(metrics, "done"))


def recorded_machines(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Each run's last "machine" record, by "variant/seed<k>": finished runs, and stopped
    ones that hold a checkpoint (resumed here, a run would be timed on two machines; one
    without starts over); runs made before pods recorded machines have none and are left
    out."""
    found = {}
    for metrics in sorted(out_dir.glob("*/seed*/metrics.jsonl")):
        machines = read_metrics(metrics, "machine")
        resumable = latest_checkpoint(metrics.parent) is not None
        if machines and (resumable or is_finished(metrics.parent)):
            found[f"{metrics.parent.parent.name}/{metrics.parent.name}"] = machines[-1]
    return found
