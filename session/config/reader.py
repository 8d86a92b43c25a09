"""Typed access to a YAML configuration document (used by `session.config.settings`): `${VAR}` /
`${VAR:-default}` interpolation and a reader per mapping that checks each value's type, knows
its dotted path for error messages and refuses keys nobody asked for.

A document is read to its end whatever it holds: each problem is written down in the readers'
shared `Problems` (a misspelled key with the key it most resembles, a value that came from an
unset `${VAR}` with that variable's name) and the reader goes on with the key's default, so one
pass finds every problem. A `Reader` made on its own, without `Problems`, raises at the first.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any


class SettingsError(ValueError):
    """The configuration is invalid; each problem names the offending key."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(
    value: Any,
    environ: Mapping[str, str],
    unset: dict[str, list[str]] | None = None,
    path: str = "",
) -> Any:
    """`value` with `${VAR}` / `${VAR:-default}` replaced from `environ` (an unset variable
    without a default becomes ""); `unset`, when given, gets each such variable's name under
    the dotted path of the value that named it."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: _variable(m, environ, unset, path), value)
    if isinstance(value, list):
        return [interpolate(v, environ, unset, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: interpolate(v, environ, unset, _join(path, str(k))) for k, v in value.items()}
    return value


def _variable(
    match: re.Match[str], environ: Mapping[str, str], unset: dict[str, list[str]] | None, path: str
) -> str:
    name, default = match.group(1), match.group(2)
    if name in environ:
        return environ[name]
    if default is None and unset is not None:
        unset.setdefault(path, []).append(name)
    return default or ""


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def close_match(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` most likely misspells, if one is close enough."""
    found = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.7)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ "; did you mean X?" for the choice `word` most likely misspells, else ""."""
    near = close_match(word, choices)
    return f"; did you mean {near}?" if near else ""


class Problems:
    """Every problem of one document, in the order found, and the `${VAR}`s it names that are
    unset (by the dotted path of the value naming them)."""

    def __init__(self, unset: Mapping[str, list[str]] | None = None) -> None:
        self.messages: list[str] = []
        self.unset: dict[str, list[str]] = dict(unset or {})

    def under(self, key: str) -> list[str]:
        """The unset variables named by `key`'s value or by any value inside it."""
        return [
            name
            for path, names in self.unset.items()
            if path == key or path.startswith((f"{key}.", f"{key}["))
            for name in names
        ]

    def add(self, key: str, problem: str) -> None:
        variables = self.under(key)
        if variables:
            names = ", ".join(f"${{{name}}}" for name in variables)
            problem += f" ({names} {'is' if len(variables) == 1 else 'are'} not set)"
        self.messages.append(f"{key}: {problem}")

    def extend(self, error: SettingsError) -> None:
        self.messages.extend(error.problems)

    def raise_any(self) -> None:
        if self.messages:
            raise SettingsError(*self.messages)


class Reader:
    """Typed access to one YAML mapping, remembering its dotted path for error messages."""

    def __init__(self, data: Any, path: str, problems: Problems | None = None) -> None:
        self.problems = problems
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.fail(None, "expected a mapping", path=path or "config")
            data = {}
        self.data: dict[str, Any] = data
        self.path = path
        self.used: set[str] = set()

    def _key(self, key: str) -> str:
        return _join(self.path, key)

    def fail(self, key: str | None, problem: str, *, path: str | None = None) -> None:
        """Write a problem of `key` (None: of this mapping) down; alone, raise it."""
        where = path or (self._key(key) if key is not None else self.path or "config")
        if self.problems is None:
            raise SettingsError(f"{where}: {problem}")
        self.problems.add(where, problem)

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(key)
        value = self.data.get(key, default)
        if value is None or value == "":
            return default
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if kind in (int, float) and isinstance(value, str):
            try:
                return kind(value)
            except ValueError:
                pass
        if kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            self.fail(key, f"expected {_kind_name(kind)}, got {value!r}")
            return default
        return value

    def positive(self, key: str, kind: type, default: Any) -> Any:
        value = self.get(key, kind, default)
        if value is not None and value <= 0:
            self.fail(key, f"must be greater than 0, got {value!r}")
            return default
        return value

    def fraction(self, key: str, default: float) -> float:
        value: float = self.get(key, float, default)
        if not 0 < value <= 1:
            self.fail(key, f"must be in (0, 1], got {value!r}")
            return default
        return value

    def child(self, key: str) -> Reader:
        self.used.add(key)
        return Reader(self.data.get(key), self._key(key), self.problems)

    def item(self, data: Any, path: str) -> Reader:
        """A reader of a mapping inside a list, sharing this one's problems."""
        return Reader(data, path, self.problems)

    def unknown(self) -> list[str]:
        return sorted(set(self.data) - self.used, key=str)

    def done(self) -> None:
        """Every key nobody asked for is a problem, with the known key it most resembles."""
        for key in self.unknown():
            self.fail(str(key), "unknown key" + did_you_mean(str(key), self.used))


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    names.update({list: "a list", dict: "a mapping"})
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)
