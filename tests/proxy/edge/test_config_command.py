"""`ctxgate config check` lists every problem of a file at once, with the key a misspelled one
most resembles and the unset `${VAR}` behind an empty value, by the same reading `serve` does;
`ctxgate config show` prints the configuration in effect, secrets masked."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.config_file import parse_settings
from proxy.edge.commands.configuration import check_file, show_file

ROOT = Path(__file__).parents[3]

# One problem at each level of the file, each the kind a first run makes.
BAD = """
upstreams:
  a: {base_url: "http://x/v1", apis: [chat, mesages]}
models: [{match: "*", contxt_length: 5}]
sever: {port: 1}
server: {prot: 8400}
storage: {retention: {session_idle_dayz: 3}}
compression:
  threshhold: 0.5
  summary: {modle: x}
  options: {protect_frist_n: 2, tail_mode: weird}
"""
EXPECTED = [
    "upstreams.a.apis: expected a non-empty list of chat, responses, messages, gemini, got "
    "['chat', 'mesages']; did you mean messages?",
    "models[0].contxt_length: unknown key; did you mean context_length?",
    "sever: unknown key; did you mean server?",
    "server.prot: unknown key; did you mean port?",
    "storage.retention.session_idle_dayz: unknown key; did you mean session_idle_days?",
    "compression.threshhold: unknown key; did you mean threshold?",
    "compression.summary.modle: unknown key; did you mean model?",
    "compression.options.protect_frist_n: unknown option; did you mean protect_first_n?",
    "compression.options.tail_mode: must be one of ('lean', 'legacy')",
]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.edge.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def checked(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> tuple[int, str]:
    path = tmp_path / "ctxgate.yaml"
    path.write_text(text)
    out = io.StringIO()
    code = check_file(str(path), environ or {}, out)
    return code, out.getvalue()


def problems(report: str) -> list[str]:
    return [line[2:] for line in report.splitlines()[1:] if not line.startswith("  note:")]


def test_check_lists_every_problem_at_once_each_with_its_likely_key(tmp_path: Path) -> None:
    code, report = checked(tmp_path, BAD)
    assert code == 2
    assert report.splitlines()[0] == f"{tmp_path / 'ctxgate.yaml'}: {len(EXPECTED)} problems"
    assert sorted(problems(report)) == sorted(EXPECTED)


def test_serve_refuses_the_same_file_with_the_same_problems(tmp_path: Path) -> None:
    path = tmp_path / "ctxgate.yaml"
    path.write_text(BAD)
    check = cli("config", "check", str(path))
    serve = cli("serve", "--config", str(path))
    assert (check.returncode, serve.returncode) == (2, 2)
    refused = serve.stderr.splitlines()
    assert refused[0] == "ctxgate: invalid configuration:"
    assert sorted(line.strip() for line in refused[1:]) == sorted(EXPECTED)
    assert sorted(problems(check.stdout)) == sorted(EXPECTED)


def test_a_misspelled_option_gets_one_suggestion_not_the_whole_list(tmp_path: Path) -> None:
    code, report = checked(
        tmp_path,
        "upstreams: {a: {base_url: 'http://x/v1'}}\nmodels: [{match: '*'}]\n"
        "compression: {options: {keep_imgaes: 2}}\n",
    )
    assert code == 2
    assert problems(report) == [
        "compression.options.keep_imgaes: unknown option; did you mean keep_images?"
    ]


def test_an_unset_variable_is_named_where_it_leaves_a_value_empty(tmp_path: Path) -> None:
    text = (
        "upstreams: {a: {base_url: '${MY_UPSTREAM_URL}', api_key: '${MY_UPSTREAM_KEY}'}}\n"
        "models: [{match: '*'}]\n"
    )
    code, report = checked(tmp_path, text)
    assert code == 2
    assert problems(report) == ["upstreams.a.base_url: required (${MY_UPSTREAM_URL} is not set)"]
    # An empty key is allowed (the client's credential is forwarded): a note, not a problem.
    assert "  note: upstreams.a.api_key: ${MY_UPSTREAM_KEY} is not set (read as empty)" in report
    code, report = checked(tmp_path, text, {"MY_UPSTREAM_URL": "http://x/v1"})
    assert code == 0 and report.splitlines()[0].endswith(": valid")


def test_a_misspelled_upstreams_section_is_reported_as_such(tmp_path: Path) -> None:
    code, report = checked(
        tmp_path, "upstream: {a: {base_url: 'http://x/v1'}}\nmodels: [{match: '*'}]\n"
    )
    assert code == 2
    assert problems(report) == ["upstream: unknown key; did you mean upstreams?"]


def test_a_valid_file_exits_0_and_a_missing_one_2(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("upstreams: {a: {base_url: 'http://x/v1'}}\nmodels: [{match: '*'}]\n")
    done = cli("config", "check", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"{path}: valid\n"
    missing = cli("config", "check", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot read config file" in missing.stdout


def test_check_runs_the_engines_own_check_as_serve_does(tmp_path: Path) -> None:
    code, report = checked(
        tmp_path,
        "upstreams: {a: {base_url: 'http://x/v1'}}\nmodels: [{match: '*'}]\n"
        "compression: {engine: zipper}\n",
    )
    assert code == 2
    assert problems(report)[0].startswith("compression.engine: ")
    assert "passthrough" in report


def test_check_without_a_file_reads_the_zero_config_environment() -> None:
    done = cli("config", "check", env={"OPENAI_BASE_URL": "ftp://nowhere"})
    assert done.returncode == 2
    assert "upstreams.openai.base_url: must start with http:// or https://" in done.stdout


# --- config show --------------------------------------------------------------------------------

SECRETS = """
upstreams:
  a:
    base_url: "${UPSTREAM_URL}"
    api_key: "${UPSTREAM_KEY}"
    headers: {Authorization: "Bearer hdr-secret-0123456789abcdef", X-Title: "my app"}
