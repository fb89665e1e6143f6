"""Each tracker writes what its own reader sees: a short `pods train` reporting to all four
(W&B offline, Trackio and MLflow in local files, no network), stopped after a step whose
checkpoint never completed, then resumed; every tracker is read back with its own reader and
compared with metrics.jsonl."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pods.runs.metrics import read_metrics

TRACKED = ["--report-to", "tensorboard,wandb,trackio,mlflow", "--tracker-project", "proj",
           "--tracker-group", "grp", "--max-time", "none", "--prompts-per-step", "2",
           "--n", "4", "--m", "2", "--eval-size", "8", "--max-new-tokens", "4",
           "--progress", "false", "--eval-every", "1e9", "--recipe", "embedded"]
# keys every step has (loss/ keys are absent from a step with nothing to learn from, which
# the untrained model on the arithmetic task often has: no update runs)
STEP_KEYS = ("rollout/reward_mean", "time/generate", "optim/lr", "time")
# pytest-xdist: the module's tests on one worker, so that the tracked run (two `pods train`
# processes importing every tracker: the module's slowest part) is made once, not per worker
pytestmark = pytest.mark.xdist_group("trackers")


def pods(env, *args) -> None:
    result = subprocess.run([sys.executable, "-m", "pods", *args], capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def tracked(tiny_model_dir, tmp_path_factory):
    """The run folder, after 3 steps (checkpoints every step), the loss of step 3's
    checkpoint (as if killed while writing it), and a resume to 4 steps."""
    tmp = tmp_path_factory.mktemp("tracked")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "WANDB_SILENT": "true", "TRACKIO_DIR": str(tmp / "trackio"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"}
    run = tmp / "run"
    pods(env, "train", "--model", tiny_model_dir, *TRACKED, "--max-steps", "3",
         "--checkpoint-every", "1e-6", "--out-dir", str(tmp), "--run-name", "run")
    checkpoints = run / "checkpoints"
    shutil.rmtree(checkpoints / "step_000003")
    (checkpoints / "latest").write_text("step_000002")
    pods(env, "train", "--resume", str(run), "--max-steps", "4")
    return run, env


def test_metrics_log_has_each_step_once(tracked):
    run, _ = tracked
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl", "step")] == [1, 2, 3, 4]


def test_tensorboard_event_files_read_back(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, _ = tracked
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    start = json.loads((run / "trackers.json").read_text())["start"]
    # what trackers get: steps and evals (not the "machine" records, nor "done")
    records = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] in ("step", "eval")]
    for key in (*STEP_KEYS, "eval/accuracy"):  # step 3's first attempt is purged on resume
        scalars = events.Scalars(key)
        expected = [(r["step"], r[key]) for r in records if key in r]
        assert [s.step for s in scalars] == [step for step, _ in expected]
        assert [s.value for s in scalars] == pytest.approx([v for _, v in expected], rel=1e-6)
        # the walltime is the run's start plus its training seconds
        assert [s.wall_time - start for s in scalars] == \
            pytest.approx([r["time"] for r in records if key in r], abs=1e-3)
    assert sorted({s.step for s in events.Scalars("optim/lr")}) == [1, 2, 3, 4]


def wandb_records(path: Path):
    """The records of a .wandb file, read with W&B's own protobuf schema. The file is a
    LevelDB-style log (7-byte header ':W&B', magic, version; 32 KiB blocks of chunks with
    a 7-byte header: crc32, length, type); wandb >= 0.2x no longer ships a Python reader."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # block trailer padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST chunk: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_run_is_one_run_across_the_resume(tracked):
    run, _ = tracked
    files = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2  # the first start and the resume
    ids, rows = set(), {}
    for file in files:
        for record in wandb_records(file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.add(record.run.run_id)
                assert record.run.run_group == "grp" and record.run.project == "proj"
                assert record.run.display_name == "grp-run"
            elif kind == "history":
                row = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                       for item in record.history.item}
                rows.setdefault(row["_step"], {}).update(row)
    assert len(ids) == 1  # resumed into the same run id
    for r in read_metrics(run / "metrics.jsonl", "step"):
        assert rows[r["step"]]["rollout/reward_mean"] == pytest.approx(r["rollout/reward_mean"])
        assert rows[r["step"]]["time"] == pytest.approx(r["time"], rel=0.5)  # redone: ~same
    for r in read_metrics(run / "metrics.jsonl", "eval"):
        assert rows[r["step"]]["eval/accuracy"] == pytest.approx(r["eval/accuracy"])


def test_trackio_local_run_reads_back(tracked):
    run, env = tracked
    reader = ("import json; from trackio.sqlite_storage import SQLiteStorage as S; "
              "print(json.dumps([S.get_runs('proj'), S.get_logs('proj', 'grp-run')], "
              "default=str))")
    out = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    runs, logs = json.loads(out.strip().splitlines()[-1])
    assert runs == ["grp-run"]  # the resume continued the run of the same name
    by_step = {}
    for log in logs:
        by_step.setdefault(log["step"], {}).update(log)
    for r in read_metrics(run / "metrics.jsonl", "step"):
        assert by_step[r["step"]]["rollout/reward_mean"] == pytest.approx(
            r["rollout/reward_mean"])


def test_mlflow_run_reads_back(tracked):
    from mlflow.tracking import MlflowClient

    run, env = tracked
    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("proj")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1 and runs[0].info.run_name == "grp-run"
    assert runs[0].data.tags["group"] == "grp" and runs[0].data.params["n"] == "4"
    run_id = json.loads((run / "trackers.json").read_text())["mlflow_run_id"]
    assert runs[0].info.run_id == run_id
    expected = {r["step"]: r["rollout/reward_mean"]
                for r in read_metrics(run / "metrics.jsonl", "step")}
    history = client.get_metric_history(run_id, "rollout/reward_mean")
    assert {m.step for m in history} == set(expected)  # step 3 twice: it was redone
    for metric in history:  # the resumed run redoes step 3 exactly
        assert metric.value == pytest.approx(expected[metric.step])
