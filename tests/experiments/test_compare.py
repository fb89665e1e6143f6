import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from pods.experiments.compare import (
    CompareSpec,
    aggregate_curves,
    is_finished,
    load_spec,
    run_compare,
    summarize,
)
from pods.train.metrics import MetricsWriter, read_metrics
from runs import flat

PNG = b"\x89PNG\r\n\x1a\n"


def write_run(run_dir: Path, evals, steps=(), done=True) -> Path:
    """A run folder with eval records [(time, accuracy)] and step records [dicts]."""
    w = MetricsWriter(run_dir / "metrics.jsonl")
    for i, (t, acc) in enumerate(evals):
        w.write({"kind": "eval", "step": i, "time": t, "eval/accuracy": acc})
    for s in steps:
        w.write({"kind": "step", **s})
    if done:
        w.write({"kind": "done", "step": len(evals), "time": evals[-1][0] if evals else 0})
    w.close()
    return run_dir


def write_spec(out: Path, baseline: str, variants) -> None:
    out.mkdir(parents=True, exist_ok=True)
    spec = {"seeds": [0], "baseline": baseline, "variants": {v: {} for v in variants}}
    (out / "compare.yaml").write_text(yaml.safe_dump(spec))


def test_step_function_grid_mean_and_sem(tmp_path):
    write_run(tmp_path / "a" / "seed2", [(0, 0.2), (10, 0.5), (25, 0.6)])
    write_run(tmp_path / "a" / "seed10", [(0, 0.4), (15, 0.3), (20, 0.7)])
    write_run(tmp_path / "b" / "seed0", [(0, 0.1), (5, 0.3)])
    (tmp_path / "notes").mkdir()  # a folder without runs is not a variant
    curves = aggregate_curves(tmp_path)
    assert list(curves) == ["a", "b"]
    a = curves["a"]
    # union of eval times {0, 10, 15, 20, 25}, cut at min(last times) = min(25, 20) = 20
    np.testing.assert_array_equal(a.times, [0, 10, 15, 20])
    # seed2 as a step function: 0->.2, 10->.5, 15->.5 (held), 20->.5 (held)
    # seed10:                   0->.4, 10->.4 (held), 15->.3, 20->.7
    # mean: (.2+.4)/2=.3, (.5+.4)/2=.45, (.5+.3)/2=.4, (.5+.7)/2=.6
    np.testing.assert_allclose(a.mean, [0.3, 0.45, 0.4, 0.6])
    # two values x, y: std (ddof=1) = |x-y|/sqrt(2), SEM = std/sqrt(2) = |x-y|/2
    np.testing.assert_allclose(a.sem, [0.1, 0.05, 0.1, 0.1])
    assert a.seeds == 2
    assert a.runs == [tmp_path / "a" / "seed2", tmp_path / "a" / "seed10"]  # numeric order
    b = curves["b"]
    assert b.seeds == 1
    np.testing.assert_array_equal(b.sem, [0.0, 0.0])  # one seed: no spread


def test_truncated_last_line_and_runs_without_evals_are_ignored(tmp_path, capsys):
    run = write_run(tmp_path / "a" / "seed0", [(0, 0.2), (10, 0.4)], done=False)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "eval", "step": 2, "time": 20, "eval/acc')  # killed mid-write
    write_run(tmp_path / "a" / "seed1", [], done=False)  # started, nothing evaluated yet
    a = aggregate_curves(tmp_path)["a"]
    np.testing.assert_array_equal(a.times, [0, 10])
    np.testing.assert_allclose(a.mean, [0.2, 0.4])
    assert a.seeds == 1 and "no eval records yet" in capsys.readouterr().out


def make_comparison(tmp_path: Path) -> Path:
    write_spec(tmp_path, "grpo", ["grpo", "pods", "slow"])
    write_run(tmp_path / "grpo" / "seed0", [(0, 0.5), (10, 0.6), (20, 0.8), (30, 0.7)],
              [{"step": 1, "time": 2, "mem/peak_rss_mb": 100, "time/generate": 0.5},
               {"step": 10, "time": 30, "mem/peak_rss_mb": 150, "mem/peak_gpu_mb": 900,
                "time/generate": 1.5, "time/update": 2.0}])
    write_run(tmp_path / "grpo" / "seed1", [(0, 0.5), (10, 0.8), (20, 0.6), (30, 0.9)],
              [{"step": 12, "time": 30, "mem/peak_rss_mb": 120}])
    write_run(tmp_path / "pods" / "seed0", [(0, 0.5), (8, 0.9), (16, 0.9)],
              [{"step": 4, "time": 16, "mem/peak_rss_mb": 200}])
    write_run(tmp_path / "pods" / "seed1", [(0, 0.5), (8, 0.7), (16, 0.9)],
              [{"step": 4, "time": 16, "mem/peak_rss_mb": 210, "rollout/completion_len": 7.0,
                "select/completion_len": 5.0}])
    write_run(tmp_path / "slow" / "seed0", [(0, 0.5), (20, 0.6), (40, 0.75)])
    return tmp_path


