"""`pods check`: the plan per machine, a real check of the embedded model on this CPU, and a
mode that fails."""

import json
from pathlib import Path

import pytest

import pods.check.run as check_run
from pods.check.modes import Machine, Mode, fsdp2_support, plan
from pods.cli import main

TINY = ["check", "--model", "tiny", "--steps", "4", "--n", "4", "--m", "2",
        "--prompts-per-step", "8", "--eval-size", "4", "--max-new-tokens", "4"]


def _by_name(modes):
    return {mode.name: mode for mode in modes}


def test_plan_on_a_cpu_skips_gpu_modes_with_the_reason():
    modes = _by_name(plan(Machine(device="cpu", gpus=0, vllm=False, fsdp2=None), n=64, m=16))
    assert [name for name, mode in modes.items() if not mode.skip] == \
        ["hf-full", "hf-lora", "grpo-16/16"]
    assert "vLLM is not installed" in modes["vllm-full"].skip
    assert modes["ddp"].skip == modes["fsdp2"].skip == "needs 2+ GPUs"
    assert modes["grpo-16/16"].overrides == {"engine": "hf", "n": 16, "m": 16}


def test_plan_on_four_gpus_with_vllm_runs_everything():
    machine = Machine(device="cuda", gpus=4, vllm=True, fsdp2=None)
    modes = _by_name(plan(machine, n=64, m=16))
    assert not any(mode.skip for mode in modes.values())
    assert modes["ddp"].procs == modes["fsdp2"].procs == 4
    assert modes["fsdp2"].overrides["parallelism"] == "fsdp2"
    assert modes["grpo-16/16"].overrides["engine"] == "vllm"  # the reference engine
    no_fsdp2 = _by_name(plan(Machine("cuda", 4, True, "this pods has no FSDP2 support"), 64, 16))
    assert no_fsdp2["fsdp2"].skip == "this pods has no FSDP2 support"
    assert "grpo-16/16" not in _by_name(plan(machine, n=16, m=16))  # GRPO is the run itself


def test_fsdp2_support_follows_the_config(monkeypatch):
    import pods.config

    def reject(values):
        raise ValueError("unknown config field(s) parallelism")

    monkeypatch.setattr(pods.config, "from_dict", reject)
    assert fsdp2_support() == "this pods has no FSDP2 support"
    monkeypatch.setattr(pods.config, "from_dict", lambda values: values)
    assert fsdp2_support() is None


