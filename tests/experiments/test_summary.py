"""The summary of a comparison folder, on hand-written runs with worked numbers: mean curves,
speed-ups and their 95% bootstrap intervals over seeds, verdicts, the probability of ending
higher, and what summary.json and summary.md say."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from comparison_runs import write_run, write_spec

from pods.experiments.summary import aggregate_curves, summarize
from pods.experiments.tables import markdown_table

PNG = b"\x89PNG\r\n\x1a\n"


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


def test_unfinished_runs_and_runs_without_evals_are_left_out(tmp_path, capsys):
    write_run(tmp_path / "a" / "seed0", [(0, 0.2), (10, 0.4)])
    run = write_run(tmp_path / "a" / "seed1", [(0, 0.9)], done=False)  # still running
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "eval", "step": 1, "time": 5, "eval/acc')  # killed mid-write
    write_run(tmp_path / "a" / "seed2", [], done=False)  # started, nothing evaluated yet
    write_run(tmp_path / "a" / "seed3", [])  # finished without an evaluation
    a = aggregate_curves(tmp_path)["a"]
    np.testing.assert_array_equal(a.times, [0, 10])  # seed1 would cut the grid to [0]
    np.testing.assert_allclose(a.mean, [0.2, 0.4])
    out = capsys.readouterr().out
    assert a.seeds == 1 and "no eval records yet" in out and "seed3" in out
    assert out.count('not finished (no "done" record), left out') == 2


def make_comparison(tmp_path: Path) -> Path:
    write_spec(tmp_path, "grpo", ["grpo", "pods", "slow"])
    write_run(tmp_path / "grpo" / "seed0", [(0, 0.5), (10, 0.6), (20, 0.8), (30, 0.7)],
              [{"step": 1, "time": 2, "mem/peak_rss_mb": 100, "time/generate": 0.5},
               {"step": 10, "time": 30, "mem/peak_rss_mb": 150, "mem/peak_gpu_mb": 900,
                "time/generate": 1.5, "time/update": 2.0}])
    write_run(tmp_path / "grpo" / "seed1", [(0, 0.5), (10, 0.8), (20, 0.6), (30, 0.9)],
              [{"step": 12, "time": 30, "mem/peak_rss_mb": 120}])
    write_run(tmp_path / "pods" / "seed0", [(0, 0.5), (8, 0.9), (16, 0.9)],
              [{"step": 4, "time": 16, "mem/peak_rss_mb": 200, "update/positions": 30,
                "update/padded_positions": 100}])
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
    assert g["final_acc"] == pytest.approx(0.8)  # (0.7 + 0.9) / 2
    # the same against optimizer steps (write_run numbers evals 0, 1, 2, ...):
    # grpo mean by step .5, .7, .7, .8 -> peak .8 at step 3; pods .5, .8, .9 -> .8 at step 1
    assert (g["steps_to_baseline_peak"], p["steps_to_baseline_peak"]) == (3, 1)
    assert s["steps_to_baseline_peak"] is None
    # 2 seeds a side: estimates, no interval (2 seeds have 3 distinct resamples) and no
    # verdict
    assert p["speedup_ci95"] is None and p["verdict"] is None
    assert p["steps_ratio"] == 3.0 and p["steps_ratio_ci95"] is None
    assert p["steps_verdict"] is None
    # pods ends at .9, .9; grpo at .7, .9: pairs 1 + 1/2 + 1 + 1/2 of 4
    assert p["p_better_at_end"] == 0.75 and p["p_better_at_end_ci95"] is None
    assert (p["seeds"], p["seeds_baseline"], p["vs"]["grpo"]["seeds_variant"]) == (2, 2, 2)
    # one seed on a side: estimates without intervals; the baseline itself: none either
    assert s["speedup_ci95"] is None and s["verdict"] is None
    assert s["p_better_at_end"] == 0.5 and s["p_better_at_end_ci95"] is None  # .75 vs .7, .9
    assert g["speedup_ci95"] is None and g["verdict"] is None and g["p_better_at_end"] is None

    # paired by seed: pods ends .9, .9 against grpo's .7, .9: differences .2 and 0, mean .1,
    # sd .1414; t(.975, 1 dof) 12.706 x .1414 / sqrt 2 = 1.2706
    pv = p["vs"]["grpo"]
    assert (pv["paired_seeds"], pv["paired_wins"]) == (2, 1)
    assert pv["paired_diff"] == pytest.approx(0.1)
    assert pv["paired_diff_ci95"] == pytest.approx([0.1 - 1.27062, 0.1 + 1.27062], abs=1e-4)
    sv = s["vs"]["grpo"]  # slow's one seed (seed0: .75 against .7): no interval
    assert (sv["paired_seeds"], sv["paired_wins"], sv["paired_diff_ci95"]) == (1, 1, None)
    assert sv["paired_diff"] == pytest.approx(0.05)
    assert g["vs"]["grpo"]["paired_diff"] is None
    assert g["peak_at_last_eval"] and p["peak_at_last_eval"]  # both still at their ends

    assert json.loads((tmp_path / "summary.json").read_text()) == list(rows.values())
    table = (tmp_path / "summary.md").read_text()
    assert p["completion_len"] == 7.0 and p["kept_completion_len"] == 5.0
    # first what a reader needs: accuracies, the speed-up, the paired end difference
    assert table.startswith("Peak and final acc: the highest and the last value of the "
                            "variant's mean curve over seeds")
    assert "\n\n| variant | seeds | peak acc (%) | final acc (%) | speed-up vs grpo [95% CI] | " \
        "each seed's last acc - grpo's, paired (points) [95% CI] |\n|---|---|---|---|---|---|\n" \
        "| grpo | 2 | 80.0 | 80.0 | 1.00x | - |\n" \
        "| pods | 2 | 90.0 | 90.0 | 3.75x (2 seeds: no CI, 3 a side give one) | +10.0 " \
        "[-117.1, +137.1] (2 seeds, 1 higher, sign-flip p = 1.000, 80% power beyond ±100) |\n" \
        "| slow | 1 | 75.0 | 75.0 | never (1 seed: no CI, 3 a side give one) | +5.0 (1 seed, " \
        "1 higher) |\n\n### Details\n" in table
    # then the rest
    assert "| variant | time to peak (s) | final at (s) | time to grpo peak (s) | steps to grpo " \
           "peak | steps ratio vs grpo [95% CI] | P(end above grpo) [95% CI] | s/step |" in table
    assert "| pods | 16.0 (last eval) | 16.0 | 8.0 | 1.0 | 3.00x (2 seeds: no CI, 3 a side " \
           "give one) | 0.75 (2 seeds: no CI, 3 a side give one) | 4.00 | - | - | 0.300 | 7.0 " \
           "| 210 | - |" in table
    assert p["positions_share"] == pytest.approx(0.3) and g["positions_share"] is None
    assert "| slow | 40.0 (last eval) | 40.0 | never | never | never (1 seed: no CI, 3 a side " \
           "give one) | 0.50 (1 seed: no CI, 3 a side give one) |" in table
    assert table.startswith(markdown_table(list(rows.values())))
    assert table in capsys.readouterr().out
    # each run on a line: evaluation i headed by the median of the runs' i-th eval times
    # (eval 1 at 10, 10, 8, 8, 20 s: 10), then steps, training s / steps, completion tokens
    assert table.split("## Each run\n\n")[1] == (
        "| variant | seed | 0 s | 10 s | 20 s | 30 s | steps | s/step | completion tokens "
        "(last 10 steps) |\n|---|---|---|---|---|---|---|---|---|\n"
        "| grpo | 0 | 50.0 | 60.0 | 80.0 | 70.0 | 10 | 3.00 | - |\n"
        "| grpo | 1 | 50.0 | 80.0 | 60.0 | 90.0 | 12 | 2.50 | - |\n"
        "| pods | 0 | 50.0 | 90.0 | 90.0 | - | 4 | 4.00 | - |\n"
        "| pods | 1 | 50.0 | 70.0 | 90.0 | - | 4 | 4.00 | 7 |\n"
        "| slow | 0 | 50.0 | 60.0 | 75.0 | - | - | - | - |\n")
    png = (tmp_path / "curves.png").read_bytes()
    assert png.startswith(PNG) and len(png) > 5000
    seeds = (tmp_path / "seeds.png").read_bytes()  # each seed of each variant
    assert seeds.startswith(PNG) and len(seeds) > 5000


def test_each_seed_is_a_line_of_its_variants_panel(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from pods.experiments import plots

    drawn, real = {}, Figure.savefig

    def keep(fig, path, **kwargs):
        drawn.update({ax.get_title(): [line.get_label() for line in ax.get_lines()]
                      for ax in fig.axes})
        return real(fig, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    plots.plot_seeds({"pods": [("seed100", [0, 360], [0.09, 0.27]),
                               ("seed101", [0, 360], [0.09, 0.23])],
                      "grpo": [("seed0", [0, 360], [0.09, 0.1])]}, tmp_path / "s.png")
    assert drawn == {"pods (2 seeds)": ["seed100", "seed101"], "grpo (1 seed)": ["seed0"]}


def test_peak_and_final_come_from_one_curve_when_seeds_differ_in_length(tmp_path):
    """Seeds of different lengths: seed0 goes on to 0.9 after seed1 stopped. Peak and final
    are read off the same mean curve (to 180 s, where seed1 stopped), so the peak is never
    below the final; seed0's later evals count in the paired end difference only."""
    write_run(tmp_path / "pods" / "seed0", [(0, 0.1), (100, 0.6), (150, 0.7), (300, 0.9)])
    write_run(tmp_path / "pods" / "seed1", [(0, 0.1), (100, 0.5), (180, 0.6)])
    write_spec(tmp_path, "pods", ["pods"])
    [row] = summarize(tmp_path)
    # mean curve: 0 s .1, 100 s .55, 150 s (.7 + .5) / 2 = .6, 180 s (.7 + .6) / 2 = .65
    assert row["peak_acc"] == pytest.approx(0.65) and row["time_to_peak"] == 180
    assert row["final_acc"] == pytest.approx(0.65) and row["time_of_final"] == 180
    assert row["peak_acc"] >= row["final_acc"]  # not .75 from each seed's last eval
    # steps at 180 s: seed0's eval at 150 s was its step 2, seed1's at 180 s its step 2
    assert row["steps_to_baseline_peak"] == 2.0


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
    # pods against slow by steps: slow peaks at step 2 (40 s), pods' seeds are at step 1 at
    # 8 s; it ends at .9 against .75 in both pairs; slow has one seed: no interval
    assert p["vs"]["slow"] == {
        "time_to_peak": 8, "speedup": 5.0, "speedup_ci95": None, "verdict": None,
        "steps_to_peak": 1.0, "steps_ratio": 2.0, "steps_ratio_ci95": None,
        "steps_verdict": None, "p_better_at_end": 1.0, "p_better_at_end_ci95": None,
        "seeds_variant": 2, "seeds_baseline": 1, "paired_seeds": 1, "paired_wins": 1,
        "paired_diff": pytest.approx(0.15), "paired_diff_ci95": None,
        "paired_p": None, "paired_detectable": None}  # seed0 .9 vs .75
    assert rows["grpo"]["vs"]["slow"]["speedup"] == pytest.approx(40 / 30)
    assert rows["slow"]["vs"]["slow"]["speedup"] == 1.0
    assert rows["slow"]["vs"]["grpo"]["speedup"] is None  # never reaches .8
    table = (tmp_path / "summary.md").read_text()
    assert "| speed-up vs grpo [95% CI] | each seed's last acc - grpo's, paired (points) [95% " \
        "CI] | speed-up vs slow [95% CI] | each seed's last acc - slow's, paired (points) " \
        "[95% CI] |" in table
    assert ("| pods | 2 | 90.0 | 90.0 | 3.75x (2 seeds: no CI, 3 a side give one) | +10.0 "
            "[-117.1, +137.1] (2 seeds, 1 higher, sign-flip p = 1.000, 80% power beyond ±100) "
            "| 5.00x (1 seed: no CI, 3 a side give one) | +15.0 (1 seed, 1 higher) |") in table
    assert "| P(end above grpo) [95% CI] | time to slow peak (s) | steps to slow peak |" in table
    assert "| 8.0 | 1.0 | 2.00x (1 seed: no CI, 3 a side give one) | 1.00 (1 seed: no CI, 3 " \
        "a side give one) |" in table


