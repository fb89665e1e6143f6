"""The config's flat faces: YAML files (``load_yaml``, ``save_yaml``) and command-line flags
(``add_config_flags``: one argument group per concern), both keyed by the flat keys of
``pods.config.flat``. Precedence: defaults < the model's recipe (pods.config.recipes) <
--config YAML < flags."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from pods.config.flat import spelled
from pods.config.names import nested_block, suggestion
from pods.config.train import (
    LEAVES,
    TrainConfig,
    as_number,
    from_dict,
    language_model_default,
    type_problem,
)


def read_yaml(path: str | Path) -> tuple[Any, dict[str, int]]:
    """A YAML file's content and the line of each top-level key; a syntax error is one
    line naming the file, line and column."""
    path = Path(path)
    if path.is_dir():
        inside = path / "config.yaml"
        hint = f"; a run folder's is {inside} (or continue that run: `pods train --resume " \
               f"{path}`)" if inside.is_file() else "; pass a YAML file of config fields"
        raise ValueError(f"{path} is a folder, not a YAML file{hint}.")
    if not path.is_file():
        raise ValueError(f"{path} does not exist.")
    text = path.read_text()
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        # where the broken construct starts (PyYAML notices the problem a line later)
        mark = getattr(error, "context_mark", None) or getattr(error, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"{where}: YAML syntax error ({problem}); write one `field: value` "
                         f"per line, with a space after the colon.") from None
    lines = {}
    if isinstance(node, yaml.MappingNode):
        lines = {str(key.value): key.start_mark.line + 1 for key, _ in node.value}
    return data, lines


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A training config file of flat keys: each key known and each value of its field's
    type (numbers that YAML reads as text, such as ``3e-4``, are taken as numbers); an error
    names the file and line. Run folders' ``config.yaml`` files are read the same way."""
    data, lines = read_yaml(path)
    data = data or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of field: value.")
    for key, value in data.items():
        where = f"{path}, line {lines.get(str(key), '?')}"
        if key not in LEAVES:
            if isinstance(value, dict):
                raise ValueError(f"{where}: {nested_block(str(key), value, LEAVES)}")
            raise ValueError(f"{where}: unknown field {key!r}; {suggestion(str(key), LEAVES)}")
        if key == "report_to" and isinstance(value, list):
            value = ",".join(map(str, value))
        data[key] = value = as_number(key, value)
        problem = type_problem(key, value)
        if problem:
            raise ValueError(f"{where}: {problem}")
    return data


# Keys a run folder written by an earlier pods may lack, and the value that reproduces how
# it trained (the defaults of new runs may differ): before schedules, the lr was constant;
# before the bf16 working copy, liger-kernel and pods's decode loop, an update computed
# under autocast with torch's kernels and the static cache decoded with generate; before
# the packed layouts, the update padded every row.
EARLIER_BEHAVIOUR = {"lr_schedule": "constant", "weight_cast": "matmul",
                     "update_kernels": "torch", "hf_decode": "generate",
                     "update_layout": "padded"}


def load_run_config(path: str | Path) -> dict[str, Any]:
    """A run folder's saved ``config.yaml`` (flat keys), every key given: those an earlier
    pods did not write set to how that run trained (their defaults then, never a recipe's
    value), so that resume and evaluation go on as it did."""
    values = load_yaml(path)
    return {**{key: leaf.default for key, leaf in LEAVES.items()}, **EARLIER_BEHAVIOUR,
            **values}


def save_yaml(config: TrainConfig, path: str | Path) -> None:
    """The config as flat keys, grouped in declaration order."""
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


def _parse_optional(kind: type):
    def parse(text: str):
        return None if text.lower() in ("none", "null") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


_PARSERS = {"int": int, "float": float, "str": str, "bool": _parse_bool}


def _parse_bool_or_text(text: str) -> bool | str:
    """A flag of choices that are true, false and words (``auto``): the bool a true or
    false word names, else the word (argparse checks it against the choices)."""
    try:
        return _parse_bool(text)
    except argparse.ArgumentTypeError:
        return text


def add_config_flags(parser: argparse.ArgumentParser, keys=None) -> None:
    """One flag per config key (--max-time and --max_time both work), under one argument
    group per concern; unset flags stay absent so that YAML values and defaults stand. A
    field of fixed choices takes only those (argparse's ``choices``, shown in --help).
    ``keys``: only these flat keys (`pods eval` takes the task's and the model source's)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for leaf in LEAVES.values():
        if keys is not None and leaf.key not in keys:
            continue
        top = leaf.path[0]
        if top not in groups:
            groups[top] = parser.add_argument_group(top, leaf.group_help)
        parse = _PARSERS[leaf.kind]
        if leaf.kind == "bool" and leaf.choices is not None:  # true, false or a word
            parse = _parse_bool_or_text
        if leaf.optional:
            parse = _parse_optional(parse)
        choices = None if leaf.optional else leaf.choices  # (argparse would refuse none)
        flags = list(dict.fromkeys([f"--{leaf.key.replace('_', '-')}", f"--{leaf.key}"]))
        metavar = "{" + ",".join(map(spelled, choices)) + "}" if choices else \
            leaf.kind.upper()  # argparse's own form, with true and false as YAML's
        groups[top].add_argument(*flags, dest=f"cfg_{leaf.key}", type=parse, choices=choices,
                                 default=argparse.SUPPRESS, metavar=metavar,
                                 help=f"{leaf.help} ({_defaults(leaf.key)})")


def _defaults(key: str) -> str:
    """``default: 8; language models: by task ...`` (the recipes, pods.config.recipes)."""
    real = language_model_default(key)
    if real is None:
        return f"default: {LEAVES[key].default}"
    return f"default: {LEAVES[key].default} for the embedded model; language models: {real}"


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys given as flags (those added by ``add_config_flags``)."""
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_")}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Defaults < --config YAML < flags."""
    values = load_yaml(args.config) if getattr(args, "config", None) else {}
    return from_dict({**values, **flag_overrides(args)})
