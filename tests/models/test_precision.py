"""What a run stores and computes in, per device: the dtype invariants (after AReaL's).

A full fine-tune keeps float32 weights (AdamW's master copy, float32 moments) on every
device; a GPU with bf16 computes the update in bfloat16 under autocast and samples from a
bfloat16 copy; a CPU computes in float32 unless asked (auto: bf16 where native). CUDA is
patched in: these tests say what pods would do on such a GPU, on any machine."""

import pytest
import torch

from pods.config import ModelConfig, from_dict
from pods.models import policy as policy_module
from pods.models.policy import add_lora, load_policy, load_saved_policy
from pods.models.precision import lost_share, plan, resolve_mixed_precision, weights_dtype

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def a_model(**options) -> ModelConfig:
    """A model other than the embedded one (which computes in float32 everywhere)."""
    return ModelConfig(name="HuggingFaceTB/SmolLM2-135M-Instruct", **options)


@pytest.fixture
def bf16_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)


def test_the_default_on_a_bf16_gpu_is_float32_weights_and_bf16_compute(bf16_gpu):
    p = plan(a_model(), CUDA)
    assert p.weights == torch.float32  # never bfloat16 by default: updates would round away
    assert (p.mixed, p.update, p.sampling, p.shards) == ("bf16", "bf16", torch.bfloat16, None)
    assert (p.cast, p.reference) == ("step", torch.bfloat16)  # a bf16 copy, cast once a step
    assert p.describe() == "weights float32 (AdamW's master copy), update computes in " \
                           "bfloat16 (a copy cast once a step)"
    assert p.short == "float32 weights, bfloat16 compute"
    old = plan(a_model(weight_cast="matmul"), CUDA)
    assert (old.cast, old.reference) == ("matmul", torch.float32)  # autocast casts both alike
    assert old.describe().endswith("bfloat16 (autocast)")


def test_the_weight_cast_applies_only_to_bf16_compute_over_float32_weights(bf16_gpu):
    assert plan(a_model(), CPU).cast == "matmul"  # float32 compute: nothing to cast
    assert plan(a_model(mixed_precision="bf16"), CPU).cast == "step"
    assert plan(a_model(), CUDA, sharded=True).cast == "matmul"  # FSDP2's policy casts
    assert plan(a_model(lora_rank=4), CUDA).cast == "matmul"  # a bf16 base, float32 adapters
    assert plan(a_model(dtype="bfloat16"), CUDA).cast == "matmul"  # bf16 weights already


