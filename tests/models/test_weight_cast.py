"""--weight-cast step: the update's passes on a bf16 copy of the float32 weights, cast once a
step, against autocast's casts at every matmul (--weight-cast matmul). bf16 compute runs on
this CPU (AVX-512 BF16 or emulated: slow, but the same arithmetic)."""

import torch
from transformers import AutoModelForCausalLM

from pods.config import LossConfig, OptimConfig
from pods.models.checkpointing import checkpointed as recomputes
from pods.models.checkpointing import set_checkpointing
from pods.models.logprobs import completion_logprobs
from pods.models.precision import autocast
from pods.models.weight_cast import WeightCast
from pods.rollout import Rollouts
from pods.runs.metrics import read_metrics
from pods.train.run import train
from pods.train.selection import KeptBatch
from pods.train.update import UpdateSpec, policy_update
from runs import config

CPU = torch.device("cpu")


def _model(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def _rows(model, B=4, Lp=3, Lc=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.config.vocab_size, (B, Lp + Lc), generator=gen)  # [B, L]
    mask = torch.ones_like(ids)
    mask[1, Lp + 3:] = 0  # a shorter completion
    return ids[:, :Lp], mask[:, :Lp], ids[:, Lp:], mask[:, Lp:]


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def test_the_copy_gives_autocasts_logprobs_and_float32_gradients_on_the_masters(
        tiny_model_dir):
    model = _model(tiny_model_dir)
    rows = _rows(model)
    weight = torch.linspace(-1, 1, rows[2].numel()).view(rows[2].shape)  # [B, Lc]
    with autocast(CPU, "bf16"):
        mixed = completion_logprobs(model, *rows, 1.0)  # [B, Lc]
        (mixed * weight).sum().backward()
    autocast_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    cast = WeightCast(model)
    assert {p.dtype for p in cast.module.parameters()} == {torch.bfloat16}
    copied = completion_logprobs(cast.module, *rows, 1.0)  # [B, Lc]
    (copied * weight).sum().backward()
    assert copied.dtype == torch.float32
    torch.testing.assert_close(copied, mixed, rtol=0, atol=5e-2)  # bf16 rounding
    assert all(p.grad is None for p in cast.module.parameters())  # handed over, freed
    for name, p in model.named_parameters():
        assert p.grad.dtype == torch.float32, name
        assert _relative(p.grad, autocast_grads[name]) < 0.05, name


def test_micro_batches_accumulate_in_float32_on_the_masters(tiny_model_dir):
    model = _model(tiny_model_dir)
    cast = WeightCast(model)
    singles = []
    for seed in (0, 1):
        completion_logprobs(cast.module, *_rows(model, seed=seed), 1.0).sum().backward()
        singles.append({n: p.grad.clone() for n, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)
    for seed in (0, 1):
        completion_logprobs(cast.module, *_rows(model, seed=seed), 1.0).sum().backward()
    for name, p in model.named_parameters():  # float32 sums of the two bf16 gradients
        assert torch.equal(p.grad, singles[0][name] + singles[1][name]), name


def _update(model, cast, lr=1e-2, micro_batch_size=2):
    prompt_ids, prompt_mask, completion_ids, completion_mask = _rows(model)
    batch = Rollouts(prompt_ids, prompt_mask, completion_ids, completion_mask, [""] * 4)
    kept = KeptBatch(batch, torch.tensor([1.0, -1.0, 0.5, -0.5]), kept=4, pad_rows=0)
    spec = UpdateSpec(OptimConfig(micro_batch_size=micro_batch_size), LossConfig(), 1.0, 5,
                      cast=cast)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with autocast(CPU, "bf16"):  # as the trainer opens it: the copy's update turns it off
        return policy_update(model, None, optimizer, kept, spec)


def test_an_update_on_the_copy_matches_the_autocast_update_and_moves_the_masters(
        tiny_model_dir):
    old, new = _model(tiny_model_dir), _model(tiny_model_dir)
    start = {n: p.detach().clone() for n, p in new.named_parameters()}
    cast = WeightCast(new)
    a, b = _update(old, None), _update(new, cast)
    assert abs(a["loss/loss"] - b["loss/loss"]) < 1e-2 * max(abs(a["loss/loss"]), 1e-2)
    for name, p in new.named_parameters():
        assert p.dtype == torch.float32
        moved, reference = p.detach() - start[name], dict(old.named_parameters())[name] - \
            start[name]
        assert _relative(moved, reference.detach()) < 0.05, name
    cast.refresh()  # the next step's copy is the updated masters' nearest bf16
    assert all(torch.equal(c, m.detach().bfloat16()) for c, m in cast.pairs)


def _moved(after: dict, start: dict) -> float:
    return sum(int((after[k] != start[k]).sum()) for k in after) / \
        sum(t.numel() for t in after.values())


def test_the_masters_keep_updates_of_lr_1e6_either_way(tiny_model_dir, tmp_path):
    """lr 1e-6 is below bf16's resolution for nearly every weight: the float32 masters
    must take it whether the update casts once a step or at every matmul."""
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    for cast in ("step", "matmul"):
        lines = []
        run = train(config(tiny_model_dir, tmp_path, max_steps=1, lr=1e-6, run_name=cast,
                           mixed_precision="bf16", device="cpu", weight_cast=cast),
                    log=lines.append)
        saved = AutoModelForCausalLM.from_pretrained(
            run / "checkpoints" / "step_000001" / "model", dtype="auto").state_dict()
        assert {t.dtype for t in saved.values()} == {torch.float32}
        assert _moved(saved, start) > 0.99, cast
        how = "a copy cast once a step" if cast == "step" else "autocast"
        assert any(line.startswith("precision:") and how in line for line in lines), lines


def test_the_reference_computes_as_the_policy_so_the_kl_starts_at_zero(tiny_model_dir,
                                                                       tmp_path):
    """beta > 0 with bf16 compute: the frozen reference is bf16, as the policy's copy, so
    the first step's KL (same weights) is exactly 0."""
    run = train(config(tiny_model_dir, tmp_path, max_steps=1, beta=0.04, run_name="kl",
                       mixed_precision="bf16", device="cpu"))
    step = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "step"][0]
    assert step["loss/kl"] == 0.0 and step["optim/skipped"] == 0


def test_the_working_copy_is_the_hf_engines_sampling_copy(tiny_model_dir, tmp_path):
    """One bf16 copy of the weights, not two: the engine samples from the module the update
    computes with (refreshed by the engine's sync after each step)."""
    from pods.train.trainer import Trainer

    trainer = Trainer(config(tiny_model_dir, tmp_path, mixed_precision="bf16", device="cpu"),
                      log=lambda line: None)
    cast = trainer.update_spec.cast
    assert cast is not None and cast.module is trainer.engine.copy.module
    assert all(p.requires_grad for p in cast.module.parameters())
    trainer.step()  # an update, then the engine's sync: the copy is the masters' bf16
    assert all(torch.equal(c, m.detach().bfloat16()) for c, m in cast.pairs)


def test_the_engine_samples_what_the_update_computes_so_the_gap_is_float_noise(
        tiny_model_dir, tmp_path):
    """Under autocast the trainer's log-probs differ from the bf16 sampling copy's (float32
    activations between the matmuls): a real gap. On the shared bf16 copy they are the
    same computation, up to the batch's shape."""
    gaps = {}
    for cast in ("step", "matmul"):
        run = train(config(tiny_model_dir, tmp_path, max_steps=1, run_name=cast,
                           mixed_precision="bf16", device="cpu", weight_cast=cast))
        gaps[cast] = read_metrics(run / "metrics.jsonl", "step")[0]["rollout/logprob_gap"]
    assert gaps["step"] < 1e-5 < 1e-4 < gaps["matmul"], gaps


def test_a_checkpointed_models_copy_recomputes_and_hands_over_the_same_gradients(
        tiny_model_dir):
    plain, checkpointed = _model(tiny_model_dir), _model(tiny_model_dir)
    set_checkpointing(checkpointed, True)
    for model in (plain, checkpointed):
        model.train()
        cast = WeightCast(model)
        assert recomputes(cast.module) == (model is checkpointed)
        completion_logprobs(cast.module, *_rows(model), 1.0).sum().backward()
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-2, atol=1e-3, msg=name)


def test_a_refresh_casts_every_master_in_one_multi_tensor_copy(tiny_model_dir):
    """Each weight is the bf16 rounding of its master after a refresh, and the refresh is
    one ``_foreach_copy_`` (one kernel launch for the lot on a GPU), not a copy a weight."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.counts[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    model = _model(tiny_model_dir)
    cast = WeightCast(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    with Ops() as ops:
        cast.refresh()
    assert ops.counts["_foreach_copy_"] == 1 and ops.counts["copy_"] == 0, ops.counts
    ours = dict(cast.module.named_parameters())
    for name, master in model.named_parameters():
        assert torch.equal(ours[name], master.to(torch.bfloat16)), name
