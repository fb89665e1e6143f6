"""A comparison built up over short windows on fresh machines: GPU runs matched by what sets
their speed, a changed spec refused by name, a time box of whole seeds, and the records
packed on one machine and unpacked on the next."""

import json
import os
import stat
import tarfile
from pathlib import Path

import pytest
import torch
import yaml
from comparison_runs import write_checkpoint, write_run

from pods.experiments.archive import pack, unpack
from pods.experiments.compare import CompareSpec, Schedule, run_compare
from pods.experiments.timebox import TimeBox
from pods.runtime import machine
from pods.runtime.machine import check_same_machine, host, this_machine
from runs import flat

SPEC = CompareSpec(variants={"grpo": {"n": 8, "m": 8}, "pods": {"n": 32}}, seeds=(0, 1, 2),
                   baseline="grpo", base={"m": 4, "max_time": 100.0})


def gpu(name="NVIDIA H200", **fields):
    """A GPU run's machine record, on a host with ``fields`` (a CPU of some kind)."""
    return {**host(), "machine/device": f"cuda {name}", "machine/gpus": 1,
            "machine/torch": torch.__version__, "machine/cuda": "12.8", **fields}


@pytest.fixture
def on_h200(monkeypatch):
    """This machine, as the comparison sees it, has one H200 and a CUDA build of torch."""
    monkeypatch.setattr(machine, "gpu_names", lambda: ["NVIDIA H200"])
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.delenv("WORLD_SIZE", raising=False)


class Clock:
    """A wall clock that the fake trainer moves on: each run takes ``beyond`` seconds more
    than its max_time (start-up and evaluations), ``late`` more for the runs named."""

    def __init__(self, beyond: float, late: dict | None = None):
        self.now, self.beyond, self.late = 0.0, beyond, late or {}

    def __call__(self) -> float:
        return self.now

    def trainer(self, calls: list, machine_record: dict | None = None):
        def train(config):
            c = flat(config)
            run = f"{Path(c.out_dir).name}/{c.run_name}"
            calls.append(run)
            write_run(Path(c.out_dir) / c.run_name, [(0, 0.01), (c.max_time, c.n / 100)],
                      [{"step": 1, "time": c.max_time}], machine=machine_record)
            self.now += c.max_time + self.beyond + self.late.get(run, 0)
        return train


# ---- GPU runs matched by what sets their speed ---------------------------------------

def test_this_machine_reads_the_gpu_without_cuda(on_h200, monkeypatch):
    here = this_machine("auto")
    assert here["machine/device"] == "cuda NVIDIA H200" and here["machine/gpus"] == 1
    assert (here["machine/cuda"], here["machine/torch"]) == ("12.8", torch.__version__)
    assert this_machine("cpu")["machine/device"] == "cpu"
    monkeypatch.setenv("WORLD_SIZE", "4")  # a torchrun launch: one GPU per process
    assert this_machine("cuda:0")["machine/gpus"] == 4
    monkeypatch.setattr(machine, "gpu_names", lambda: [])
    assert this_machine("auto")["machine/device"] == "cpu"


