"""Choosing the context engine by name: a short name or a `module:Class` import string.

    load_engine("compressor", CompressorOptions(threshold=0.6))   # options already checked
    load_engine("compressor", {"threshold": 0.6})                 # checked here
    load_engine("passthrough", {})
    load_engine("my_pkg.engines:Mine", {...})   # Mine.from_options(options) or Mine(**options)

The built-in compressor takes its options typed, or as a mapping it checks; any other engine
takes a mapping of its own. Either way they are checked at start-up: a typo fails the boot,
not the first request.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from compression.engine import ContextEngine
from compression.options import CompressorOptions
from compression.thresholds import Limits, limits_for

ENGINES: dict[str, str] = {
    "compressor": "compression.compressor:Compressor",
    "passthrough": "compression.passthrough:PassthroughEngine",
}


@runtime_checkable
class HasLimits(Protocol):
    def limits(self, context_length: int, max_output_tokens: int | None) -> Limits: ...


def load_engine(
    name: str, options: CompressorOptions | Mapping[str, Any] | None = None
) -> ContextEngine:
    target = ENGINES.get(name, name)
    if ":" not in target:
        raise ValueError(
            f"unknown compression engine {name!r}; choose one of {', '.join(ENGINES)} "
            "or give a 'module:Class' import string"
        )
    engine = _construct(name, target, _import(target), options)
    if not callable(getattr(engine, "compress", None)):
        raise ValueError(f"compression engine {name!r} has no compress() method")
    result: ContextEngine = engine
    return result


def _construct(
    name: str, target: str, factory: Any, options: CompressorOptions | Mapping[str, Any] | None
) -> Any:
    if isinstance(options, CompressorOptions):
        if target != ENGINES["compressor"]:
            raise ValueError(
                f"compression engine {name!r} takes a mapping of its own options, "
                "not the built-in compressor's"
            )
        return factory(options)
    mapping = dict(options or {})
    from_options = getattr(factory, "from_options", None)
    return from_options(mapping) if callable(from_options) else factory(**mapping)


def _import(target: str) -> Any:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"cannot import compression engine module {module_name!r}: {error}"
        ) from error
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no engine {attribute!r}") from None


def engine_limits(
    engine: ContextEngine,
    context_length: int,
    max_output_tokens: int | None,
    defaults: CompressorOptions | None = None,
) -> Limits:
    """The engine's thresholds; engines without their own use `defaults`' (else built-in)."""
    if isinstance(engine, HasLimits):
        return engine.limits(context_length, max_output_tokens)
    return limits_for(defaults or CompressorOptions(), context_length, max_output_tokens)
