"""The device a run names, and the peak memory the process held (pods.runtime.device)."""

import pytest
import torch

from pods.runtime.device import device_notes, peak_memory_mb, resolve_device


@pytest.fixture
def two_gpus(monkeypatch):
    """A CUDA build of torch that sees two GPUs (on any machine)."""
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.fixture
def cpu_torch(monkeypatch):
    """A torch built without CUDA, as the CPU wheel is."""
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_named_devices_resolve_as_torch_names_them(two_gpus):
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("auto") == torch.device("cuda")
    with pytest.raises(ValueError, match=r"--device cuda:2: this machine has cpu, cuda:0, "
                                         r"cuda:1\."):
        resolve_device("cuda:2")


def test_an_unknown_device_says_which_exist(cpu_torch):
    for name in ("cdua", "xpu", "cuda:x"):
        with pytest.raises(ValueError, match=f"unknown device '{name}'; pods runs on auto, "
                                             f"cpu, cuda, cuda:N or mps, and this machine "
                                             f"has cpu\\."):
            resolve_device(name)


def test_cuda_on_a_torch_without_it_says_what_to_install(cpu_torch):
    for name in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match=f"--device {name} needs a CUDA build of torch, "
                                             f"and this one .* was built without CUDA: "
                                             f"install one \\(pip install torch "
                                             f"--index-url https://download.pytorch.org/"):
            resolve_device(name)
    with pytest.raises(ValueError, match="no Apple GPU"):
        resolve_device("mps")
    assert resolve_device("auto") == torch.device("cpu")


def test_auto_says_which_device_it_chose_and_a_gpu_recipe_warns_on_a_cpu(cpu_torch):
    cpu = torch.device("cpu")
    assert device_notes("auto", cpu, False) == [
        "device: auto chose cpu (this torch was built without CUDA)"]
    assert device_notes("cpu", cpu, False) == []  # named: nothing to say
    warning = device_notes("cpu", cpu, True)
    assert len(warning) == 1 and warning[0].startswith(
        "warning: this config is written for a GPU (written_for_gpu: true) and runs on the CPU")
    assert device_notes("cuda", torch.device("cuda"), True) == []


def test_peak_memory_is_at_least_what_the_process_holds_now():
    held = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, touched
    with open("/proc/self/status") as status:  # VmRSS: the resident set now, in kB
        now_mb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    now_mb /= 1024
    peak = peak_memory_mb(torch.device("cpu"))
    assert set(peak) == {"mem/peak_rss_mb"}  # no GPU figure for a CPU run
    assert now_mb - 1 <= peak["mem/peak_rss_mb"] < now_mb + 64 * 1024  # MB, not KB or bytes
    assert held.sum() == 64 << 20


def test_a_run_says_its_recipe_and_device_and_warns_for_a_gpu_config(tiny_model_dir,
                                                                       tmp_path, cpu_torch):
    from pods.train.trainer import Trainer
    from runs import config

    lines = []
    Trainer(config(tiny_model_dir, tmp_path, device="auto", written_for_gpu=True),
            log=lines.append)
    assert lines[0] == "recipe: embedded model on even_start: max_new_tokens 4, lr 0.01 " \
                       "(full, constant), P=3 n=6 m=2, temperature 1, eval every 1e+09 s " \
                       "on 12 test problems"
    assert lines[1] == "device: auto chose cpu (this torch was built without CUDA)"
    assert lines[2].startswith("warning: this config is written for a GPU")
