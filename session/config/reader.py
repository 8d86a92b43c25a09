"""Typed access to a YAML configuration document (used by `session.config.settings`): `${VAR}` /
`${VAR:-default}` interpolation and a reader per mapping that checks each value's type, knows
its dotted path for error messages and refuses keys nobody asked for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


class SettingsError(ValueError):
    """The configuration is invalid; the message names the offending key."""


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(value: Any, environ: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: environ.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    return value


class Reader:
    """Typed access to one YAML mapping, remembering its dotted path for error messages."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise SettingsError(f"{path or 'config'}: expected a mapping")
        self.data: dict[str, Any] = data
        self.path = path
        self.used: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

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
            raise SettingsError(f"{self._key(key)}: expected {_kind_name(kind)}, got {value!r}")
        return value

    def positive(self, key: str, kind: type, default: Any) -> Any:
        value = self.get(key, kind, default)
        if value is not None and value <= 0:
            raise SettingsError(f"{self._key(key)}: must be greater than 0, got {value!r}")
        return value

    def fraction(self, key: str, default: float) -> float:
        value: float = self.get(key, float, default)
        if not 0 < value <= 1:
            raise SettingsError(f"{self._key(key)}: must be in (0, 1], got {value!r}")
        return value

    def child(self, key: str) -> Reader:
        self.used.add(key)
        return Reader(self.data.get(key), self._key(key))

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise SettingsError(f"{self._key(unknown[0])}: unknown key")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    names.update({list: "a list", dict: "a mapping"})
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)
