"""--update-kernels: which kernels an update runs (liger-kernel on a CUDA GPU where it is
installed, else torch's), the errors of a "liger" that cannot run, and on a GPU with Triton
and liger-kernel, the liger path against the chunked head (skipped elsewhere)."""

import importlib.util

import pytest
import torch
from transformers import AutoModelForCausalLM

from pods.models import kernels
from pods.models.kernels import INSTALL, update_kernels, use_kernels
from pods.models.logprobs import completion_logprobs
from pods.train.trainer import Trainer
from runs import config

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture
def liger(monkeypatch):
    monkeypatch.setattr(kernels, "liger_installed", lambda: True)


def test_auto_is_liger_on_a_cuda_gpu_with_it_installed_and_torch_elsewhere(liger):
    assert update_kernels("auto", CUDA) == "liger"
    assert update_kernels("auto", CPU) == "torch"  # Triton's kernels need a GPU
    assert update_kernels("auto", CUDA, sharded=True) == "torch"  # FSDP2 shards the head
    assert update_kernels("torch", CUDA) == "torch" and update_kernels("liger", CUDA) == "liger"


def test_auto_without_liger_installed_is_torch(monkeypatch):
    monkeypatch.setattr(kernels, "liger_installed", lambda: False)
    assert update_kernels("auto", CUDA) == "torch"


@pytest.mark.parametrize("installed, device, sharded, message", [
    (True, CPU, False, "need a CUDA GPU and this run is on cpu"),
    (False, CUDA, False, "liger-kernel is not installed; " + INSTALL),
    (True, CUDA, True, "FSDP2 shards it"),
])
def test_liger_where_it_cannot_run_is_refused_with_what_to_do(monkeypatch, installed, device,
                                                              sharded, message):
    monkeypatch.setattr(kernels, "liger_installed", lambda: installed)
    with pytest.raises(ValueError, match="--update-kernels liger cannot run here") as error:
        update_kernels("liger", device, sharded)
    assert message in str(error.value) and "--update-kernels auto" in str(error.value)


