"""The TRL adapter: config validation, and the contract that only the m rollouts of each
group that ``pods.core.downsample`` keeps reach TRL's loss, with advantages over those m."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from launch import EAGER_VLLM  # noqa: E402
from pods.core.advantages import group_advantages  # noqa: E402
from pods.core.downsample import downsample  # noqa: E402
from pods.integrations.trl import PODSGRPOConfig, PODSGRPOTrainer, _take_rows  # noqa: E402

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from trl_contract import check_contract  # noqa: E402


def config(tmp_path, **overrides):
    values = dict(output_dir=str(tmp_path), num_generations=8, pods_m=4,
                  per_device_train_batch_size=4, use_cpu=True, report_to="none")
    return PODSGRPOConfig(**{**values, **overrides})


# ---- construction-time rejection ---------------------------------------------------------
def test_batch_of_kept_rollouts_must_hold_whole_groups(tmp_path):
    with pytest.raises(ValueError) as error:
        config(tmp_path, per_device_train_batch_size=6)
    assert str(error.value) == (
        "per_device_train_batch_size=6 with num_generations=8, pods_m=4, "
        "steps_per_generation=1: per_device_train_batch_size counts kept rollouts; each "
        "process must keep whole groups of m=4 per generation, but "
        "per_device_train_batch_size * steps_per_generation = 6. Set "
        "per_device_train_batch_size to a multiple of 4 (e.g. 8).")


def test_micro_batch_must_come_from_whole_generated_rollouts(tmp_path):
    # 3 kept x 6/4 = 4.5 generated rollouts per micro-batch
    with pytest.raises(ValueError) as error:
        config(tmp_path, num_generations=6, per_device_train_batch_size=3,
               gradient_accumulation_steps=4)
    assert str(error.value) == (
        "per_device_train_batch_size=3 with num_generations=6, pods_m=4, "
        "steps_per_generation=4: per_device_train_batch_size counts kept rollouts; each "
        "micro-batch must come from a whole number of generated rollouts, but "
        "per_device_train_batch_size * n / m = 4.5. Set per_device_train_batch_size to a "
        "multiple of 2 (e.g. 4).")


@pytest.mark.parametrize("m", [1, 9, 0])
def test_m_must_be_between_2_and_n(tmp_path, m):
    with pytest.raises(ValueError) as error:
        config(tmp_path, pods_m=m)
    assert str(error.value) == (
        f"pods_m={m} must be in [2, num_generations=8]: it keeps m of the n rollouts of each "
        f"prompt, and group advantages need at least 2; set pods_m between 2 and 8 (or raise "
        f"num_generations).")


def test_unknown_rule(tmp_path):
    with pytest.raises(ValueError) as error:
        config(tmp_path, pods_rule="best")
    assert str(error.value) == (
        "unknown pods_rule 'best'; use one of max_abs_advantage, max_reward, max_variance, "
        "min_reward, percentile, random, reward_per_token, shortest, or pass a callable rule "
        "that returns each group's kept columns, LongTensor [P, m] (see pods.core.downsample).")


def test_the_rule_help_names_every_registered_rule():
    """--pods_rule's help is built from the registry, so a new rule shows up in it."""
    import dataclasses

    from pods.core.downsample import RULES

    (field,) = [f for f in dataclasses.fields(PODSGRPOConfig) if f.name == "pods_rule"]
    assert [name for name in RULES if name not in field.metadata["help"]] == []


def test_generation_batch_size_counts_generated_rollouts(tmp_path):
    with pytest.raises(ValueError) as error:
        config(tmp_path, generation_batch_size=20)
    assert str(error.value) == ("generation_batch_size=20 counts generated rollouts and must be "
                                "whole groups of num_generations=8; set it to a multiple of 8.")
    args = config(tmp_path, generation_batch_size=24)  # 3 prompts x 8, keep 3 x 4 = 12
    assert (args.steps_per_generation, args.per_device_train_batch_size) == (3, 4)


def test_sizes_are_derived_in_generated_rollouts(tmp_path):
    args = config(tmp_path, per_device_train_batch_size=8, gradient_accumulation_steps=2)
    # each process keeps 8 x 2 = 16 rollouts per generation: 4 groups, 4 x 8 = 32 generated
    assert (args.per_device_train_batch_size, args.steps_per_generation) == (8, 2)
    assert args.generation_batch_size == 32
    plain = config(tmp_path, pods_m=None, per_device_train_batch_size=8)  # stock GRPO sizes
    assert plain.generation_batch_size == 8