def test_a_gpu_that_only_emulates_bf16_computes_in_float32(monkeypatch):
    """torch.cuda.is_bf16_supported() counts emulation by default (a T4, a V100)."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: including_emulation)
    p = plan(a_model(), CUDA)
    assert (p.weights, p.mixed, p.sampling) == (torch.float32, "no", None)
    assert weights_dtype(a_model(lora_rank=4), CUDA) == torch.float32


def test_the_default_on_a_cpu_is_float32_through_and_through():
    p = plan(a_model(), CPU)
    assert (p.weights, p.mixed, p.sampling) == (torch.float32, "no", None)
    assert p.short == "float32 weights, float32 compute"


def test_a_gpu_without_bf16_computes_in_float32(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    p = plan(a_model(), CUDA)
    assert (p.weights, p.mixed) == (torch.float32, "no")


def test_the_embedded_model_computes_in_float32_on_every_device_unless_asked(bf16_gpu):
    for device in (CPU, CUDA):
        p = plan(ModelConfig(), device)  # the embedded default: --model tiny
        assert (p.weights, p.mixed, p.sampling) == (torch.float32, "no", None)
    assert plan(ModelConfig(mixed_precision="bf16"), CUDA).mixed == "bf16"  # asked for
    assert plan(a_model(), CUDA).mixed == "bf16"  # any other model: the GPU default


def test_fsdp2_keeps_float32_shards_and_gathers_them_in_bf16(bf16_gpu):
    p = plan(a_model(), CUDA, sharded=True)
    assert (p.update, p.sampling, p.shards) == ("no", None, torch.bfloat16)  # policy, no autocast
    assert p.short == "float32 weights, bfloat16 compute"
    assert plan(a_model(dtype="bfloat16"), CPU, sharded=True).shards == torch.bfloat16
    assert plan(a_model(), CPU, sharded=True).shards is None  # CPU: float32 compute


def test_fsdp2_keeps_float32_shards_of_float16_weights_and_gathers_them_in_float16():
    """The shards are float32 masters for every dtype, as the lost-update warning (not
    given under FSDP2) assumes; float16 weights compute in float16."""
    p = plan(a_model(dtype="float16"), CPU, sharded=True)
    assert p.shards == torch.float16
    assert p.describe() == "weights float32 (AdamW's master copy), update computes in " \
                           "float16 (FSDP2 policy)"


def test_bf16_weights_only_by_choice(bf16_gpu):
    for device in (CPU, CUDA):
        chosen = a_model(dtype="bfloat16")
        assert weights_dtype(chosen, device) == torch.bfloat16
        # the default "gpu" computes 16-bit weights in their own dtype
        assert resolve_mixed_precision(chosen.mixed_precision, device, chosen.dtype) == "no"
    assert plan(a_model(dtype="bfloat16"), CUDA).describe() == (
        "weights bfloat16 (exact updates: float32 master = weight + its low 16 bits), update "
        "computes in bfloat16")
    assert "plain AdamW" in plan(a_model(dtype="bfloat16"), CUDA).describe("plain")


def test_gpu_is_bf16_only_on_a_gpu_and_auto_where_native(bf16_gpu, monkeypatch):
    monkeypatch.setattr("pods.runtime.machine.cpu_bf16", lambda: "amx")
    assert resolve_mixed_precision("gpu", CPU) == "no"  # CPU results do not move
    assert resolve_mixed_precision("auto", CPU) == "bf16"  # asked for: native here
    assert resolve_mixed_precision("gpu", CUDA) == resolve_mixed_precision("auto", CUDA) == "bf16"


def test_a_lora_run_keeps_a_bf16_base_on_a_gpu_and_float32_adapters(bf16_gpu, tiny_model_dir):
    lora = a_model(lora_rank=4)
    assert weights_dtype(lora, CUDA) == torch.bfloat16  # frozen: no update to lose
    assert weights_dtype(lora, CPU) == torch.float32
    # what PEFT does with a bf16 base (loaded here on the CPU, as it would be on the GPU)
    base, _ = load_policy(tiny_model_dir, CPU, ModelConfig(dtype="bfloat16"))
    model = add_lora(base, lora)
    trained = {p.dtype for p in model.parameters() if p.requires_grad}
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert trained == {torch.float32} and frozen == {torch.bfloat16}
    assert "LoRA adapters float32" in plan(lora, CUDA).describe()


def test_mixed_precision_settings_that_cannot_work_are_refused_and_the_rest_pass():
    with pytest.raises(ValueError, match="keeps float32 master weights.*--dtype float32"):
        from_dict({"mixed_precision": "bf16", "dtype": "bfloat16"})
    from_dict({"mixed_precision": "bf16", "parallelism": "fsdp2"})  # FSDP2's policy does it
    from_dict({"dtype": "bfloat16"})  # the default "gpu" computes bf16 weights as stored
    with pytest.raises(ValueError, match="bf16_updates"):
        from_dict({"bf16_updates": "kahan"})


def test_lost_share_counts_the_weights_an_update_would_not_move():
    w = torch.tensor([1.0, 1.0, 0.001, 1e-7])
    # bf16 steps: 2**-7 near 1.0 (1e-3 lost), ~4e-6 near 1e-3 (1e-3 kept), tiny near 1e-7
    assert lost_share([w.bfloat16()], 1e-3) == pytest.approx(0.5)
    assert lost_share([w], 1e-3) == 0.0
    assert lost_share([w], 1e-6) == 0.0  # float32 near 1.0 steps by 1.2e-7


def test_the_benchmark_prints_its_table(monkeypatch, capsys):
    """benchmarks/update/update_precision.py --quick (a tiny random Qwen2): the results
    page's table, and the rehearsal that keeps the script running."""
    from bench_scripts import BENCHMARKS, run_script

    out = run_script(BENCHMARKS / "update" / "update_precision.py", ["--quick"], monkeypatch,
                     capsys)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in
            out.splitlines() if line.startswith("| ") and "weights" not in line}
    assert rows["float32 (the default)"][:2] == ["100.0%", "100.0%"]
    assert rows["bf16, exact updates"][:2] == ["100.0%", "100.0%"]
    assert rows["float32 (the default)"][2] == "16.0 |"  # 4 + 4 + 8
    assert rows["bf16, exact updates"][2] == "14.0 |"  # 2 + 2 + 2 (low bits) + 8
    plain = [float(cell.rstrip("%")) for cell in rows["bf16, plain AdamW"][:2]]
    assert plain[0] < 50 < plain[1]  # lr 1e-6 mostly lost; 1e-2 mostly kept


def test_a_lora_checkpoint_loads_its_base_in_the_dtype_training_used(bf16_gpu, tmp_path,
                                                                     monkeypatch):
    """Resume (Trainer._load_weights) and pods eval load a LoRA run's checkpoint with
    load_saved_policy: its base must be bf16 on a GPU as in training, not float32."""
    (tmp_path / "adapter_config.json").write_text("{}")
    asked = []

    def spy(name, device, options, log=print):
        asked.append(weights_dtype(options, device))
        raise RuntimeError("stop before loading")

    monkeypatch.setattr(policy_module, "load_policy", spy)
    lora = a_model(lora_rank=4)
    for device, dtype in ((CUDA, torch.bfloat16), (CPU, torch.float32)):
        with pytest.raises(RuntimeError, match="stop before loading"):
            load_saved_policy(tmp_path, lora.name, device, lora)
        assert asked.pop() == dtype
