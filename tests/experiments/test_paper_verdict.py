"""benchmarks/smollm2_paper_verdict.py on the committed records of the paper comparison: the
published rows read back as the results page prints them, and the by-seed differences the
page quotes recomputed from them."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

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
