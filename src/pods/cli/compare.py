"""`pods compare`: run a comparison spec's variants x seeds into a folder, in a time box if
asked, and carry the folder's records between machines.

    pods compare SPEC --out DIR                        every run not finished, then the summary
    pods compare SPEC --out DIR --budget 540           the whole seeds that fit in 540 s
    pods compare --out DIR --pack DIR.tar.gz           the records (no checkpoints), one file
    pods compare SPEC --out DIR --unpack IN.tar.gz --budget 540 --pack OUT.tar.gz
                                                       go on from another machine's records
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from pods.config import add_config_flags, flag_overrides

if TYPE_CHECKING:
    from pods.experiments.timebox import TimeBox


def add_parser(sub) -> None:
    """The `compare` subcommand on the `pods` parser's subparsers."""
    p = sub.add_parser("compare", help="run variants x seeds, then aggregate curves and table; "
                       "pack and unpack a comparison's records",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", nargs="?", help="comparison spec YAML (see "
                   "configs/compare_embedded.yaml); may be left out with --pack or --unpack "
                   "alone")
    p.add_argument("--out", required=True, help="comparison folder (re-run to continue)")
    add_config_flags(p)
    p.add_argument("--only", metavar="VARIANTS", help="comma-separated variants to train now "
                   "(default: all); the summary covers every variant with runs in --out")
    p.add_argument("--any-machine", action="store_true", help="add runs on a machine unlike "
                   "the finished runs' (refused by default: their times are not comparable)")
    p.add_argument("--budget", type=float, metavar="SECONDS", help="wall-clock seconds this "
                   "command may train for: whole seeds in order, each started only if its "
                   "runs' max_time, plus the start-up and evaluation time the folder's "
                   "timed runs took, fits in the time left; the rest is named, for later")
    p.add_argument("--unpack", metavar="FILE", help="first write the records of a packed "
                   "comparison (--pack) into --out")
    p.add_argument("--pack", metavar="FILE", help="last write --out's records (spec, finished "
                   "runs' metrics and configs, run times, summary; no checkpoints) to FILE "
                   "(.tar.gz)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pods.experiments.archive import pack, unpack
    from pods.experiments.timebox import TimeBox

    out = Path(args.out)
    if args.spec is None and not (args.pack or args.unpack):
        raise ValueError("give a comparison spec to run, or --pack FILE / --unpack FILE to "
                         "carry --out's records.")
    if args.spec is None and args.budget is not None:
        raise ValueError("--budget times the runs of a spec; give the spec to run.")
    time_box = TimeBox(args.budget, out) if args.budget is not None else None  # from now
    if args.unpack:
        added = unpack(args.unpack, out)
        print(f"unpacked {len(added)} run(s) into {out}: {', '.join(added) or 'none new'}")
    if args.spec is not None:
        _compare(args, out, time_box)
    if args.pack:
        packed, left = pack(out, args.pack)
        size = Path(args.pack).stat().st_size
        print(f"packed {len(packed)} finished run(s) of {out} into {args.pack} "
              f"({size / 1024:.0f} kB)" + (f"; not finished, left out: {', '.join(left)}"
                                           if left else ""))
    return 0


def _compare(args: argparse.Namespace, out: Path, time_box: TimeBox | None) -> None:
    from pods.experiments.compare import Schedule, in_fresh_process, load_spec, run_compare
    from pods.train.run import train_or_resume

    only = [v.strip() for v in args.only.split(",") if v.strip()] if args.only else None
    spec = load_spec(args.spec)
    train_fn = in_fresh_process(partial(train_or_resume, curve=draw_curve))
    run_compare(spec, out, train_fn, flag_overrides(args),
                Schedule(only=only, any_machine=args.any_machine, time_box=time_box))


def draw_curve(run_dir: Path) -> Path:
    """A run's learning curve (curve.png), drawn when each run ends."""
    from pods.experiments.plots import plot_run

    return plot_run(run_dir)