models: [{match: "*", upstream: a}]
storage: {url: "postgresql+asyncpg://ctx:pg-pass-S3cret@db.internal:5432/ctx"}
auth: {keys: ["client-key-0123456789abcdef"], admin_key: "admin-key-0123456789abcdef"}
compression: {threshold: 0.6, options: {keep_images: 2}}
"""
ENVIRON = {"UPSTREAM_URL": "https://llm.internal/v1", "UPSTREAM_KEY": "sk-proj-0123456789abcdef"}


def shown(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    path = tmp_path / "ctxgate.yaml"
    path.write_text(SECRETS)
    out = io.StringIO()
    assert show_file(str(path), ENVIRON, out) == 0
    return out.getvalue(), yaml.safe_load(out.getvalue())


def test_show_masks_every_secret(tmp_path: Path) -> None:
    text, document = shown(tmp_path)
    for secret in (
        "sk-proj-0123456789ab",
        "hdr-secret",
        "pg-pass-S3cret",
        "client-key-",
        "admin-key-",
    ):
        assert secret not in text
    upstream = document["upstreams"]["a"]
    assert upstream["api_key"] == "****cdef"  # the tail tells two keys apart
    assert upstream["headers"] == {"Authorization": "****cdef", "X-Title": "my app"}
    assert document["storage"]["url"] == "postgresql+asyncpg://ctx:****@db.internal:5432/ctx"
    assert document["auth"] == {"keys": ["****cdef"], "admin_key": "****cdef"}


# Credentials in the other places a config can hold them: headers named otherwise than
# `Authorization`, URL query parameters, the options of an engine named by import string.
HIDDEN = """
upstreams:
  a:
    base_url: "https://gen.example/v1beta?key=AIzaSyA-0123456789abcdefgh&alt=sse"
    apis: [gemini]
    headers:
      Helicone-Auth: "Bearer sk-helicone-0123456789abcdef"
      x-auth: supersecretvalue
      X-Amz-Security-Token: amz-session-token-value
      OpenAI-Organization: org-visible
models: [{match: "*", upstream: a}]
storage:
  url: "postgresql+asyncpg://ctx@db.internal/ctx?password=hunter2pw&ssl=require"
