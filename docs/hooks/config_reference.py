"""MkDocs hook: the configuration reference, generated from `pods.config.TrainConfig`.

The page `docs/configuration.md` holds the reference between the markers
`<!-- config-reference -->` and `<!-- /config-reference -->`, one table per group of
fields, written into the file so that it reads anywhere (GitHub shows the file as it is):
`python docs/hooks/config_reference.py` rewrites it, `tests/test_config_reference.py` fails
while the file differs from the dataclass, and at build time the hook puts the generated
text in place, so the site cannot drift from the dataclass that `pods train --help` is
built from either.

Convention (it holds for today's flat config and for the nested one it is moving to): walk
`dataclasses.fields(TrainConfig)` recursively. A field whose type is a dataclass is a
*group*; its `metadata["help"]` describes the group, and groups may nest (`task.math`).
Every other field is a *leaf*: `metadata["help"]` is its help, and `metadata["key"]`
(default: the field name) its flat YAML key; the CLI flag is `--` + key with `_` -> `-`.
"""

from __future__ import annotations

import dataclasses
import html
import types
import typing
from pathlib import Path
from typing import Any, NamedTuple

MARKER, END = "<!-- config-reference -->", "<!-- /config-reference -->"
PAGE = Path(__file__).resolve().parents[1] / "configuration.md"


class Row(NamedTuple):
    group: str  # dotted group path; "" for fields at the top level
    key: str  # flat YAML key
    flag: str  # CLI flag
    type: str
    default: str
    help: str


def _hints(cls: type) -> dict[str, Any]:
    """Field types with string annotations resolved where possible (a module that uses
    `from __future__ import annotations` stores them as text)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an unresolvable name: fall back to the text of the annotation
        return {}


def _type_name(tp: Any) -> str:
    """`int`, `int | None`; a field of fixed choices (a `Literal`) as its choices:
    `'group' | 'batch'`."""
    if isinstance(tp, str):
        return tp
    if tp is type(None):
        return "None"
    if typing.get_origin(tp) is typing.Literal:
        return " | ".join(map(repr, typing.get_args(tp)))
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " | ".join(map(_type_name, typing.get_args(tp)))
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return "required"


def groups(cls: type, path: str = "") -> list[tuple[str, str, list[Row]]]:
    """[(group path, group help, its leaf rows)] in declaration order, depth first; the top
    level comes first when it has leaves of its own."""
    hints, leaves, nested = _hints(cls), [], []
    for f in dataclasses.fields(cls):
        tp = hints.get(f.name, f.type)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            sub = f"{path}.{f.name}" if path else f.name
            sub_groups = groups(tp, sub)
            help_text = f.metadata.get("help", "")
            if sub_groups and sub_groups[0][0] == sub:
                sub_groups[0] = (sub, help_text, sub_groups[0][2])
            else:  # a group whose fields are all in sub-groups
                sub_groups.insert(0, (sub, help_text, []))
            nested += sub_groups
            continue
        key = f.metadata.get("key", f.name)
        leaves.append(Row(path, key, "--" + key.replace("_", "-"), _type_name(tp),
                          _default(f), f.metadata.get("help", "")))
    return ([(path, "", leaves)] if leaves else []) + nested


def rows(cls: type) -> list[Row]:
    """Every leaf field of `cls`, nested groups included."""
    return [row for _, _, group_rows in groups(cls) for row in group_rows]


def _cell(text: str, code: bool = False) -> str:
    text = html.escape(text, quote=False).replace("|", "&#124;")
    return f"<code>{text}</code>" if code else text


def reference_markdown(cls: type, recipe: dict[str, str] | None = None) -> str:
    """Markdown tables, one per group: key, CLI flag, type, default, help; with ``recipe``
    (key -> the language-model recipe's value, where it differs from the default) a
    column of those values after the default."""
    if recipe is not None:
        return _with_recipe_column(reference_markdown(cls), recipe)
    out = []
    for path, help_text, group_rows in groups(cls):
        if path:
            out += [f"### `{path}`", ""]
            if help_text:
                out += [_cell(help_text), ""]
        if not group_rows:
            continue
        out += ["| YAML key | CLI flag | type | default | help |", "|---|---|---|---|---|"]
        out += [f"| {_cell(r.key, True)} | {_cell(r.flag, True)} | {_cell(r.type, True)} | "
                f"{_cell(r.default, True)} | {_cell(r.help)} |" for r in group_rows]
        out.append("")
    return "\n".join(out)


def _with_recipe_column(markdown: str, recipe: dict[str, str]) -> str:
    """The tables of ``markdown`` with a "language models" column after the default."""
    out = []
    for line in markdown.splitlines():
        if line.startswith("| YAML key |"):
            line = line.replace("| default |", "| default (embedded model) | language models |")
        elif line.startswith("|---|"):
            line += "---|"
        elif line.startswith("| <code>"):
            key = html.unescape(line.split("<code>", 1)[1].split("</code>", 1)[0])
            cells = line.split(" | ")  # key, flag, type, default, help (escaped: no " | ")
            value = recipe.get(key)
            cells.insert(4, _cell(value, code=True) if value else "")
            line = " | ".join(cells)
        out.append(line)
    return "\n".join(out) + ("\n" if markdown.endswith("\n") else "")


def with_reference(markdown: str, cls: type, recipe: dict[str, str] | None = None) -> str:
    """``markdown`` with the text between the markers made the reference of ``cls``."""
    if MARKER not in markdown:
        return markdown
    head, rest = markdown.split(MARKER, 1)
    tail = rest.split(END, 1)[1] if END in rest else "\n"
    return f"{head}{MARKER}\n{reference_markdown(cls, recipe)}{END}{tail}"


def pods_reference(markdown: str) -> str:
    """``markdown`` with pods's reference: TrainConfig, and the language-model recipe's
    values (pods.config.recipes) beside the defaults (the embedded model's)."""
    from pods.config import TrainConfig, describe_fields

    recipe = {row["key"]: row["language_model"] for row in describe_fields()
              if row["language_model"] is not None}
    return with_reference(markdown, TrainConfig, recipe)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """MkDocs event: the page's reference made current."""
    if MARKER not in markdown:
        return markdown
    return pods_reference(markdown)


if __name__ == "__main__":  # rewrite docs/configuration.md's reference in place
    from pods.config import TrainConfig

    PAGE.write_text(pods_reference(PAGE.read_text()))
    print(f"wrote the reference of {len(rows(TrainConfig))} fields into {PAGE}")
