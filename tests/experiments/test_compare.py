import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from comparison_runs import write_checkpoint, write_run

from pods.config import from_dict
from pods.experiments.compare import (
    CompareSpec,
    Schedule,
    in_fresh_process,
    is_finished,
    load_spec,
    run_compare,
)
from pods.runs.metrics import read_metrics
from runs import flat

SRC = Path(__file__).resolve().parents[2] / "src"


def test_spec_numbers_in_yaml_exponent_form(tmp_path):
    """`lr: 3e-4` is text to YAML 1.1; a spec takes it as the number, as a config file does."""
    path = tmp_path / "spec.yaml"
    path.write_text("seeds: 1\nbaseline: a\nbase: {lr: 3e-4}\nvariants: {a: {clip_eps: 2e-1}}\n")
    spec = load_spec(path)
    config = spec.config("a", 0)
    assert config.optim.lr == 3e-4 and config.loss.clip_eps == 0.2


def test_spec_takes_a_list_of_baselines(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("seeds: 1\nbaseline: [a, b]\nvariants: {a: {}, b: {}, c: {}}\n")
    spec = load_spec(path)
    assert spec.baseline == ("a", "b") and spec.to_dict()["baseline"] == ["a", "b"]
    path.write_text("seeds: 1\nbaseline: [a, d]\nvariants: {a: {}, b: {}}\n")
    with pytest.raises(ValueError, match="baseline 'd' is not a variant; use one of a, b"):
        load_spec(path)


def fake_trainer(calls: list):
    """Records each config and writes a finished run: accuracy .01, then n/100 at 1 s."""
    def train(config):
        config = flat(config)
        calls.append(config)
        run = Path(config.out_dir) / config.run_name
        (run / "metrics.jsonl").unlink(missing_ok=True)  # a fresh start, as after a crash
        write_run(run, [(0, 0.01), (1, config.n / 100)],
                  [{"step": 1, "time": 1, "rollout/reward_mean": 0.5, "mem/peak_rss_mb": 10}])
    return train


def test_run_compare_order_overrides_and_resume(tmp_path, capsys):
    spec = CompareSpec(variants={"grpo": {"n": 8, "m": 8}, "pods": {"n": 32}}, seeds=(0, 1),
                       baseline="grpo", base={"m": 4, "max_time": 5.0})
    out, calls = tmp_path / "cmp", []
    assert run_compare(spec, out, fake_trainer(calls), {"lr": 1e-3, "m": 2}) == out
    # seeds outer: every variant has seed 0 before any has seed 1
    assert [(c.seed, Path(c.out_dir).name) for c in calls] == [
        (0, "grpo"), (0, "pods"), (1, "grpo"), (1, "pods")]
    assert calls[0].out_dir == str(out / "grpo") and calls[0].run_name == "seed0"
    assert calls[3].out_dir == str(out / "pods") and calls[3].run_name == "seed1"
    assert [c.n for c in calls] == [8, 32, 8, 32]
    # trackers: a group per variant, runs named by it and the seed ("cmp-pods-seed1")
    assert [c.tracker_group for c in calls] == ["cmp-grpo", "cmp-pods"] * 2
    assert all(c.m == 2 and c.lr == 1e-3 and c.max_time == 5.0 for c in calls)  # flags last
    # compare.yaml holds the spec with the overrides folded in: the same configs again
    saved = load_spec(out / "compare.yaml")
    assert saved.base == {"m": 2, "max_time": 5.0, "lr": 1e-3}
    assert saved.variants == {"grpo": {"n": 8}, "pods": {"n": 32}}
    assert flat(saved.config("pods", 1, out_dir=str(out / "pods"), run_name="seed1",
                             tracker_group="cmp-pods")) == calls[3]
    rows = json.loads((out / "summary.json").read_text())
    assert [r["variant"] for r in rows] == ["grpo", "pods"]
    assert capsys.readouterr().out.endswith(  # the comparison ends with its table, once
        (out / "summary.md").read_text() +
        f"summary: {out / 'summary.md'}, curves: {out / 'curves.png'}\n")
    assert rows[1]["speedup"] == 1.0  # grpo peaks (.08) at 1 s; pods passes .08 at 1 s too

    # interrupt pods/seed1: drop its "done" record; a re-run trains only that run
    metrics = out / "pods" / "seed1" / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in read_metrics(metrics)[:-1]))
    assert not is_finished(metrics.parent)
    capsys.readouterr()
    again = []
    run_compare(spec, out, fake_trainer(again), {"lr": 1e-3, "m": 2})
    assert [(c.seed, c.n) for c in again] == [(1, 32)]
    assert capsys.readouterr().out.count("already finished, skipped") == 3

    other = CompareSpec(variants={"grpo": {"n": 16}}, seeds=(0,), baseline="grpo")
    with pytest.raises(ValueError, match="holds a comparison with other variants"):
        run_compare(other, out, fake_trainer([]))


