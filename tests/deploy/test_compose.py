"""docker-compose.yml validates and means what docs/deployment.md says, under Compose v2 and v1.

No container engine is needed: `config` only parses, interpolates and validates. CI installs
Debian 12's `docker-compose` (1.29.2) and sets CTXGATE_REQUIRE_COMPOSE=1, so a missing tool
fails there instead of skipping. v2 prints only the active profiles' services and long-syntax
ports and volumes; v1 prints every service and short strings: both are normalised here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.config_file import load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKER_CONFIG = ROOT / "deploy" / "config.docker.yaml"
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
REQUIRE = os.environ.get("CTXGATE_REQUIRE_COMPOSE") == "1"

# The variables docker-compose.yml reads; cleared so the file's own defaults are tested.
COMPOSE_VARS = (
    "CTXGATE_UPSTREAM_URL",
    "CTXGATE_UPSTREAM_API_KEY",
    "CTXGATE_ADMIN_KEY",
    "CTXGATE_CONTEXT_LENGTH",
    "CTXGATE_LOG_LEVEL",
    "CTXGATE_BIND",
    "POSTGRES_PASSWORD",
    "COMPOSE_PROFILES",
    "COMPOSE_PROJECT_NAME",
    "COMPOSE_FILE",
)


def _v2() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    probe = subprocess.run(
        [docker, "compose", "version"], capture_output=True, text=True, timeout=60, check=False
    )
    return [docker, "compose"] if probe.returncode == 0 else None


def _v1() -> list[str] | None:
    binary = shutil.which("docker-compose")
    return [binary] if binary else None


FINDERS = {"docker compose": _v2, "docker-compose": _v1}


@pytest.fixture(scope="module", params=list(FINDERS))
def compose(request: pytest.FixtureRequest) -> list[str]:
    command = FINDERS[request.param]()
    if command is not None:
        return command
    if REQUIRE and not any(find() for find in FINDERS.values()):
        pytest.fail(
            "CTXGATE_REQUIRE_COMPOSE=1 but neither `docker compose` nor `docker-compose` is "
            "installed (Debian: apt-get install docker-compose)"
        )
    pytest.skip(f"{request.param} is not installed")


def run_config(
    compose: list[str], tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # An empty env file: a developer's own .env beside the compose file must not leak in.
    empty_env = tmp_path / "empty.env"
    empty_env.write_text("")
    environ = {k: v for k, v in os.environ.items() if k not in COMPOSE_VARS}
    environ.update(env or {})
    command = [*compose, "--env-file", str(empty_env), "-f", str(COMPOSE_FILE), *args]
    return subprocess.run(
        command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120, check=False
    )


def resolved(
    compose: list[str], tmp_path: Path, *profiles: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The interpolated model of the file, with only the services the profiles activate."""
    flags = [arg for profile in profiles for arg in ("--profile", profile)]
    quiet = run_config(compose, tmp_path, *flags, "config", "-q", env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == ""
    done = run_config(compose, tmp_path, *flags, "config", env=env)
    assert done.returncode == 0, done.stderr
    model: dict[str, Any] = yaml.safe_load(done.stdout)
    model["services"] = {
        name: service
        for name, service in model["services"].items()
        if not service.get("profiles") or set(service["profiles"]) & set(profiles)
    }
    return model


def ports(service: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(host address, published, container port) whichever syntax the tool printed."""
    out = set()
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.add((port["host_ip"], str(port["published"]), str(port["target"])))
        else:
            host_ip, published, target = str(port).removesuffix("/tcp").rsplit(":", 2)
            out.add((host_ip, published, target))
    return out


def volumes(service: dict[str, Any]) -> set[tuple[str, str, bool]]:
    """(source, target, read-only) whichever syntax the tool printed."""
    out = set()
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            out.add((volume["source"], volume["target"], bool(volume.get("read_only"))))
        else:
            source, target, mode = str(volume).split(":")
            out.add((source, target, mode == "ro"))
    return out


def container_settings(service: dict[str, Any]) -> Any:
    """What ctxgate would load inside that container: the mounted file, its environment."""
    environ = {k: str(v) for k, v in service["environment"].items()}
    return load_settings(DOCKER_CONFIG, {"CTXGATE_PORT": "8400", **environ})


def test_default_profile_runs_one_sqlite_proxy(compose: list[str], tmp_path: Path) -> None:
    model = resolved(compose, tmp_path)
    assert set(model["services"]) == {"ctxgate"}
    service = model["services"]["ctxgate"]
    assert ports(service) == {("127.0.0.1", "8400", "8400")}
    assert volumes(service) == {
        (str(DOCKER_CONFIG), "/etc/ctxgate/config.yaml", True),
        ("ctxgate-data", "/var/lib/ctxgate", False),
    }
    assert service["image"] == "ctxgate:local"
    assert Path(service["build"]["context"]) == ROOT
    settings = container_settings(service)
    assert settings.storage.url == "sqlite+aiosqlite:////var/lib/ctxgate/ctxgate.db"
    assert settings.server.host == "0.0.0.0"
    assert settings.server.port == 8400
    assert settings.upstreams["default"].base_url == "https://api.openai.com/v1"
    assert settings.upstreams["default"].api_key is None  # clients' own keys are forwarded
    assert settings.auth.admin_key is None


def test_postgres_profile_adds_two_replicas_on_one_database(
    compose: list[str], tmp_path: Path
) -> None:
    model = resolved(compose, tmp_path, "postgres")
    services = model["services"]
    assert set(services) == {"ctxgate", "postgres", "ctxgate-a", "ctxgate-b", "balancer"}
    assert "healthcheck" in services["postgres"]
    assert ("postgres-data", "/var/lib/postgresql/data", False) in volumes(services["postgres"])
    assert ports(services["postgres"]) == set()  # reachable by the replicas only
    for name, published in (("ctxgate-a", "8401"), ("ctxgate-b", "8402")):
        replica = services[name]
        assert ports(replica) == {("127.0.0.1", published, "8400")}
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        settings = container_settings(replica)
        assert settings.storage.url == (
            "postgresql+asyncpg://ctxgate:ctxgate@postgres:5432/ctxgate"
        )
    volume_names = set(model.get("volumes") or {})
    assert {"ctxgate-data", "postgres-data"} <= volume_names


def test_postgres_profile_puts_haproxy_in_front_of_both_replicas(
    compose: list[str], tmp_path: Path
) -> None:
    services = resolved(compose, tmp_path, "postgres")["services"]
    balancer = services["balancer"]
    assert Path(balancer["build"]["context"]) == ROOT / "deploy" / "haproxy"
    assert balancer["image"] == "ctxgate-balancer:local"
    assert ports(balancer) == {("127.0.0.1", "8410", "8400")}
    assert set(balancer["depends_on"]) == {"ctxgate-a", "ctxgate-b"}
    env = {k: str(v) for k, v in balancer["environment"].items()}
    assert env["CTXGATE_BALANCER_PORT"] == "8400"
    # Each server address is a replica's service name and the port ctxgate listens on there.
    for var, name in (("CTXGATE_REPLICA_A", "ctxgate-a"), ("CTXGATE_REPLICA_B", "ctxgate-b")):
        host, port = env[var].rsplit(":", 1)
        assert host == name
        assert int(port) == container_settings(services[name]).server.port
    text = HAPROXY_CONFIG.read_text()
    for var in env:
        assert f"${{{var}}}" in text
    assert "http-check send meth GET uri /readyz" in text
    assert "balance roundrobin" in text


def test_environment_reaches_ports_and_config(compose: list[str], tmp_path: Path) -> None:
    env = {
        "CTXGATE_BIND": "0.0.0.0",
        "CTXGATE_UPSTREAM_URL": "http://llm.internal:8080/v1",
        "CTXGATE_ADMIN_KEY": "admin-key-1",
        "CTXGATE_CONTEXT_LENGTH": "32768",
        "POSTGRES_PASSWORD": "s3cret",
    }
    services = resolved(compose, tmp_path, "postgres", env=env)["services"]
    assert ports(services["ctxgate"]) == {("0.0.0.0", "8400", "8400")}
    settings = container_settings(services["ctxgate-a"])
    assert settings.upstreams["default"].base_url == "http://llm.internal:8080/v1"
    assert settings.auth.admin_key == "admin-key-1"
    assert settings.models[0].context_length == 32768
    assert settings.storage.url == "postgresql+asyncpg://ctxgate:s3cret@postgres:5432/ctxgate"
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "s3cret"


def test_docker_config_loads_with_its_own_defaults() -> None:
    """deploy/config.docker.yaml is valid even where no compose tool is installed."""
    settings = load_settings(DOCKER_CONFIG, {})
    assert settings.storage.url == "sqlite+aiosqlite:////var/lib/ctxgate/ctxgate.db"
    assert settings.server.port == 8400
    assert settings.auth.keys == ()
