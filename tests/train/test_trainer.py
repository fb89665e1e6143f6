import pytest
import torch

from pods.cli import draw_curve
from pods.core import selection as selection_module  # where the trainer selects
from pods.core.advantages import group_advantages
from pods.runs.metrics import read_metrics
from pods.tasks import Task
from pods.tasks.scoring import Scores
from pods.train import trainer as trainer_module
from pods.train.run import resume, train, train_or_resume
from pods.train.trainer import Trainer
from runs import config, train_interrupted, weights


def test_two_step_run_changes_the_model_and_writes_everything(tiny_model_dir, tmp_path):
    said = []
    run = train(config(tiny_model_dir, tmp_path), log=lambda *a, **k: said.append(str(a[0])),
                curve=draw_curve)  # what `pods train` passes
    records = read_metrics(run / "metrics.jsonl")
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in steps] == [1, 2]
    assert evals[0]["step"] == 0 and evals[0]["time"] == 0.0  # the starting policy
    assert evals[-1]["step"] == 2 and records[-1]["kind"] == "done"
    for key in ("rollout/reward_mean", "select/var_kept", "select/var_full",
                "select/zero_var_frac", "loss/loss", "loss/clip_frac", "time/generate",
                "time/reward", "time/select", "time/update", "mem/peak_rss_mb",
                "rollout/completion_len"):
        assert key in steps[0], key
    assert steps[1]["time"] > steps[0]["time"] > 0
    start, end = weights(tiny_model_dir), weights(run / "checkpoints" / "step_000002" / "model")
    assert any(not torch.equal(start[k], end[k]) for k in start)
    assert (run / "config.yaml").is_file() and (run / "curve.png").stat().st_size > 1000
    assert (run / "checkpoints" / "latest").read_text() == "step_000002"
    # the run ends with its summary: accuracy at start, best and end, steps, phases, files
    first, last = evals[0]["eval/accuracy"], evals[-1]["eval/accuracy"]
    summary = said[-1].splitlines()
    assert summary[0] == f"run folder: {run}"
    assert summary[1].startswith(f"test accuracy: {100 * first:.1f}% at the start, best ")
    assert summary[1].endswith(f"{100 * last:.1f}% at the end")
    assert summary[2].startswith(f"2 steps in {steps[-1]['time']:.1f} training seconds")
    assert "generate" in summary[2] and "update" in summary[2] and "sync" in summary[2]
    share = sum(s["update/positions"] for s in steps) / \
        sum(s["update/padded_positions"] for s in steps)
    assert summary[3].startswith(f"the update processed {share:.3f} of the positions padded")
    assert summary[4] == f"learning curve: {run / 'curve.png'}"


def test_update_sees_only_the_kept_rollouts(tiny_model_dir, tmp_path, monkeypatch):
    seen = []
    real = trainer_module.policy_update

    def spy(model, ref, optimizer, kept, *args, **kwargs):
        seen.append((kept.rows.completion_ids.shape[0], kept.advantages.shape[0], kept.kept))
        return real(model, ref, optimizer, kept, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "policy_update", spy)
    train(config(tiny_model_dir, tmp_path, prompts_per_step=3, n=8, m=3))
    assert seen == [(9, 9, 9), (9, 9, 9)]  # P*m = 3*3 of the P*n = 24 generated


def test_the_official_grpo_ga_trains_on_all_with_advantages_in_blocks(tiny_model_dir,
                                                                      tmp_path, monkeypatch):
    """adv_group_size=2 at n=m=4: all P*n rows reach the update, each with the advantage of
    its block of 2 of the same prompt (generation order)."""
    seen, updates = [], []
    real_blocks, real_update = selection_module._blocks, trainer_module.policy_update

    def blocks(rewards, spec):
        keep, adv = real_blocks(rewards, spec)
        seen.append((rewards, adv))
        return keep, adv

    def update(model, ref, optimizer, kept, *args, **kwargs):
        updates.append(kept.advantages.cpu())
        return real_update(model, ref, optimizer, kept, *args, **kwargs)

    monkeypatch.setattr(selection_module, "_blocks", blocks)
    monkeypatch.setattr(trainer_module, "policy_update", update)
    train(config(tiny_model_dir, tmp_path, prompts_per_step=2, n=4, m=4, adv_group_size=2,
                 temperature=2.0, max_steps=3))
    assert len(seen) == 3 and len(updates) <= 3  # a step without signal runs no update
    for rewards, adv in seen:
        assert torch.equal(adv, group_advantages(rewards.reshape(4, 2)).view(2, 4))
    for got in updates:
        assert got.shape == (8,)
        assert any(torch.allclose(got, adv.flatten()) for _, adv in seen)


