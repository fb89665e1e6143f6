"""Ctrl-C at every moment of a run: each phase gets a real SIGINT (``signal.raise_signal``
from inside a patched function of that phase), the run stops, and ``resume`` then gives the
uninterrupted run: the same step and evaluation records and the same final weights."""

import signal

import pytest
import torch

from pods.runs.checkpoints import latest_checkpoint
from pods.runs.metrics import read_metrics
from pods.train import trainer as trainer_module
from pods.train.interrupts import Interrupts
from pods.train.run import resume, train
from runs import config, weights

STEPS = 3


@pytest.fixture(autouse=True)
def ctrl_c_is_python_s_own():
    """Each test here starts with Python's own SIGINT handler, as in a terminal, also where
    the suite was started with SIGINT ignored (a background job, `make test &`, where a run
    rightly leaves Ctrl-C alone)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="module")
def whole(tiny_model_dir, tmp_path_factory):
    """The uninterrupted run every interrupted one is compared with."""
    from pods.tasks import TASKS
    from toy_task import EvenStart

    with pytest.MonkeyPatch.context() as patch:  # the suite's toy task, module-wide
        patch.setitem(TASKS, "even_start", EvenStart)
        return train(config(tiny_model_dir, tmp_path_factory.mktemp("whole"),
                            max_steps=STEPS))


def records(run) -> list[tuple]:
    """What a run recorded, without the wall-clock parts (times, memory) and where it ran
    (the "machine" records: one at the start, one at each resume)."""
    return [(r["kind"], r["step"], r.get("rollout/reward_mean"), r.get("eval/accuracy"))
            for r in read_metrics(run / "metrics.jsonl") if r["kind"] != "machine"]


def assert_same_run(whole, part) -> None:
    assert records(part) == records(whole)
    machines = [r for r in read_metrics(part / "metrics.jsonl") if r["kind"] == "machine"]
    assert machines[0]["step"] == 0  # where it ran: at the start, and at each resume
    a = weights(whole / "checkpoints" / f"step_{STEPS:06d}" / "model")
    b = weights(part / "checkpoints" / f"step_{STEPS:06d}" / "model")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)


def ctrl_c_on(patch, owner, name: str, when, presses: int = 1, after: bool = False):
    """Patch ``owner.name`` so that the call for which ``when(self_or_args)`` holds gets
    ``presses`` real SIGINTs, before the real call (or after it, with ``after``)."""
    real = getattr(owner, name)
    calls = []

    def patched(*args, **kwargs):
        calls.append(1)
        fire = when(len(calls))
        if fire and not after:
            for _ in range(presses):
                signal.raise_signal(signal.SIGINT)
        result = real(*args, **kwargs)
        if fire and after:
            for _ in range(presses):
                signal.raise_signal(signal.SIGINT)
        return result

    patch.setattr(owner, name, patched)


def interrupted(tiny_model_dir, tmp_path, said=None):
    cfg = config(tiny_model_dir, tmp_path, max_steps=STEPS, run_name="part")
    log = (lambda *a, **k: said.append(str(a[0]))) if said is not None else print
    with pytest.raises(KeyboardInterrupt):
        train(cfg, log=log)
    return tmp_path / "part"


@pytest.mark.parametrize("owner, name, when", [
    (trainer_module, "render_prompts", lambda call: call == 2),  # generating step 2
    (trainer_module.Scorer, "rewards", lambda call: call == 2),  # scoring step 2
    (trainer_module, "evaluate", lambda call: call == 1),  # the first evaluation
    (trainer_module, "evaluate", lambda call: call == 2),  # the final evaluation
], ids=["generation", "scoring", "first-evaluation", "final-evaluation"])
def test_ctrl_c_where_work_can_be_redone_stops_at_once(owner, name, when, whole,
                                                      tiny_model_dir, tmp_path):
    with pytest.MonkeyPatch.context() as patch:  # undone before the resume
        ctrl_c_on(patch, owner, name, when)
        part = interrupted(tiny_model_dir, tmp_path)
    resume(part)
    assert_same_run(whole, part)


@pytest.mark.parametrize("after", [False, True], ids=["before-optimizer-step", "after-it"])
def test_ctrl_c_in_the_update_finishes_records_and_checkpoints_the_step(
        after, whole, tiny_model_dir, tmp_path):
    with pytest.MonkeyPatch.context() as patch:  # undone before the resume
        ctrl_c_on(patch, trainer_module, "policy_update", lambda call: call == 2,
                  after=after)
        said = []
        part = interrupted(tiny_model_dir, tmp_path, said)
        assert any("Ctrl-C: finishing the update of step 2 first" in line for line in said)
        assert latest_checkpoint(part).name == "step_000002"  # the step it was in, finished
        assert [r["step"] for r in read_metrics(part / "metrics.jsonl", "step")] == [1, 2]
    resume(part)
    assert_same_run(whole, part)


def test_ctrl_c_in_a_checkpoint_write_finishes_it(whole, tiny_model_dir, tmp_path):
    """The final checkpoint: written whole, then the run stops before its "done" record;
    the resume adds only that record (no second final evaluation)."""
    with pytest.MonkeyPatch.context() as patch:  # undone before the resume
        ctrl_c_on(patch, trainer_module, "write_model", lambda call: call == 1)
        said = []
        part = interrupted(tiny_model_dir, tmp_path, said)
        assert any("finishing the checkpoint of step 3 first" in line for line in said)
        assert any("after step 3: its checkpoint is written" in line for line in said)
        assert latest_checkpoint(part).name == "step_000003"
        assert records(part)[-1][0] == "eval"
    resume(part)
    assert_same_run(whole, part)


def test_a_second_ctrl_c_says_a_third_stops_at_once(whole, tiny_model_dir, tmp_path):
    with pytest.MonkeyPatch.context() as patch:  # undone before the resume
        ctrl_c_on(patch, trainer_module, "policy_update", lambda call: call == 2, presses=2)
        said = []
        part = interrupted(tiny_model_dir, tmp_path, said)
        assert any("(Ctrl-C 1 more time to stop at once" in line for line in said)
        assert latest_checkpoint(part).name == "step_000002"
    resume(part)
    assert_same_run(whole, part)


def test_a_forced_stop_before_any_checkpoint_resumes_from_the_start(
        whole, tiny_model_dir, tmp_path):
    """Three Ctrl-C in the first update stop inside it: no checkpoint of a half-updated
    model exists, and the folder (config.yaml, the first evaluation's record) resumes from
    step 0 exactly as a new run; what it had recorded goes to metrics.redone.jsonl."""
    with pytest.MonkeyPatch.context() as patch:  # undone before the resume
        ctrl_c_on(patch, trainer_module, "policy_update", lambda call: call == 1, presses=3)
        said = []
        part = interrupted(tiny_model_dir, tmp_path, said)
        assert any("stopping inside the update of step 1" in line for line in said)
        assert any("the run folder resumes from the start" in line for line in said)
        assert latest_checkpoint(part) is None and len(records(part)) == 1
    said.clear()
    resume(part, log=lambda *a, **k: said.append(str(a[0])))
    assert any("from the start (no checkpoint was written)" in line for line in said)
    assert_same_run(whole, part)
    assert [r["kind"] for r in read_metrics(part / "metrics.redone.jsonl")] == \
        ["machine", "eval"]


def test_ctrl_c_outside_a_run_is_python_s_own():
    """Only a run's own sections hold Ctrl-C: the handler is put back after the run, and a
    program that set its own SIGINT handler keeps it."""
    before = signal.getsignal(signal.SIGINT)
    with Interrupts().installed():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before

    def mine(signum, frame):
        pass

    signal.signal(signal.SIGINT, mine)
    try:
        with Interrupts().installed():
            assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)


def test_held_raises_after_the_section_and_not_on_an_error():
    said = []
    interrupts = Interrupts(log=said.append)
    done = []
    with interrupts.installed(), pytest.raises(KeyboardInterrupt):
        with interrupts.held("the write"):
            signal.raise_signal(signal.SIGINT)
            done.append("finished")  # reached: the interrupt waits for the section's end
    assert done == ["finished"] and "finishing the write first" in said[0]
    with interrupts.installed(), pytest.raises(ValueError):  # the error, not the interrupt
        with interrupts.held("the write"):
            signal.raise_signal(signal.SIGINT)
            raise ValueError("disk full")
