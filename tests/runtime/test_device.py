"""The device a run names, and the peak memory the process held (pods.runtime.device)."""

import torch

from pods.runtime.device import peak_memory_mb, resolve_device


def test_named_devices_resolve_as_torch_names_them():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_peak_memory_is_at_least_what_the_process_holds_now():
    held = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, touched
    with open("/proc/self/status") as status:  # VmRSS: the resident set now, in kB
        now_mb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    now_mb /= 1024
    peak = peak_memory_mb(torch.device("cpu"))
    assert set(peak) == {"mem/peak_rss_mb"}  # no GPU figure for a CPU run
    assert now_mb - 1 <= peak["mem/peak_rss_mb"] < now_mb + 64 * 1024  # MB, not KB or bytes
    assert held.sum() == 64 << 20