def test_evaluations_start_at_eval_offset(tiny_model_dir, tmp_path, monkeypatch):
    seen = []
    real = trainer_module.evaluate

    def spy(engine, task, problems, *args, **kwargs):
        seen.append(problems)
        return real(engine, task, problems, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "evaluate", spy)
    train(config(tiny_model_dir, tmp_path / "all", eval_size=9, max_steps=1))
    train(config(tiny_model_dir, tmp_path / "held", eval_offset=5, eval_size=4, max_steps=1))
    assert len(seen[0]) == 9 and seen[-1] == seen[0][5:9]


def test_batch_selection_keeps_p_times_m_across_groups(tiny_model_dir, tmp_path, monkeypatch):
    """selection=batch: at most P*m rows reach the update, no group keeps 1, a group
    without variance keeps none, and the advantages are those of each group's kept ones."""
    seen = []
    real = selection_module.batch_max_variance

    def spy(rewards, budget, max_per_group):
        keep = real(rewards, budget, max_per_group)
        seen.append((rewards, keep))
        return keep

    monkeypatch.setattr(selection_module, "batch_max_variance", spy)
    run = train(config(tiny_model_dir, tmp_path, prompts_per_step=4, n=8, m=3, max_steps=3,
                       selection="batch", temperature=2.0))
    steps = read_metrics(run / "metrics.jsonl", "step")
    for (rewards, keep), record in zip(seen, steps, strict=True):
        assert keep.shape == (4, 8) and int(keep.sum()) <= 12  # P * m
        sizes = keep.sum(1)
        assert ((sizes == 0) | (sizes >= 2)).all()
        flat = rewards.amax(1) == rewards.amin(1)
        assert (sizes[flat] == 0).all()
        assert record["select/kept"] == int(keep.sum())
        assert record["select/zero_var_frac"] == 0.0  # a kept group always has contrast
    assert any(int(keep.sum()) == 12 for _, keep in seen)  # the budget is used


def test_a_step_that_keeps_nothing_skips_the_update(tiny_model_dir, tmp_path, monkeypatch):
    """Batch selection when every group's rewards are equal: nothing is kept, no optimizer
    step is taken, the model stays as it was, and the step is still logged."""
    monkeypatch.setattr(trainer_module.Scorer, "rewards",
                        lambda self, texts, problems, n, finished=None:
                        Scores(torch.zeros(len(problems), n), 0, 0))
    run = train(config(tiny_model_dir, tmp_path, selection="batch"))
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["select/kept"] for r in steps] == [0, 0]
    assert not any(key.startswith("loss/") for r in steps for key in r)
    before, after = weights(tiny_model_dir), weights(run / "checkpoints" / "step_000002" / "model")
    for k in before:
        torch.testing.assert_close(after[k], before[k], rtol=0, atol=0)


def test_a_step_without_reward_variance_moves_nothing(tiny_model_dir, tmp_path, monkeypatch):
    """Group selection keeps m of each group, but every group's rewards are equal, so every
    advantage is 0: no update runs, the weights and the optimizer state stay as they were
    (AdamW would still step its counters and, later, move weights by its momentum), and the
    step is logged as skipped with its time counted."""
    monkeypatch.setattr(trainer_module.Scorer, "rewards",
                        lambda self, texts, problems, n, finished=None:
                        Scores(torch.ones(len(problems), n), 0, 0))
    said = []
    run = train(config(tiny_model_dir, tmp_path, dtype="float32"),  # float32 on a GPU too
                log=lambda *a, **k: said.append(str(a[0])))
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["select/kept"] for r in steps] == [6, 6]  # P*m = 3*2 kept, all advantage 0
    assert [r["optim/skipped"] for r in steps] == [1, 1]
    assert not any(key.startswith("loss/") or key == "time/update" for r in steps for key in r)
    assert steps[1]["time"] > steps[0]["time"] > 0  # generation and scoring still counted
    assert sum("2 of the 2 steps had no reward variance in the rollouts kept: no update"
               in line for line in said) == 1  # in the summary, not a line per step
    checkpoint = run / "checkpoints" / "step_000002"
    before, after = weights(tiny_model_dir), weights(checkpoint / "model")
    for k in before:
        torch.testing.assert_close(after[k], before[k], rtol=0, atol=0)
    assert torch.load(checkpoint / "state.pt", weights_only=False)["optimizer"]["state"] == {}