def test_trainer_needs_the_pods_config_before_loading_a_model(tmp_path):
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    with pytest.raises(TypeError, match=r"needs args=PODSGRPOConfig\(...\)"):
        PODSGRPOTrainer(model=str(tmp_path / "no-such-model"), reward_funcs=[], args=args)


# ---- pure parts ---------------------------------------------------------------------------
def test_take_rows_cuts_every_per_rollout_entry_including_images():
    # 3 rollouts with 1, 0, 2 images; Qwen-style flat pixel_values, one row per patch
    grid = torch.tensor([[1, 1, 2], [1, 1, 1], [1, 1, 3]])  # patches per image: 2, 1, 3
    batch = {"prompt_ids": torch.arange(6).view(3, 2), "advantages": torch.tensor([1., 2, 3]),
             "pixel_values": torch.arange(6.).view(6, 1), "image_grid_thw": grid,
             "num_images": [1, 0, 2], "num_items_in_batch": torch.tensor(9)}
    cut = _take_rows(batch, torch.tensor([0, 2]), 3)
    assert cut["prompt_ids"].tolist() == [[0, 1], [4, 5]]
    assert cut["advantages"].tolist() == [1, 3]
    assert cut["num_images"] == [1, 2]
    assert cut["image_grid_thw"].tolist() == [[1, 1, 2], [1, 1, 1], [1, 1, 3]]
    assert cut["pixel_values"].flatten().tolist() == [0, 1, 2, 3, 4, 5]  # all images kept
    cut = _take_rows(batch, torch.tensor([1, 2]), 3)
    assert cut["image_grid_thw"].tolist() == [[1, 1, 1], [1, 1, 3]]
    assert cut["pixel_values"].flatten().tolist() == [2, 3, 4, 5]  # the first image dropped
    assert cut["num_items_in_batch"] == 9  # scalars are left to the caller


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_kept_advantages_are_group_advantages(scale):
    from types import SimpleNamespace

    kept = torch.tensor([[1., 0, 0, 1], [0, 0, 0, 0], [0.2, 0.5, 0.9, 0.1]])  # [P=3, m=4]
    trainer = SimpleNamespace(reward_weights=torch.ones(1), scale_rewards=scale,
                              multi_objective_aggregation="sum_then_normalize")
    got = PODSGRPOTrainer._kept_advantages(trainer, kept.unsqueeze(2), torch.zeros(3, 4).bool())
    torch.testing.assert_close(got, group_advantages(kept, scale=scale))


def test_unscorable_rollouts_get_zero_advantage_and_no_weight_in_the_mean():
    from types import SimpleNamespace

    kept = torch.tensor([[1., 0, float("nan"), 1]]).unsqueeze(2)  # [1, 4, 1]
    trainer = SimpleNamespace(reward_weights=torch.ones(1), scale_rewards="none",
                              multi_objective_aggregation="sum_then_normalize")
    got = PODSGRPOTrainer._kept_advantages(trainer, kept, kept.isnan().all(dim=2))
    # mean over the 3 scored rewards is 2/3
    torch.testing.assert_close(got, torch.tensor([[1 / 3, -2 / 3, 0.0, 1 / 3]]))


def test_only_the_kept_rollouts_reach_the_loss(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(HERE))
    from trl_contract import run

    records = run(tiny_model_dir, str(tmp_path), n=8, m=4, per_device=4, grad_accum=2)
    assert len(records["full"]) == 2 and len(records["loss"]) == 4  # 2 generations x 2
    assert all(len(b["completion_ids"]) == 4 for b in records["loss"])  # kept, per micro-batch
    assert len(records["full"][0]["completion_ids"]) == 16  # 2 prompts x n=8 generated
    check_contract([records], n=8, m=4)
    logged = records["metrics"][0]  # the native trainer's select/ metrics, under its keys
    assert {"select/reward_mean", "select/var_full", "select/var_kept", "select/kept",
            "select/zero_var_frac_full", "select/zero_var_frac", "select/groups_kept",
            "select/completion_len"} <= set(logged)
    assert logged["select/kept"] == 8 and logged["select/groups_kept"] == 1.0  # 2 groups x 4


