"""benchmarks/runs/smollm2_paper_verdict.py on the committed records of the paper comparison: the
published rows read back as the results page prints them, and the by-seed differences the
page quotes recomputed from them."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "runs"))

import smollm2_paper_verdict as verdict  # noqa: E402

FOLDER = ROOT / "results" / "smollm2_paper"


def test_the_published_rows_are_counts_out_of_256_on_one_grid():
    grid, rows = verdict.published(FOLDER / "published_19.csv")
    assert grid == [0, 156, 309, 457, 605, 755, 906]
    assert len(rows) == 19 and len({(r.variant, r.seed) for r in rows}) == 19
    counts = np.array([r.accs for r in rows]) * 256
    assert np.abs(counts - counts.round()).max() < 0.13  # 0.1-point rounding of k/256
    assert all(r.accs[0] == pytest.approx(26 / 256, abs=5e-4) for r in rows)  # one model


def test_the_page_s_by_seed_differences_come_from_the_rows():
    _, rows = verdict.published(FOLDER / "published_19.csv")
    end = {(r.variant, r.seed): 100 * r.accs[-1] for r in rows}
    diffs = [round(end["pods", s] - end["grpo", s], 1) for s in ("200", "201", "202", "203")]
    assert diffs == [14.0, -11.3, -19.2, 4.7]  # docs/results.md, "The seeds differ more"


def test_a_run_both_published_and_recorded_is_refused():
    grid, rows = verdict.published(FOLDER / "published_19.csv")
    with pytest.raises(ValueError, match=r"both published and recorded: \[\('pods', '200'\)\]"):
        verdict.check([*rows, rows[0]], grid)
    with pytest.raises(ValueError, match="without one evaluation per grid time"):
        verdict.check([verdict.Row("pods", "204", [0.1], [], None)], grid)


def variants_from_the_records():
    grid, rows = verdict.published(FOLDER / "published_19.csv")
    rows += verdict.recorded(FOLDER)
    names = ["pods", "grpo", "grpo_ga", "grpo_ga_one_group", "random"]
    return grid, {n: sorted((r for r in rows if r.variant == n), key=lambda r: int(r.seed))
                  for n in names}


def test_the_page_s_claims_about_the_missing_runs_come_from_the_rows():
    # docs/results.md, "What the 6 missing runs could have changed" and the verdicts
    grid, variants = variants_from_the_records()
    table = verdict.missing_table(variants, grid, planned=5).splitlines()
    row = {line.split(" | ")[0].strip("| "): line.split(" | ")[2:] for line in table[2:]}
    assert all(c.strip(" |") == "nothing decides" for c in row["pods - grpo"])
    assert all(c.strip(" |") == "nothing decides" for c in row["pods - random"])
    assert row["pods - grpo_ga"][1] == "decided by one from +10.5 to +37.5"
    assert row["grpo_ga_one_group - grpo_ga"][0] == "decided on 4, undone by one of -2.0"


def test_the_page_s_power_figures_come_from_the_rows():
    grid, variants = variants_from_the_records()
    cells = verdict.power_table(variants, grid, planned=5).splitlines()[2].split(" | ")[1:]
    assert cells[-1].strip(" |") == "sd 15.1: 25.3; 10 points: 20, 5: 74"  # pods - grpo, 906 s
