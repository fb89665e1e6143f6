"""Where a policy's weights come from, told apart before anything loads.

A ``--model`` is one of:
    tiny                       the embedded model (pods.models.tiny), shipped in the package
    smollm2                    a short name of a model ``pods fetch`` caches (pods.models.fetch)
    ./model.gguf               a GGUF file (or a folder or hub repo plus ``--gguf-file NAME``)
    ./folder                   a folder written by ``save_pretrained``
    org/name                   a Hugging Face hub id

A GGUF file is dequantized once into an ordinary safetensors folder in the pods cache
(pods.models.gguf), and every later load reads that folder: checkpoints and exports are
plain Hugging Face folders that load without the gguf package, and vLLM can read the weights.

This module imports nothing heavy: ``pods train``, ``pods check`` and loading call
``source_problem`` before anything loads. The configuration checks do not: a run folder
whose base model has moved still reads (its checkpoints hold full weights, or a resume
names the new place with --model).
"""

from __future__ import annotations

import os
from pathlib import Path

from pods.models.fetch import FETCHABLE, fetch


def is_builtin(name: str) -> bool:
    """Whether ``name`` is the embedded model or one pods fetches (never a path, even where
    a folder of that name exists)."""
    return name == "tiny" or name in FETCHABLE


def is_local(name: str) -> bool:
    """Whether ``name`` means a path on this machine rather than a hub id ("org/name"):
    it exists, starts like a path (/, ., ~, or runs/, where pods writes its run folders),
    has more than one "/" or names a .gguf file. A folder here named like a hub
    organisation does not make "org/name" local (the hub id still loads)."""
    return (os.path.exists(os.path.expanduser(name)) or name.startswith(("/", ".", "~"))
            or name.startswith("runs/") or name.count("/") > 1 or name.endswith(".gguf"))


def source_problem(name: str, gguf_file: str | None) -> str | None:
    """What is wrong with ``--model name`` (and ``--gguf-file``) that can be told without
    loading anything, else None: a local path that does not exist, a GGUF file missing
    from its folder, a .gguf file named twice."""
    if is_builtin(name):
        if gguf_file:
            return f"--gguf-file {gguf_file} names a file inside a --model folder, but " \
                   f"{name!r} is a built-in model; drop --gguf-file."
        return None
    path = Path(name).expanduser()
    if is_local(name) and not path.exists():
        return f"the model path {name} does not exist (from {Path.cwd()}); pass an " \
               f"existing folder or .gguf file, a hub id such as " \
               f"HuggingFaceTB/SmolLM2-135M-Instruct, 'tiny', or a model pods fetch knows " \
               f"({', '.join(FETCHABLE)})."
    if name.endswith(".gguf") and gguf_file:
        return f"--model {name} is a GGUF file already; drop --gguf-file {gguf_file}."
    if path.is_file() and not name.endswith(".gguf"):
        return f"--model {name} is a file but not a .gguf file; pass a model folder, a " \
               f"hub id or a .gguf file."
    if gguf_file and path.is_dir() and not (path / gguf_file).is_file():
        return f"{path} holds no GGUF file {gguf_file}; it holds " \
               f"{', '.join(p.name for p in path.glob('*.gguf')) or 'none'}."
    return None


def check_source(name: str, gguf_file: str | None) -> None:
    """Raise ValueError saying what is wrong with ``--model``, if ``source_problem`` can
    tell it without loading anything."""
    problem = source_problem(name, gguf_file)
    if problem:
        raise ValueError(problem)


def resolve(name: str, gguf_file: str | None, log=print) -> str:
    """What ``from_pretrained`` loads for ``--model name``: a folder (the embedded model's,
    a fetched model's or a GGUF file's dequantized one, built on first use) or a hub id."""
    check_source(name, gguf_file)
    if name == "tiny":
        from pods.models.tiny import embedded_model_path

        return str(embedded_model_path(log=log))
    if name in FETCHABLE:
        return str(fetch(name, log=log))
    if name.endswith(".gguf") or gguf_file:
        from pods.models.gguf import dequantized, find_gguf

        return str(dequantized(find_gguf(name, gguf_file), log=log))
    if is_local(name):
        return str(Path(name).expanduser())
    from pods.runtime.hub import check_hub_model

    check_hub_model(name, log)  # no network: the cached copy, or an error in seconds
    return name