def test_length_rules_get_each_rollouts_completion_length(tiny_model_dir, tmp_path,
                                                         monkeypatch):
    seen = []
    real = selection_module.downsample

    def spy(rewards, m, rule, generator=None, **inputs):
        idx = real(rewards, m, rule, generator, **inputs)
        seen.append((inputs["lengths"], idx))
        return idx

    monkeypatch.setattr(selection_module, "downsample", spy)
    train(config(tiny_model_dir, tmp_path, prompts_per_step=3, n=8, m=3, rule="shortest",
                 max_new_tokens=8, temperature=2.0))
    lengths, idx = seen[0]
    lengths = lengths.float()  # token counts, as computed from the completion masks
    assert lengths.shape == (3, 8) and lengths.min() >= 1 and lengths.max() <= 8
    assert lengths.unique().numel() > 1  # lengths differ, so the choice is a real one
    kept = lengths.gather(1, idx)  # [P, m]: no dropped rollout is shorter than a kept one
    dropped = lengths.masked_fill(torch.zeros_like(lengths, dtype=torch.bool).scatter(
        1, idx, True), float("inf"))
    assert (kept.amax(1) <= dropped.amin(1)).all()


def test_a_rule_with_a_new_input_gets_it_computed_from_each_rollout(tiny_model_dir, tmp_path,
                                                                     monkeypatch):
    """A new per-rollout input is one function in pods.core.rollout_inputs and a rule that
    names it: the trainer computes it from the rollouts and passes it, [P, n]."""
    from pods.core.downsample import RULES
    from pods.core.rollout_inputs import ROLLOUT_INPUTS

    def first_token(completion_ids):
        return completion_ids[:, 0]  # [rows]

    seen = []

    def by_first_token(rewards, m, generator, *, first_token):
        seen.append(first_token.clone())
        return first_token.argsort(dim=1, stable=True)[:, :m]

    by_first_token.needs = ("first_token",)
    monkeypatch.setitem(ROLLOUT_INPUTS, "first_token", first_token)
    monkeypatch.setitem(RULES, "by_first_token", by_first_token)
    generated = []
    real = trainer_module.Trainer.sample

    def sample(self):
        generate = self.engine.generate

        def spy(*args, **kwargs):
            rollouts = generate(*args, **kwargs)
            generated.append(rollouts.completion_ids[:, 0].clone())
            return rollouts

        self.engine.generate = spy
        return real(self)

    monkeypatch.setattr(trainer_module.Trainer, "sample", sample)
    train(config(tiny_model_dir, tmp_path, prompts_per_step=2, n=4, m=2, max_steps=1,
                 rule="by_first_token", temperature=2.0))
    assert len(seen) == 1 and seen[0].shape == (2, 4)
    assert torch.equal(seen[0].flatten(), generated[0])


def test_resume_matches_an_uninterrupted_run(tiny_model_dir, tmp_path):
    whole = train(config(tiny_model_dir, tmp_path, max_steps=4, run_name="whole"))
    part = train(config(tiny_model_dir, tmp_path, max_steps=2, run_name="part"))
    resume(part, {"max_steps": 4})
    a = weights(whole / "checkpoints" / "step_000004" / "model")
    b = weights(part / "checkpoints" / "step_000004" / "model")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)
    rewards = [[r["rollout/reward_mean"] for r in read_metrics(run / "metrics.jsonl", "step")]
               for run in (whole, part)]
    assert rewards[0] == rewards[1] and len(rewards[0]) == 4


def test_ctrl_c_checkpoints_and_resume_continues(tiny_model_dir, tmp_path):
    cfg = config(tiny_model_dir, tmp_path, max_steps=4)
    train_interrupted(cfg, after=2)
    run = tmp_path / "run"
    assert (run / "checkpoints" / "latest").read_text() == "step_000002"
    train_or_resume(cfg)  # what `pods compare` does with an unfinished run
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl", "step")]
    assert steps == [1, 2, 3, 4]


