"""Without the hub, pods finds out once and fast (pods.runtime.hub): a cached model loads
offline, anything else fails in seconds saying what works offline."""

import socket
import time

import pytest

from pods.runtime import hub


@pytest.fixture
def no_network(monkeypatch):
    """A hub host that never answers: each connection attempt takes its whole timeout."""
    attempts = []

    def refuse(address, timeout=None):
        attempts.append(address)
        time.sleep(0.01)
        raise TimeoutError("timed out")
    monkeypatch.setattr(socket, "create_connection", refuse)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE",
                "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(key, "")  # recorded, so that what pods sets is undone after
        monkeypatch.delenv(key)
    hub.reachable.cache_clear()
    yield attempts
    hub.reachable.cache_clear()


def test_an_uncached_hub_model_fails_at_once_saying_what_works_offline(no_network):
    from pods.models.source import resolve

    start = time.monotonic()
    for _ in range(3):  # asked once per process, however many loads follow
        with pytest.raises(ValueError, match=r"not in the local cache, and the hub .* did "
                           r"not answer within 3 s; what works without the hub: --model "
                           r"tiny .*pods fetch smollm2.*--data-dir"):
            resolve("nobody/no-such-model", None)
    assert time.monotonic() - start < 2 and len(no_network) == 1


def test_a_cached_model_loads_offline_without_retries(no_network, monkeypatch):
    import os

    from pods.models.source import resolve

    monkeypatch.setattr(hub, "cached_model", lambda repo_id: True)
    said = []
    assert resolve("HuggingFaceTB/SmolLM2-135M-Instruct", None, log=said.append) == \
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert os.environ["HF_HUB_OFFLINE"] == "1" and "local cache only" in said[0]


def test_hf_hub_offline_is_taken_at_its_word(monkeypatch):
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("network"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.reachable.cache_clear()
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set"):
        hub.check_hub_model("nobody/no-such-model")
    hub.reachable.cache_clear()


def test_hub_data_goes_offline_so_it_fails_at_once(no_network, monkeypatch):
    import os

    hub.before_hub_data()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["HF_DATASETS_OFFLINE"] == "1"


def test_behind_a_proxy_the_proxy_is_asked(no_network, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert not hub.reachable()
    assert no_network == [("proxy.example", 3128)]
