"""What a resume may change: the budget, cadences, trackers and logging, each recorded in
resumes.jsonl; anything that changes how steps are made is refused before work starts,
whether it comes from a flag or from an edit of the run folder's config.yaml."""

import json
from pathlib import Path

import pytest
import yaml

from pods.runs.metrics import read_metrics
from pods.train.run import resume, train
from runs import config


@pytest.fixture
def run(tiny_model_dir, tmp_path):
    return train(config(tiny_model_dir, tmp_path, max_steps=2))


def history(run) -> list[dict]:
    path = run / "resumes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_flag_that_changes_how_steps_are_made_is_refused(run):
    before = (run / "config.yaml").read_text(), (run / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match=r"would change how its steps are made: n 6 -> 8 "
                                         r"\(--n\), lr 0\.01 -> 0\.02 \(--lr\)\. A resume "
                                         r"may change only .*max_steps.*; drop those flags"):
        resume(run, {"n": 8, "lr": 0.02, "max_steps": 3})
    assert ((run / "config.yaml").read_text(), (run / "metrics.jsonl").read_text()) == before
    assert history(run) == []  # nothing was written


def test_a_hand_edited_config_yaml_is_refused(run):
    """The checkpoint holds the config it was written with, so an edit of config.yaml that
    would change the steps is found; the message says where the right values are."""
    values = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**values, "temperature": 0.5}))
    with pytest.raises(ValueError, match=r"temperature 1\.0 -> 0\.5 \(edited in config\.yaml\)"
                                         r".*put back the values in .*config\.yaml \(each "
                                         r"checkpoint holds the config it was written with"):
        resume(run, {"max_steps": 3})


def test_allowed_changes_are_recorded_and_the_first_values_stay_known(run):
    said = []
    resume(run, {"max_steps": 3, "eval_every": 1e8},
           log=lambda *a, **k: said.append(str(a[0])))
    assert any("changed: eval_every 1000000000.0 -> 100000000.0, max_steps 2 -> 3" in line
               for line in said)
    (entry,) = history(run)
    assert entry["checkpoint"] == "step_000002" and entry["step"] == 2
    assert entry["changed"] == {"eval_every": {"from": 1e9, "to": 1e8},
                                "max_steps": {"from": 2, "to": 3}}
    # config.yaml holds what is in force now; each checkpoint what it was written with
    assert yaml.safe_load((run / "config.yaml").read_text())["max_steps"] == 3
    first = yaml.safe_load((run / "checkpoints" / "step_000002" / "config.yaml").read_text())
    assert first["max_steps"] == 2
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl", "step")] == [1, 2, 3]
    resume(run, {"max_steps": 4})  # a second resume: a second line, from the new values
    assert history(run)[1]["changed"] == {"max_steps": {"from": 3, "to": 4}}


def test_an_allowed_edit_of_config_yaml_is_recorded_too(run):
    values = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**values, "max_steps": 3}))
    resume(run)
    assert history(run)[0]["changed"] == {"max_steps": {"from": 2, "to": 3}}


def test_local_paths_are_recorded_absolute_so_a_resume_from_another_folder_finds_them(
        tiny_model_dir, tmp_path, monkeypatch):
    """`pods train --model ./model` in one folder, `pods train --resume` from another: the
    run folder names the model by its absolute path, so the resume loads the same files."""
    tiny_model_dir = Path(tiny_model_dir)
    monkeypatch.chdir(tiny_model_dir.parent)
    run = train(config(f"./{tiny_model_dir.name}", tmp_path, max_steps=1,
                       data_dir=f"{tmp_path}/../{tmp_path.name}"))
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"] == str(tiny_model_dir.resolve())
    assert saved["data_dir"] == str(tmp_path.resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    resume(run, {"max_steps": 2})
    assert history(run)[0]["changed"] == {"max_steps": {"from": 1, "to": 2}}


def test_hub_ids_built_in_names_and_missing_paths_stay_as_given(tmp_path, monkeypatch):
    from pods.config import from_dict
    from pods.train.resumes import anchored

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()  # a folder named like the embedded model: still the built-in
    for model in ["tiny", "smollm2", "Qwen/Qwen2.5-0.5B-Instruct", "./not-there"]:
        assert anchored(from_dict({"model": model})).model.name == model
    assert anchored(from_dict({"model": "org/model", "task": "custom",
                                "data_file": "gone.jsonl"})).task.data_file \
        == "gone.jsonl"
