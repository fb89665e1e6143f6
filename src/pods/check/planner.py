"""`pods plan`: how to choose P, n and m for a model, task and engine on this machine.

    pods plan --config configs/smollm2_wordproblems.yaml
    pods plan --model tiny --candidates 1x8/2,1x16/4,2x16/4

Builds the trainer a `pods train` with the same flags would build, measures the base
model's rewards and the step's costs (``pods.check.plan_measure``), and prints for each
candidate the expected share of groups with reward variance, the seconds per step and the
groups with signal per second (``pods.check.plan``), with the best candidate for each m.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from pods.check.plan import Candidate, default_candidates, predict, recommend, table
from pods.config.files import add_config_flags, config_from_args


def add_parser(sub) -> None:
    about = "measure the base model's pass rate and a step's costs here, and predict " \
            "groups with signal per second for candidate P, n, m"
    p = sub.add_parser("plan", help=about, description=about[0].upper() + about[1:] +
                       ". The model, task and engine are pods train's flags (or --config).",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", help="YAML file of TrainConfig fields (as pods train)")
    p.add_argument("--candidates", default=None, help="comma-separated PxN/M settings, e.g. "
                   "1x16/4,1x64/16 (default: the config's, GRPO on m and n = 2m, 4m, 8m, at "
                   "P and 2P)")
    p.add_argument("--prompts", type=int, default=16, help="training prompts sampled")
    p.add_argument("--samples", type=int, default=16, help="rollouts per sampled prompt")
    p.add_argument("--rows", default="2,8", help="kept-row counts the update is timed at")
    p.add_argument("--json", default=None, help="also write the measurements and "
                   "predictions to this file")
    add_config_flags(p)
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from pods.check.plan_measure import Sample, measure
    from pods.train.trainer import Trainer

    config = config_from_args(args)
    r, s = config.rollout, config.selection
    candidates = [Candidate.parse(c) for c in args.candidates.split(",")] if args.candidates \
        else default_candidates(r.prompts_per_step, r.n, s.m)
    sample = Sample(args.prompts, args.samples, tuple(int(x) for x in args.rows.split(",")))
    measured = measure(Trainer(config), sample)
    predictions = [predict(measured.costs, measured.rewards, c) for c in candidates]
    print(report(measured, predictions))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "rewards": measured.rewards.tolist(), "costs": asdict(measured.costs),
            "predictions": [{**asdict(p), "signal_per_s": p.signal_per_s}
                            for p in predictions]}, indent=1))
    return 0


def report(measured, predictions) -> str:
    rewards, costs = measured.rewards, measured.costs
    Q, S = rewards.shape
    varied = int((rewards.max(1).values > rewards.min(1).values).sum())
    lines = [f"base model: mean reward {float(rewards.mean()):.3f} over {Q} prompts x {S} "
             f"rollouts; {varied} of {Q} prompts had rewards that differ; "
             f"{measured.mean_length:.0f} completion tokens a rollout",
             f"costs: generate {costs.generate.intercept:.3g} s + {costs.generate.slope:.3g} s "
             f"a rollout, score {costs.score * 1e3:.3g} ms a rollout, update "
             f"{costs.update.intercept:.3g} s + {1e3 * costs.update.slope:.3g} s per 1000 "
             f"padded tokens (rows x the longest; kept rows "
             f"{sum(costs.kept_lengths) / len(costs.kept_lengths):.0f} tokens), sync "
             f"{costs.sync:.3g} s", "", table(predictions), "", "best for each m (most groups "
             "with signal per second):"]
    for m, best in recommend(predictions).items():
        lines.append(f"  m={m}: {best.candidate} ({best.signal_per_s:.3f} groups with signal "
                     f"a second, {best.step_s:.1f} s a step)")
    return "\n".join(lines)
