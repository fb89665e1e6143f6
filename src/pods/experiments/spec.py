"""A comparison's spec: variants (each a set of config overrides), seeds and baselines, read
from YAML (``load_spec``) and kept in the comparison folder as ``compare.yaml``
(``write_spec``, which refuses a folder that holds another spec and names what differs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pods.config import LEAVES, TrainConfig, as_number, from_dict, load_yaml, read_yaml
from pods.config.names import suggestion
from pods.experiments.summary import baseline_names
from pods.train.checks import check

__all__ = ["CompareSpec", "check_overrides", "load_spec", "spec_changes", "write_spec"]

SPEC_KEYS = ("base", "seeds", "baseline", "variants")
# set per run by run_compare, never by a spec
RUN_KEYS = ("seed", "out_dir", "run_name", "tracker_group")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class CompareSpec:
    """Variants to compare: each variant's config is defaults < ``base`` < its overrides."""

    variants: dict[str, dict]  # variant name (its folder name) -> TrainConfig overrides
    seeds: tuple[int, ...]  # every variant is trained once per seed
    # the variant(s) whose peak accuracy defines a speed-up target: a name, or a list whose
    # first name is the primary one (summary columns, the dotted line in curves.png)
    baseline: str | tuple[str, ...]
    base: dict = field(default_factory=dict)  # overrides common to all variants

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(self.seeds))
        if not self.variants:
            raise ValueError("the spec has no variants; add at least one under `variants:` "
                             "as `name: {field: value, ...}`.")
        if isinstance(self.baseline, list | tuple):
            object.__setattr__(self, "baseline", tuple(self.baseline))
        names = baseline_names(self.baseline)
        if not names:
            raise ValueError("the spec names no baseline; give `baseline: NAME` or a list.")
        for name in names:
            if name not in self.variants:
                raise ValueError(f"baseline {name!r} is not a variant; use one of "
                                 f"{', '.join(self.variants)}.")
        if not self.seeds:
            raise ValueError("the spec has no seeds; give `seeds: [0, 1, 2]` or `seeds: 3`.")
        for seed in self.seeds:
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise ValueError(f"seed {seed!r} is not an integer; seeds must be integers.")
        if len(set(self.seeds)) < len(self.seeds):
            raise ValueError(f"seeds {list(self.seeds)} repeat a seed; list each seed once.")
        check_overrides("base", self.base)
        for name, overrides in self.variants.items():
            if not _NAME.fullmatch(name) or name in (".", ".."):
                raise ValueError(f"variant name {name!r} is not usable as a folder name; use "
                                 "only letters, digits, '-', '_' and '.'.")
            check_overrides(f"variant {name!r}", overrides)
        for name in self.variants:
            for seed in self.seeds:
                self.config(name, seed)

    def config(self, variant: str, seed: int, **extra: Any) -> TrainConfig:
        """The resolved config of one run: defaults < base < variant < ``extra``, then seed,
        its registry names checked too (pods.train.checks), so a spec fails when loaded."""
        values = {**self.base, **self.variants[variant], **extra, "seed": seed}
        try:
            return check(from_dict(values))
        except ValueError as e:
            raise ValueError(f"variant {variant!r} (seed {seed}): {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """The spec as load_spec reads it."""
        baseline = list(self.baseline) if isinstance(self.baseline, tuple) else self.baseline
        return {"base": dict(self.base), "seeds": list(self.seeds), "baseline": baseline,
                "variants": {name: dict(v) for name, v in self.variants.items()}}


def check_overrides(where: str, overrides: Any) -> None:
    if not isinstance(overrides, dict):
        raise ValueError(f"{where} must be a mapping of TrainConfig field: value, "
                         f"got {overrides!r}.")
    for key in overrides:
        if key in RUN_KEYS:
            raise ValueError(f"{where} sets {key!r}, which the comparison sets for each run "
                             "(seeds come from `seeds:`, folders from --out, tracker groups are "
                             "comparison-variant); remove it.")
        if key not in LEAVES:  # the same help as a YAML file or a flag gets
            raise ValueError(f"{where} overrides unknown field {key!r}; "
                             f"{suggestion(str(key), LEAVES)} (every field: `pods train "
                             f"--help`)")


def load_spec(path: str | Path) -> CompareSpec:
    """A CompareSpec from YAML: ``base`` (optional), ``seeds`` (list, or k for 0..k-1),
    ``baseline`` (a name or a list of names) and ``variants`` (name: {field: value})."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"comparison spec {path} does not exist.")
    data = read_yaml(path)[0] or {}  # a syntax error names the line
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a comparison spec is a mapping with keys "
                         f"{', '.join(SPEC_KEYS)}.")
    unknown = [k for k in data if k not in SPEC_KEYS]
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(map(str, unknown))}; "
                         f"the keys are {', '.join(SPEC_KEYS)}.")
    for key in ("seeds", "baseline", "variants"):
        if key not in data:
            raise ValueError(f"{path}: missing `{key}:`.")
    variants = data["variants"]
    if isinstance(variants, dict):  # `name:` with nothing under it means the defaults
        variants = {str(k): _fields(v, path) for k, v in variants.items()}
    try:
        return CompareSpec(variants=variants or {}, seeds=_seeds(data["seeds"]),
                           baseline=_baseline(data["baseline"]),
                           base=_fields(data.get("base"), path))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _fields(value: Any, spec: Path) -> Any:
    """A variant's or the base's fields: a mapping, nothing (the defaults), or the name of
    a training config YAML file, relative to the spec's folder (configs/paper/ uses it)."""
    if value is None:
        return {}
    if isinstance(value, str):
        return load_yaml(spec.parent / value)
    if isinstance(value, dict):  # YAML reads 3e-4 as text; a training config file does not
        return {k: as_number(k, v) if k in LEAVES else v for k, v in value.items()}
    return value


