"""The documentation site builds with no warning: `mkdocs build --strict` over mkdocs.yml, where
a link to a missing page or anchor, or a page left out of the nav, fails (as in .ci/run)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="MkDocs is not installed: pip install -e '.[docs]' (CI installs it)",
)


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )


def test_the_site_builds_strict(tmp_path: Path) -> None:
    built = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "configuration-reference" / "index.html").exists()
    assert (tmp_path / "site" / "assets" / "ctxgate.svg").exists()


def test_a_broken_anchor_fails_the_build(tmp_path: Path) -> None:
    """Strict mode catches a link to an anchor no heading has, not only missing pages."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [there](other.md#no-such-heading).\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = config[: config.index("\nnav:")] + "\nnav:\n  - index.md\n  - other.md\n"
    (tmp_path / "mkdocs.yml").write_text(config.replace("docs_dir: docs", f"docs_dir: {docs}"))
    built = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "no-such-heading" in built.stderr