def test_run_compare_checks_every_config_before_training(tmp_path):
    spec = CompareSpec(variants={"a": {"n": 32, "m": 8}, "b": {"n": 8, "m": 8}}, seeds=(0,),
                       baseline="a")
    calls = []
    with pytest.raises(ValueError, match=r"variant 'b' \(seed 0\).*m=16 is larger than n=8"):
        run_compare(spec, tmp_path, fake_trainer(calls), {"m": 16})
    assert calls == []
    with pytest.raises(ValueError, match="command-line overrides sets 'seed'"):
        run_compare(spec, tmp_path, fake_trainer(calls), {"seed": 3})


GOOD = {"variants": {"grpo": {"n": 8, "m": 8}, "pods": {}}, "seeds": (0, 1), "baseline": "grpo"}


@pytest.mark.parametrize("change, message", [
    ({"variants": {}}, "no variants"),
    ({"baseline": "gpro"}, "baseline 'gpro' is not a variant; use one of grpo, pods"),
    ({"seeds": ()}, "no seeds"),
    ({"seeds": (0, 1, 0)}, "repeat a seed"),
    ({"seeds": (0, "1")}, "seed '1' is not an integer"),
    ({"variants": {"grpo": {}, "a/b": {}}}, "'a/b' is not usable as a folder name"),
    ({"variants": {"grpo": {}, "..": {}}}, "'..' is not usable as a folder name"),
    ({"variants": {"grpo": {}, "pods": {"max_stesp": 3}}},
     "variant 'pods' overrides unknown field 'max_stesp'; did you mean 'max_steps'"),
    ({"variants": {"grpo": {}, "pods": {"num_generations": 64}}},  # TRL's name: as in
     "unknown field 'num_generations'; pods calls it 'n'"),  # a YAML file or a flag
    ({"base": {"lr_rate": 1.0}}, "base overrides unknown field 'lr_rate'"),
    ({"variants": {"grpo": {}, "pods": {"seed": 3}}}, "variant 'pods' sets 'seed'"),
    ({"variants": {"grpo": {}, "pods": [1]}}, "variant 'pods' must be a mapping"),
    ({"variants": {"grpo": {}, "pods": {"n": 32, "m": 64}}},
     r"variant 'pods' \(seed 0\): invalid config: m=64 is larger than n=32"),
])
def test_spec_validation_errors(change, message):
    with pytest.raises(ValueError, match=message):
        CompareSpec(**{**GOOD, **change})