def test_a_run_asking_liger_on_a_cpu_fails_before_the_model_loads(tiny_model_dir, tmp_path,
                                                                  monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("pods.train.trainer.load_policy", never)
    with pytest.raises(ValueError, match="need a CUDA GPU"):
        Trainer(config(tiny_model_dir, tmp_path, update_kernels="liger", device="cpu"))


def test_torch_kernels_leave_the_model_as_it_is(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    before = {name: type(m) for name, m in model.named_modules()}
    assert use_kernels(model, "torch") == "torch"
    assert {name: type(m) for name, m in model.named_modules()} == before


def test_a_fused_head_scatters_its_token_logprobs_into_the_rows(tiny_model_dir, monkeypatch):
    """head_logprobs asks a FusedHead for its log-probs, here with liger's kernel replaced
    by the same arithmetic in torch (Triton does not run here): the [B, Lc] result,
    padding 0, equals the chunked head's, and its gradient reaches the weights."""
    calls = []

    def same_math(states, targets, head):  # what liger's kernel computes
        calls.append(len(targets))
        logits = torch.nn.functional.linear(states, head.weight).float()
        return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)

    monkeypatch.setattr(kernels, "liger_logprobs", same_math)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.randint(3, model.config.vocab_size, (3, 7))  # [B, L]
    mask = torch.ones_like(ids)
    mask[2, 5:] = 0
    for temperature in (1.0, 0.7):
        args = (model, ids[:, :3], mask[:, :3], ids[:, 3:], mask[:, 3:], temperature)
        model.get_output_embeddings().__class__ = torch.nn.Linear
        chunked = completion_logprobs(*args)
        model.get_output_embeddings().__class__ = kernels.FusedHead  # as use_kernels does
        fused = completion_logprobs(*args)
        torch.testing.assert_close(fused, chunked, rtol=0, atol=1e-6)
        assert fused[2, 2:].eq(0).all()
        fused.sum().backward()
        assert model.get_output_embeddings().weight.grad.abs().sum() > 0
    # the fused kernel at temperature 1 only: at 0.7 the chunked head divides the float32
    # logits as the sampler does (liger would divide the bf16 hidden states)
    assert calls == [10]
    with pytest.raises(ValueError, match="temperature 1 only"):
        model.get_output_embeddings().logprobs(torch.zeros(1, 64), torch.zeros(1).long(), 0.7)


LIGER = importlib.util.find_spec("triton") is not None and \
    importlib.util.find_spec("liger_kernel") is not None


@pytest.mark.gpu
@pytest.mark.skipif(not LIGER, reason="needs Triton and liger-kernel (pip install -e '.[gpu]')")
def test_liger_matches_the_chunked_head_within_bf16_tolerance(tiny_model_dir):
    """Log-probs, a loss and its gradients by liger's kernels (RMSNorm, SwiGLU and the
    fused linear log-probs) against transformers' modules and the chunked head, on a
    bf16 model on the GPU."""
    def run(kind: str):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
        model = model.to(CUDA)
        use_kernels(model, kind)
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(3, model.config.vocab_size, (4, 40), generator=gen).to(CUDA)
        mask = torch.ones_like(ids)
        mask[1, 30:] = 0
        logp = completion_logprobs(model, ids[:, :8], mask[:, :8], ids[:, 8:], mask[:, 8:],
                                   1.0)  # [B, Lc]: the fused head's temperature
        assert isinstance(model.get_output_embeddings(), kernels.FusedHead) == \
            (kind == "liger")
        weights = torch.linspace(0.1, 3.0, 32, device=CUDA)  # tokens weighted unequally: a
        # per-token scaling bug of the fused kernel would pass an equal-weight loss
        loss = -(logp * mask[:, 8:] * weights).sum() / mask[:, 8:].sum()
        loss.backward()
        return logp.detach(), loss.detach(), {n: p.grad.float() for n, p in
                                              model.named_parameters()}

    logp, loss, grads = run("liger")  # first: the torch model built after it must have
    logp_t, loss_t, grads_t = run("torch")  # transformers' own modules
    torch.testing.assert_close(logp, logp_t, rtol=0, atol=5e-2)
    torch.testing.assert_close(loss, loss_t, rtol=2e-2, atol=1e-2)
    for name, g in grads.items():
        assert float((g - grads_t[name]).norm() / grads_t[name].norm()) < 0.05, name


@pytest.fixture
def patch_table(monkeypatch):
    """liger-kernel's table of architectures (MODEL_TYPE_TO_APPLY_LIGER_FN) as given, in
    place of the package (not installed here; its kernels need a GPU)."""
    import sys
    import types

    def install(table):
        for name in ("liger_kernel", "liger_kernel.transformers"):
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        module = types.ModuleType("liger_kernel.transformers.monkey_patch")
        module.MODEL_TYPE_TO_APPLY_LIGER_FN = table
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return install


def test_liger_patches_the_instance_without_its_fused_loss(tiny_model_dir, patch_table):
    calls = []
    patch_table({"qwen2": lambda **kwargs: calls.append(kwargs)})
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)  # a Qwen2
    assert use_kernels(model, "liger") == "liger"
    assert calls == [dict(model=model, rope=False, rms_norm=True, swiglu=True,
                          cross_entropy=False, fused_linear_cross_entropy=False)]
    head = model.get_output_embeddings()
    assert isinstance(head, kernels.FusedHead)  # its log-probs by liger's fused kernel
    assert head.weight is model.get_input_embeddings().weight  # still tied


def test_an_architecture_liger_does_not_patch_is_torch_under_auto_and_refused_if_asked(
        tiny_model_dir, patch_table):
    patch_table({"llama": lambda **kwargs: None})
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)  # a Qwen2
    assert use_kernels(model, "liger", strict=False) == "torch"
    with pytest.raises(ValueError, match="no kernels for the 'qwen2' architecture"):
        use_kernels(model, "liger", strict=True)


def apply_gemma(model, rope=True, cross_entropy=False, fused_linear_cross_entropy=True,
                rms_norm=True, geglu=True):
    """The signature of liger's apply_liger_kernel_to_gemma: geglu, not swiglu."""
    apply_gemma.calls.append(dict(rope=rope, cross_entropy=cross_entropy, geglu=geglu,
                                  fused_linear_cross_entropy=fused_linear_cross_entropy,
                                  rms_norm=rms_norm))


def apply_pixtral(model, rope=True, rms_norm=True, swiglu=True):
    """Pixtral's: no cross-entropy options at all."""
    apply_pixtral.calls.append(dict(rope=rope, rms_norm=rms_norm, swiglu=swiglu))


