import struct

import numpy as np
import pytest

from pods.experiments.plots import plot_compare, plot_run
from pods.runs.metrics import MetricsWriter

PNG = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    """(width, height) of a PNG file, checking its signature; IHDR follows it."""
    data = path.read_bytes()
    assert data.startswith(PNG) and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def write_metrics(run_dir, records):
    w = MetricsWriter(run_dir / "metrics.jsonl")
    for r in records:
        w.write(r)
    w.close()


def test_plot_run_writes_two_panel_png(tmp_path):
    run = tmp_path / "pods-64-16"
    write_metrics(run, [{"kind": "eval", "step": 0, "time": 0.0, "eval/accuracy": 0.1}]
                  + [{"kind": "step", "step": i, "time": 2.0 * i, "rollout/reward_mean": i / 10}
                     for i in range(1, 6)]
                  + [{"kind": "eval", "step": 5, "time": 10.0, "eval/accuracy": 0.4},
                     {"kind": "done", "step": 5, "time": 10.0}])
    path = plot_run(run)
    assert path == run / "curve.png"
    assert png_size(path) == (1100, 400)  # figsize (11, 4) at 100 dpi
    assert path.stat().st_size > 10_000  # lines, labels and a title, not a blank image


@pytest.mark.parametrize("records", [
    [{"kind": "eval", "step": 0, "time": 0.0, "eval/accuracy": 0.25}],  # only the time-0 eval
    [],  # nothing written yet
])
def test_plot_run_with_almost_no_records(tmp_path, records):
    write_metrics(tmp_path, records)
    assert png_size(plot_run(tmp_path)) == (1100, 400)


def test_plot_run_needs_metrics(tmp_path):
    with pytest.raises(ValueError, match="has no metrics.jsonl; pass a run folder"):
        plot_run(tmp_path)


def curve(times, mean, sem, seeds):
    """Plain data, as plot_compare takes it: numpy arrays or lists alike."""
    return {"times": np.array(times, float), "mean": mean, "sem": sem, "seeds": seeds}


def test_plot_compare_writes_png(tmp_path):
    curves = {"grpo": curve([0, 10, 20], [0.5, 0.6, 0.7], [0.0, 0.02, 0.03], 3),
              "pods": curve([0, 8], [0.5, 0.75], [0.0, 0.0], 1)}
    path = plot_compare(curves, tmp_path / "sub" / "curves.png", baseline="grpo")
    assert path == tmp_path / "sub" / "curves.png"
    assert png_size(path) == (700, 450) and path.stat().st_size > 10_000
    with pytest.raises(ValueError, match="baseline 'gpro' has no curve; use one of grpo, pods"):
        plot_compare(curves, tmp_path / "x.png", baseline="gpro")
