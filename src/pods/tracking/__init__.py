"""Experiment trackers: the records of metrics.jsonl, also sent to TensorBoard, Weights &
Biases, Trackio or MLflow through their own clients (``report_to``).

Every tracker gets the same keys as metrics.jsonl (``rollout/...``, ``select/...``,
``eval/accuracy``, ``time``, ...) at the run's optimizer step, and ``time`` (training seconds,
the clock that excludes evaluation and checkpoints) as a metric of its own, so either can be
the x axis. Where a tracker takes a timestamp (TensorBoard's walltime, MLflow's timestamp) it
is the run's start plus its training seconds, so the tracker's "relative" axis is training
time too. Only rank 0 reports. A resumed run continues the same tracker run: the ids live in
the run folder's ``trackers.json``.

Each tracker is an optional extra (``pip install -e '.[wandb]'``); asking for one that is
not installed is refused before the model loads (:func:`check_installed`).
"""

from __future__ import annotations

import importlib.util
import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRACKERS = ("tensorboard", "wandb", "trackio", "mlflow")
_MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio",
            "mlflow": "mlflow"}


def parse_report_to(report_to: str) -> tuple[str, ...]:
    """The trackers a ``report_to`` value names ("none", or comma-separated names)."""
    names = tuple(dict.fromkeys(n.strip().lower() for n in report_to.split(",") if n.strip()))
    return tuple(n for n in names if n != "none")


def tracker_problems(report_to: str) -> Iterator[str]:
    """A message for each tracker ``report_to`` names that pods does not know."""
    for name in parse_report_to(report_to):
        if name not in TRACKERS:
            yield f"unknown tracker {name!r} in report_to; use none or a comma-separated " \
                  f"list of {', '.join(TRACKERS)}."


def check_installed(report_to: str) -> None:
    """Raise a ValueError naming what to install for each tracker asked for but missing."""
    missing = [n for n in parse_report_to(report_to)
               if importlib.util.find_spec(_MODULES[n]) is None]
    if missing:
        extras = ",".join(missing)
        raise ValueError(f"report_to asks for {', '.join(missing)}, which "
                         f"{'is' if len(missing) == 1 else 'are'} not installed; install "
                         f"with `pip install -e '.[{extras}]'` in pods's clone (or `pip install "
                         f"{' '.join(missing)}`), or drop {extras} from --report-to.")


def tracker_values(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics.jsonl record, by the same keys (``kind`` and ``step`` are the
    tracker's own step and need no key)."""
    return {k: float(v) for k, v in record.items() if k not in ("kind", "step")
            and isinstance(v, int | float) and not isinstance(v, bool)}


class Trackers:
    """The trackers of one run, fed the records that go to metrics.jsonl.

    ``start_step``: the step the run starts or resumes at; the steps after it are (re)done.
    """

    def __init__(self, report_to: str, run_dir: Path, *, project: str, group: str | None,
                 config: dict[str, Any], start_step: int):
        from pods.tracking import backends

        self.names = parse_report_to(report_to)
        self.state_path = run_dir / "trackers.json"
        state = json.loads(self.state_path.read_text()) if self.state_path.is_file() else {}
        state.setdefault("start", time.time())  # the run's first start: the time axis' origin
        name = f"{group}-{run_dir.name}" if group else run_dir.name
        run = backends.RunInfo(name=name, project=project, group=group, run_dir=run_dir,
                               config=config, start=state["start"], start_step=start_step,
                               resumed=bool(state.get("opened")))
        self.backends = []
        try:
            for tracker in self.names:
                self.backends.append(backends.BACKENDS[tracker](run, state))
        except BaseException:
            self.close()
            raise
        if self.backends:  # the ids to resume into, and the time axis' origin
            state["opened"] = True
            self.state_path.write_text(json.dumps(state, indent=1))

    def write(self, record: dict[str, Any]) -> None:
        if record.get("kind") not in ("step", "eval") or not self.backends:
            return
        values = tracker_values(record)
        for backend in list(self.backends):
            try:
                backend.log(values, int(record["step"]))
            except Exception as error:  # a tracker must never cost the run: drop it, say so
                self.backends.remove(backend)
                warnings.warn(f"tracker {type(backend).__name__} failed at step "
                              f"{record['step']} ({type(error).__name__}: {error}) and gets no "
                              f"more records; metrics.jsonl still has every one.", stacklevel=2)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
        self.backends = []