compression:
  engine: "tests.compression.test_registry:CustomEngine"
  options:
    level: 3
    max_tokens: 900
    api_key: sk-engine-0123456789abcdef
    upstream: {clientSecret: engine-client-secret, sig: engine-signature, region: eu}
"""


def test_show_masks_credentials_under_secret_names_wherever_they_sit(tmp_path: Path) -> None:
    path = tmp_path / "ctxgate.yaml"
    path.write_text(HIDDEN)
    out = io.StringIO()
    assert show_file(str(path), {}, out) == 0
    text, document = out.getvalue(), yaml.safe_load(out.getvalue())
    for secret in (
        "AIzaSyA-0123456789",
        "sk-helicone-0123456789",
        "supersecretvalue",
        "amz-session-token",
        "hunter2pw",
        "sk-engine-0123456789",
        "engine-client-secret",
        "engine-signature",
    ):
        assert secret not in text
    upstream = document["upstreams"]["a"]
    assert upstream["base_url"] == "https://gen.example/v1beta?key=****&alt=sse"
    assert upstream["headers"] == {
        "Helicone-Auth": "****cdef",
        "x-auth": "****",
        "X-Amz-Security-Token": "****alue",
        "OpenAI-Organization": "org-visible",
    }
    assert document["storage"]["url"] == (
        "postgresql+asyncpg://ctx@db.internal/ctx?password=****&ssl=require"
    )
    assert document["compression"]["options"] == {
        "level": 3,
        "max_tokens": 900,
        "api_key": "****",
        "upstream": {"clientSecret": "****", "sig": "****", "region": "eu"},
    }


def test_show_prints_the_settings_in_effect_in_the_files_layout(tmp_path: Path) -> None:
    _, document = shown(tmp_path)
    assert document["upstreams"]["a"]["base_url"] == "https://llm.internal/v1"  # env applied
    assert document["server"]["port"] == 8400  # defaults filled in
    assert document["compression"]["threshold"] == 0.6
    assert document["compression"]["options"]["keep_images"] == 2
    assert document["compression"]["options"]["protect_last_n"] == 8
    # What it prints is a configuration file: read back, it is the same settings (but secrets).
    original = parse_settings(yaml.safe_load(SECRETS), ENVIRON)
    again = parse_settings(document, {})
    assert again.server == original.server
    # `options` as written differs (show writes every option); what they set does not.
    assert replace(again.compression, options={}) == replace(original.compression, options={})
    assert again.models == original.models
    assert again.prices == original.prices
    assert again.upstreams["a"].apis == original.upstreams["a"].apis


@pytest.mark.parametrize("args", [("config", "show"), ("config", "check")])
def test_without_a_file_config_reads_the_zero_config_environment(args: tuple[str, ...]) -> None:
    done = cli(
        *args,
        env={
            "ANTHROPIC_BASE_URL": "http://a.example",
            "ANTHROPIC_API_KEY": "sk-ant-0123456789abcdef",
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if args[1] == "show":
        document = yaml.safe_load(done.stdout)
        assert document["upstreams"]["anthropic"]["base_url"] == "http://a.example/v1"
        assert document["upstreams"]["anthropic"]["api_key"] == "****cdef"
        assert "sk-ant-0123456789" not in done.stdout


def test_an_unset_variable_inside_a_list_is_named_by_the_lists_problem(tmp_path: Path) -> None:
    code, report = checked(
        tmp_path,
        "upstreams: {a: {base_url: 'http://x/v1'}}\nmodels: [{match: '*'}]\n"
        "auth: {keys: ['${CLIENT_KEY}']}\n",
    )
    assert code == 2
    assert problems(report) == [
        "auth.keys: expected a list of non-empty strings (${CLIENT_KEY} is not set)"
    ]
    assert "note:" not in report


@pytest.mark.parametrize("shipped", ["config.example.yaml", "deploy/config.docker.yaml"])
def test_the_shipped_config_files_pass_the_check(shipped: str) -> None:
    out = io.StringIO()
    assert check_file(str(ROOT / shipped), {}, out) == 0, out.getvalue()
    assert out.getvalue().splitlines()[0].endswith(": valid")
