"""How each agent is pointed at ctxgate, and which provider it speaks (pure).

Every agent is pointed with what it reads at start-up (environment variables, command-line
flags or config overrides given on its command line), never by editing the user's own config
files, so the user's setup is the same before and after a run. The agent keeps sending the
user's own credentials; ctxgate forwards them upstream.

A command this table does not know gets every provider's base-URL variable at once, which is
how most other tools built on the providers' SDKs are pointed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from session.config.environment import Provider


@dataclass(frozen=True, slots=True)
class Launch:
    """The agent's command line and the environment variables set for it (over the user's)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One known agent: its command's name, the provider its requests go to by default, and
    how to point it at ctxgate's `base` (`http://127.0.0.1:PORT`, no path)."""

    name: str
    provider: Provider
    how: str  # for the README and `ctxgate run --help`
    point: Callable[[Sequence[str], str, Mapping[str, str]], Launch]
    install: str = ""  # the public install command, for `--help` and a missing agent


def _claude(argv: Sequence[str], base: str, environ: Mapping[str, str]) -> Launch:
    # Claude Code appends /v1/messages itself; it sends ANTHROPIC_API_KEY as x-api-key,
    # ANTHROPIC_AUTH_TOKEN (or a login's token) as a bearer, all forwarded as they come.
    return Launch(tuple(argv), {"ANTHROPIC_BASE_URL": base})


CODEX_PROVIDER = "ctxgate"


def codex_overrides(base: str, environ: Mapping[str, str]) -> list[str]:
    """`-c` overrides that add a model provider for ctxgate and select it. Codex's built-in
    OpenAI provider would try a WebSocket first, which ctxgate does not serve."""
    prefix = f"model_providers.{CODEX_PROVIDER}"
    values = {
        "name": json.dumps(CODEX_PROVIDER),
        "base_url": json.dumps(f"{base}/v1"),
        "wire_api": json.dumps("responses"),
        "supports_websockets": "false",
    }
    # With OPENAI_API_KEY set Codex sends it; without, the key or token of `codex login`.
    if environ.get("OPENAI_API_KEY"):
        values["env_key"] = json.dumps("OPENAI_API_KEY")
    else:
        values["requires_openai_auth"] = "true"
    flags = [f"model_provider={json.dumps(CODEX_PROVIDER)}"]
    flags += [f"{prefix}.{key}={value}" for key, value in values.items()]
    return [arg for flag in flags for arg in ("-c", flag)]


def _codex(argv: Sequence[str], base: str, environ: Mapping[str, str]) -> Launch:
    # Root-level `-c` flags apply to every subcommand (`codex exec …` included).
    return Launch((argv[0], *codex_overrides(base, environ), *argv[1:]))


def _aider(argv: Sequence[str], base: str, environ: Mapping[str, str]) -> Launch:
    # aider calls models through LiteLLM, which reads these for `openai/…`, `gpt-…` and
    # `claude-…` models; aider's own `--openai-api-base` would set the first one the same way.
    return Launch(
        tuple(argv),
        {
            "OPENAI_API_BASE": f"{base}/v1",
            "OPENAI_BASE_URL": f"{base}/v1",
            "ANTHROPIC_API_BASE": base,
            "ANTHROPIC_BASE_URL": base,
        },
    )


def opencode_config(base: str, environ: Mapping[str, str]) -> str:
    """OPENCODE_CONFIG_CONTENT: OpenCode's built-in OpenAI and Anthropic providers sent to
    ctxgate, merged over the content the user may already pass the same way."""
    try:
        loaded = json.loads(environ.get("OPENCODE_CONFIG_CONTENT") or "{}")
    except ValueError:
        loaded = {}
    config = loaded if isinstance(loaded, dict) else {}
    providers = config.setdefault("provider", {})
    for name in ("openai", "anthropic"):
        entry = providers.setdefault(name, {})
        entry.setdefault("options", {})["baseURL"] = f"{base}/v1"
    return json.dumps(config)


def _opencode(argv: Sequence[str], base: str, environ: Mapping[str, str]) -> Launch:
    return Launch(tuple(argv), {"OPENCODE_CONFIG_CONTENT": opencode_config(base, environ)})


