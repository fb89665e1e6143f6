"""What a run shows while it trains: the training clock, a step's measurements over the
ranks, the progress bar."""

from __future__ import annotations

import time
from contextlib import contextmanager

from pods.runtime.device import peak_memory_mb


class Clock:
    """Training seconds, with the time of each phase of the current step."""

    def __init__(self, seconds: float = 0.0):
        self.seconds = seconds
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            self.phases[f"time/{name}"] = self.phases.get(f"time/{name}", 0.0) + spent
            self.seconds += spent


def over_ranks(dist, clock: Clock, device, lengths, scores
               ) -> tuple[dict[str, float], dict[str, float]]:
    """A step's per-rank measurements reduced over the ranks: (the clock ("time"), phase
    times and peak memory of the slowest rank; completion length and reward counts summed).
    It changes nothing: the step sets its clock from the first."""
    slowest = dist.reduce({"time": clock.seconds, **clock.phases,
                           **peak_memory_mb(device)}, "max")
    summed = dist.reduce({"length": lengths.sum().item(), "rows": lengths.numel(),
                          "errors": scores.reward_errors, "failures": scores.grading_failures,
                          "truncated": scores.truncated}, "sum")
    return slowest, {"rollout/completion_len": summed["length"] / max(summed["rows"], 1),
                     "rollout/truncated": int(summed["truncated"]),
                     "rollout/grading_failures": int(summed["failures"]),
                     "rollout/reward_errors": int(summed["errors"])}


class Progress:
    """A tqdm bar over steps (with max_steps) or training seconds (with max_time only)."""

    def __init__(self, cfg, seconds: float, steps: int, enabled: bool = True):
        from tqdm.auto import tqdm

        self.by_steps = cfg.max_steps is not None
        self.skipped = 0  # steps of this process without an update (no reward variance)
        total = cfg.max_steps if self.by_steps else cfg.max_time
        self.bar = tqdm(total=total, initial=steps if self.by_steps else round(seconds),
                        disable=not (cfg.progress and enabled),
                        unit="step" if self.by_steps else "s",
                        dynamic_ncols=True, mininterval=1.0)  # ~1 redraw/s, short logs

    def update(self, record: dict, accuracy: float | None) -> None:
        if self.by_steps:
            self.bar.update(1)
        else:
            self.bar.update(min(round(record["time"]), self.bar.total) - self.bar.n)
        self.skipped += record.get("optim/skipped", 0)
        acc = "-" if accuracy is None else f"{100 * accuracy:.1f}%"
        skipped = f" skipped {self.skipped}" if self.skipped else ""
        self.bar.set_postfix_str(f"step {record['step']} reward "
                                 f"{record['rollout/reward_mean']:.3f} test {acc} "
                                 f"train {record['time']:.0f}s{skipped}")

    def close(self) -> None:
        self.bar.close()


def silent(*args, **kwargs) -> None:
    """The log of ranks other than 0."""