def test_baseline_peaking_at_time_zero_gives_no_speedup(tmp_path):
    write_spec(tmp_path, "base", ["base", "other"])
    write_run(tmp_path / "base" / "seed0", [(0, 0.5), (10, 0.4)])
    write_run(tmp_path / "other" / "seed0", [(0, 0.5), (10, 0.6)])
    rows = {r["variant"]: r for r in summarize(tmp_path)}
    assert rows["base"]["time_to_peak"] == 0 and rows["base"]["speedup"] == 1.0
    # reaches .5 at 0 s; 0 s / 0 s is no speed-up
    assert rows["other"]["time_to_baseline_peak"] == 0 and rows["other"]["speedup"] is None
    table = (tmp_path / "summary.md").read_text()  # n/a, and why
    assert "| other | 1 | 60.0 | 60.0 | n/a (base's peak was its start) |" in table
    assert "| other | 10.0 (last eval) | 10.0 | 0.0 | 0.0 | n/a (reached at step 0) |" in table


def test_summarize_needs_a_comparison_folder(tmp_path):
    with pytest.raises(ValueError, match="has no compare.yaml"):
        summarize(tmp_path)




def write_seeds(out: Path, variant: str, runs) -> None:
    for seed, evals in enumerate(runs):
        write_run(out / variant / f"seed{seed}", evals)