def test_each_architecture_gets_the_options_its_function_takes(tiny_model_dir, patch_table):
    """Gemma's patch takes geglu (asking swiglu=True raised TypeError at the start of
    training), Pixtral's no cross_entropy: each gets what its signature names."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)  # a Qwen2, standing in
    for apply, want in ((apply_gemma, dict(rope=False, rms_norm=True, geglu=True,
                                           cross_entropy=False,
                                           fused_linear_cross_entropy=False)),
                        (apply_pixtral, dict(rope=False, rms_norm=True, swiglu=True))):
        apply.calls = []
        patch_table({"qwen2": apply})
        assert use_kernels(model, "liger") == "liger"
        assert apply.calls == [want]


def test_a_patch_that_fails_falls_back_to_torch_with_the_reason(tiny_model_dir, patch_table):
    def broken(model, rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
               fused_linear_cross_entropy=False):
        raise TypeError("unexpected keyword argument")

    patch_table({"qwen2": broken})
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.warns(RuntimeWarning, match="liger-kernel's broken for 'qwen2' failed .*"
                      "torch's kernels"):
        assert use_kernels(model, "liger", strict=False) == "torch"
    assert type(model.get_output_embeddings()) is torch.nn.Linear  # no fused head
    with pytest.raises(ValueError, match="failed .*--update-kernels auto or torch"):
        use_kernels(model, "liger", strict=True)


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None,
                    reason="needs liger-kernel (pip install -e '.[gpu]'; it installs on a CPU)")
def test_liger_goes_on_the_model_asked_for_and_on_no_later_model():
    """liger's patch rebinds names in transformers' modeling module besides patching the
    model it is given: after use_kernels(a, "liger"), a has liger's RMSNorm and SwiGLU
    forwards, a model built from the same config afterwards has none, and the modeling
    module's names are transformers' own again (no Triton module in a later CPU model)."""
    import transformers.models.qwen2.modeling_qwen2 as modeling
    from transformers import Qwen2Config, Qwen2ForCausalLM

    names = {k: v for k, v in vars(modeling).items()}
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    a = Qwen2ForCausalLM(config)
    assert use_kernels(a, "liger", strict=True) == "liger"

    def liger_modules(model):
        return sorted({type(m).__name__ for m in model.modules() if "Liger" in type(m).__name__}
                      | {m.forward.__qualname__.split(".")[0] for m in model.modules()
                         if "Liger" in getattr(m.forward, "__qualname__", "")})

    assert liger_modules(a) == ["LigerRMSNorm", "LigerSwiGLUMLP"]
    assert isinstance(a.get_output_embeddings(), kernels.FusedHead)
    changed = [k for k, v in vars(modeling).items() if names.get(k) is not v]
    assert changed == []  # Qwen2RMSNorm, Qwen2MLP, apply_rotary_pos_emb are transformers'
    b = Qwen2ForCausalLM(config)
    assert liger_modules(b) == [] and type(b.get_output_embeddings()) is torch.nn.Linear
    ids = torch.randint(0, 64, (2, 5))
    assert b(input_ids=ids).logits.shape == (2, 5, 64)  # torch's kernels run on the CPU


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None,
                    reason="needs liger-kernel (pip install -e '.[gpu]'; it installs on a CPU)")
def test_with_liger_the_working_copy_is_not_the_sampling_copy(tiny_model_dir):
    """With the bf16 working copy, liger's modules go on the update's own copy; the hf
    engine's sampling copy (whose forward is compiled on CUDA) keeps torch's modules."""
    from pods.config.step import LossConfig, OptimConfig
    from pods.models.precision import SamplingCopy
    from pods.train.compute import Compute, with_compute
    from pods.train.update import UpdateSpec

    def spec_of(model, kernels_name):
        return with_compute(UpdateSpec(OptimConfig(), LossConfig(), 1.0, 4), model, None,
                            Compute(cast=True, kernels=kernels_name), log=lambda line: None)

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    sampling = SamplingCopy(model, torch.bfloat16).module
    spec = spec_of(model, "liger")
    assert spec.cast.module is not sampling
    assert isinstance(spec.cast.module.get_output_embeddings(), kernels.FusedHead)
    assert not any("Liger" in getattr(m.forward, "__qualname__", "") for m in sampling.modules())
    assert type(sampling.get_output_embeddings()) is torch.nn.Linear
    torch_only = spec_of(AutoModelForCausalLM.from_pretrained(tiny_model_dir), "torch")
    assert torch_only.cast.module is SamplingCopy(torch_only.cast.model, torch.bfloat16).module