def test_truncated_metrics_line_after_a_hard_kill_is_ignored_on_resume(tiny_model_dir,
                                                                        tmp_path):
    run = train(config(tiny_model_dir, tmp_path, max_steps=2))
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "step", "step": 3, "time": 9.')  # killed mid-write
    resume(run, {"max_steps": 3})
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl", "step")] == [1, 2, 3]
    # the records taken out (the first run's "done") are kept aside, the broken line is not
    assert [r["kind"] for r in read_metrics(run / "metrics.redone.jsonl")] == ["done"]


def test_an_existing_run_is_never_overwritten(tiny_model_dir, tmp_path):
    train(config(tiny_model_dir, tmp_path))
    with pytest.raises(ValueError, match="--resume"):
        train(config(tiny_model_dir, tmp_path))


def test_time_budget_and_periodic_evaluation(tiny_model_dir, tmp_path):
    run = train(config(tiny_model_dir, tmp_path, max_steps=None, max_time=1.0,
                       eval_every=0.3))
    records = read_metrics(run / "metrics.jsonl")
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert steps[-1]["time"] >= 1.0 and steps[-2]["time"] < 1.0
    assert len(evals) >= 3  # time 0, every 0.3 training seconds, the end
    assert all(e["time"] <= s["time"] for e, s in zip(evals[1:], evals[2:], strict=False))


def test_gradient_accumulation_matches_one_pass(tiny_model_dir, tmp_path):
    one = train(config(tiny_model_dir, tmp_path, max_steps=1, run_name="one"))
    acc = train(config(tiny_model_dir, tmp_path, max_steps=1, run_name="acc",
                       micro_batch_size=2))
    a = weights(one / "checkpoints" / "step_000001" / "model")
    b = weights(acc / "checkpoints" / "step_000001" / "model")
    for k in a:  # Adam's first step is about lr * sign(grad): a float-noise-sized gradient
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-4)  # may flip (lr = 1e-2)
    step_one, step_acc = (read_metrics(r / "metrics.jsonl", "step")[0] for r in (one, acc))
    for key in ("loss/loss", "loss/grad_norm"):  # the scale Adam would hide
        assert step_acc[key] == pytest.approx(step_one[key], rel=1e-5, abs=1e-7)


def test_multiple_iterations_and_kl_run(tiny_model_dir, tmp_path):
    """The KL penalty must change the update, not only a logged number: the same run with
    beta 0 ends with other weights (by far more than float noise; the worked numbers are
    in tests/train/test_update.py)."""
    runs = {beta: train(config(tiny_model_dir, tmp_path, num_iterations=3, beta=beta,
                               loss_norm="token", run_name=f"beta{beta}"))
            for beta in (0.0, 1.0)}
    step = read_metrics(runs[1.0] / "metrics.jsonl", "step")[-1]
    assert step["loss/kl"] > 0  # the policy moved away from the reference
    assert step["loss/ratio_mean"] != 1.0  # the later iterations are off-policy
    with_kl, without = (weights(runs[b] / "checkpoints" / "step_000002" / "model")
                        for b in (1.0, 0.0))
    assert max((with_kl[k] - without[k]).abs().max().item() for k in with_kl) > 1e-4


GAP_KEYS = ("rollout/logprob_gap", "rollout/logprob_gap_max", "rollout/logprob_kl_k3",
            "rollout/ratio_outside_frac")
IS_KEYS = ("loss/is_weight_mean", "loss/is_masked_frac", "loss/is_capped_frac")


