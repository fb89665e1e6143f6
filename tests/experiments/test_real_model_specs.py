"""The real-model comparison specs (configs/compare_smollm2.yaml: the paper's claims on
SmolLM2-135M-Instruct) run end to end, scaled down so that they keep working: one seed, 2
steps of 8 new tokens on the hf engine, with the tests' tiny chat model standing in for
SmolLM2. Every other setting is the spec's: its base config (the word problems, bf16
compute over float32 weights) and each variant's n, m, rule and micro-batch."""

from pathlib import Path

from pods.config import load_yaml
from pods.experiments.compare import CompareSpec, load_spec, run_compare
from pods.runs.metrics import read_metrics
from pods.train.run import train_or_resume

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SCALED = {"max_steps": 2, "max_time": None, "max_new_tokens": 8, "engine": "hf",
          "eval_size": 4, "eval_every": 1e9, "checkpoint_every": 1e9, "progress": False}


def test_the_spec_runs_scaled_down(chat_model_dir, tmp_path):
    spec = load_spec(CONFIGS / "compare_smollm2.yaml")
    assert set(spec.variants) == {"grpo", "grpo_ga", "pods", "random"}
    assert spec.base["model"] == "smollm2" and spec.base["task"] == "wordproblems"
    small = CompareSpec(variants=spec.variants, seeds=(0,), baseline=spec.baseline,
                        base=spec.base)
    out = run_compare(small, tmp_path / "compare", train_or_resume,
                      overrides={**SCALED, "model": chat_model_dir})
    for variant, fields in spec.variants.items():
        run = out / variant / "seed0"
        assert len(read_metrics(run / "metrics.jsonl", "step")) == 2
        saved = load_yaml(run / "config.yaml")
        kept = {k: v for k, v in fields.items() if k not in SCALED}  # n, m, rule, micro-batch
        assert {k: saved[k] for k in kept} == kept and kept
        assert saved["mixed_precision"] == "auto" and saved["word_levels"] == "1,2"
    assert (out / "summary.md").is_file()


def test_the_paper_spec_builds_every_run_and_its_official_ga_runs(chat_model_dir, tmp_path):
    """compare_smollm2_paper.yaml: every variant's config is valid for every stated seed, all
    measure on the held-out stories, and its GRPO-GA (advantages in blocks of m) runs."""
    spec = load_spec(CONFIGS / "compare_smollm2_paper.yaml")
    assert spec.seeds == (200, 201, 202, 203, 204) and spec.baseline[0] == "grpo"
    for variant in spec.variants:
        for seed in spec.seeds:
            config = spec.config(variant, seed, out_dir=str(tmp_path), run_name="r")
            assert (config.eval.offset, config.eval.size, config.eval.every) == (64, 256, 150)
            assert config.run.max_time == 900 and config.selection.dynamic_sampling
    ga = spec.variants["grpo_ga"]
    assert (ga["n"], ga["m"], ga["adv_group_size"]) == (16, 16, 4)
    small = CompareSpec(variants={"grpo_ga": ga}, seeds=(200,), baseline="grpo_ga",
                        base=spec.base)
    out = run_compare(small, tmp_path / "compare", train_or_resume,
                      overrides={**SCALED, "model": chat_model_dir})
    assert len(read_metrics(out / "grpo_ga" / "seed200" / "metrics.jsonl", "step")) == 2
    assert load_yaml(out / "grpo_ga" / "seed200" / "config.yaml")["adv_group_size"] == 4


def test_the_correction_ab_reuses_the_unseen_seeds_runs(tmp_path):
    """compare_smollm2_is.yaml links the uncorrected runs of compare_smollm2_unseen.yaml:
    its pods variant must build the very configs those ran, and pods_is differ only in the
    correction."""
    ab, unseen = (load_spec(CONFIGS / name) for name in
                  ("compare_smollm2_is.yaml", "compare_smollm2_unseen.yaml"))
    assert set(ab.seeds) <= set(unseen.seeds)
    where = dict(out_dir=str(tmp_path), run_name="r", tracker_group="g")
    for seed in ab.seeds:
        assert ab.config("pods", seed, **where) == unseen.config("pods", seed, **where)
        corrected = ab.config("pods_is", seed, **where)
        assert corrected.loss.is_correction == "token_truncate"
        assert corrected.replace(is_correction="none") == ab.config("pods", seed, **where)


# what a run of compare_smollm2_gpu.yaml does not use (LoRA with lora_rank 0, other engines,
# tasks and trackers) or what the comparison sets for each run
UNUSED = {"lora_alpha", "lora_dropout", "lora_target_modules", "data_dir", "data_file",
          "reward_fn", "reward_errors", "code_test_timeout", "code_memory_mb",
          "code_max_tests", "code_reward", "sandbox_workers", "vllm_gpu_memory_utilization",
          "vllm_sleep", "vllm_seeded", "is_cap", "seed", "out_dir", "run_name", "dist_timeout",
          "report_to", "tracker_project", "tracker_group"}


def test_the_gpu_spec_pins_its_runs_and_keeps_one_shape_a_run(tmp_path):
    """compare_smollm2_gpu.yaml: the paper's three (PODS 64/16, GRPO 16/16, GRPO-GA 64/64
    in blocks of 16) at equal prompts; every key a run relies on is pinned in the spec
    (defaults may change); each variant generates at one shape, which its evaluation
    shares (the compile falls in the first evaluation, outside the training clock)."""
    from pods.config import LEAVES

    spec = load_spec(CONFIGS / "compare_smollm2_gpu.yaml")
    assert set(LEAVES) - UNUSED - set(spec.base) - {"n", "m"} == set()
    runs = {name: spec.config(name, 300, out_dir=str(tmp_path), run_name="r")
            for name in spec.variants}
    shape = {name: (c.rollout.n, c.selection.m, c.optim.micro_batch_size,
                    c.selection.adv_group_size) for name, c in runs.items()}
    assert shape == {"pods": (64, 16, None, None), "grpo": (16, 16, None, None),
                     "grpo_ga": (64, 64, 64, 16)}
    for c in runs.values():
        rows = c.rollout.prompts_per_step * c.rollout.n
        assert rows == c.rollout.gen_batch_size and c.eval.size % rows == 0
        assert (c.rollout.engine, c.rollout.hf_compile, c.run.device) == ("hf", "auto", "auto")
        assert not c.selection.dynamic_sampling and c.eval.size == 256
    # one seed of the three within 9 minutes: each run's training time, plus at most 60 s
    # of start-up, 52 s of compile, 4 s an evaluation and 15 s of checkpoint and last step
    worst = sum(c.run.max_time + 60 + 52 + 4 * (c.run.max_time // c.eval.every + 1) + 15
                for c in runs.values())
    assert worst <= 540
