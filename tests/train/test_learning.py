"""The loop learns: a short run on the toy reward raises the held-out reward from chance.

even_start pays 1 when a completion starts with a digit below 5; the untrained tiny model
earns it about as often as chance. Twenty steps of GRPO-PODS under the default's kind of
schedule (warm-up, cosine decay) must make it the rule (0.45 -> 0.93 with seed 0). A broken
sign, selection, advantage, loss or lr hook leaves the accuracy at chance or drives it down.
"""

import pytest

from pods.runs.metrics import read_metrics
from pods.train.run import train
from runs import config


@pytest.mark.parametrize("seed", [0, 1])
def test_a_short_run_raises_the_held_out_reward(tiny_model_dir, tmp_path, seed):
    run = train(config(tiny_model_dir, tmp_path, seed=seed, max_steps=20, prompts_per_step=8,
                       n=16, m=4, lr=1e-2, lr_schedule="cosine", warmup_frac=0.1,
                       lr_floor=0.1, eval_size=32, eval_temperature=1.0, eval_repeats=4))
    evals = [r["eval/accuracy"] for r in read_metrics(run / "metrics.jsonl", "eval")]
    assert len(evals) == 2  # the starting policy and the end (eval_every is 1e9)
    start, end = evals
    assert start < 0.7, f"the untrained model already earns {start:.2f}: the test says nothing"
    assert end > 0.8 and end - start > 0.3, f"{start:.2f} -> {end:.2f}: the run did not learn"