def test_a_corrected_run_logs_the_gap_and_what_the_correction_did(tiny_model_dir, tmp_path):
    """is_correction token_mask on the hf engine: every step logs the gap's tail and the
    correction's keys. In float32 the engine's log-probs are the trainer's (float noise),
    so nothing is masked and the weights are 1; under bf16 autocast (--weight-cast matmul)
    the engine samples from a bf16 copy and the gap is real. Without a correction only the
    gap."""
    run = train(config(tiny_model_dir, tmp_path, is_correction="token_mask", run_name="f32"))
    steps = read_metrics(run / "metrics.jsonl", "step")
    for step in steps:
        assert all(key in step for key in GAP_KEYS + IS_KEYS), step
        assert 0 <= step["rollout/logprob_gap"] <= step["rollout/logprob_gap_max"] < 1e-4
        assert step["rollout/ratio_outside_frac"] == 0 and step["loss/is_masked_frac"] == 0
        assert step["loss/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    start, end = weights(tiny_model_dir), weights(run / "checkpoints" / "step_000002" / "model")
    assert any(not torch.equal(start[k], end[k]) for k in start)
    bf16 = train(config(tiny_model_dir, tmp_path, is_correction="sequence_truncate",
                        mixed_precision="bf16", weight_cast="matmul", run_name="bf16"))
    step = read_metrics(bf16 / "metrics.jsonl", "step")[0]
    assert step["rollout/logprob_gap"] > 1e-4 and step["rollout/logprob_kl_k3"] > 0
    assert step["loss/is_weight_mean"] != 1.0
    plain = read_metrics(train(config(tiny_model_dir, tmp_path, run_name="plain"))
                         / "metrics.jsonl", "step")[0]
    assert all(key in plain for key in GAP_KEYS) and not any(k in plain for k in IS_KEYS)


def test_a_model_that_cannot_load_leaves_no_run_folder(tmp_path):
    missing = str(tmp_path / "no" / "model-here")  # neither a folder nor a valid hub id
    with pytest.raises(ValueError, match="model-here does not exist"):
        train(config(missing, tmp_path))
    assert not (tmp_path / "run").exists()


class FailsOnCall(Task):
    """The toy task's reward, raising (or returning NaN) on the k-th call only."""

    def __init__(self, k: int, value=None):
        from toy_task import EvenStart

        self.inner, self.k, self.calls, self.value = EvenStart(), k, 0, value

    def reward(self, completion, problem):
        self.calls += 1
        if self.calls == self.k:
            if self.value is None:
                raise RuntimeError("judge timed out")
            return self.value
        return self.inner.reward(completion, problem)


def _score_with(monkeypatch, task):
    """Trainers built from here on score (and evaluate) with ``task``'s reward; returns
    the real Trainer.__init__ to put back."""
    real_init = Trainer.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.task = self.scorer.task = task

    monkeypatch.setattr(Trainer, "__init__", init)
    return real_init


def test_a_raising_reward_stops_with_a_checkpoint_of_the_last_complete_step(
        tiny_model_dir, tmp_path, monkeypatch):
    """The reward raises while step 3 is scored: the run stops naming the function, and
    the checkpoint is of step 2 with step 3's draws rewound, so resuming gives exactly the
    uninterrupted run."""
    whole = train(config(tiny_model_dir, tmp_path, max_steps=4, run_name="whole"))
    evals, per_step = 12, 3 * 6  # reward calls: the first evaluation, then P*n per step
    real_init = _score_with(monkeypatch, FailsOnCall(evals + 2 * per_step + 5))
    said = []
    with pytest.raises(ValueError, match=r"reward function FailsOnCall.reward raised "
                                         r"RuntimeError: judge timed out; problem '"):
        train(config(tiny_model_dir, tmp_path, max_steps=4, run_name="part"),
              log=lambda *a, **k: said.append(str(a[0])))
    part = tmp_path / "part"
    assert (part / "checkpoints" / "latest").read_text() == "step_000002"
    assert any(f"--resume {part}" in line for line in said)
    monkeypatch.setattr(Trainer, "__init__", real_init)
    resume(part)
    rewards = [[r["rollout/reward_mean"] for r in read_metrics(run / "metrics.jsonl", "step")]
               for run in (whole, part)]
    assert rewards[0] == rewards[1] and len(rewards[0]) == 4
    a = weights(whole / "checkpoints" / "step_000004" / "model")
    b = weights(part / "checkpoints" / "step_000004" / "model")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)


def test_zero_policy_scores_bad_rewards_zero_and_counts_them(tiny_model_dir, tmp_path,
                                                             monkeypatch):
    _score_with(monkeypatch, FailsOnCall(12 + 4, value=float("nan")))  # step 1: one NaN
    said = []
    run = train(config(tiny_model_dir, tmp_path, reward_errors="zero"),
                log=lambda *a, **k: said.append(str(a[0])))
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["rollout/reward_errors"] for r in steps] == [1, 0]
    warnings = [line for line in said if "reward_errors=zero" in line]
    assert len(warnings) == 1 and "returned nan (float)" in warnings[0]


