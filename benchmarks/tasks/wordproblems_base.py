"""A model's accuracy on the wordproblems task, per level, before any training: the number a
run on this task starts from.

pods' own pieces end to end: the model loads as `pods train` loads it, prompts go through
its chat template with the paper's system prompt, the hf engine generates and
pods.evaluation scores (the paper's math grading: accuracy is the answer alone, format
accuracy the <think>/<answer> layout). Each level's first ``--size`` test problems, at each
``--temperatures`` (0 = greedy, as evaluation during training; 0.9, as `pods eval` and the
paper), sampled ``--repeats`` times.

    python benchmarks/tasks/wordproblems_base.py --model smollm2 --size 50
    python benchmarks/tasks/wordproblems_base.py --quick   # the embedded model, 2 problems
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402
from pods.config.groups import ModelConfig  # noqa: E402
from pods.evaluation import Sampling, evaluate  # noqa: E402
from pods.models.policy import load_policy  # noqa: E402
from pods.rollout.hf import HFEngine  # noqa: E402
from pods.runtime.device import resolve_device  # noqa: E402
from pods.tasks.wordproblems import WordProblems, parse_levels  # noqa: E402


def main() -> None:
    parser = suite.parser(__doc__, "the embedded model, level 1, 2 problems, 8 new tokens")
    parser.add_argument("--model", help="hub id, model folder, .gguf file or smollm2 "
                        "(pods fetch); required but with --quick")
    parser.add_argument("--levels", default="1,2,3,4")
    parser.add_argument("--size", type=int, default=50, help="test problems per level")
    parser.add_argument("--temperatures", default="0,0.9")
    parser.add_argument("--repeats", type=int, default=1, help="samplings at T > 0")
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64, help="sequences per generate()")
    args = parser.parse_args()
    if args.quick:
        from pods.models.tiny import embedded_model_path

        args.model, args.levels, args.size = str(embedded_model_path()), "1", 2
        args.temperatures, args.max_new_tokens = "0", 8
    if not args.model:
        parser.error("give --model (or --quick)")

    device = resolve_device("cpu")
    model, tokenizer = load_policy(args.model, device, ModelConfig(dtype="float32"))
    engine = HFEngine(model, tokenizer, args.batch)
    rows = []
    for temperature in map(float, args.temperatures.split(",")):
        repeats = 1 if temperature == 0 else args.repeats
        for level in parse_levels(args.levels):
            task = WordProblems((level,))
            result = evaluate(engine, task, task.test()[:args.size],
                              Sampling(temperature, args.max_new_tokens, repeats=repeats))
            rows.append({"level": level, "temperature": temperature, **result})
            print(row_line(rows[-1]), flush=True)
    print(suite.markdown(["level", "T", "problems", "repeats", "accuracy %", "format %",
                          "reward", "tokens"], [
        [r["level"], f"{r['temperature']:g}", r["eval/problems"], r["eval/repeats"],
         f"{100 * r['eval/accuracy']:.1f}", f"{100 * r['eval/format_accuracy']:.1f}",
         f"{r['eval/reward_mean']:.3f}", f"{r['eval/completion_len']:.0f}"] for r in rows]))
    suite.write_json(args.json, rows)


def row_line(r: dict) -> str:
    sem = f" ± {100 * r['eval/accuracy_sem']:.1f}" if "eval/accuracy_sem" in r else ""
    return (f"level {r['level']}  T={r['temperature']:g}  problems {r['eval/problems']}  "
            f"repeats {r['eval/repeats']}  accuracy {100 * r['eval/accuracy']:.1f}%{sem}  "
            f"format {100 * r['eval/format_accuracy']:.1f}%  "
            f"reward {r['eval/reward_mean']:.3f}  tokens {r['eval/completion_len']:.0f}")


if __name__ == "__main__":
    main()