def test_a_clear_speedup_is_faster_and_its_reverse_slower(tmp_path):
    """Every pods seed reaches .8 in half the time of a grpo seed, with 1-2 s of spread:
    the speed-up's interval lies above 1 (and grpo's against pods below 1). By optimizer
    steps the two are alike, so that ratio's interval holds 1."""
    write_spec(tmp_path, ["grpo", "pods"], ["grpo", "pods"])
    # (time, accuracy, step): grpo takes 2 s a step, pods 1 s
    write_seeds(tmp_path, "grpo", [[(0, .5, 0), (40 + 2 * i, .8, 20 + i), (60, .8, 30)]
                                   for i in range(3)])
    write_seeds(tmp_path, "pods", [[(0, .5, 0), (20 + i, .8, 20 + i), (60, .8, 60)]
                                   for i in range(3)])
    rows = {r["variant"]: r for r in summarize(tmp_path)}
    p, g = rows["pods"], rows["grpo"]
    # grpo's mean is .8 once all three seeds are (44 s, when its seeds had made 20, 21 and
    # 22 steps: 21 on average); pods' at 22 s, its seeds at steps 20, 21, 22 too
    assert (g["time_to_peak"], p["time_to_baseline_peak"]) == (44, 22)
    assert p["speedup"] == 2.0 and p["steps_ratio"] == 1.0
    # a resample's time is its slowest seed: grpo 40, 42 or 44 s, pods 20, 21 or 22 s, so
    # a speed-up lies in [40/22, 44/20]; each end has probability (1/27)(19/27) = 2.6%
    low, high = p["speedup_ci95"]
    assert 40 / 22 <= low < 2.0 < high <= 44 / 20 and p["verdict"] == "faster"
    low, high = p["steps_ratio_ci95"]  # steps: 20, 21 or 22 on both sides
    assert 20 / 22 <= low < 1.0 < high <= 22 / 20
    assert p["steps_verdict"] == "not distinguishable"
    back = g["vs"]["pods"]  # grpo against pods: 22 s / 44 s
    assert back["speedup"] == 0.5 and back["verdict"] == "slower"
    assert 20 / 44 <= back["speedup_ci95"][0] < 0.5 < back["speedup_ci95"][1] <= 22 / 40
    # every run ends at .8: all pairs tie, in every resample
    assert p["p_better_at_end"] == 0.5 and p["p_better_at_end_ci95"] == [0.5, 0.5]
    assert (p["seeds"], p["seeds_baseline"]) == (3, 3)
    table = (tmp_path / "summary.md").read_text()
    assert f"| 2.00x [{p['speedup_ci95'][0]:.2f}, {p['speedup_ci95'][1]:.2f}] faster |" \
        in table
    assert "| 0.50x [" in table and "] slower |" in table
    assert "| 22.0 | 21.0 | 1.00x [" in table and "] not distinguishable | 0.50 [0.50, 0.50] |" \
        in table
    # the same folder gives the same summary: the generator is seeded
    assert summarize(tmp_path) == list(rows.values())