def _baseline(value: Any) -> str | tuple[str, ...]:
    """``baseline:`` one name, or a list of names (the first is the primary one)."""
    return tuple(map(str, value)) if isinstance(value, list) else str(value)


def _seeds(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"seeds: {value} asks for no runs; give a count >= 1 or a list.")
        return tuple(range(value))
    if isinstance(value, list):
        return tuple(value)
    raise ValueError(f"seeds: {value!r} is neither a count nor a list of integers.")


def write_spec(spec: CompareSpec, path: Path) -> None:
    """Write compare.yaml, refusing to mix runs of a different spec in one folder: the
    refusal names each difference (``spec_changes``). Seeds and baselines may change."""
    if path.is_file():
        changes = spec_changes(yaml.safe_load(path.read_text()) or {}, spec.to_dict())
        if changes:
            raise ValueError(f"{path.parent} holds a comparison with other variants or base "
                             f"overrides: {'; '.join(changes)} (its compare.yaml / this "
                             "spec). Run the spec it holds, pick another --out folder, or "
                             "delete this one.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))


def spec_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """How two specs as compare.yaml holds them differ in what their runs are: "base: lr
    1e-05 -> 2e-05", "variant 'grpo': n 16 -> 8", "variant 'x': added" or "removed"
    (their seeds and baselines may differ: a comparison grows by seeds)."""
    old_variants, new_variants = old.get("variants") or {}, new.get("variants") or {}
    changes = [f"base: {c}" for c in _field_changes(old.get("base") or {},
                                                    new.get("base") or {})]
    for name in [*old_variants, *(n for n in new_variants if n not in old_variants)]:
        if name not in new_variants:
            changes.append(f"variant {name!r}: removed")
        elif name not in old_variants:
            changes.append(f"variant {name!r}: added")
        else:
            changes += [f"variant {name!r}: {c}" for c in
                        _field_changes(old_variants[name] or {}, new_variants[name] or {})]
    return changes


def _field_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """"key old -> new" for each field set differently ("unset" where one does not set it)."""
    keys = [*old, *(k for k in new if k not in old)]
    return [f"{k} {old.get(k, 'unset')} -> {new.get(k, 'unset')}" for k in keys
            if old.get(k, _UNSET) != new.get(k, _UNSET)]


_UNSET = object()
