"""pods's cache folder: the embedded model, fetched models, converted GGUF files and the
kernels torch's compiler built."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$PODS_CACHE``, else ``$XDG_CACHE_HOME/pods``, else ``~/.cache/pods``."""
    if os.environ.get("PODS_CACHE"):
        return Path(os.environ["PODS_CACHE"])
    return user_cache_dir()


def user_cache_dir() -> Path:
    """The user's pods cache whatever ``PODS_CACHE`` says: ``$XDG_CACHE_HOME/pods``, else
    ``~/.cache/pods``."""
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "pods"


def compile_cache() -> str:
    """Where torch's inductor keeps compiled kernels: ``TORCHINDUCTOR_CACHE_DIR`` where the
    user set it, else the pods cache's ``compile`` folder (set for this process), so the
    compile of a shape is paid once per machine, not once per process or per /tmp. Called
    before each compile pods starts (the decode loop, generate's static cache, the packed
    layouts' FlexAttention)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "compile"))
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]
