"""FSDP2 (--parallelism fsdp2) on 2 CPU processes (torchrun, gloo) against DDP and 1 process.

Tolerance: the runs draw the same rollouts and keep the same ones (those metrics are
compared exactly); the weights agree to 1e-4 (``assert_same_run``), because FSDP2 reduces
the gradients with a reduce-scatter, DDP with an all-reduce and one process not at all: the
same sums in other orders (float32 rounding, ~1e-7), which Adam can turn into up to ~lr
where a gradient is ~0."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint import FileSystemReader

from launch import ENV, assert_same_run, pods, saved_tensors, train_args
from pods.cli.evaluate import EvalRequest, evaluate_path
from pods.cli.export import export_checkpoint
from pods.config import from_dict
from pods.runs.metrics import read_metrics
from pods.runtime import fsdp
from pods.train.run import resume

# pytest-xdist: on one worker, in turn (each test starts 2-3 processes of its own)
pytestmark = pytest.mark.xdist_group("launch")

FIELDS = dict(micro_batch_size=2, loss_norm="token", parallelism="fsdp2")
GENERATE = Path(__file__).parent / "fsdp_generate.py"


@pytest.fixture(scope="module")
def one(tiny_model_dir, tmp_path_factory):
    """4 steps on one process (the fsdp2 setting has nothing to shard there)."""
    out = tmp_path_factory.mktemp("one")
    pods(train_args(tiny_model_dir, out, "one", max_steps=4, **FIELDS), procs=1)
    return out / "one"


def test_fsdp2_matches_ddp_and_one_process(tiny_model_dir, tmp_path, one):
    pods(train_args(tiny_model_dir, tmp_path, "ddp", max_steps=4,
                    **{**FIELDS, "parallelism": "ddp"}), procs=2)
    pods(train_args(tiny_model_dir, tmp_path, "fsdp", max_steps=4, **FIELDS), procs=2)
    assert_same_run(one, tmp_path / "fsdp", step=4)
    assert_same_run(tmp_path / "ddp", tmp_path / "fsdp", step=4)
    # the tied lm_head is saved once (the gathered full state dict repeats it)
    tensors = saved_tensors(tmp_path / "fsdp" / "checkpoints" / "step_000004" / "model")
    assert "lm_head.weight" not in tensors and "model.embed_tokens.weight" in tensors
    assert len(tensors) == 14  # embeddings, 1 layer of 12, the final norm
    shards = tmp_path / "fsdp" / "checkpoints" / "step_000004" / "shards"
    stored = FileSystemReader(str(shards)).read_metadata().state_dict_metadata
    # weights and Adam moments are stored as one half per rank: they were sharded
    for key in ("model.model.layers.0.mlp.up_proj.weight",
                "optimizer.state.model.layers.0.mlp.up_proj.weight.exp_avg_sq"):
        assert [tuple(c.sizes) for c in stored[key].chunks] == [(64, 32), (64, 32)]
    assert json.loads((shards / fsdp.LAYOUT).read_text()) == {"parallelism": "fsdp2",
                                                              "world": 2}
    assert not (tmp_path / "ddp" / "checkpoints" / "step_000004" / "shards").exists()


def test_auto_checkpointing_switched_on_after_sharding_gives_the_same_run(tiny_model_dir,
                                                                         tmp_path, one):
    """Where memory (made 1 MiB) holds no pass, auto turns checkpointing on at the first
    update, on the module FSDP2 has sharded already, on both ranks: the same run."""
    pods(train_args(tiny_model_dir, tmp_path, "fsdp", max_steps=4,
                    gradient_checkpointing="auto", **FIELDS), procs=2,
         env={"TEST_HOST_BYTES": str(2**20)})
    records = read_metrics(tmp_path / "fsdp" / "metrics.jsonl", "step")
    assert [r["optim/gradient_checkpointing"] for r in records if not r["optim/skipped"]] \
        == [1.0] * 4
    assert_same_run(one, tmp_path / "fsdp", step=4)


def test_fsdp2_resume_continues_the_run(tiny_model_dir, tmp_path, one):
    """2 steps, resumed to 4 on 2 processes = 4 steps; on 1 process it is refused."""
    pods(train_args(tiny_model_dir, tmp_path, "fsdp", max_steps=2, **FIELDS), procs=2)
    said = []
    with pytest.raises(ValueError, match=r"step_000002 cannot be read .*written under FSDP2"):
        resume(tmp_path / "fsdp", {"max_steps": 4}, log=said.append)  # this one process
    assert any("written under FSDP2; resume it with as many processes" in s for s in said)
    pods(["train", "--resume", str(tmp_path / "fsdp"), "--max-steps", "4"], procs=2)
    assert_same_run(one, tmp_path / "fsdp", step=4)


def test_fsdp2_lora_matches_one_process_and_exports(tiny_model_dir, tmp_path):
    lora = dict(max_steps=2, lora_rank=4, lora_alpha=8.0, lr=5e-2,
                lora_target_modules="q_proj,v_proj,up_proj", **FIELDS)
    pods(train_args(tiny_model_dir, tmp_path, "one", **lora), procs=1)
    pods(train_args(tiny_model_dir, tmp_path, "fsdp", **lora), procs=2)
    saved = [tmp_path / run / "checkpoints" / "step_000002" / "model" for run in
             ("one", "fsdp")]
    assert not (saved[1] / "model.safetensors").exists()  # the adapter alone
    a, b = (load_file(s / "adapter_model.safetensors") for s in saved)
    assert a.keys() == b.keys() and any(v.abs().sum() > 0 for k, v in a.items()
                                        if "lora_B" in k)  # B starts at 0: it trained
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-4, atol=1e-4)
    export_checkpoint(tmp_path / "fsdp", tmp_path / "exported")  # a standalone model
    result = evaluate_path(EvalRequest(str(tmp_path / "fsdp"), repeats=1, temperature=0.0,
                                       size=4, device="cpu"))
    assert result["even_start"]["eval/problems"] == 4


def test_fsdp2_shards_the_reference_and_computes_it_as_the_policy(tiny_model_dir, tmp_path):
    """beta > 0 with bf16 compute: the reference is sharded and gathered in bf16 like the
    policy, so at the first step (the same weights) the KL is exactly 0 (a float32
    reference beside a bf16 policy made it about 1e-7)."""
    pods(train_args(tiny_model_dir, tmp_path, "kl", max_steps=1, beta=0.04,
                    mixed_precision="bf16", **FIELDS), procs=2)
    step = read_metrics(tmp_path / "kl" / "metrics.jsonl", "step")[0]
    assert step["loss/kl"] == 0.0 and step["optim/skipped"] == 0


@pytest.mark.parametrize("mode", ["synced", "unsynced"])
def test_generation_with_unequal_lengths_does_not_hang(tiny_model_dir, tmp_path, mode):
    """Rank 0's completions end after 1 token, rank 1's run to 6 (see fsdp_generate.py).
    Synced, both finish with the unsharded model's rollouts; unsynced (the control), the
    ranks' collectives no longer match and the run fails or hangs (cut off by timeout)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", str(GENERATE), tiny_model_dir, mode, str(tmp_path)]
    try:
        done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=60)
        ok = done.returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    if mode == "unsynced":
        assert not ok
        return
    assert ok, done.stderr[-3000:]
    for rank in range(2):
        found = json.loads((tmp_path / f"rank_{rank}.json").read_text())
        assert found["sharded"] and found["same_as_unsharded"]
        assert found["shard_dtypes"] == ["torch.float32"]  # bf16 compute, float32 master
        assert found["lengths"] == [1.0] * 4 + [6.0] * 4