def test_summary_speedup_worked_numbers(tmp_path, capsys):
    rows = {r["variant"]: r for r in summarize(make_comparison(tmp_path))}
    # grpo mean on [0, 10, 20, 30]: .5, (.6+.8)/2=.7, (.8+.6)/2=.7, (.7+.9)/2=.8
    g = rows["grpo"]
    assert g["peak_acc"] == pytest.approx(0.8) and g["time_to_peak"] == 30
    assert g["time_to_baseline_peak"] == 30 and g["speedup"] == 1.0
    assert g["sec_per_step"] == pytest.approx(2.75)  # mean(30 s / 10 steps, 30 s / 12 steps)
    assert g["peak_mem_mb"] == 150 and g["peak_gpu_mb"] == 900
    assert g["generate_sec"] == 1.0 and g["update_sec"] == 2.0  # means over step records
    # pods mean on [0, 8, 16]: .5, (.9+.7)/2=.8, .9; first reaches grpo's peak .8 at 8 s
    p = rows["pods"]
    assert p["peak_acc"] == pytest.approx(0.9) and p["time_to_peak"] == 16
    assert p["time_to_baseline_peak"] == 8
    assert p["speedup"] == pytest.approx(30 / 8)  # 3.75x
    assert p["peak_gpu_mb"] is None and p["final_acc"] == pytest.approx(0.9)
    # slow peaks at .75 < .8: never reaches the baseline's peak
    s = rows["slow"]
    assert s["time_to_baseline_peak"] is None and s["speedup"] is None
    assert s["sec_per_step"] is None and s["final_acc"] == pytest.approx(0.75)
    # the same against optimizer steps (write_run numbers evals 0, 1, 2, ...):
    # grpo mean by step .5, .7, .7, .8 -> peak .8 at step 3; pods .5, .8, .9 -> .8 at step 1
    assert (g["steps_to_baseline_peak"], p["steps_to_baseline_peak"]) == (3, 1)
    assert s["steps_to_baseline_peak"] is None

    assert json.loads((tmp_path / "summary.json").read_text()) == list(rows.values())
    table = (tmp_path / "summary.md").read_text()
    assert p["completion_len"] == 7.0 and p["kept_completion_len"] == 5.0
    assert "| time to grpo peak (s) | speed-up vs grpo | steps to grpo peak |" in table
    assert "| pods | 2 | 90.0 | 16.0 | 8.0 | 3.75x | 1 | 90.0 | 4.000 | - | - | 7.0 | 210 | - |" \
        in table
    assert "| slow | 1 | 75.0 | 40.0 | never | never | never | 75.0 |" in table
    assert table in capsys.readouterr().out
    png = (tmp_path / "curves.png").read_bytes()
    assert png.startswith(PNG) and len(png) > 5000


def test_two_baselines_each_get_a_speedup(tmp_path):
    """The paper's two comparisons in one spec: PODS against GRPO with fewer rollouts and
    against GRPO-GA on all of them."""
    make_comparison(tmp_path)
    spec = yaml.safe_load((tmp_path / "compare.yaml").read_text())
    spec["baseline"] = ["grpo", "slow"]
    (tmp_path / "compare.yaml").write_text(yaml.safe_dump(spec))
    rows = {r["variant"]: r for r in summarize(tmp_path)}
    p = rows["pods"]
    # the first baseline stays the row's own speed-up
    assert p["speedup"] == pytest.approx(30 / 8) and p["vs"]["grpo"]["speedup"] == p["speedup"]
    # slow peaks (.75) at 40 s; pods first reaches .75 at 8 s (mean .8): 5x, at step 1;
    # grpo reaches .75 at 30 s (mean .8): 40/30
    assert p["vs"]["slow"] == {"time_to_peak": 8, "speedup": 5.0, "steps_to_peak": 1}
    assert rows["grpo"]["vs"]["slow"]["speedup"] == pytest.approx(40 / 30)
    assert rows["slow"]["vs"]["slow"]["speedup"] == 1.0
    assert rows["slow"]["vs"]["grpo"]["speedup"] is None  # never reaches .8
    table = (tmp_path / "summary.md").read_text()
    assert "| speed-up vs grpo | steps to grpo peak | time to slow peak (s) | speed-up vs " \
           "slow |" in table
    assert "| pods | 2 | 90.0 | 16.0 | 8.0 | 3.75x | 1 | 8.0 | 5.00x | 1 | 90.0 |" in table


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


def test_baseline_peaking_at_time_zero_gives_no_speedup(tmp_path):
    write_spec(tmp_path, "base", ["base", "other"])
    write_run(tmp_path / "base" / "seed0", [(0, 0.5), (10, 0.4)])
    write_run(tmp_path / "other" / "seed0", [(0, 0.5), (10, 0.6)])
    rows = {r["variant"]: r for r in summarize(tmp_path)}
    assert rows["base"]["time_to_peak"] == 0 and rows["base"]["speedup"] == 1.0
    # reaches .5 at 0 s; 0 s / 0 s is no speed-up
    assert rows["other"]["time_to_baseline_peak"] == 0 and rows["other"]["speedup"] is None
    assert "| n/a |" in (tmp_path / "summary.md").read_text()


def test_summarize_needs_a_comparison_folder(tmp_path):
    with pytest.raises(ValueError, match="has no compare.yaml"):
        summarize(tmp_path)


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
     "variant 'pods' overrides unknown field 'max_stesp'. Did you mean max_steps"),
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