def test_overlapping_seeds_are_not_distinguishable(tmp_path):
    """grpo's seeds reach .8 at 10, 20, 30 s, pods' at 12, 18, 28 s: pods' point estimate
    is a little ahead (30/28) but resampling the seeds puts it on either side of 1."""
    write_spec(tmp_path, "grpo", ["grpo", "pods"])
    # every run ends lower (the mean's peak stays .8, reached when all picked seeds are)
    write_seeds(tmp_path, "grpo", [[(0, .5), (t, .8), (40, end)]
                                   for t, end in ((10, .5), (20, .7), (30, .75))])
    write_seeds(tmp_path, "pods", [[(0, .5), (t, .8), (40, end)]
                                   for t, end in ((12, .6), (18, .7), (28, .75))])
    p = {r["variant"]: r for r in summarize(tmp_path)}["pods"]
    assert p["speedup"] == pytest.approx(30 / 28)
    # a resample's time is its slowest seed. P(grpo's <= 20 s) = 8/27 and P(pods' = 28 s)
    # = 19/27: 21% of resamples give 20/28 or less; as many give 30/18 or more
    low, high = p["speedup_ci95"]
    assert 10 / 28 <= low <= 20 / 28 and 30 / 18 <= high <= 30 / 12
    assert p["verdict"] == "not distinguishable"
    # ends: pods .6, .7, .75 against grpo .5, .7, .75. .6 beats .5 (1); .7 beats .5, ties
    # .7 (1.5); .75 beats .5 and .7, ties .75 (2.5): 5 of 9 pairs
    assert p["p_better_at_end"] == pytest.approx(5 / 9)
    low, high = p["p_better_at_end_ci95"]
    assert 0 <= low < 0.5 < 5 / 9 < high <= 1  # not a clear win either
    assert f"| {5 / 9:.2f} [{low:.2f}, {high:.2f}] |" in (tmp_path / "summary.md").read_text()