def test_vllm_is_refused_under_fsdp2():
    with pytest.raises(ValueError, match="vllm engine does not run under fsdp2"):
        from_dict({"engine": "vllm", "parallelism": "fsdp2"})
    with pytest.raises(ValueError, match="unknown parallelism 'zero3'; use one of ddp, fsdp2"):
        from_dict({"parallelism": "zero3"})


def test_shards_of_another_world_size_are_refused(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoints" / "step_000002"
    old = checkpoint / "engine"  # the folder's name in checkpoints of earlier versions
    old.mkdir(parents=True)
    assert fsdp.shards_dir(checkpoint) == old
    (old / fsdp.LAYOUT).write_text(json.dumps({"parallelism": "fsdp2", "world": 4}))
    with pytest.raises(ValueError, match="shards of 4 processes, but this run has 2; resume "
                                         "with `torchrun --nproc_per_node 4"):
        fsdp.load(None, None, fsdp.shards_dir(checkpoint), world=2)
    (checkpoint / "shards").mkdir()
    assert fsdp.shards_dir(checkpoint) == checkpoint / "shards"
    with pytest.raises(ValueError, match="not written under FSDP2"):
        fsdp.load(None, None, tmp_path, world=2)


@pytest.mark.parametrize("plugin, message", [
    (dict(fsdp_version=2), None),
    (dict(fsdp_version=1), "set fsdp_version: 2"),
    (dict(fsdp_version=2, cpu_offload=True), "fsdp_offload_params: false"),
    (dict(fsdp_version=2, activation_checkpointing=True), "use pods's --gradient-checkpoint"),
])
def test_accelerate_fsdp_settings_pods_does_not_honour_are_refused(plugin, message):
    from accelerate import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(**plugin)
    if message is None:
        fsdp.check_accelerate_plugin(plugin)
        return
    with pytest.raises(ValueError, match=message):
        fsdp.check_accelerate_plugin(plugin)
