"""Import direction: proxy -> compression, storage; compression and storage import neither."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
WEB = {"fastapi", "starlette", "httpx", "aiohttp", "yarl", "uvicorn", "h11", "httptools"}
DB = {"sqlalchemy", "aiosqlite", "asyncpg", "psycopg", "psycopg2"}
FORBIDDEN = {
    "compression": WEB | DB | {"proxy", "storage"},
    "storage": WEB | {"proxy", "compression"},
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_what_it_may(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_roots(path) & FORBIDDEN[package])
        for path in files
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import httpx\nfrom storage.records import SessionKey\n")
    assert imported_roots(sample) & FORBIDDEN["compression"] == {"httpx", "storage"}


# Inside proxy/, a request is followed one way: the edge (app, routes, gateway) calls the
# policy side (conversations, compaction) and the front doors; neither calls back up.
EDGE = {"proxy.app", "proxy.routes", "proxy.gateway", "proxy.admin", "proxy.cli"}
PROXY_LAYERS = {
    "proxy.policy": EDGE | {"proxy.conversations", "proxy.compaction", "proxy.doors"},
    "proxy.frontdoor": EDGE | {"proxy.conversations", "proxy.compaction", "proxy.doors"},
    "proxy.doors": EDGE | {"proxy.conversations", "proxy.compaction", "proxy.policy"},
    "proxy.conversations": EDGE,
    "proxy.compaction": EDGE | {"proxy.conversations", "proxy.policy", "proxy.doors"},
    "proxy.turn": EDGE | {"proxy.conversations", "proxy.compaction", "proxy.policy"},
    "proxy.rounds": EDGE | {"proxy.conversations", "proxy.compaction", "proxy.doors"},
    "proxy.recall": EDGE | {"proxy.rounds", "proxy.conversations", "proxy.compaction"},
}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", sorted(PROXY_LAYERS))
def test_the_request_path_runs_one_way(module: str) -> None:
    base = ROOT / module.replace(".", "/")
    files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    assert files and files[0].exists()
    forbidden = PROXY_LAYERS[module]
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name
            for name in imported_modules(path)
            if any(name == f or name.startswith(f + ".") for f in forbidden)
        )
        for path in files
    }
    assert {k: v for k, v in offenders.items() if v} == {}
