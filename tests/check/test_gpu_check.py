"""benchmarks/gpu/, the prepared GPU check, rehearsed on the CPU (--quick: tiny sizes):
every section runs through pods's own code within its share, and the rows whose config
keys this checkout lacks are marked, not failed."""

import importlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU))  # the check's scripts import each other by name
try:
    check, decode, device_runs, gpucommon, layouts, recipe, update = (
        importlib.import_module(name) for name in ("check", "decode", "device_runs",
                                                   "gpucommon", "layouts", "recipe",
                                                   "update"))
finally:
    sys.path.remove(str(GPU))


def test_the_check_runs_every_section_on_a_cpu_within_its_share(tmp_path):
    from pods.config import LEAVES

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    sections = "matmul,update,decode,layouts,default,tests,liger,recipe,trl"
    done = subprocess.run([sys.executable, str(GPU / "check.py"), "--quick", "--sections",
                           sections, "--budget", "tests=4", "--recipes", "smollm2_gpu",
                           "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["details.tar.gz", "gpu.json",
                                                          "gpu.md"]  # at most 8 files
    report = json.loads((tmp_path / "gpu.json").read_text())
    s = report["sections"]
    assert list(s) == sections.split(",")
    assert all(v["rows"] for v in s.values())  # every section wrote what it measured
    tests = s["tests"]  # given 4 s: it stopped its pytest there, the sections after it
    # ran in full (a section that overruns is stopped by the check: the test below)
    assert tests["rows"][0]["summary"].startswith("stopped at its share")
    assert tests["spent_s"] < 4 + check.GRACE
    assert all((ROOT / f).exists() for f in tests["rows"][0]["files"])  # none missing
    assert all(v["status"] == "done" for v in s.values()), {k: v["status"] for k, v in s.items()}
    for row in s["update"]["rows"] + s["liger"]["rows"]:  # measured, or marked
        keys = update.VARIANTS[row["variant"]]
        if keys and any(key not in LEAVES for key in keys):
            assert row["error"].startswith("not available in this checkout")
        elif row["variant"] == "liger":
            assert row["error"] == "needs a CUDA GPU"
        else:
            assert row["tok_s"] > 0 and row["share"] > 0
            assert row["checkpointing"] is (row["variant"] == "bare-ckpt")  # the recipe's
            # auto: off, where this machine's memory holds the pass
    cast = all(key in LEAVES for key in update.VARIANTS["cast-step"])
    measured = {r["variant"] for r in s["update"]["rows"] if "tok_s" in r}
    assert measured == ({"cast-step", "cast-matmul"} if cast else {"pods"}) | {
        "bare", "bare-ckpt",  # the bare step without and with gradient checkpointing
        "pods-groups"}  # the rows as PODS keeps them, each group's prompt read once
    layouts = {(r["shape"], r["layout"]): r for r in s["layouts"]["rows"]}
    assert len(layouts) == 6 and all(r["seconds"] > 0 for r in layouts.values())
    for shape in ("gsm8k", "math"):  # each prompt once: fewer positions than padded
        assert layouts[shape, "shared_prompt"]["positions"] < \
            layouts[shape, "packed"]["positions"] < layouts[shape, "padded"]["positions"]
    for row in s["decode"]["rows"]:
        if "hf_decode" in decode.PATHS[row["path"]] and "hf_decode" not in LEAVES:
            assert row["error"].startswith("not available in this checkout")
        else:
            assert row["ms_step"] > 0 and row["steps"] == 8
        if row["path"] != "dynamic" and "error" not in row:  # a static cache: counted
            assert row["held_gib"] > 0 and row["held_in_update_gib"] == 0  # parked
            assert row["fallbacks"] == 0 and row["graph_breaks"] == 0
    assert s["default"]["rows"][0]["steps"] == 1
    (run,) = s["recipe"]["rows"]
    assert run["recipe"] == "smollm2_gpu" and run["steps"] == 2 and "error" not in run
    pods, trl = s["trl"]["rows"]
    assert pods["s_step"] > 0 and trl["s_generation"] > 0 and trl["s_step"] > 0
    table = (tmp_path / "gpu.md").read_text()
    assert "| tests | 4 |" in table and "pods step / TRL generation batch:" in table
    with tarfile.open(tmp_path / "details.tar.gz") as tar:
        names = tar.getnames()
    assert "details/recipes/smollm2_gpu/metrics.jsonl" in names
    assert not any("checkpoint" in name for name in names)


def test_a_section_past_its_share_is_stopped_with_its_children(tmp_path):
    """The next section's share is guaranteed: the whole process group goes."""
    child = tmp_path / "child.pid"
    code = ("import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
            f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    start = time.monotonic()
    done = check.run_section([sys.executable, "-c", code], 1.0, tmp_path / "log")
    assert done["status"] == "stopped at its share (1 s)"
    assert time.monotonic() - start < 1 + check.GRACE + 2
    time.sleep(0.2)
    stat = Path(f"/proc/{child.read_text()}/stat")  # gone, or a zombie left to init
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_row_whose_keys_this_checkout_lacks_is_marked_and_one_it_has_runs(monkeypatch):
    from pods.config import LEAVES

    cpu = torch.device("cpu")
    keys = {"weight_cast": "step", "update_kernels": "torch"}
    monkeypatch.delitem(LEAVES, "weight_cast", raising=False)
    assert update.unavailable(keys, cpu).startswith("not available in this checkout")
    assert not update.redundant("pods", cpu)  # the defaults stand in for the cast rows
    for key in keys:  # as after the merge of the leaves: the row runs
        monkeypatch.setitem(LEAVES, key, LEAVES["dtype"])
    assert update.unavailable(keys, cpu) is None
    assert update.redundant("pods", cpu)  # the defaults are the cast once a step here
    assert update.unavailable({**keys, "update_kernels": "liger"}, cpu) == "needs a CUDA GPU"


def test_a_variant_s_keys_reach_the_trainer_and_its_update_is_measured(tmp_path):
    args = type("Args", (), dict(quick=True, new=8, prompt=8, repeats=1, tflops=1.0,
                                 rows=(2,), out=str(tmp_path), section="update"))()
    folder = update.save_architecture("SmolLM2-135M", torch.device("cpu"), args, tmp_path)
    trainer = update.trainer_for(folder, {"micro_batch_size": 1}, 2, args)
    assert trainer.cfg.optim.micro_batch_size == 1
    update.pods_rows("SmolLM2-135M", folder, "pods", {"micro_batch_size": 1},
                     torch.device("cpu"), args)
    (row,) = gpucommon.read_rows(tmp_path / "update.jsonl")
    assert row["tok_s"] > 0 and row["precision"] == "float32 weights, float32 compute"


def test_the_static_decode_path_runs_from_its_keys(tmp_path, monkeypatch):
    """The static cache's path through the engine (the loop's keys are not in every
    checkout; hf_compile on is)."""
    monkeypatch.setitem(decode.PATHS, "static", {"hf_compile": "on"})
    args = type("Args", (), dict(prompt=8, new=8))()
    model = gpucommon.build("SmolLM2-135M", torch.device("cpu"), torch.float32, True).eval()
    tokenizer = gpucommon.word_tokenizer(model.config.vocab_size)
    row = decode.cell("static", 3, model, tokenizer, torch.device("cpu"), args)
    assert row["steps"] == 8 and row["ms_step"] > 0 and row["first_s"] > 0


def test_the_recipe_summary_reads_every_evaluation_and_the_seconds_to_the_target():
    evals = [(0.0, 0.10), (20.4, 0.40), (41.0, 0.55), (60.2, 0.61), (81.5, 0.66)]
    records = [{"kind": "eval", "time": t, "eval/accuracy": a} for t, a in evals]
    records += [{"kind": "step", "time": 2.0 * (i + 1)} for i in range(60)]
    got = recipe.summary(records)
    assert got["evals"] == [(0.0, 0.10), (20.4, 0.40), (41.0, 0.55), (60.2, 0.61),
                            (81.5, 0.66)]
    assert got["to_target_s"] == 60.2
    assert (got["start"], got["best"], got["steps"], got["s_step"]) == (0.10, 0.66, 60, 2.0)


def test_the_budget_table_gives_every_section_a_share_and_budget_changes_one():
    args = type("Args", (), dict(sections="", part=2, quick=False, budget="trl=90",
                                 recipes="smollm2_gpu_fast,smollm2_gpu"))()
    shares = check.plan(args)
    assert list(shares) == ["decode", "liger", "recipe", "trl"] and shares["trl"] == 90
    assert shares["recipe"] == 60 + 40 + 30 + 20  # training seconds, and the rest
    assert all(v > 0 for part in check.PARTS.values() for v in part.values())
    # two parts of at most 4 and 5 minutes
    assert sum(check.PARTS[1].values()) <= 240 and sum(check.PARTS[2].values()) <= 300


def test_part_2_takes_the_matmul_rate_from_part_1(tmp_path):
    earlier = tmp_path / "gpu.json"
    earlier.write_text(json.dumps({"sections": {"matmul": {"rows": [{"tflops": 790.0}]}}}))
    assert check.earlier_tflops(str(earlier)) == 790.0
    earlier.write_text(json.dumps({"sections": {}}))
    assert check.earlier_tflops(str(earlier)) is None and check.earlier_tflops(None) is None


def test_the_check_measures_the_architectures_in_the_gpu_default_precision(monkeypatch):
    """bf16 compute on a GPU with bf16, as a user's model gets it (not the embedded model's
    float32, which plain ModelConfig() would plan for)."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    for name in gpucommon.ARCHITECTURES:
        precision = update.default_precision(name, torch.device("cuda"))
        assert (precision.weights, precision.update) == (torch.float32, "bf16")


def test_an_earlier_part_joins_the_table_so_liger_stands_beside_the_bare_step(tmp_path):
    def section(*rows):
        return {"share_s": 15, "spent_s": 3, "status": "done", "rows": list(rows)}

    head = {"device": "H200", "date": "2026-11-28", "torch": "2.11", "transformers": "5.17",
            "command": "check.py"}
    row = {"model": "M", "rows": 16, "precision": "p", "share": 0.5, "peak_gib": 1.0}
    earlier = tmp_path / "gpu.json"
    earlier.write_text(json.dumps({**head, "sections": {
        "update": section({**row, "variant": "bare", "tok_s": 200.0})}}))
    report = {**head, "sections": {"liger": section({**row, "variant": "liger",
                                                     "tok_s": 300.0})}}
    table = importlib.import_module("table").table
    assert "| M | 16 | liger | p | 300 | - |" in table(report)  # no bare step to divide by
    assert "| M | 16 | liger | p | 300 | 1.50x | 50% | 1.0 | - |" in table(
        check.merged(report, str(earlier)))
    report["sections"]["liger"]["rows"][0]["checkpointing"] = False
    assert "| 1.0 | off |" in table(report)


def test_a_cell_that_raises_is_noted_and_the_next_one_runs(tmp_path, monkeypatch):
    def cell(path, rows, *args):
        if path == "dynamic":
            raise ValueError("boom\nmore")
        return {"ms_step": 1.0}

    monkeypatch.setattr(decode, "cell", cell)
    monkeypatch.setattr(sys, "argv", ["decode.py", "--out", str(tmp_path), "--seconds", "60",
                                      "--section", "decode", "--quick",
                                      "--paths", "loop,dynamic,static generate"])
    decode.main()
    rows = gpucommon.read_rows(tmp_path / "decode.jsonl")
    assert [(r["path"], r.get("error")) for r in rows] == [
        ("loop", None), ("dynamic", "ValueError: boom"), ("static generate", None)]


@pytest.mark.parametrize("script,first", [
    ("import time; time.sleep(60)", "stopped at the path's cap (1 s), still in this cell"),
    ("import sys; sys.exit(3)", "its process ended (exit 3) in this cell")])
def test_a_path_that_hangs_or_dies_costs_its_own_cap_and_says_so(tmp_path, monkeypatch,
                                                                  script, first):
    """Each decoding path runs in a process of its own, capped at an even part of what is
    left of the share: a compile that never ends leaves the next paths their time."""
    import argparse

    (tmp_path / "path.py").write_text(script)
    monkeypatch.setattr(decode, "__file__", str(tmp_path / "path.py"))
    args = argparse.Namespace(out=str(tmp_path), section="decode", quick=False,
                              order=["loop", "dynamic"],
                              deadline=time.monotonic() + decode.SLACK + 2)
    start = time.monotonic()
    decode.run_path("loop", args)  # (2 s left) / 2 paths
    assert time.monotonic() - start < 10
    rows = gpucommon.read_rows(tmp_path / "decode.jsonl")
    assert [(r["rows"], r["error"]) for r in rows] == [
        (256, first), (1024, "not reached: the path's cap was spent"),
        (64, "not reached: the path's cap was spent")]


def test_smollm2_is_taken_from_its_installed_wheel_into_the_cache(tmp_path, monkeypatch):
    import dataclasses
    import hashlib

    from pods.models import fetch

    package = tmp_path / "site" / "fake_smollm2_wheel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.gguf").write_bytes(b"weights")
    spec = dataclasses.replace(fetch.FETCHABLE["smollm2"],
                               member="fake_smollm2_wheel/model.gguf",
                               sha256=hashlib.sha256(b"weights").hexdigest())
    monkeypatch.setitem(fetch.FETCHABLE, "smollm2", spec)
    monkeypatch.setenv("PODS_CACHE", str(tmp_path / "cache"))
    assert recipe.smollm2_ready().startswith("SmolLM2 is not here")  # not installed
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(fetch.FETCHABLE, "smollm2", dataclasses.replace(spec, sha256="0"))
    assert "sha256 differs" in recipe.smollm2_ready()
    monkeypatch.setitem(fetch.FETCHABLE, "smollm2", spec)
    assert recipe.smollm2_ready() is None
    assert fetch.gguf_path("smollm2").read_bytes() == b"weights"


def test_the_tests_section_counts_from_the_junit_file(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite tests="9" failures="1" errors="1" skipped="3">'
                     '</testsuite></testsuites>')
    assert device_runs.junit_counts(junit) == {"passed": 4, "failed": 2, "skipped": 3}
    assert device_runs.junit_counts(tmp_path / "none.xml") == {}
    assert check.PARTS[1] and list(check.PARTS[1])[0] == "tests"  # make test-gpu first


def test_the_embedded_default_is_in_no_part_and_has_a_share_that_finishes_it():
    assert all("default" not in part for part in check.PARTS.values())
    args = type("Args", (), dict(sections="default", part=1, quick=False, budget="",
                                 recipes="smollm2_gpu"))()
    assert check.plan(args) == {"default": 90}  # 1000 steps: 58 training s on an H200


def test_the_layouts_rows_pin_the_kernel_each_device_runs():
    cuda = layouts.rows_of(torch.device("cuda"))
    assert ("gsm8k", "shared_prompt", "flex") in cuda
    assert ("math", "shared_prompt", "sdpa") in cuda
    assert ("gsm8k", "packed", "flex") in cuda and ("gsm8k", "padded", "-") in cuda
    assert {k for _, _, k in layouts.rows_of(torch.device("cpu"))} == {"-", "sdpa"}


def test_a_command_past_the_share_is_interrupted_first_so_pytest_writes_its_junit(tmp_path):
    """The tests section ends make test-gpu as Ctrl-C would: pytest then writes its JUnit
    file with the tests run so far; a command that ignores the interrupt is killed."""
    import argparse

    script = ("import signal, sys, time\n"
              "def stop(*_):\n"
              "    open(sys.argv[1], 'w').write('written on interrupt'); sys.exit(2)\n"
              "signal.signal(signal.SIGINT, stop if sys.argv[2] == 'handle' else signal.SIG_IGN)\n"
              "time.sleep(60)\n")
    for mode in ("handle", "ignore"):
        args = argparse.Namespace(seconds=8.0, deadline=time.monotonic() + 8.0)
        note = tmp_path / f"{mode}.txt"
        code, wall = device_runs.until_share([sys.executable, "-c", script, str(note), mode],
                                             tmp_path / "log", args)
        assert code is None and wall < 12
        assert note.exists() == (mode == "handle")