class PaysEverything(Task):
    def reward(self, completion, problem):
        return 1.0


@pytest.mark.parametrize("truncated_reward", [None, -1.0])
def test_rollouts_cut_at_the_limit_are_counted_and_paid_truncated_reward(
        tiny_model_dir, tmp_path, monkeypatch, truncated_reward):
    """With one new token most rollouts are cut: each step counts them, and pays them
    truncated_reward when it is set (every other rollout earns 1 here)."""
    _score_with(monkeypatch, PaysEverything())
    run = train(config(tiny_model_dir, tmp_path, max_new_tokens=1,
                       truncated_reward=truncated_reward))
    for step in read_metrics(run / "metrics.jsonl", "step"):
        rows, cut = 3 * 6, step["rollout/truncated"]
        assert cut > 0
        paid = rows if truncated_reward is None else rows - 2 * cut
        assert step["rollout/reward_mean"] == pytest.approx(paid / rows)


def test_resume_falls_back_when_the_newest_checkpoint_cannot_be_read(tiny_model_dir,
                                                                      tmp_path):
    run = train(config(tiny_model_dir, tmp_path, max_steps=2))
    resume(run, {"max_steps": 4})  # checkpoints of steps 2 and 4
    weights_file = next((run / "checkpoints" / "step_000004" / "model").glob("*.safetensors"))
    weights_file.write_bytes(weights_file.read_bytes()[:100])  # truncated
    said = []
    resume(run, {"max_steps": 5}, log=lambda *a, **k: said.append(str(a[0])))
    assert any("step_000004 cannot be read" in line for line in said)
    assert any("falling back to step_000002" in line for line in said)
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl", "step")]
    assert steps == [1, 2, 3, 4, 5]  # steps 3 and 4 redone from step 2, then step 5
    assert (run / "checkpoints" / "latest").read_text() == "step_000005"


def test_a_failed_checkpoint_write_keeps_the_previous_one(tiny_model_dir, tmp_path,
                                                          monkeypatch):
    """A write that fails inside the real writers (safetensors, torch.save), as on a full
    disk: a file-size limit (RLIMIT_FSIZE) set just before the checkpoint of step 3 makes
    the first large file's write fail with EFBIG. The partial copy goes, the previous
    checkpoint stays, the error is one readable line, and the run goes on from it."""
    import resource
    import signal

    from pods.runs.checkpoints import CheckpointWriteError, latest_checkpoint

    run = train(config(tiny_model_dir, tmp_path, max_steps=2))
    real_write = trainer_module.write_model

    def on_a_full_disk(*args, **kwargs):
        limits = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
        try:
            return real_write(*args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, limits)

    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a kill
    monkeypatch.setattr(trainer_module, "write_model", on_a_full_disk)
    try:
        with pytest.raises(CheckpointWriteError, match=r"could not write the checkpoint of "
                           r"step 3 .*(File too large|SafetensorError|RuntimeError).*"
                           r"step_000002, is intact"):
            resume(run, {"max_steps": 3})
    finally:
        signal.signal(signal.SIGXFSZ, old_handler)
    monkeypatch.setattr(trainer_module, "write_model", real_write)
    assert latest_checkpoint(run).name == "step_000002"
    assert not list((run / "checkpoints").glob(".tmp_*"))  # the partial copy is gone
    resume(run, {"max_steps": 3})  # and the run goes on from it
    assert (run / "checkpoints" / "latest").read_text() == "step_000003"


def test_a_raising_reward_under_zero_is_scored_zero_at_the_step_it_raises(
        tiny_model_dir, tmp_path, monkeypatch):
    """--reward-errors zero with a reward that raises (not only NaN), at step 2 of 3."""
    evals, per_step = 12, 3 * 6  # reward calls: the first evaluation, then P*n per step
    _score_with(monkeypatch, FailsOnCall(evals + per_step + 4))
    said = []
    run = train(config(tiny_model_dir, tmp_path, max_steps=3, reward_errors="zero"),
                log=lambda *a, **k: said.append(str(a[0])))
    steps = read_metrics(run / "metrics.jsonl", "step")
    assert [r["rollout/reward_errors"] for r in steps] == [0, 1, 0]
    warnings = [line for line in said if "reward_errors=zero" in line]
    assert len(warnings) == 1 and "raised RuntimeError: judge timed out" in warnings[0]
