"""The flat view of a nested config: YAML files, flags and run folders use one unique key per
leaf field (``n``, ``lr``, ``code_test_timeout``), mapped here onto the group it belongs to
(``rollout.n``, ``optim.lr``, ``task.code.test_timeout``).

Generic over the root dataclass (``leaves(TrainConfig)``), so that this module imports
nothing from pods but ``pods.config.names`` (what an unknown key meant):
``pods.config.train`` builds ``TrainConfig`` on top of it.

A leaf's type is one of int, float, str and bool, or a ``Literal`` of fixed choices (the
values it takes, checked here with the types), optionally ``| None``."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pods.config.names import nested_block, suggestion


@dataclass(frozen=True)
class Leaf:
    """One configurable value: its flat key, where it sits and how it is declared."""

    key: str  # the YAML key and CLI flag name: "lr"
    path: tuple[str, ...]  # attribute names from the root: ("optim", "lr")
    field: dataclasses.Field
    group: str  # the group's dotted path: "optim", "task.code"
    group_help: str  # the top-level group's description, for --help
    hint: Any  # the field's type, resolved: int, int | None, Literal["group", "batch"]

    @property
    def optional(self) -> bool:  # None is a value (no limit, the default's own choice)
        return type(None) in _members(self.hint)

    @property
    def choices(self) -> tuple | None:
        """The values a ``Literal`` field takes, in declared order; None for other types."""
        literal = [t for t in _members(self.hint) if typing.get_origin(t) is Literal]
        return typing.get_args(literal[0]) if literal else None

    @property
    def kind(self) -> str:
        """What a value is: int, float, str or bool (a Literal's: its choices' type)."""
        if self.choices is not None:
            return type(self.choices[0]).__name__
        return next(t for t in _members(self.hint) if t is not type(None)).__name__

    @property
    def type(self) -> str:
        """As written in the dataclass ("int | None"); a Literal as its choices
        ("'group' | 'batch'")."""
        if self.choices is None:
            return " | ".join("None" if t is type(None) else t.__name__
                              for t in _members(self.hint))
        return " | ".join([*map(repr, self.choices), *(["None"] if self.optional else [])])

    @property
    def help(self) -> str:
        return self.field.metadata["help"]

    @property
    def default(self) -> Any:
        return self.field.default


def _is_group(f: dataclasses.Field) -> bool:
    return f.default_factory is not dataclasses.MISSING and \
        dataclasses.is_dataclass(f.default_factory)


def _members(hint: Any) -> tuple:
    """The types a union joins (``int | None``: int and NoneType), or the type alone."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _leaves(cls: type, path: tuple[str, ...] = (), group_help: str = "") -> list[Leaf]:
    hints = typing.get_type_hints(cls)  # the annotations' text resolved in cls's module
    found = []
    for f in dataclasses.fields(cls):
        if _is_group(f):
            found += _leaves(f.default_factory, (*path, f.name),
                             group_help or f.metadata["help"])
        else:
            found.append(Leaf(f.metadata.get("key", f.name), (*path, f.name), f,
                              ".".join(path), group_help, hints[f.name]))
    return found


@functools.cache
def leaves(root: type) -> dict[str, Leaf]:
    """Every leaf field of the dataclass ``root`` by its flat key, in --help order."""
    found = _leaves(root)
    by_key = {leaf.key: leaf for leaf in found}
    assert len(by_key) == len(found), "flat config keys must be unique"
    return by_key


def get(config: Any, key: str) -> Any:
    """The value of flat key ``key`` in ``config``."""
    value: Any = config
    for name in leaves(type(config))[key].path:
        value = getattr(value, name)
    return value


def to_flat(config: Any) -> dict[str, Any]:
    return {key: get(config, key) for key in leaves(type(config))}


def _build(cls: type, values: dict[tuple[str, ...], Any], path: tuple[str, ...] = ()):
    kwargs = {}
    for f in dataclasses.fields(cls):
        here = (*path, f.name)
        if _is_group(f):
            kwargs[f.name] = _build(f.default_factory, values, here)
        elif here in values:
            kwargs[f.name] = values[here]
    return cls(**kwargs)


def build(root: type, values: dict[str, Any]) -> Any:
    """A ``root`` config from a mapping of flat keys (missing keys take their defaults); an
    unknown key is an error that lists the known ones. A time budget given alone is the
    whole budget: ``max_time`` without ``max_steps`` clears the default step budget."""
    known = leaves(root)
    check_known(known, values)
    if values.get("max_time") is not None and "max_steps" not in values:
        values = {**values, "max_steps": None}
    return _build(root, {known[k].path: v for k, v in values.items()})


def check_known(known: dict[str, Leaf], values: dict[str, Any]) -> None:
    """Raise ValueError naming each key of ``values`` not in ``known`` and what was meant
    (a typo, a TRL or verl name, a nested block: pods.config.names)."""
    unknown = [key for key in values if key not in known]
    if unknown:
        raise ValueError("; ".join(
            nested_block(key, values[key], known) if isinstance(values[key], dict)
            else f"unknown config field {key!r}: {suggestion(str(key), known)}"
            for key in unknown))


_KINDS = {"int": "a whole number", "float": "a number", "str": "text", "bool": "true or false"}


def spelled(value: Any) -> str:
    """``value`` as YAML and the flags write it: true and false for bools."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def unknown(key: str, value: Any, names) -> str:
    """The message for a ``value`` of ``key`` that is none of ``names``."""
    return f"unknown {key} {value!r}; use one of {', '.join(map(spelled, names))}."


def type_problem(leaf: Leaf, value: Any) -> str | None:
    """What is wrong when ``value`` does not fit ``leaf``'s type (or is none of its
    choices), else None."""
    key, kind = leaf.key, leaf.kind
    if value is None:
        return None if leaf.optional else f"{key} must be {_KINDS[kind]}, not empty."
    if leaf.choices is not None:  # the value and its type: 1 is not True
        return None if any(value == c and type(value) is type(c) for c in leaf.choices) \
            else unknown(key, value, leaf.choices)
    fits = {"int": isinstance(value, int), "float": isinstance(value, int | float),
            "str": isinstance(value, str), "bool": isinstance(value, bool)}[kind]
    if isinstance(value, bool) and kind != "bool":
        fits = False
    if fits:
        return None
    empty = " (or null)" if leaf.optional else ""
    return f"{key}={value!r} must be {_KINDS[kind]}{empty}."


def as_number(leaf: Leaf, value: Any) -> Any:
    """YAML 1.1 reads 3e-4 (no dot) as text: take such text as the number it spells."""
    if isinstance(value, str) and leaf.kind == "float":
        try:
            return float(value)
        except ValueError:
            return value
    return value