def test_gpu_names_come_from_nvidia_smi(tmp_path, monkeypatch):
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '0, GPU-aaa1, NVIDIA H100 80GB HBM3'\n"
                    "echo '1, GPU-bbb2, NVIDIA H200'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA numbers them as nvidia-smi
    assert machine.gpu_names() == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert machine.gpu_names() == ["NVIDIA H200"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa")
    assert machine.gpu_names() == ["NVIDIA H100 80GB HBM3"]


def test_gpu_runs_match_by_gpu_count_and_build_not_by_host(on_h200):
    here = this_machine("auto")
    check_same_machine({"grpo/seed0": gpu(**{"machine/cpu": "another CPU",
                                             "machine/cores": 99})}, here)
    old = {k: v for k, v in gpu().items() if k not in ("machine/gpus", "machine/cuda")}
    check_same_machine({"grpo/seed0": old}, here)  # an older pods's record: name and torch
    for record, said in [(gpu("NVIDIA H100 80GB HBM3"), "device: cuda NVIDIA H100 80GB HBM3 "
                          "/ cuda NVIDIA H200"),
                         (gpu(**{"machine/gpus": 2}), "gpus: 2 / 1"),
                         (gpu(**{"machine/cuda": "12.1"}), "cuda: 12.1 / 12.8"),
                         ({**host(), "machine/device": "cpu"}, "device: cpu / cuda NVIDIA H200")]:
        with pytest.raises(ValueError, match=f"pods/seed1 was made on another machine "
                           f"\\({said}; theirs / this one's\\)"):
            check_same_machine({"pods/seed1": record}, here)


def test_an_h100_run_is_refused_beside_h200_runs_unless_any_machine(on_h200, tmp_path):
    out, clock, calls = tmp_path / "cmp", Clock(0), []
    spec = CompareSpec(variants=SPEC.variants, seeds=(0,), baseline="grpo", base=SPEC.base)
    write_run(out / "grpo" / "seed0", [(0, 0.01), (100, 0.08)],
              machine=gpu("NVIDIA H100 80GB HBM3"))
    with pytest.raises(ValueError, match="grpo/seed0 was made on another machine"):
        run_compare(spec, out, clock.trainer(calls, gpu()))
    assert calls == []
    run_compare(spec, out, clock.trainer(calls, gpu()), schedule=Schedule(any_machine=True))
    assert calls == ["pods/seed0"]
    text = (out / "summary.md").read_text()
    assert text.startswith("**These runs were made on different machines")
    assert "- device cuda NVIDIA H100 80GB HBM3, gpus 1, torch " in text
    assert ", cuda 12.8: grpo/seed0\n" in text and ", cuda 12.8: pods/seed0\n" in text


def test_two_h200_hosts_pool_without_a_warning(on_h200, tmp_path):
    out, clock, calls = tmp_path / "cmp", Clock(0), []
    spec = CompareSpec(variants=SPEC.variants, seeds=(0,), baseline="grpo", base=SPEC.base)
    write_run(out / "grpo" / "seed0", [(0, 0.01), (100, 0.08)],
              machine=gpu(**{"machine/cpu": "another CPU"}))
    run_compare(spec, out, clock.trainer(calls, gpu()))
    assert calls == ["pods/seed0"]
    assert (out / "summary.md").read_text().startswith("Peak and final acc:")  # no warning first


# ---- a changed spec is refused by name ----------------------------------------------

def test_a_changed_spec_is_refused_naming_each_difference(tmp_path):
    out, clock, calls = tmp_path / "cmp", Clock(0), []
    spec = CompareSpec(variants=SPEC.variants, seeds=(0,), baseline="grpo", base=SPEC.base)
    run_compare(spec, out, clock.trainer(calls))
    saved = (out / "compare.yaml").read_text()
    changed = CompareSpec(variants={"grpo": {"n": 8, "m": 8, "lr": 2e-5}, "random": {}},
                          seeds=(0, 1), baseline="grpo", base={"m": 4, "max_time": 60.0})
    with pytest.raises(ValueError) as refused:
        run_compare(changed, out, clock.trainer(calls))
    assert str(refused.value) == (
        f"{out} holds a comparison with other variants or base overrides: base: max_time "
        "100.0 -> 60.0; variant 'grpo': lr unset -> 2e-05; variant 'pods': removed; "
        "variant 'random': added (its compare.yaml / this spec). Run the spec it holds, "
        "pick another --out folder, or delete this one.")
    assert len(calls) == 2 and (out / "compare.yaml").read_text() == saved  # no work
    more_seeds = CompareSpec(variants=SPEC.variants, seeds=(0, 1), baseline="pods",
                             base=SPEC.base)  # seeds and baselines may change
    run_compare(more_seeds, out, clock.trainer(calls))
    assert calls[2:] == ["grpo/seed1", "pods/seed1"]


# ---- the time box -------------------------------------------------------------------

def test_the_time_box_starts_only_whole_seeds_that_fit(tmp_path, capsys):
    """Runs of max_time 100 that take 30 s more: seed 0 (untimed: estimated at 100 s a
    run) fits 300 s; then 170 s are left and seed 1 needs 2 x 130 s: skipped, and seed 2
    after it (seed-major); the skipped runs are named. A second window does seed 1."""
    out, clock, calls = tmp_path / "cmp", Clock(30), []
    box = TimeBox(300, out, clock=clock)
    run_compare(SPEC, out, clock.trainer(calls), schedule=Schedule(time_box=box))
    assert calls == ["grpo/seed0", "pods/seed0"]
    said = capsys.readouterr().out
    assert "no run in" in said and "estimated by its max_time alone" in said
    assert said.rstrip().endswith(
        "budget: 4 run(s) skipped (grpo/seed1 + pods/seed1 need about 260 s; 40 s were "
        "left): grpo/seed1, pods/seed1, grpo/seed2, pods/seed2; run the same `pods "
        "compare` again to add them.")
    times = [json.loads(line) for line in (out / "run_times.jsonl").read_text().splitlines()]
    assert [(t["run"], t["wall"], t["max_time"]) for t in times] == [
        ("grpo/seed0", 130, 100), ("pods/seed0", 130, 100)]
    run_compare(SPEC, out, clock.trainer(calls),
                schedule=Schedule(time_box=TimeBox(400, out, clock=clock)))
    assert calls[2:] == ["grpo/seed1", "pods/seed1"]  # 260 s of 400; seed 2's 260 > 140


def test_the_time_box_never_starts_a_run_it_cannot_finish(tmp_path, capsys):
    """A run that overruns leaves too little for the next run of its seed: that one is not
    started, though its seed was admitted."""
    out, calls = tmp_path / "cmp", []
    clock = Clock(30, late={"grpo/seed0": 200})
    (out).mkdir()
    (out / "run_times.jsonl").write_text(json.dumps(
        {"run": "grpo/seed9", "wall": 130, "max_time": 100, "resumed": False}) + "\n")
    box = TimeBox(400, out, clock=clock)  # seed 0: 2 x 130 s fit
    run_compare(SPEC, out, clock.trainer(calls), schedule=Schedule(time_box=box))
    # it took 330 s: 70 s left; pods has no timed run, so it is estimated by the most any
    # run took beyond its limit (grpo/seed0's 230 s): 330 s
    assert calls == ["grpo/seed0"]
    assert box.skipped == ["pods/seed0", "grpo/seed1", "pods/seed1", "grpo/seed2",
                           "pods/seed2"]
    assert "(pods/seed0 needs about 330 s; 70 s were left)" in capsys.readouterr().out


def test_a_time_box_too_short_for_a_seed_trains_nothing_and_says_so(tmp_path, capsys):
    calls, clock = [], Clock(30)
    run_compare(SPEC, tmp_path, clock.trainer(calls),
                schedule=Schedule(time_box=TimeBox(150, tmp_path, clock=clock)))
    assert calls == []  # seed 0 needs 2 x 100 s
    said = capsys.readouterr().out
    assert f"{tmp_path} holds no finished run yet: no summary." in said
    assert "budget: 6 run(s) skipped (grpo/seed0 + pods/seed0 need about 200 s; 150 s " \
           "were left)" in said


def test_the_time_box_needs_a_time_limit(tmp_path):
    spec = CompareSpec(variants=SPEC.variants, seeds=(0,), baseline="grpo",
                       base={"m": 4, "max_steps": 3})
    with pytest.raises(ValueError, match="variant 'grpo' has no max_time"):
        run_compare(spec, tmp_path, Clock(0).trainer([]),
                    schedule=Schedule(time_box=TimeBox(100, tmp_path)))
    with pytest.raises(ValueError, match="--budget 0 leaves no time"):
        TimeBox(0, tmp_path)


# ---- records that travel --------------------------------------------------------------

def test_a_packed_comparison_holds_records_only_and_unpacks_elsewhere(tmp_path, capsys):
    here, clock, calls = tmp_path / "here", Clock(30), []
    spec = CompareSpec(variants=SPEC.variants, seeds=(0,), baseline="grpo", base=SPEC.base)
    run_compare(spec, here, clock.trainer(calls),
                schedule=Schedule(time_box=TimeBox(1000, here, clock=clock)))
    write_checkpoint(here / "grpo" / "seed0")
    write_run(here / "pods" / "seed7", [(0, 0.01)], done=False)  # stopped: stays behind
    packed, left = pack(here, tmp_path / "here.tar.gz")
    assert (packed, left) == (["grpo/seed0", "pods/seed0"], ["pods/seed7"])
    with tarfile.open(tmp_path / "here.tar.gz") as tar:
        assert sorted(tar.getnames()) == [
            "compare.yaml", "curves.png", "grpo/seed0/metrics.jsonl", "pods/seed0/metrics.jsonl",
            "run_times.jsonl", "seeds.png", "summary.json", "summary.md"]
    there = tmp_path / "there"
    assert unpack(tmp_path / "here.tar.gz", there) == ["grpo/seed0", "pods/seed0"]
    assert unpack(tmp_path / "here.tar.gz", there) == []  # again: nothing new, no clash
    assert (there / "run_times.jsonl").read_text() == (here / "run_times.jsonl").read_text()
    # extended by a seed there: only the new runs train; the time box reads the times
    more = CompareSpec(variants=SPEC.variants, seeds=(0, 1), baseline="grpo", base=SPEC.base)
    box = TimeBox(260, there, clock=clock)
    run_compare(more, there, clock.trainer(calls), schedule=Schedule(time_box=box))
    assert calls[2:] == ["grpo/seed1", "pods/seed1"] and box.skipped == []
    summary = json.loads((there / "summary.json").read_text())
    assert [r["seeds"] for r in summary] == [2, 2]

    (there / "grpo" / "seed0" / "metrics.jsonl").write_text("")  # another run, same name
    with pytest.raises(ValueError, match="holds grpo/seed0/metrics.jsonl already, with other"):
        unpack(tmp_path / "here.tar.gz", there)
    other = CompareSpec(variants={"grpo": {"n": 16, "m": 8}}, seeds=(0,), baseline="grpo",
                        base=SPEC.base)
    run_compare(other, tmp_path / "other", clock.trainer([]))
    with pytest.raises(ValueError, match="holds another comparison than .*: variant 'grpo': "
                       r"n 16 -> 8; variant 'pods': added \(the folder's / the archive's\)"):
        unpack(tmp_path / "here.tar.gz", tmp_path / "other")
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(here / "compare.yaml", arcname="../compare.yaml")
    with pytest.raises(ValueError, match=r"holds \.\./compare\.yaml, which a packed"):
        unpack(bad, tmp_path / "elsewhere")
    for outside in ("../seed0/metrics.jsonl", "./seed0/metrics.jsonl"):  # a run's shape
        with tarfile.open(bad, "w:gz") as tar:
            tar.add(here / "compare.yaml", arcname="compare.yaml")
            tar.add(here / "pods" / "seed0" / "metrics.jsonl", arcname=outside)
        with pytest.raises(ValueError, match="which a packed"):
            unpack(bad, tmp_path / "elsewhere" / "out")
        assert not (tmp_path / "elsewhere" / "seed0").exists()
    assert not (tmp_path / "elsewhere").exists()
    assert yaml.safe_load((there / "compare.yaml").read_text())["seeds"] == [0, 1]


def test_packed_unpacked_and_extended_by_a_seed_equals_one_go(tiny_model_dir, tmp_path):
    """With the embedded model's trainer: seed 0 trained on one machine, packed (no
    checkpoints travel), unpacked on the next and extended by seed 1, holds the same
    records, configs and summary as both seeds trained in one folder in one go (all but
    the clocks: training times, and what is measured in them)."""
    from pods.train.run import train_or_resume

    def spec(seeds):
        small = {"model": tiny_model_dir, "task": "even_start", "prompts_per_step": 2,
                 "n": 4, "m": 2, "max_new_tokens": 4, "max_steps": 2, "max_time": None,
                 "eval_every": 1e9, "eval_size": 8, "checkpoint_every": 1e9,
                 "progress": False, "lr": 1e-2, "lr_schedule": "constant"}
        return CompareSpec(variants={"grpo": {"n": 2}, "pods": {}}, seeds=seeds,
                           baseline="grpo", base=small)

    first, second, whole = (tmp_path / side / "cmp" for side in ("first", "second", "whole"))
    run_compare(spec((0,)), first, train_or_resume)
    pack(first, tmp_path / "first.tar.gz")
    unpack(tmp_path / "first.tar.gz", second)
    run_compare(spec((0, 1)), second, train_or_resume)
    run_compare(spec((0, 1)), whole, train_or_resume)
    assert not list(second.glob("*/seed0/checkpoints"))  # seed 0 came without them
    for run in ("grpo/seed0", "grpo/seed1", "pods/seed0", "pods/seed1"):
        assert _records(second / run) == _records(whole / run), run
        assert _config(second / run) == _config(whole / run), run
    assert _summary(second) == _summary(whole) and [r["seeds"] for r in _summary(whole)] == [2, 2]


def _records(run_dir: Path) -> list[dict]:
    """metrics.jsonl without what clocks measure (times, memory)."""
    from pods.runs.metrics import read_metrics

    return [{k: v for k, v in r.items() if not k.startswith(("time", "mem/"))}
            for r in read_metrics(run_dir / "metrics.jsonl")]


def _config(run_dir: Path) -> dict:
    return {k: v for k, v in yaml.safe_load((run_dir / "config.yaml").read_text()).items()
            if k != "out_dir"}


def _summary(out_dir: Path) -> list[dict]:
    """summary.json's figures that come from accuracies and steps, not from times (the final
    accuracy and the steps to a peak are read where the mean curve over time is)."""
    keys = ("variant", "seeds", "p_better_at_end", "zero_var_frac", "var_kept",
            "completion_len")
    rows = json.loads((out_dir / "summary.json").read_text())
    return [{k: r[k] for k in keys} | {"paired": [v["paired_diff"] for v in r["vs"].values()]}
            for r in rows]


def test_pods_compare_packs_and_unpacks_without_a_spec(tmp_path, capsys):
    from pods.cli import main

    out, clock = tmp_path / "cmp", Clock(0)
    spec = CompareSpec(variants=SPEC.variants, seeds=(0,), baseline="grpo", base=SPEC.base)
    run_compare(spec, out, clock.trainer([]))
    capsys.readouterr()
    assert main(["compare", "--out", str(out), "--pack", str(tmp_path / "c.tar.gz")]) == 0
    assert capsys.readouterr().out.startswith(f"packed 2 finished run(s) of {out} into ")
    assert main(["compare", "--out", str(tmp_path / "b"), "--unpack",
                 str(tmp_path / "c.tar.gz")]) == 0
    assert capsys.readouterr().out == \
        f"unpacked 2 run(s) into {tmp_path / 'b'}: grpo/seed0, pods/seed0\n"
    assert main(["compare", "--out", str(out)]) == 2
    assert "give a comparison spec to run, or --pack FILE" in capsys.readouterr().err
    assert main(["compare", "--out", str(out), "--pack", "x.tar.gz", "--budget", "60"]) == 2
    assert "--budget times the runs of a spec" in capsys.readouterr().err


def test_a_compressed_bomb_is_refused_from_its_header_before_it_is_read(tmp_path,
                                                                       monkeypatch):
    """A member that would expand past the bounds is refused from its tar header: a 200 MiB
    run record that gzip packs into a few hundred kB is never read into memory."""
    import io

    import pods.experiments.archive as archive

    bomb = tmp_path / "bomb.tar.gz"
    size = 200 * 2**20
    with tarfile.open(bomb, "w:gz") as tar:
        info = tarfile.TarInfo("pods/seed0/metrics.jsonl")
        info.size = size

        class Zeros(io.RawIOBase):  # 200 MiB of zeros, never held at once
            left = size

            def readable(self):
                return True

            def readinto(self, buffer):
                n = min(len(buffer), self.left)
                buffer[:n] = bytes(n)
                self.left -= n
                return n
        tar.addfile(info, io.BufferedReader(Zeros()))
    assert bomb.stat().st_size < 1_000_000
    reads = []
    real = tarfile.ExFileObject.read
    monkeypatch.setattr(tarfile.ExFileObject, "read",
                        lambda self, *a: reads.append(a) or real(self, *a))
    with pytest.raises(ValueError, match=r"of 209,715,200 bytes .*at most 64 MiB a file"):
        unpack(bomb, tmp_path / "out")
    assert reads == [] and not (tmp_path / "out").exists()
    monkeypatch.setattr(archive, "MAX_TOTAL", 100)  # the total over files is bounded too
    small = tmp_path / "small.tar.gz"
    with tarfile.open(small, "w:gz") as tar:
        for name in ("pods/seed0/metrics.jsonl", "pods/seed1/metrics.jsonl"):
            info = tarfile.TarInfo(name)
            info.size = 60
            tar.addfile(info, io.BytesIO(b"x" * 60))
    with pytest.raises(ValueError, match=r"after 1 files, 60 bytes"):
        unpack(small, tmp_path / "out")


def test_under_torchrun_every_rank_takes_rank_0s_budget_decision(monkeypatch):
    """Each rank's clock and read of run_times.jsonl may differ: rank 0 decides whether the
    next run fits, and the others take its answer (a rank that started a run the others
    skipped would wait in process-group start-up for ever)."""
    import pods.experiments.compare as compare

    monkeypatch.setattr(compare, "launched_world_size", lambda: 2)
    sent = []
    monkeypatch.setattr(compare, "from_main", lambda value: sent.append(value) or False)
    asked = []
    # rank 1: its own view would admit the run; it takes rank 0's "no" without deciding
    assert compare.agreed(lambda: asked.append(1) or True, main=False) is False
    assert asked == [] and sent == [None]
    monkeypatch.setattr(compare, "from_main", lambda value: value)  # rank 0 sends its own
    assert compare.agreed(lambda: True, main=True) is True
    monkeypatch.setattr(compare, "launched_world_size", lambda: 1)  # one process: itself
    assert compare.agreed(lambda: False, main=True) is False


def test_new_seeds_are_refused_where_pods_defaults_changed_since_the_old_runs(tmp_path):
    """The spec is the same, but the old runs resolved to another config (a default of pods
    changed since): each key that differs is named, with the pin that keeps the old way."""
    from pods.config import save_yaml

    spec = CompareSpec(variants={"pods": {"n": 32}}, seeds=(0, 1), baseline="pods",
                       base=SPEC.base)
    old = spec.config("pods", 0, out_dir=str(tmp_path / "pods"), run_name="seed0")
    write_run(tmp_path / "pods" / "seed0", [(0, 0.1), (5, 0.2)])
    save_yaml(old.replace(update_layout="padded", lr=1e-3), tmp_path / "pods" / "seed0" /
              "config.yaml")
    calls = []
    with pytest.raises(ValueError, match=r"variant 'pods': its runs in .* were made with "
                       r"another config .*lr 0.001 -> 0.0006; update_layout 'padded' -> "
                       r"'auto'.*Pin the old values in the spec's base \(lr: 0.001, "
                       r"update_layout: 'padded'\)"):
        run_compare(spec, tmp_path, lambda config: calls.append(config))
    assert calls == []  # refused before any run trained
    save_yaml(old, tmp_path / "pods" / "seed0" / "config.yaml")  # made the same way: pools
    run_compare(spec, tmp_path, lambda config: calls.append(config) or write_run(
        Path(config.run.out_dir) / config.run.run_name, [(0, 0.1), (5, 0.3)]))
    assert [c.run.seed for c in calls] == [1]


def test_gpu_names_come_from_torch_where_nvidia_smi_cannot_say(tmp_path, monkeypatch):
    """No nvidia-smi (a container without it), a MIG instance, or GPUs of two kinds in
    CUDA's own order: the names come from a short process that asks torch, as runs record
    them, so a run made on this very machine is not refused as another's."""
    asked = []

    def probe(command, **kwargs):
        asked.append(command)
        return type("Done", (), {"stdout": "NVIDIA H200\n"})()

    machine._torch_names.cache_clear()
    monkeypatch.setattr(machine.subprocess, "run", probe)
    monkeypatch.setattr(machine.shutil, "which", lambda tool: None)  # no nvidia-smi
    assert machine.gpu_names() == ["NVIDIA H200"] and machine.PROBE in asked[0]
    machine.gpu_names()
    assert len(asked) == 1  # asked once per process
    machine._torch_names.cache_clear()
    monkeypatch.undo()  # the real subprocess.run again, for nvidia-smi
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '0, GPU-aaa1, NVIDIA H100 80GB HBM3'\n"
                    "echo '1, GPU-bbb2, NVIDIA H200'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(machine.shutil, "which", lambda name: str(tool))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f2c1a77-8e0b-5d34-9a1e-1b2c3d4e5f60")
    assert machine._smi_names() is None  # a MIG instance: torch names it
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert machine._smi_names() is None  # two kinds, CUDA's fastest-first order
    machine._torch_names.cache_clear()