SESSION_HEADER = "X-Ctxgate-Session-Id"


def gemini_headers(environ: Mapping[str, str], session: str) -> str:
    """GEMINI_CLI_CUSTOM_HEADERS with a session id added (unless the user sets one there):
    with an API key Gemini CLI sends none, and one run is one conversation."""
    mine = f"{SESSION_HEADER}: {session}"
    theirs = (environ.get("GEMINI_CLI_CUSTOM_HEADERS") or "").strip()
    if SESSION_HEADER.lower() in theirs.lower():
        return theirs  # the user names the session already
    return f"{theirs}, {mine}" if theirs else mine


def _gemini(argv: Sequence[str], base: str, environ: Mapping[str, str]) -> Launch:
    session = f"ctxgate-run-{uuid.uuid4().hex[:16]}"
    return Launch(
        tuple(argv),
        {
            "GOOGLE_GEMINI_BASE_URL": base,
            "GEMINI_CLI_CUSTOM_HEADERS": gemini_headers(environ, session),
        },
    )


def _other(argv: Sequence[str], base: str, environ: Mapping[str, str]) -> Launch:
    return Launch(
        tuple(argv),
        {
            "OPENAI_BASE_URL": f"{base}/v1",
            "OPENAI_API_BASE": f"{base}/v1",
            "ANTHROPIC_BASE_URL": base,
            "GOOGLE_GEMINI_BASE_URL": base,
        },
    )


AGENTS: dict[str, AgentSpec] = {
    spec.name: spec
    for spec in (
        AgentSpec(
            "claude",
            "anthropic",
            "ANTHROPIC_BASE_URL",
            _claude,
            "npm install -g @anthropic-ai/claude-code",
        ),
        AgentSpec(
            "codex",
            "openai",
            "`-c model_providers.ctxgate…` overrides",
            _codex,
            "npm install -g @openai/codex",
        ),
        AgentSpec(
            "aider",
            "openai",
            "OPENAI_API_BASE, ANTHROPIC_API_BASE",
            _aider,
            "pipx install aider-chat",
        ),
        AgentSpec(
            "opencode",
            "openai",
            "OPENCODE_CONFIG_CONTENT (provider baseURL)",
            _opencode,
            "npm install -g opencode-ai",
        ),
        AgentSpec(
            "gemini",
            "gemini",
            "GOOGLE_GEMINI_BASE_URL",
            _gemini,
            "npm install -g @google/gemini-cli",
        ),
    )
}
OTHER = AgentSpec("other", "openai", "every provider's base-URL variable", _other)
_TITLES = {
    "claude": "Claude Code",
    "codex": "Codex CLI",
    "aider": "aider",
    "opencode": "OpenCode",
    "gemini": "Gemini CLI",
}


def agent_for(command: str) -> AgentSpec:
    """The spec for a command (`claude`, `/opt/bin/codex`, …); OTHER for one not in the table."""
    return AGENTS.get(PurePath(command).name, OTHER)


def launch(argv: Sequence[str], base: str, environ: Mapping[str, str]) -> Launch:
    """How to run `argv` (the agent and its own arguments) against ctxgate at `base`."""
    if not argv:
        raise ValueError("no agent command given")
    return agent_for(argv[0]).point(argv, base.rstrip("/"), environ)


def not_found(command: str) -> str:
    """What a shell says of a command that is not on PATH, with how to install it when it is
    an agent this table knows."""
    spec = AGENTS.get(PurePath(command).name)
    message = f"{command}: command not found"
    if spec is None:
        return message
    title = _TITLES.get(spec.name, spec.name)
    return f"{message}; install {title} with: {spec.install}"


def agents_help() -> str:
    """The agents `ctxgate run` knows, each with its install command (for `run --help`)."""
    width = max(len(name) for name in AGENTS)
    lines = [
        f"  {spec.name:<{width}}  {_TITLES.get(spec.name, spec.name)}: {spec.install}"
        for spec in AGENTS.values()
    ]
    return (
        "agents it knows (any other command gets every provider's base-URL variable):\n"
        + "\n".join(lines)
    )
