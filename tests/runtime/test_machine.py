"""The machine a run records, the bf16 warning, and the check that keeps a comparison's runs
on one machine class."""

import pytest
import torch

from pods.runtime import machine
from pods.runtime.machine import (
    HOST,
    KEY,
    check_same_machine,
    differences,
    host,
    machine_fields,
    slow_bf16,
)


def test_machine_fields_name_the_host_and_the_device():
    fields = machine_fields(torch.device("cpu"))
    assert set(KEY) <= set(fields) and fields["machine/device"] == "cpu"
    assert fields["machine/cores"] >= 1 and fields["machine/torch"] == torch.__version__
    assert fields["machine/bf16"] in ("amx", "avx512_bf16", "none", "unknown")
    assert fields["machine/cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert {k: fields[k] for k in HOST} == host()


@pytest.mark.parametrize("bf16, dtype, mixed, warns", [
    ("none", "float32", "bf16", True), ("none", "bfloat16", "no", True),
    ("none", "float32", "no", False), ("none", "auto", "no", False),
    ("avx512_bf16", "float32", "bf16", False), ("amx", "bfloat16", "no", False),
    ("unknown", "float32", "bf16", False)])
def test_slow_bf16_warns_only_where_the_cpu_emulates_it(monkeypatch, bf16, dtype, mixed,
                                                         warns):
    monkeypatch.setattr(machine, "cpu_bf16", lambda: bf16)
    said = slow_bf16(torch.device("cpu"), dtype, mixed)
    assert (said is not None) == warns
    if warns:
        assert "--dtype float32 --mixed-precision no" in said
    assert slow_bf16(torch.device("cuda"), dtype, mixed) is None  # a CPU's question only


def test_a_comparison_refuses_runs_on_another_host():
    here = host()
    other = {**here, "machine/bf16": "none" if here["machine/bf16"] != "none" else "amx",
             "machine/cores": here["machine/cores"] + 6}
    check_same_machine({}, here)  # nothing finished, or runs of an older pods: nothing to say
    check_same_machine({"pods/seed0": {**here, "machine/device": "cpu",
                                       "machine/torch": "other"}}, here)  # the same host
    assert differences(other, here, HOST) == [
        f"cores: {other['machine/cores']} / {here['machine/cores']}",
        f"bf16: {other['machine/bf16']} / {here['machine/bf16']}"]
    with pytest.raises(ValueError, match="device: cuda NVIDIA H100 / cpu"):
        check_same_machine({"pods/seed0": {**other, "machine/device": "cuda NVIDIA H100"}},
                           {**here, "machine/device": "cpu"})  # a GPU run, a CPU here
    with pytest.raises(ValueError, match=r"pods/seed1 was made on another machine \(cores: "
                       r".*theirs / this one's\): runs timed on both would not be comparable"):
        check_same_machine({"pods/seed0": here, "pods/seed1": other}, here)
