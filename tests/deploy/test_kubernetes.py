"""deploy/kubernetes/ validates against the Kubernetes schemas and fits what ctxgate really does.

The schemas come bundled with PyPI's kubernetes-validate (the test extra), so this runs
offline. What a schema cannot tell is checked against ctxgate itself: the probes' paths are
routes it serves (and answer 200 from a real `ctxgate serve` on the ConfigMap's config), the
container port is the config's, the ConfigMap's YAML passes ctxgate's own settings parser, and
the Secret keys the Deployment reads are exactly the variables that config interpolates.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from proxy.config_file import parse_settings
from proxy.edge.routes import router
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(p for p in DIR.glob("*.yaml") if p.name != "kustomization.yaml")
# The oldest Kubernetes the manifests are meant for, and the newest whose schemas are bundled.
VERSIONS = ("1.29", kubernetes_validate.utils.latest_version())
SECRET_VALUES = {
    "database-url": "postgresql+asyncpg://ctxgate:pw@postgres:5432/ctxgate",
    "upstream-api-key": "sk-upstream",
    "admin-key": "adm-1",
}


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def resource(kind: str) -> dict[str, Any]:
    found = [doc for path in MANIFESTS for doc in documents(path) if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def container() -> dict[str, Any]:
    (only,) = resource("Deployment")["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = only
    return found


def config_text() -> str:
    text: str = resource("ConfigMap")["data"]["config.yaml"]
    return text


def secret_env() -> dict[str, str]:
    """Environment variable -> Secret key, as the Deployment maps them."""
    out = {}
    for var in container()["env"]:
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["name"] == "ctxgate"
            out[var["name"]] = ref["key"]
    return out


def container_environ(*, optional: bool = True) -> dict[str, str]:
    """What the pod's environment holds with the example Secret (optional keys or not)."""
    refs = {v["name"]: v["valueFrom"]["secretKeyRef"] for v in container()["env"]}
    return {
        name: SECRET_VALUES[ref["key"]]
        for name, ref in refs.items()
        if optional or not ref.get("optional")
    }


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_against_the_kubernetes_schema(path: Path, version: str) -> None:
    docs = documents(path)
    assert docs
    for doc in docs:
        # strict: an unknown field (a typo such as `readinesProbe`) is an error too.
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_a_wrong_field() -> None:
    """The check above can fail: a misspelt probe is refused."""
    deployment = resource("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    pod["containers"][0]["readinesProbe"] = pod["containers"][0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)


def test_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    kustomization = yaml.safe_load((DIR / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in MANIFESTS} - {"secret.example.yaml"}


def test_probes_use_routes_ctxgate_serves() -> None:
    served = {(route.path, method) for route in router.routes for method in route.methods}  # type: ignore[attr-defined]
    spec = container()
    assert spec["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = spec[probe]["httpGet"]
        assert (get["path"], "GET") in served, get
        assert get["port"] == "http"


def test_ports_match_the_config() -> None:
    settings = parse_settings(yaml.safe_load(config_text()), container_environ())
    (port,) = container()["ports"]
    assert port["name"] == "http"
    assert port["containerPort"] == settings.server.port
    assert settings.server.host == "0.0.0.0"
    (service_port,) = resource("Service")["spec"]["ports"]
    assert service_port["targetPort"] == "http"


def test_configmap_config_loads_with_ctxgate_settings() -> None:
    settings = parse_settings(yaml.safe_load(config_text()), container_environ())
    assert settings.storage.url == SECRET_VALUES["database-url"]
    assert settings.storage.url.startswith("postgresql+asyncpg://")
    assert settings.upstreams["default"].api_key == SECRET_VALUES["upstream-api-key"]
    assert settings.auth.admin_key == SECRET_VALUES["admin-key"]
    # Without the optional keys: clients' own keys go upstream, the admin API is off.
    bare = parse_settings(yaml.safe_load(config_text()), container_environ(optional=False))
    assert bare.upstreams["default"].api_key is None
    assert bare.auth.admin_key is None
    assert bare.storage.url == SECRET_VALUES["database-url"]


def test_secret_keys_are_the_variables_the_config_reads() -> None:
    referenced = set(re.findall(r"\$\{([A-Z0-9_]+)", config_text()))
    mapping = secret_env()
    assert set(mapping) == referenced
    example = resource("Secret")
    assert example["metadata"]["name"] == "ctxgate"
    assert set(example["stringData"]) == set(mapping.values()) == set(SECRET_VALUES)
    # Only the database URL is required: the pod must not start without it.
    required = {
        v["name"] for v in container()["env"] if not v["valueFrom"]["secretKeyRef"].get("optional")
    }
    assert required == {"CTXGATE_DATABASE_URL"}


def test_config_is_mounted_where_the_command_reads_it() -> None:
    spec = container()
    args = spec["args"]
    config_path = Path(args[args.index("--config") + 1])
    mounts = {m["name"]: m for m in spec["volumeMounts"]}
    assert Path(mounts["config"]["mountPath"]) == config_path.parent
    volumes = {v["name"]: v for v in resource("Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == resource("ConfigMap")["metadata"]["name"]
    assert config_path.name in resource("ConfigMap")["data"]


def test_pod_runs_as_the_image_user_on_a_read_only_root() -> None:
    uid = int(re.search(r"--uid (\d+)", (ROOT / "Dockerfile").read_text()).group(1))  # type: ignore[union-attr]
    pod = resource("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == uid
    assert pod["securityContext"]["runAsNonRoot"] is True
    spec = container()
    assert spec["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["allowPrivilegeEscalation"] is False
    assert {m["mountPath"] for m in spec["volumeMounts"]} >= {"/tmp"}
    assert spec["resources"]["requests"]["cpu"]
    assert spec["resources"]["requests"]["memory"]
    assert spec["resources"]["limits"]["memory"]


def test_shutdown_fits_the_grace_period() -> None:
    """preStop sleep, then SIGTERM and uvicorn's graceful drain: all before the SIGKILL."""
    serve = (ROOT / "proxy" / "edge" / "commands" / "serve.py").read_text()
    drain = re.search(r"timeout_graceful_shutdown=(\d+)", serve)
    assert drain, (
        "proxy/edge/commands/serve.py no longer passes a literal timeout_graceful_shutdown"
    )
    command = container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = int(command[1])
    grace = resource("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert pre_stop >= 2  # long enough for the endpoints to drop the pod
    assert pre_stop + int(drain.group(1)) < grace


def test_selectors_match_the_pods() -> None:
    deployment = resource("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert resource("Service")["spec"]["selector"].items() <= labels.items()
    pdb = resource("PodDisruptionBudget")["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["minAvailable"] < deployment["spec"]["replicas"]


def test_probes_answer_from_ctxgate_serving_the_configmap(tmp_path: Path) -> None:
    """`ctxgate serve` on the ConfigMap's config (SQLite standing in for the database URL)."""
    config = tmp_path / "config.yaml"
    config.write_text(config_text())
    port = free_port()
    environ = {
        **container_environ(),
        "CTXGATE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/k8s.db",
        "PATH": "/usr/bin:/bin",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy.edge.cli", "serve", "--config", str(config)]
        + ["--host", "127.0.0.1", "--port", str(port)],
        env=environ,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        spec = container()
        paths = [spec[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")]
        deadline = time.monotonic() + 30
        while True:
            try:
                answers = [httpx.get(f"http://127.0.0.1:{port}{p}", timeout=2) for p in paths]
                break
            except httpx.HTTPError:
                assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "ctxgate did not start"
                time.sleep(0.1)
        assert [a.status_code for a in answers] == [200, 200]
    finally:
        process.terminate()
        _, err = process.communicate(timeout=15)
    assert "Traceback" not in err, err
