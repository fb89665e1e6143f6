"""report_to: parsing, validation, and a missing tracker refused before the model loads."""

import importlib.util

import pytest

from pods.cli import main
from pods.config import from_dict, load_yaml
from pods.tracking import Trackers, parse_report_to, tracker_values


@pytest.mark.parametrize("value, names", [
    ("none", ()), ("", ()), ("tensorboard", ("tensorboard",)),
    ("wandb, MLflow,wandb", ("wandb", "mlflow")), (["trackio", "none"], ("trackio",)),
])
def test_report_to_values(value, names):
    config = from_dict(dict(report_to=value))
    assert parse_report_to(config.tracking.report_to) == names


def test_unknown_tracker_is_refused_with_the_choices():
    from pods.train.checks import check

    with pytest.raises(ValueError, match="unknown tracker 'tensorbord' in report_to; use "
                       "none or a comma-separated list of tensorboard, wandb, trackio, "
                       "mlflow"):
        check(from_dict(dict(report_to="tensorbord")))  # before a run loads anything


def test_yaml_list(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("report_to: [tensorboard, mlflow]\n")
    assert from_dict(load_yaml(path)).tracking.report_to == "tensorboard,mlflow"


def test_missing_tracker_fails_before_the_model_loads(monkeypatch, capsys, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    code = main(["train", "--report-to", "tensorboard,wandb", "--model",
                 "no-such-org/no-such-model", "--max-steps", "1", "--out-dir",
                 str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "report_to asks for wandb, which is not installed; install with `pip install " \
           "-e '.[wandb]'` in pods's clone" in err  # not the model's loading error: it came first
    assert not list(tmp_path.iterdir())


def test_only_numbers_go_to_trackers():
    record = {"kind": "eval", "step": 3, "time": 1.5, "eval/accuracy": 0.25,
              "data/dropped_test": 0, "flag": True, "name": "x"}
    assert tracker_values(record) == {"time": 1.5, "eval/accuracy": 0.25,
                                      "data/dropped_test": 0.0}


def test_no_trackers_write_nothing(tmp_path):
    trackers = Trackers("none", tmp_path, project="p", group=None, config={}, start_step=0)
    trackers.write({"kind": "step", "step": 1, "time": 1.0})
    trackers.close()
    assert not list(tmp_path.iterdir())


def test_a_failing_tracker_is_dropped_with_a_warning_and_the_run_goes_on(tmp_path, monkeypatch):
    """A tracker that raises (its server gone, say) must not stop a long run: it is dropped
    after one warning; the others keep logging."""
    from pods.tracking import backends

    logged = []

    class Flaky:
        def __init__(self, run, state):
            pass

        def log(self, values, step):
            raise ConnectionError("server went away")

        def close(self):
            pass

    class Fine(Flaky):
        def log(self, values, step):
            logged.append(step)

    monkeypatch.setitem(backends.BACKENDS, "wandb", Flaky)
    monkeypatch.setitem(backends.BACKENDS, "mlflow", Fine)
    trackers = Trackers("wandb,mlflow", tmp_path, project="p", group=None, config={},
                        start_step=0)
    with pytest.warns(UserWarning, match=r"tracker Flaky failed at step 1 \(ConnectionError: "
                                         r"server went away\)"):
        trackers.write({"kind": "step", "step": 1, "time": 1.0})
    trackers.write({"kind": "step", "step": 2, "time": 2.0})  # no second warning
    trackers.close()
    assert logged == [1, 2] and [type(b).__name__ for b in trackers.backends] == []
