"""Compare training variants over seeds: run every variant on every seed, then summarize.

A comparison folder holds ``compare.yaml`` (the spec), one folder per variant with one run
folder per seed (``grpo/seed0/metrics.jsonl``), and after ``summarize``
(pods.experiments.summary: the protocol and speed-ups) the files ``summary.json``,
``summary.md`` and ``curves.png``. ``pods compare`` trains each run in a fresh process
(``in_fresh_process``), so that one run's memory is not the next one's.
"""

from __future__ import annotations

import difflib
import multiprocessing
import os
import re
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pods.config import LEAVES, TrainConfig, as_number, from_dict, load_yaml, read_yaml
from pods.experiments.summary import baseline_names, summarize
from pods.runs.metrics import read_metrics
from pods.runtime.machine import check_same_machine, host
from pods.train.checks import check

__all__ = ["CompareSpec", "in_fresh_process", "is_finished", "load_spec", "run_compare"]

SPEC_KEYS = ("base", "seeds", "baseline", "variants")
# set per run by run_compare, never by a spec
RUN_KEYS = ("seed", "out_dir", "run_name", "tracker_group")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class CompareSpec:
    """Variants to compare: each variant's config is defaults < ``base`` < its overrides."""

    variants: dict[str, dict]  # variant name (its folder name) -> TrainConfig overrides
    seeds: tuple[int, ...]  # every variant is trained once per seed
    # the variant(s) whose peak accuracy defines a speed-up target: a name, or a list whose
    # first name is the primary one (summary columns, the dotted line in curves.png)
    baseline: str | tuple[str, ...]
    base: dict = field(default_factory=dict)  # overrides common to all variants

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(self.seeds))
        if not self.variants:
            raise ValueError("the spec has no variants; add at least one under `variants:` "
                             "as `name: {field: value, ...}`.")
        if isinstance(self.baseline, list | tuple):
            object.__setattr__(self, "baseline", tuple(self.baseline))
        names = baseline_names(self.baseline)
        if not names:
            raise ValueError("the spec names no baseline; give `baseline: NAME` or a list.")
        for name in names:
            if name not in self.variants:
                raise ValueError(f"baseline {name!r} is not a variant; use one of "
                                 f"{', '.join(self.variants)}.")
        if not self.seeds:
            raise ValueError("the spec has no seeds; give `seeds: [0, 1, 2]` or `seeds: 3`.")
        for seed in self.seeds:
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise ValueError(f"seed {seed!r} is not an integer; seeds must be integers.")
        if len(set(self.seeds)) < len(self.seeds):
            raise ValueError(f"seeds {list(self.seeds)} repeat a seed; list each seed once.")
        _check_overrides("base", self.base)
        for name, overrides in self.variants.items():
            if not _NAME.fullmatch(name) or name in (".", ".."):
                raise ValueError(f"variant name {name!r} is not usable as a folder name; use "
                                 "only letters, digits, '-', '_' and '.'.")
            _check_overrides(f"variant {name!r}", overrides)
        for name in self.variants:
            for seed in self.seeds:
                self.config(name, seed)

    def config(self, variant: str, seed: int, **extra: Any) -> TrainConfig:
        """The resolved config of one run: defaults < base < variant < ``extra``, then seed,
        its registry names checked too (pods.train.checks), so a spec fails when loaded."""
        values = {**self.base, **self.variants[variant], **extra, "seed": seed}
        try:
            return check(from_dict(values))
        except ValueError as e:
            raise ValueError(f"variant {variant!r} (seed {seed}): {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """The spec as load_spec reads it."""
        baseline = list(self.baseline) if isinstance(self.baseline, tuple) else self.baseline
        return {"base": dict(self.base), "seeds": list(self.seeds), "baseline": baseline,
                "variants": {name: dict(v) for name, v in self.variants.items()}}


def _check_overrides(where: str, overrides: Any) -> None:
    if not isinstance(overrides, dict):
        raise ValueError(f"{where} must be a mapping of TrainConfig field: value, "
                         f"got {overrides!r}.")
    for key in overrides:
        if key in RUN_KEYS:
            raise ValueError(f"{where} sets {key!r}, which the comparison sets for each run "
                             "(seeds come from `seeds:`, folders from --out, tracker groups are "
                             "comparison-variant); remove it.")
        if key not in LEAVES:
            close = difflib.get_close_matches(str(key), LEAVES, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"{where} overrides unknown field {key!r}.{hint} "
                             f"Known fields: {', '.join(LEAVES)}.")


def load_spec(path: str | Path) -> CompareSpec:
    """A CompareSpec from YAML: ``base`` (optional), ``seeds`` (list, or k for 0..k-1),
    ``baseline`` (a name or a list of names) and ``variants`` (name: {field: value})."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"comparison spec {path} does not exist.")
    data = read_yaml(path)[0] or {}  # a syntax error names the line
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a comparison spec is a mapping with keys "
                         f"{', '.join(SPEC_KEYS)}.")
    unknown = [k for k in data if k not in SPEC_KEYS]
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(map(str, unknown))}; "
                         f"the keys are {', '.join(SPEC_KEYS)}.")
    for key in ("seeds", "baseline", "variants"):
        if key not in data:
            raise ValueError(f"{path}: missing `{key}:`.")
    variants = data["variants"]
    if isinstance(variants, dict):  # `name:` with nothing under it means the defaults
        variants = {str(k): _fields(v, path) for k, v in variants.items()}
    try:
        return CompareSpec(variants=variants or {}, seeds=_seeds(data["seeds"]),
                           baseline=_baseline(data["baseline"]),
                           base=_fields(data.get("base"), path))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _fields(value: Any, spec: Path) -> Any:
    """A variant's or the base's fields: a mapping, nothing (the defaults), or the name of
    a training config YAML file, relative to the spec's folder (configs/paper/ uses it)."""
    if value is None:
        return {}
    if isinstance(value, str):
        return load_yaml(spec.parent / value)
    if isinstance(value, dict):  # YAML reads 3e-4 as text; a training config file does not
        return {k: as_number(k, v) if k in LEAVES else v for k, v in value.items()}
    return value