def test_load_spec(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("base: {max_time: 30}\nseeds: 3\nbaseline: grpo\n"
                    "variants:\n  grpo: {n: 8, m: 8}\n  pods:\n")
    spec = load_spec(path)
    assert spec.seeds == (0, 1, 2) and spec.base == {"max_time": 30}
    assert spec.variants == {"grpo": {"n": 8, "m": 8}, "pods": {}}
    path.write_text("seeds: [4, 7]\nbaseline: a\nvariants: {a: {}}\n")
    assert load_spec(path).seeds == (4, 7) and load_spec(path).base == {}


@pytest.mark.parametrize("text, message", [
    ("seeds: 2\nbaseline: a\nvariants: {a: {}}\nvarients: {}\n", r"unknown key\(s\) varients"),
    ("baseline: a\nvariants: {a: {}}\n", "missing `seeds:`"),
    ("seeds: 0\nbaseline: a\nvariants: {a: {}}\n", "seeds: 0 asks for no runs"),
    ("seeds: 2\nbaseline: b\nvariants: {a: {}}\n", "spec.yaml: baseline 'b' is not a variant"),
    ("- 1\n", "a comparison spec is a mapping"),
])
def test_load_spec_errors(tmp_path, text, message):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_spec(path)
    with pytest.raises(ValueError, match="does not exist"):
        load_spec(tmp_path / "missing.yaml")


def test_only_trains_the_named_variants_and_refuses_unknown_ones(tmp_path):
    spec = CompareSpec(variants={"grpo": {"n": 8, "m": 8}, "pods": {"n": 32}}, seeds=(0, 1),
                       baseline="grpo", base={"m": 4, "max_time": 5.0})
    out, calls = tmp_path / "cmp", []
    run_compare(spec, out, fake_trainer(calls), schedule=Schedule(only=["grpo"]))
    assert [(c.seed, c.n) for c in calls] == [(0, 8), (1, 8)]
    run_compare(spec, out, fake_trainer(calls), schedule=Schedule(only=["pods"]))  # the rest, later
    assert [(c.seed, c.n) for c in calls[2:]] == [(0, 32), (1, 32)]
    rows = json.loads((out / "summary.json").read_text())
    assert {r["variant"] for r in rows} == {"grpo", "pods"}
    with pytest.raises(ValueError, match="does not have: podz"):
        run_compare(spec, out, fake_trainer(calls), schedule=Schedule(only=["podz"]))


def _pid_and_seed(config):  # module level: the fresh process imports it by name
    return os.getpid(), config.run.seed


def _refuses(config):
    raise ValueError(f"seed {config.run.seed} refused")


ORPHAN = """
import os, sys, time
from pods.config import from_dict
from pods.experiments.compare import in_fresh_process

def wait(config):
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(600)  # longer than the test waits: only a stop ends it in time

if __name__ == "__main__":
    in_fresh_process(wait)(from_dict({}))
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG: Linux")
@pytest.mark.parametrize("background", [False, True])
def test_a_killed_compare_leaves_no_run_training_behind(tmp_path, background):
    """`kill` of the comparison stops the run it had started (SIGINT, as Ctrl-C), instead
    of leaving it to train on beside the next `pods compare`; also when the comparison
    was started in the background by a script (`nohup pods compare ... &`), which starts
    it with SIGINT ignored, and every process it starts inherits that."""
    script, pid_file = tmp_path / "parent.py", tmp_path / "child.pid"
    script.write_text(ORPHAN)
    parent = subprocess.Popen([sys.executable, str(script), str(pid_file)],
                              env={**os.environ, "PYTHONPATH": str(SRC)},
                              preexec_fn=_ignore_sigint if background else None)
    deadline = time.monotonic() + 120
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 120  # a loaded machine is slow to start and stop Python
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return  # the child is gone
        time.sleep(0.2)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the run went on after its comparison was killed")


def test_pods_compare_trains_each_run_in_a_fresh_process():
    """Each call runs in a new process (so a run's memory is freed when it ends) and
    returns what the function returned there, or raises what it raised."""
    run, config = in_fresh_process(_pid_and_seed), from_dict({"seed": 3})
    (first, seed), (second, _) = run(config), run(config)
    assert seed == 3 and len({first, second, os.getpid()}) == 3
    with pytest.raises(ValueError, match="seed 3 refused"):
        in_fresh_process(_refuses)(config)


def test_runs_are_not_added_on_another_machine(tmp_path, capsys):
    """A comparison whose finished runs were made on another host class refuses to train
    more before any training; --any-machine trains them, and the summary names both."""
    from pods.runtime.machine import host

    here = host()
    other = {**here, "machine/cpu": "a CPU of another kind", "machine/device": "cpu"}
    spec = CompareSpec(variants={"grpo": {"n": 8, "m": 8}, "pods": {"n": 32}}, seeds=(0,),
                       baseline="grpo", base={"m": 4, "max_time": 5.0})
    out, calls = tmp_path / "cmp", []
    write_run(out / "grpo" / "seed0", [(0, 0.01), (1, 0.08)], machine=other)
    with pytest.raises(ValueError, match=r"grpo/seed0 was made on another machine \(cpu: "
                       r"a CPU of another kind / .*--any-machine adds"):
        run_compare(spec, out, fake_trainer(calls))
    assert calls == []  # refused before any training
    run_compare(spec, out, fake_trainer(calls), schedule=Schedule(any_machine=True))
    assert [Path(c.out_dir).name for c in calls] == ["pods"]
    text = (out / "summary.md").read_text()
    assert text.startswith("**These runs were made on different machines")
    assert "- cpu a CPU of another kind, " in text and ": grpo/seed0" in text
    assert "machine not recorded (a run of an older pods): pods/seed0" in text
    # a stopped run made elsewhere would be timed on two machines if resumed here; one
    # without a checkpoint starts over, so its machine does not matter
    stopped = tmp_path / "stopped"
    write_run(stopped / "pods" / "seed0", [(0, 0.01)], done=False, machine=other)
    write_checkpoint(stopped / "pods" / "seed0")
    with pytest.raises(ValueError, match="pods/seed0 was made on another machine"):
        run_compare(spec, stopped, fake_trainer(calls))
    shutil.rmtree(stopped / "pods" / "seed0" / "checkpoints")
    run_compare(spec, stopped, fake_trainer(calls))
