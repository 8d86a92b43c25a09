"""`ctxgate serve` without a config file: the real process, its upstreams taken from the same
variables `ctxgate run` reads, serves all four APIs (driven with the official SDKs and httpx
against the provider simulator); it refuses an upstream that is its own address; its start-up
lines say where each API goes and whose credential travels."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from proxy.config_file import load_settings, parse_settings
from proxy.edge.commands.serve import Origins, reaches, self_pointing, startup_lines
from session.config.environment import PROVIDERS, zero_config_document
from tests.servers import free_port
from tests.serving import ServeProcess
from tests.simulator import Simulator
from tests.simulator.endpoints import presented_key
from tests.simulator.fixtures import sim as sim

# Variables a developer's shell may hold that would steer the zero-config settings.
STEERING = {
    name for provider in PROVIDERS for name in (*provider.base_variables, provider.key_variable)
}


def clean_environ(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in STEERING}
    return {**environ, **extra}


@pytest.fixture
def served(tmp_path: Path, sim: Simulator) -> Iterator[ServeProcess]:
    environ = clean_environ(
        OPENAI_BASE_URL=sim.base_url,
        ANTHROPIC_BASE_URL=sim.url,  # as Anthropic's SDK takes it: no /v1
        GOOGLE_GEMINI_BASE_URL=sim.url,  # as Gemini CLI takes it: no /v1beta
        OPENAI_API_KEY="sk-server-openai",
    )
    # No `--config`, in a scratch directory.
    server = ServeProcess(log=tmp_path / "serve.log", cwd=tmp_path, env=environ)
    try:
        yield server
    finally:
        server.stop(30)


def test_every_api_reaches_its_provider_with_no_config_file(
    served: ServeProcess, sim: Simulator
) -> None:
    with openai.OpenAI(base_url=f"{served.root}/v1", api_key="sk-client", max_retries=0) as oa:
        chat = oa.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
        response = oa.responses.create(model="gpt-4o", input="hello")
    assert chat.choices[0].message.content and response.output_text
    with anthropic.Anthropic(base_url=served.root, api_key="sk-ant-client", max_retries=0) as an:
        message = an.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
        )
        # A model name no rule gives to Anthropic: the Messages API names the provider.
        other = an.messages.create(
            model="glm-4.6", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
    assert message.content and other.content
    assert sim.messages_requests[-1].body["model"] == "glm-4.6"
    gemini = httpx.post(
        f"{served.root}/v1beta/models/gemini-2.5-flash:generateContent",
        headers={"x-goog-api-key": "gemini-client"},
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        timeout=30,
    )
    assert gemini.status_code == 200, gemini.text
    assert gemini.json()["candidates"]

    # OPENAI_API_KEY is set: ctxgate's key replaces the client's on the OpenAI APIs ...
    for received in (sim.chat_requests[-1], sim.responses_requests[-1]):
        assert received.headers["authorization"] == "Bearer sk-server-openai"
    # ... and the other providers, with no key in the environment, get the client's own.
    assert presented_key(sim.messages_requests[-1].headers) == "sk-ant-client"
    assert sim.gemini_requests[-1].headers["x-goog-api-key"] == "gemini-client"
    assert sim.gemini_requests[-1].path == "/v1beta/models/gemini-2.5-flash:generateContent"

    log = served.output()
    assert f"chat, responses -> {sim.base_url} (upstream openai, from OPENAI_BASE_URL)" in log
    assert "replaced by ctxgate's key from OPENAI_API_KEY" in log
    assert f"messages -> {sim.url}/v1 (upstream anthropic, from ANTHROPIC_BASE_URL)" in log
    assert "own credential is passed upstream (ANTHROPIC_API_KEY is unset)" in log
    assert f"gemini -> {sim.url}/v1beta (upstream gemini, from GOOGLE_GEMINI_BASE_URL)" in log
    assert "clients' own Authorization is passed upstream" not in log


def test_without_variables_each_api_goes_to_its_providers_public_url() -> None:
    settings = load_settings(None, {})
    bases = {name: up.base_url for name, up in settings.upstreams.items()}
    assert bases == {
        "openai": "https://api.openai.com/v1",
        "anthropic": "https://api.anthropic.com/v1",
        "gemini": "https://generativelanguage.googleapis.com/v1beta",
    }
    assert all(up.api_key is None for up in settings.upstreams.values())
    served = {api: name for name, up in settings.upstreams.items() for api in up.apis}
    assert served == {
        "chat": "openai",
        "responses": "openai",
        "messages": "anthropic",
        "gemini": "gemini",
    }
    routes = {model: settings.rule_for(model) for model in ("gpt-5", "claude-x", "gemini-y")}
    assert {m: r.upstream if r else None for m, r in routes.items()} == {
        "gpt-5": "openai",
        "claude-x": "anthropic",
        "gemini-y": "gemini",
    }
    lines = startup_lines(settings, Origins.of(settings, None, {}))
    assert lines[0].startswith("chat, responses -> https://api.openai.com/v1 (upstream openai, ")
    assert all("the provider's public URL" in line for line in lines)
    assert all("own credential is passed upstream" in line for line in lines)


def test_keys_in_the_environment_go_to_their_own_provider_with_its_header() -> None:
    environ = {"ANTHROPIC_API_KEY": "sk-ant-server", "GEMINI_API_KEY": "g-server"}
    settings = parse_settings(zero_config_document(environ), environ)
    anthropic_up, gemini_up = settings.upstreams["anthropic"], settings.upstreams["gemini"]
    assert (anthropic_up.api_key, anthropic_up.auth) == ("sk-ant-server", "x-api-key")
    assert (gemini_up.api_key, gemini_up.auth) == ("g-server", "x-goog-api-key")
    assert settings.upstreams["openai"].api_key is None
    lines = startup_lines(settings, Origins.of(settings, None, environ))
    assert "replaced by ctxgate's key from ANTHROPIC_API_KEY, sent as x-api-key" in lines[1]
    assert "replaced by ctxgate's key from GEMINI_API_KEY, sent as x-goog-api-key" in lines[2]


def test_the_lines_say_when_clients_must_present_ctxgates_keys() -> None:
    document = {
        "upstreams": {
            "keyed": {"base_url": "http://a.example/v1", "api_key": "sk-up"},
            "bare": {"base_url": "http://b.example/v1", "apis": ["messages"]},
        },
        "models": [{"match": "*", "upstream": "keyed"}],
        "auth": {"keys": ["ctx-key"]},
    }
    settings = parse_settings(document, {})
    keyed, bare = startup_lines(settings, Origins.of(settings, "ctxgate.yaml", {}))
    assert "(upstream keyed, from upstreams.keyed.base_url in ctxgate.yaml)" in keyed
    assert "clients must present one of auth.keys" in keyed
    assert "ctxgate's key from upstreams.keyed.api_key in ctxgate.yaml is sent as bearer" in keyed
    assert "without a credential" in bare


# --- an upstream that is ctxgate itself -------------------------------------------------------


def test_serve_refuses_a_base_url_that_points_at_itself(tmp_path: Path) -> None:
    port = free_port()
    environ = clean_environ(ANTHROPIC_BASE_URL=f"http://localhost:{port}")
    done = subprocess.run(
        [sys.executable, "-m", "proxy.edge.cli", "serve", "--port", str(port)],
        cwd=tmp_path,
        env={**environ, "PYTHONPATH": str(Path(__file__).parents[3])},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "the upstream 'anthropic' is this ctxgate itself" in done.stderr
    assert f"http://localhost:{port}/v1 (from ANTHROPIC_BASE_URL)" in done.stderr
    assert "another --port" in done.stderr
    assert not (tmp_path / "ctxgate.db").exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("target", "host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("localhost", "127.0.0.1", True),
        ("0.0.0.0", "127.0.0.1", True),
        ("127.0.0.2", "0.0.0.0", True),
        ("localhost", "0.0.0.0", True),
        ("devbox", "0.0.0.0", True),  # the machine's own name
        ("DEVBOX", "::", True),
        ("10.1.2.3", "10.1.2.3", True),
        # other spellings of loopback
        ("localhost.", "127.0.0.1", True),
        ("LocalHost", "127.0.0.1", True),
        ("127.1", "127.0.0.1", True),
        ("0x7f000001", "127.0.0.1", True),
        ("2130706433", "localhost", True),
        ("::ffff:127.0.0.1", "127.0.0.1", True),
        ("::ffff:7f00:1", "0.0.0.0", True),
        ("0", "127.0.0.1", True),
        ("api.openai.com", "0.0.0.0", False),
        ("no-such-host.invalid", "0.0.0.0", False),
        ("203.0.113.7", "0.0.0.0", False),  # an address no interface of this machine holds
        ("localhost", "10.1.2.3", False),  # ctxgate is not on loopback: something else is
        ("devbox", "127.0.0.1", False),  # the name may resolve to another interface
        ("127.0.0.2", "127.0.0.1", False),  # a server on 127.0.0.1 alone is not there
        ("::1", "127.0.0.1", False),
    ],
)
def test_which_hosts_reach_the_server_itself(target: str, host: str, expected: bool) -> None:
    assert reaches(target, host, "devbox") is expected


def own_lan_address() -> str:
    """The address this machine sends from on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.7", 9))
        except OSError:
            pytest.skip("this machine has no route off loopback")
        address = str(probe.getsockname()[0])
    if ipaddress.ip_address(address).is_loopback:
        pytest.skip("this machine has no address off loopback")
    return address