def test_never_reaching_the_peak_still_has_an_interval(tmp_path):
    """pods never reaches grpo's mean peak, but only because of grpo's lucky seed: a
    resample counts "never" as speed-up 0, and the resamples without the lucky seed tie."""
    write_spec(tmp_path, "grpo", ["grpo", "pods"])
    write_seeds(tmp_path, "grpo", [[(0, .5), (10, .8), (20, .8)]]
                + [[(0, .5), (10, .6), (20, .6)]] * 2)
    write_seeds(tmp_path, "pods", [[(0, .5), (10, .6), (20, .65)]] * 3)
    p = {r["variant"]: r for r in summarize(tmp_path)}["pods"]
    # grpo's mean peaks at (.8 + .6 + .6) / 3 = .667 > .65: pods never gets there. A grpo
    # resample holding the lucky seed peaks higher still: 0; one without it (probability
    # (2/3)^3 = 30%) peaks at .6, which pods reaches at 10 s as grpo does: 1
    assert p["time_to_baseline_peak"] is None and p["speedup"] is None
    assert p["speedup_ci95"] == [0.0, 1.0] and p["verdict"] == "not distinguishable"
    assert "| never | never [0.00, 1.00] not distinguishable |" in \
        (tmp_path / "summary.md").read_text()


def test_five_seeds_a_side_give_an_interval_and_a_verdict(tmp_path):
    """5 seeds a side, each pods seed reaching .8 in half its grpo seed's time at the same
    step: grpo's mean is .8 at 48 s (its slowest seed), pods' at 24 s, 2.0x. A resample's
    time is its slowest seed's: grpo 40-48 s, pods 20-24 s, so every resample lies in
    [40/24, 48/20] = [1.67, 2.40], above 1: faster. By steps the seeds are alike."""
    write_spec(tmp_path, "grpo", ["grpo", "pods"])
    write_seeds(tmp_path, "grpo", [[(0, .5, 0), (40 + 2 * i, .8, 20 + i), (60, .7, 30 + i)]
                                   for i in range(5)])
    write_seeds(tmp_path, "pods", [[(0, .5, 0), (20 + i, .8, 20 + i), (60, .75, 60)]
                                   for i in range(5)])
    p = {r["variant"]: r for r in summarize(tmp_path)}["pods"]
    assert p["speedup"] == 2.0 and p["verdict"] == "faster"
    low, high = p["speedup_ci95"]
    assert 40 / 24 <= low < 2.0 < high <= 48 / 20
    # steps when the mean got there: grpo's seeds at 48 s were at 20..24 (22 on average),
    # pods' at 24 s at 20..24 too
    assert (p["vs"]["grpo"]["steps_to_peak"], p["steps_ratio"]) == (22.0, 1.0)
    assert p["steps_verdict"] == "not distinguishable"
    # the mean curve falls to .75 by 60 s: the peak is above the final, as on its curve
    assert (p["peak_acc"], p["final_acc"]) == (pytest.approx(0.8), pytest.approx(0.75))
    # every pods seed ends .05 above its grpo seed: 5 of 5, the smallest sign-flip p
    pv = p["vs"]["grpo"]
    assert (pv["paired_wins"], pv["paired_p"]) == (5, pytest.approx(2 / 32))


def test_summary_json_names(tmp_path):
    """The names a reader looks up in summary.json, top level (the first baseline) and per
    baseline under ``vs``."""
    summarize(make_comparison(tmp_path))
    row = json.loads((tmp_path / "summary.json").read_text())[1]
    per_baseline = {"time_to_peak", "speedup", "speedup_ci95", "verdict", "steps_to_peak",
                    "steps_ratio", "steps_ratio_ci95", "steps_verdict", "p_better_at_end",
                    "p_better_at_end_ci95", "seeds_variant", "seeds_baseline",
                    "paired_seeds", "paired_wins", "paired_diff", "paired_diff_ci95", "paired_p",
                    "paired_detectable"}
    assert set(row["vs"]["grpo"]) == per_baseline
    top = per_baseline - {"time_to_peak", "steps_to_peak", "seeds_variant", "paired_seeds",
                          "paired_wins", "paired_diff", "paired_diff_ci95", "paired_p",
                          "paired_detectable"}
    assert top | {"time_to_baseline_peak", "steps_to_baseline_peak", "seeds"} <= set(row)
    assert row["variant"] == "pods" and row["speedup_ci95"] == row["vs"]["grpo"]["speedup_ci95"]