@pytest.fixture
def quiet_modes(monkeypatch):
    """The modes' processes offline and on one thread each (`--model tiny` is the shipped
    model: nothing to build or download)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_check_tiny_on_cpu(quiet_modes, tmp_path, capsys):
    out = tmp_path / "check"
    assert main([*TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "check.json").read_text())
    rows = {row["mode"]: row for row in report["modes"]}
    assert [name for name, row in rows.items() if row["status"] == "passed"] == \
        ["hf-full", "hf-lora", "grpo-2/2"]
    assert all(row["status"] == "skipped" for name, row in rows.items()
               if name not in ("hf-full", "hf-lora", "grpo-2/2"))
    assert rows["ddp"]["reason"] == "needs 2+ GPUs"
    for name in ("hf-full", "hf-lora", "grpo-2/2"):
        row = rows[name]
        assert row["steps"] == 4  # auto on a CPU: float32 through and through
        assert row["precision"] == "float32 weights, float32 compute"
        assert row["step_s"] > 0 and row["phases_s"]["generate"] > 0
        assert row["memory_mb"]["peak_rss_mb"] > 0 and row["eval_accuracy"] is not None
        assert (out / "runs" / name.replace("/", "_") / "checkpoints" / "latest").is_file()
    ratio = report["ratio"]
    assert ratio["pods"] == "4/2" and ratio["mode"] == "hf-full"
    assert ratio["value"] == pytest.approx(rows["hf-full"]["step_s"] / rows["grpo-2/2"]["step_s"])
    table = (out / "check.md").read_text()
    assert "| hf-lora | passed | float32 weights, float32 compute |" in table
    assert "| ddp | skipped |" in table and "step-time ratio PODS 4/2 : GRPO 2/2 = " in table
    assert table in printed
    sandbox = report["sandbox"]  # what the code tasks' sandbox can do for this caller
    assert set(sandbox["modes"]) == {"bwrap", "unshare"} and sandbox["memory"]
    assert f"total memory: {sandbox['memory']}" in table
    assert main([*TINY, "--out", str(out)]) == 2  # an existing check is not overwritten


def test_a_failing_mode_exits_1_with_the_reason(quiet_modes, tmp_path, monkeypatch, capsys):
    broken = Mode("hf-broken", {"engine": "hf", "lora_rank": 4,
                                "lora_target_modules": "no_such_proj"})
    skipped = Mode("ddp", skip="needs 2+ GPUs")
    monkeypatch.setattr(check_run, "plan", lambda machine, n, m: [broken, skipped])
    out = tmp_path / "check"
    assert main([*TINY, "--out", str(out)]) == 1
    row = json.loads((out / "check.json").read_text())["modes"][0]
    assert row["status"] == "failed"
    assert "Target modules {'no_such_proj'} not found" in row["reason"]  # peft's words
    assert "no_such_proj" in Path(row["log"]).read_text()  # the traceback, kept
    assert "| hf-broken | failed |" in capsys.readouterr().out


def test_only_names_known_modes(tmp_path, capsys):
    assert main([*TINY, "--only", "hf-ful", "--out", str(tmp_path / "c")]) == 2
    assert "unknown mode(s) hf-ful" in capsys.readouterr().err


def test_the_default_hub_model_offline_fails_at_once_saying_what_works(tmp_path,
                                                                       monkeypatch, capsys):
    """Offline and not cached: one error before any mode starts (not a minute of hub
    retries a mode), naming what works without the hub."""
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: nothing to load
    out = tmp_path / "check"
    start = time.monotonic()
    assert main(["check", "--only", "hf-full", "--steps", "1", "--out", str(out)]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert "--model Qwen/Qwen2.5-0.5B-Instruct is a Hugging Face hub id, not in the local " \
        "cache, and HF_HUB_OFFLINE is set" in err and "--model tiny" in err
    assert not out.exists()  # refused before any mode started


def test_gguf_file_is_checked_before_any_mode_and_reaches_every_mode(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "other.gguf").write_bytes(b"")
    out = tmp_path / "check"
    assert main(["check", "--model", str(folder), "--gguf-file", "model.Q4.gguf",
                 "--out", str(out)]) == 2
    assert f"{folder} holds no GGUF file model.Q4.gguf; it holds other.gguf" \
        in capsys.readouterr().err
    assert not out.exists()  # refused before any mode started
    settings = {"model": str(folder), "gguf_file": "other.gguf", "task": "gsm8k",
                "data_dir": None, "device": "cpu", "dtype": "auto", "steps": 1, "n": 4,
                "m": 2, "prompts_per_step": 1, "eval_size": 2, "max_new_tokens": 8}
    config = check_run.mode_config(Mode("hf-full", {"engine": "hf"}), settings, out)
    assert config["gguf_file"] == "other.gguf" and config["model"] == str(folder)


def test_the_report_says_what_bounds_a_sandbox():
    from pods.check.report import sandbox_line

    report = {"sandbox": {"modes": {"bwrap": "works", "unshare": "unavailable: no unshare"},
                          "memory": "one process per sandbox (RLIMIT_NPROC)"}}
    assert sandbox_line(report) == ("sandbox (code tasks): bwrap works, unshare unavailable: "
                                    "no unshare; total memory: one process per sandbox "
                                    "(RLIMIT_NPROC)")
    assert sandbox_line({}) == "sandbox (code tasks): not probed"


def test_step_times_count_only_steps_that_updated(tmp_path):
    """A step whose groups had no reward variance skips the update: its time is not a
    step's, so neither it nor the first step enters the seconds per step; with none left
    the ratio is not measured, and the line says why."""
    from pods.check.report import measure, ratio_line
    from pods.runs.metrics import MetricsWriter

    w = MetricsWriter(tmp_path / "metrics.jsonl")
    for step, (seconds, skipped) in enumerate([(9.0, 0), (1.0, 1), (4.0, 0), (1.0, 1)], 1):
        w.write({"kind": "step", "step": step, "time/step": seconds, "optim/skipped": skipped})
    w.close()
    assert measure(tmp_path)["step_s"] == 4.0  # step 3 alone
    assert "no step after the first updated" in ratio_line(None)
