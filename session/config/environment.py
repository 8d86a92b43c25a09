"""The zero-config settings: what `ctxgate serve` without a file and `ctxgate run` read from the
user's environment, in one place (pure: the environment comes in as a mapping).

Each provider gets an upstream from its usual variables, or its public URL when none is set:

- Chat Completions and Responses (OpenAI): OPENAI_BASE_URL (or OPENAI_API_BASE), OPENAI_API_KEY;
- Messages (Anthropic): ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY;
- Gemini: GOOGLE_GEMINI_BASE_URL, GEMINI_API_KEY.

`serve` puts the keys it finds in the upstreams (a client's own credential is then replaced);
`run` leaves them out, so the agent's own credential is what reaches the provider. Models are
routed by name: `claude*` to Anthropic, `gemini*` to Gemini, every other name to the primary
provider (OpenAI for `serve`, the agent's provider for `run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Provider = Literal["openai", "anthropic", "gemini"]


@dataclass(frozen=True, slots=True)
class ProviderVariables:
    """One provider's variables and defaults, and the API path its upstream's base ends in."""

    name: Provider
    apis: tuple[str, ...]
    base_variables: tuple[str, ...]  # the first one set wins
    key_variable: str
    default_base: str
    suffix: str  # appended when the variable's URL lacks it ("" : taken as given)
    window: int  # the context length assumed for its models


PROVIDERS: tuple[ProviderVariables, ...] = (
    ProviderVariables(
        "openai",
        ("chat", "responses"),
        ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
        "OPENAI_API_KEY",
        "https://api.openai.com/v1",
        "",
        128_000,
    ),
    ProviderVariables(
        "anthropic",
        ("messages",),
        ("ANTHROPIC_BASE_URL",),
        "ANTHROPIC_API_KEY",
        "https://api.anthropic.com",
        "/v1",
        200_000,
    ),
    ProviderVariables(
        "gemini",
        ("gemini",),
        ("GOOGLE_GEMINI_BASE_URL",),
        "GEMINI_API_KEY",
        "https://generativelanguage.googleapis.com",
        "/v1beta",
        1_048_576,
    ),
)
BY_NAME: dict[str, ProviderVariables] = {provider.name: provider for provider in PROVIDERS}
# Model names that go to a provider whatever the primary one is.
ROUTES = (("claude*", "anthropic"), ("gemini*", "gemini"))


def base_url(provider: ProviderVariables, environ: Mapping[str, str]) -> str:
    """The upstream's base: the first variable set, else the public URL, with the API's path
    (the SDKs' variables omit /v1 for Anthropic and /v1beta for Gemini; the upstream has it)."""
    given = next((environ[v] for v in provider.base_variables if environ.get(v)), None)
    base = (given or provider.default_base).rstrip("/")
    return base if base.endswith(provider.suffix) else f"{base}{provider.suffix}"


def source_of(provider: ProviderVariables, environ: Mapping[str, str]) -> str | None:
    """The variable the base URL came from (None: the provider's default)."""
    return next((v for v in provider.base_variables if environ.get(v)), None)


def upstreams_document(environ: Mapping[str, str], *, keys: bool) -> dict[str, dict[str, Any]]:
    """An upstream per provider; with `keys`, each holds its key variable's value when set."""
    out: dict[str, dict[str, Any]] = {}
    for provider in PROVIDERS:
        entry: dict[str, Any] = {"base_url": base_url(provider, environ), "apis": [*provider.apis]}
        if keys and environ.get(provider.key_variable):
            entry["api_key"] = environ[provider.key_variable]
        out[provider.name] = entry
    return out


def models_document(primary: str) -> list[dict[str, Any]]:
    """Rules sending `claude*` and `gemini*` to their providers, every other name to `primary`."""
    main = BY_NAME.get(primary, BY_NAME["openai"])
    rules = [
        {"match": match, "upstream": name, "context_length": BY_NAME[name].window}
        for match, name in ROUTES
    ]
    rules.append({"match": "*", "upstream": main.name, "context_length": main.window})
    return rules


def zero_config_document(environ: Mapping[str, str]) -> dict[str, Any]:
    """`ctxgate serve` without a file: every API to its provider, keys from the environment."""
    return {
        "upstreams": upstreams_document(environ, keys=True),
        "models": models_document("openai"),
    }


def origins(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Per zero-config upstream, the variable its base URL came from (absent: the provider's
    public URL) and the variable its key is read from."""
    base: dict[str, str] = {}
    for provider in PROVIDERS:
        variable = source_of(provider, environ)
        if variable is not None:
            base[provider.name] = variable
    return base, {p.name: p.key_variable for p in PROVIDERS}