def test_with_a_lora_adapter_only_the_kept_rollouts_train_only_the_adapter(
        tiny_model_dir, tmp_path, monkeypatch):
    """PODSGRPOTrainer(..., peft_config=LoraConfig(...)), as TRL takes LoRA: the contract
    holds, and the optimizer moves the adapter's weights and nothing of the base model."""
    from peft import LoraConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(HERE))
    from trl_contract import run

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                      task_type="CAUSAL_LM")
    records = run(tiny_model_dir, str(tmp_path), n=8, m=4, per_device=4, grad_accum=2,
                  peft_config=lora)
    check_contract([records], n=8, m=4)
    assert records["changed_names"], "the adapter did not train"
    assert all("lora_" in name for name in records["changed_names"]), records["changed_names"]


def test_length_rule_gets_the_completion_lengths(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(HERE))
    from trl_contract import run

    records = run(tiny_model_dir, str(tmp_path), n=8, m=4, per_device=8, grad_accum=1,
                  rule="shortest")
    lengths = [sum(row) for b in records["full"] for row in b["completion_mask"]]
    assert len(set(lengths)) > 1  # completions differ in length: the choice is a real one
    check_contract([records], n=8, m=4, rule="shortest")


def test_callable_rule_batch_scale_and_weighted_rewards(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(HERE))
    from trl_contract import run

    def lowest(rewards, m):  # a user rule in the documented 2-argument form
        return downsample(rewards, m, "min_reward")

    weights = [1.0, 0.5]
    records = run(tiny_model_dir, str(tmp_path), n=8, m=4, per_device=8, grad_accum=1,
                  rule=lowest, scale="batch", reward_weights=weights)
    check_contract([records], n=8, m=4, rule="min_reward", scale="batch", weights=weights)


def test_a_callable_rule_gets_the_inputs_it_needs(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(HERE))
    from trl_contract import run

    def short(rewards, m, *, lengths):  # 2-argument form, plus the input it names
        return downsample(rewards, m, "shortest", lengths=lengths)

    short.needs = ("lengths",)
    records = run(tiny_model_dir, str(tmp_path), n=8, m=4, per_device=8, grad_accum=1,
                  rule=short)
    check_contract([records], n=8, m=4, rule="shortest")


ABORT = "terminate called without an active exception"


def launch_trl(command: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """Run a torchrun command, once more if a rank aborted with ``ABORT``: a gloo thread
    releasing a collective's tensor while the interpreter finalizes (the cause, and how a
    rank avoids it, in pods.runtime.distributed.leave, through which trl_contract.py
    ends); any other failure, or a second abort, fails the test."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 and ABORT in done.stderr:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=timeout)
    return done


def test_two_processes_keep_their_own_groups(tiny_model_dir, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", str(HERE / "trl_contract.py"),
               "--model", tiny_model_dir, "--out", str(tmp_path)]
    done = launch_trl(command, env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2]
    for rec in ranks:  # each rank: 2 groups of 8 generated, 2 x 4 kept, micro-batches of 4
        assert [len(b["completion_ids"]) for b in rec["full"]] == [16, 16]
        assert [len(b["completion_ids"]) for b in rec["loss"]] == [4, 4, 4, 4]
    check_contract(ranks, n=8, m=4)


@pytest.mark.vllm
@pytest.mark.parametrize("procs", [1, 2])
def test_vllm_colocate_mode_keeps_the_contract(vllm_model_dir, tmp_path, procs):
    """TRL's own vLLM colocate mode generates (vLLM's CPU build, an engine per process);
    still only the m kept of each group's n reach the loss, with advantages over them."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT / "src"),
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", **EAGER_VLLM}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", str(procs), str(HERE / "trl_contract.py"),
               "--model", vllm_model_dir, "--out", str(tmp_path), "--vllm-colocate"]
    done = launch_trl(command, env, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(procs)]
    for rec in ranks:
        assert [len(b["completion_ids"]) for b in rec["full"]] == [16, 16]  # 2 x n=8
        assert [len(b["completion_ids"]) for b in rec["loss"]] == [4, 4, 4, 4]  # kept
        assert rec["changed"]
    check_contract(ranks, n=8, m=4)