def test_the_machines_own_lan_address_reaches_a_server_on_every_address() -> None:
    lan = own_lan_address()
    assert reaches(lan, "0.0.0.0", "devbox")
    assert reaches(lan, "::", "devbox")
    assert reaches(f"::ffff:{lan}", "0.0.0.0", "devbox")
    assert reaches(lan, lan, "devbox")
    assert not reaches(lan, "127.0.0.1", "devbox")


def test_only_the_same_port_is_refused() -> None:
    document = zero_config_document(
        {
            "OPENAI_BASE_URL": "http://127.0.0.1:8400/v1",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:8401",
            "GOOGLE_GEMINI_BASE_URL": "http://localhost:80",
        }
    )
    settings = parse_settings(document, {})
    assert self_pointing(settings, "127.0.0.1", 8400, "devbox") == ["openai"]
    assert self_pointing(settings, "127.0.0.1", 8401, "devbox") == ["anthropic"]
    assert self_pointing(settings, "127.0.0.1", 80, "devbox") == ["gemini"]
    assert self_pointing(settings, "127.0.0.1", 9000, "devbox") == []
    disguised = parse_settings(
        zero_config_document({"OPENAI_BASE_URL": "http://127.1:8400/v1"}), {}
    )
    assert self_pointing(disguised, "0.0.0.0", 8400, "devbox") == ["openai"]
    https = parse_settings(zero_config_document({}), {})  # the providers' public URLs
    assert self_pointing(https, "0.0.0.0", 443, "devbox") == []