def _baseline(value: Any) -> str | tuple[str, ...]:
    """``baseline:`` one name, or a list of names (the first is the primary one)."""
    return tuple(map(str, value)) if isinstance(value, list) else str(value)


def _seeds(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"seeds: {value} asks for no runs; give a count >= 1 or a list.")
        return tuple(range(value))
    if isinstance(value, list):
        return tuple(value)
    raise ValueError(f"seeds: {value!r} is neither a count nor a list of integers.")


def run_compare(spec: CompareSpec, out_dir: str | Path,
                train_fn: Callable[[TrainConfig], Any],
                overrides: dict[str, Any] | None = None,
                only: list[str] | None = None, any_machine: bool = False) -> Path:
    """Train every variant on every seed (seeds outer), skipping finished runs, then summarize.
    ``only`` trains just these variants now (a comparison run in parts); the summary covers
    every variant that has runs in the folder. Runs are trained only on a machine like the
    folder's runs so far (pods.runtime.machine), unless ``any_machine``.

    ``train_fn(config)`` trains one run into ``config.out_dir/config.run_name``
    (``out_dir/variant/seed{seed}``). ``overrides`` (e.g. CLI flags) apply to all variants,
    after their own overrides; compare.yaml records the spec with them folded in.
    """
    out_dir = Path(out_dir)
    main = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 writes and reports
    say = print if main else _quiet
    overrides = dict(overrides or {})
    _check_overrides("the command-line overrides", overrides)
    spec = CompareSpec(  # the same runs, with the overrides folded into base
        variants={n: {k: v for k, v in o.items() if k not in overrides}
                  for n, o in spec.variants.items()},
        seeds=spec.seeds, baseline=spec.baseline, base={**spec.base, **overrides})
    if main:
        _write_spec(spec, out_dir / "compare.yaml")
    unknown = sorted(set(only or ()) - set(spec.variants))
    if unknown:
        raise ValueError(f"--only names variants the spec does not have: {', '.join(unknown)}; "
                         f"its variants are {', '.join(spec.variants)}.")
    runs = [(seed, name, spec.config(name, seed, out_dir=str(out_dir / name),
                                     run_name=f"seed{seed}",  # trackers: group per variant
                                     tracker_group=f"{out_dir.name}-{name}"))
            for seed in spec.seeds for name in spec.variants
            if only is None or name in only]  # all built before any training
    finished = {(seed, name) for seed, name, _ in runs
                if is_finished(out_dir / name / f"seed{seed}")}
    if not any_machine and len(finished) < len(runs):
        check_same_machine(recorded_machines(out_dir), host())  # before any training
    for i, (seed, name, config) in enumerate(runs, 1):
        run = f"{name}/seed{seed}"
        if (seed, name) in finished:
            say(f"[{i}/{len(runs)}] {run}: already finished, skipped.")
            continue
        say(f"[{i}/{len(runs)}] {run}: training.")
        train_fn(config)
    if main:
        summarize(out_dir)  # prints the table
        say(f"summary: {out_dir / 'summary.md'}, curves: {out_dir / 'curves.png'}")
    return out_dir


