"""Activation (gradient) checkpointing of a transformers model: whether it is on, and
switching it, through the name the installed transformers has.

transformers 5.25 renamed ``gradient_checkpointing_enable`` / ``_disable`` to
``activation_checkpointing_enable`` / ``_disable`` (the old names warn, and go in v6);
earlier releases have only the old ones. Either way the checkpointed modules carry
``gradient_checkpointing = True``, which ``checkpointed`` reads.
"""

from __future__ import annotations


def checkpointed(model) -> bool:
    """Whether ``model`` recomputes activations in the backward pass (transformers marks
    the modules it checkpoints ``gradient_checkpointing = True``)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def set_checkpointing(model, on: bool) -> None:
    """Switch ``model``'s activation checkpointing on or off (every layer)."""
    verb = "enable" if on else "disable"
    switch = getattr(model, f"activation_checkpointing_{verb}", None) or \
        getattr(model, f"gradient_checkpointing_{verb}")
    switch()
