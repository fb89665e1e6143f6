"""A model's accuracy on the wordproblems task, per level, before any training: the number a
run on this task starts from.

pods' own pieces end to end: the model loads as `pods train` loads it, prompts go through
its chat template with the paper's system prompt, the hf engine generates and
pods.evaluation scores (the paper's math grading: accuracy is the answer alone, format
accuracy the <think>/<answer> layout). Each level's first ``--size`` test problems, at each
``--temperatures`` (0 = greedy, as evaluation during training; 0.9, as `pods eval` and the
paper), sampled ``--repeats`` times.

    python benchmarks/wordproblems_base.py --model smollm2 --size 50
"""

from __future__ import annotations

import argparse
import json

from pods.config.groups import ModelConfig
from pods.evaluation import Sampling, evaluate
from pods.models.policy import load_policy
from pods.rollout.hf import HFEngine
from pods.runtime.device import resolve_device
from pods.tasks.wordproblems import WordProblems, parse_levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="hub id, model folder, .gguf file or smollm2 (pods fetch)")
    parser.add_argument("--levels", default="1,2,3,4")
    parser.add_argument("--size", type=int, default=50, help="test problems per level")
    parser.add_argument("--temperatures", default="0,0.9")
    parser.add_argument("--repeats", type=int, default=1, help="samplings at T > 0")
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64, help="sequences per generate()")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

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
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def row_line(r: dict) -> str:
    sem = f" ± {100 * r['eval/accuracy_sem']:.1f}" if "eval/accuracy_sem" in r else ""
    return (f"level {r['level']}  T={r['temperature']:g}  problems {r['eval/problems']}  "
            f"repeats {r['eval/repeats']}  accuracy {100 * r['eval/accuracy']:.1f}%{sem}  "
            f"format {100 * r['eval/format_accuracy']:.1f}%  "
            f"reward {r['eval/reward_mean']:.3f}  tokens {r['eval/completion_len']:.0f}")


if __name__ == "__main__":
    main()
