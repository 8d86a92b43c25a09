"""Write the configuration reference page of the docs site from the settings code.

    python scripts/config_reference.py           print the page
    python scripts/config_reference.py --write   write docs/configuration-reference.md
    python scripts/config_reference.py --check   exit 1 when that file is stale

The page is generated whole, so nothing in it can be edited by hand and drift from the code.

Keys and types come from the dataclasses in session/config/settings.py and session/config/prices.py,
descriptions from the docstring under each field, and defaults from what `parse_settings`
actually produces for a minimal file (so the table cannot claim a default the loader does not
apply). The built-in compressor's options come from `compression.options.CompressorOptions`:
all of them in their own table, and those the config sets on `compression` itself (its
`compressor` field) as rows of that section, described by the string under the option.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from compression import CompressorOptions
from proxy.config_file import parse_settings
from session.config import prices as prices_module
from session.config import settings as settings_module
from session.config.settings import COMPRESSION_KEYS, Settings, UpstreamSettings

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration-reference.md"
COMMAND = "python scripts/config_reference.py --write"
TITLE = "# Configuration reference"
INTRO = (
    "Every key of the config file, generated from `session/config/settings.py`, "
    "`session/config/prices.py` and `compression/options.py` (`tests/test_readme.py` fails "
    "when this page and the code disagree). Only `upstreams` and `models` are required; "
    "how to start a file, and the settings most deployments change: "
    "[Configuration](configuration.md)."
)

# The loader fills these in from the file's own structure, not from a default value.
_FIRST_UPSTREAM = "<first upstream>"
_MINIMAL = {
    "upstreams": {_FIRST_UPSTREAM: {"base_url": "https://provider.example/v1"}},
    "models": [{}],
}
_REQUIRED = {(UpstreamSettings, "base_url")}
_NOT_KEYS = {(UpstreamSettings, "name")}  # the mapping key under `upstreams`

_SCALARS = {
    str: ("string", "strings"),
    int: ("integer", "integers"),
    float: ("number", "numbers"),
    bool: ("boolean", "booleans"),
    Any: ("any value", "any values"),
}


@dataclasses.dataclass(frozen=True)
class Section:
    path: str  # e.g. "upstreams.NAME", "models[]", "compression.summary"
    cls: type
    value: Any  # the loaded instance the defaults are read from
    intro: str


def field_docs(module: types.ModuleType) -> dict[str, dict[str, str]]:
    """{class name: {field: docstring}} from the string literal under each annotated field."""
    tree = ast.parse(inspect.getsource(module))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        found = docs.setdefault(node.name, {})
        for stmt, following in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                found[stmt.target.id] = one_line(following.value.value)
    return docs


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _strip_optional(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def type_name(hint: Any, plural: bool = False) -> str:
    hint = _strip_optional(hint)
    if hint in _SCALARS:
        return _SCALARS[hint][plural]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return ("lists of " if plural else "list of ") + type_name(args[0], plural=True)
    if origin in (Mapping, dict) and len(args) == 2:
        kind = "mappings" if plural else "mapping"
        return kind if args[1] is Any else f"{kind} to {type_name(args[1], plural=True)}"
    raise TypeError(f"no reference name for the type {hint!r}; extend type_name()")


def render_default(value: Any) -> str:
    if value is None:
        return "unset"
    if value == _FIRST_UPSTREAM:
        return "the first upstream"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str | int | float):
        return f"`{value}`"
    if isinstance(value, tuple | list):
        return "`[" + ", ".join(render_default(v).strip("`") for v in value) + "]`"
    if isinstance(value, Mapping):
        items = (f"{k}: {render_default(v).strip('`')}" for k, v in value.items())
        return "`{" + ", ".join(items) + "}`"
    raise TypeError(f"no reference rendering for the default {value!r}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def all_docs() -> dict[str, dict[str, str]]:
    modules = (settings_module, prices_module, inspect.getmodule(CompressorOptions))
    docs: dict[str, dict[str, str]] = {}
    for module in modules:
        assert module is not None
        docs |= field_docs(module)
    return docs


def sections(loaded: Settings) -> Iterator[Section]:
    """The tables, in the order of the fields of `Settings` (nested sections after their parent)."""
    docs = all_docs()
    hints = typing.get_type_hints(Settings)
    for f in dataclasses.fields(Settings):
        hint, value = hints[f.name], getattr(loaded, f.name)
        intro = one_line(inspect.getdoc(_section_class(hint)) or "")
        if f.name in docs["Settings"]:
            intro = f"{intro} {docs['Settings'][f.name]}"
        if typing.get_origin(hint) is Mapping:
            yield Section(
                f"{f.name}.NAME", typing.get_args(hint)[1], next(iter(value.values())), intro
            )
        elif typing.get_origin(hint) is tuple:
            yield Section(f"{f.name}[]", typing.get_args(hint)[0], value[0], intro)
        else:
            yield from _nested(f.name, hint, value, intro)


def _section_class(hint: Any) -> type:
    args = typing.get_args(hint)
    cls = args[-1] if typing.get_origin(hint) is Mapping else args[0] if args else hint
    assert dataclasses.is_dataclass(cls) and isinstance(cls, type)
    return cls


def _nested(path: str, cls: type, value: Any, intro: str) -> Iterator[Section]:
    yield Section(path, cls, value, intro)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        sub = hints[f.name]
        if dataclasses.is_dataclass(sub) and isinstance(sub, type) and sub is not CompressorOptions:
            sub_intro = one_line(inspect.getdoc(sub) or "")
            yield from _nested(f"{path}.{f.name}", sub, getattr(value, f.name), sub_intro)


def _declared_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def section_table(section: Section, docs: dict[str, dict[str, str]]) -> list[str]:
    lines = [f"## `{section.path}`", ""]
    if section.intro:
        lines += [section.intro, ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    for cls, f, value in _keys(section.cls, section.value):
        hint = typing.get_type_hints(cls)[f.name]
        description = docs.get(cls.__name__, {}).get(f.name)
        if not description:
            raise SystemExit(
                f"{cls.__name__}.{f.name} has no docstring in {inspect.getsourcefile(cls)}; "
                "add one under the field (it becomes its description here)"
            )
        loaded = getattr(value, f.name)
        declared = _declared_default(f)
        if declared is not dataclasses.MISSING and declared != loaded:
            raise SystemExit(
                f"{cls.__name__}.{f.name}: the dataclass default {declared!r} differs "
                f"from the loader's {loaded!r}; make them agree in {inspect.getsourcefile(cls)}"
            )
        default = "required" if (cls, f.name) in _REQUIRED else render_default(loaded)
        key = f"`{section.path}.{f.name}`"
        lines.append(f"| {key} | {type_name(hint)} | {default} | {_cell(description)} |")
    return lines + [""]


def _keys(cls: type, value: Any) -> Iterator[tuple[type, dataclasses.Field[Any], Any]]:
    """The section's keys, in field order, each as (its class, its field, the loaded instance
    holding it): the built-in compressor's options set on this section stand where the
    `CompressorOptions` field does."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if hint is CompressorOptions:
            options = {item.name: item for item in dataclasses.fields(CompressorOptions)}
            for name in COMPRESSION_KEYS:
                yield CompressorOptions, options[name], getattr(value, f.name)
        elif (cls, f.name) not in _NOT_KEYS and not dataclasses.is_dataclass(hint):
            yield cls, f, value


