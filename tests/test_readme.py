"""README.md stays true to the code: the generated configuration reference, the metric names,
and the marked blocks other tools read (.ci/run's test command, the results placeholders)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from session.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SCRIPT = ROOT / "scripts" / "config_reference.py"


@pytest.fixture(scope="module")
def reference() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("config_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before running: dataclasses look their module up while building the class.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_config_reference_matches_the_settings_code(reference: ModuleType, readme: str) -> None:
    assert reference.current_block(readme) == reference.render(), (
        "README.md's configuration reference differs from session/config/settings.py and "
        "compression/options.py; regenerate it "
        f"with: {reference.COMMAND}"
    )


def test_config_reference_covers_every_key(reference: ModuleType) -> None:
    rendered = reference.render()
    for key in (
        "server.host",
        "storage.url",
        "upstreams.NAME.base_url",
        "upstreams.NAME.headers",
        "models[].match",
        "compression.threshold",
        "compression.summary.model",
        "auth.keys",
        "auth.admin_key",
        "logging.log_content",
        "tokens.encodings_dir",
    ):
        assert f"| `{key}` |" in rendered
    assert "upstreams.NAME.name" not in rendered  # the mapping key, not a setting
    assert "| `protect_first_n` | integer | `3` |" in rendered


def test_check_command_agrees() -> None:
    check = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr


def test_every_metric_is_documented(readme: str) -> None:
    exposition = Metrics().render().decode()
    names = {
        line.split()[2]
        for line in exposition.splitlines()
        if line.startswith("# TYPE ") and not line.split()[2].endswith("_created")
    }
    assert names, "no metrics rendered"
    missing = sorted(name for name in names if f"`{name}`" not in readme)
    assert not missing, f"README.md's metrics table lacks {missing}"


def test_marked_blocks_are_present(readme: str) -> None:
    for marker in ("test-command", "config-reference", "bench-tables", "eval-results"):
        assert readme.count(f"<!-- {marker} -->") == 1, marker
        assert readme.count(f"<!-- /{marker} -->") == 1, marker
    # .ci/run runs the lines of the test-command block that are neither markers nor fences.
    block = re.search(r"<!-- test-command -->\n(.*?)<!-- /test-command -->", readme, re.S)
    assert block is not None
    commands = [
        line for line in block.group(1).splitlines() if not line.startswith(("<!--", "```"))
    ]
    assert len(commands) == 1 and "pytest" in commands[0]


def test_the_walk_and_the_tree_agree(readme: str) -> None:
    """Development names each folder of proxy/ once, in the walk's order, each subpackage of
    compression/ and storage/, and every file it names exists."""
    development = readme[readme.index("## Development") :]
    folders = sorted(
        str(p.parent.relative_to(ROOT)) + "/" for p in (ROOT / "proxy").glob("*/__init__.py")
    )
    listed = re.findall(r"^- `(proxy/\w+/)`", development, re.M)
    assert sorted(listed) == folders
    stages = [line.split("`")[1].split(".")[1] for line in _stage_lines()]
    assert [f.split("/")[1] for f in listed] == stages
    for package in ("compression", "storage", "session"):
        inner = sorted(p.parent.name + "/" for p in (ROOT / package).glob("*/__init__.py"))
        assert inner and all(f"`{name}`" in development for name in inner), package
    named = set(re.findall(r"`((?:proxy|session|compression|storage)/[\w/]+\.py)`", development))
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert named and missing == []


def _stage_lines() -> list[str]:
    """The stages in the order `proxy/__init__.py` gives them."""
    doc = (ROOT / "proxy" / "__init__.py").read_text(encoding="utf-8")
    return [line for line in doc.splitlines() if line.startswith("- `proxy.")]