def in_fresh_process(train_fn: Callable[[TrainConfig], Any]) -> Callable[[TrainConfig], Any]:
    """``train_fn`` (a module-level function, or a partial of one) run in a new process at
    each call, which returns its result or raises its exception. What a run holds
    (weights, optimizer, vLLM's KV cache, threads) is released when it ends: in one
    process it was not, and a comparison of SmolLM2 runs on 24 GB ran out of memory in
    its second run (the first left 7 GB behind). Each process imports pods again, about 5 s.
    On Linux the run gets SIGINT if this process dies (``kill`` of `pods compare`), and
    stops as on Ctrl-C, with a checkpoint; else it would train on, orphaned, beside
    the next `pods compare` (a 2-core machine ran two seeds at once that way)."""
    def run(config: TrainConfig) -> Any:
        spawn = multiprocessing.get_context("spawn")  # nothing inherited from this process
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn,
                                 initializer=_stop_with_parent) as pool:
            return pool.submit(_while_parent_lives, train_fn, config).result()
    return run


_PARENT: int | None = None  # in a spawned run: the pid of the comparison that started it


def _while_parent_lives(train_fn: Callable[[TrainConfig], Any], config: TrainConfig) -> Any:
    """``train_fn(config)`` in the spawned process; if the comparison died meanwhile (its
    SIGINT stopped the run), the process ends here, instead of waiting, as the pool's
    worker would, for work that will never come."""
    try:
        return train_fn(config)
    finally:
        if _PARENT is not None and os.getppid() != _PARENT:
            os._exit(130)  # 128 + SIGINT, as a shell reports a Ctrl-C


def _stop_with_parent() -> None:
    """Ask Linux to send this process SIGINT when its parent dies (prctl PR_SET_PDEATHSIG);
    elsewhere nothing. SIGINT is made Python's own again first: a comparison started in
    the background by a script (``nohup pods compare ... &``) starts with it ignored, and
    its runs would inherit that and train on."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    global _PARENT
    _PARENT = os.getppid()
    signal.signal(signal.SIGINT, signal.default_int_handler)

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGINT), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent died before the call: stop now
        os.kill(os.getpid(), signal.SIGINT)


def _quiet(*args, **kwargs) -> None:
    """What ranks other than 0 print."""


def _write_spec(spec: CompareSpec, path: Path) -> None:
    """Write compare.yaml, refusing to mix runs of a different spec in one folder."""
    if path.is_file():
        old = yaml.safe_load(path.read_text()) or {}
        if old.get("base") != spec.base or old.get("variants") != spec.variants:
            raise ValueError(f"{path.parent} holds a comparison with other variants or base "
                             "overrides; pick another --out folder, or delete this one.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))


def is_finished(run_dir: Path) -> bool:
    """Whether a run folder's metrics.jsonl has the "done" record of a finished run."""
    metrics = run_dir / "metrics.jsonl"
    return metrics.is_file() and bool(read_metrics(metrics, "done"))


def recorded_machines(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Each run's last "machine" record, by "variant/seed<k>": finished runs, and stopped
    ones (resumed here, a run would be timed on two machines); runs made before pods
    recorded machines have none and are left out."""
    found = {}
    for metrics in sorted(out_dir.glob("*/seed*/metrics.jsonl")):
        machines = read_metrics(metrics, "machine")
        if machines:
            found[f"{metrics.parent.parent.name}/{metrics.parent.name}"] = machines[-1]
    return found