def options_table() -> list[str]:
    """The built-in compressor's options (names, types and defaults only)."""
    *first, last = (f"`{name}`" for name in COMPRESSION_KEYS)
    lines = [
        "## `compression.options` of the built-in `compressor` engine",
        "",
        f"Checked at start-up: an unknown name or a wrong value stops it. {', '.join(first)} "
        f"and {last} default to the `compression` keys of the same name, "
        "`summary_model_context_length` to `compression.summary.context_length`.",
        "",
        "| option | type | default |",
        "|---|---|---|",
    ]
    hints = typing.get_type_hints(CompressorOptions)
    for f in dataclasses.fields(CompressorOptions):
        default = render_default(_declared_default(f))
        lines.append(f"| `{f.name}` | {type_name(hints[f.name])} | {_cell(default)} |")
    return lines + [""]


def render() -> str:
    """The Markdown between the markers (without them)."""
    loaded = parse_settings(_MINIMAL, {})
    docs = all_docs()
    lines = [
        "<!-- Generated from session/config/settings.py and compression/options.py by "
        f"`{COMMAND}`; do not edit by hand. -->",
        "",
    ]
    tables = list(sections(loaded))
    # The options table follows the last `compression` section, whatever their order.
    last = max(i for i, s in enumerate(tables) if s.path.split(".")[0] == "compression")
    for i, section in enumerate(tables):
        lines += section_table(section, docs)
        if i == last:
            lines += options_table()
    return "\n".join(lines).rstrip("\n") + "\n"


def render_page() -> str:
    """The whole of docs/configuration-reference.md."""
    return f"{TITLE}\n\n{INTRO}\n\n{render()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {PAGE.name}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {PAGE.name} is stale")
    args = parser.parse_args(argv)
    page = render_page()
    if not (args.write or args.check):
        sys.stdout.write(page)
        return 0
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if args.check:
        if current != page:
            print(f"{PAGE} is stale; run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if current != page:
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
