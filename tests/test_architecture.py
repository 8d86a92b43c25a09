"""The house's import rules, read from the code.

Between the top-level packages: proxy -> session -> compression, storage; compression and
storage import neither each other nor anything above them, and the session core reaches no web
or HTTP library, directly or through any module it imports. Outside `compression/`, code
imports only its face (`compression/__init__.py`).

Inside every package no module imports another that imports it back, however many modules lie
between them. Inside `proxy/` and `session/`, each subpackage holds to the `May import:` line
of its `__init__` docstring, and `proxy/`'s stages follow the request's walk one way (edge ->
gateway -> doors -> provider). No folder is a crowd, and no two modules that import each
other's neighbours share a name.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ("proxy", "session", "compression", "storage")
WEB = {"fastapi", "starlette", "httpx", "aiohttp", "yarl", "uvicorn", "h11", "httptools"}
DB = {"sqlalchemy", "aiosqlite", "asyncpg", "psycopg", "psycopg2"}
FORBIDDEN = {
    "compression": WEB | DB | {"proxy", "session", "storage"},
    "storage": WEB | {"proxy", "session", "compression"},
    "session": WEB | {"proxy"},
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


# --- the module graph -------------------------------------------------------------------------


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (under `root`) by dotted name; a package by its own name."""
    names = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _imports(path: Path, name: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(module, names) for every import in the file, wherever it stands: at the top, under
    TYPE_CHECKING or inside a function, since each of those can close a circle."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, module] if module else base)
            yield module, tuple(alias.name for alias in node.names)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Which modules of `package` each of its modules imports. `from pkg import x` counts as an
    import of `pkg.x` when that is a module, else of `pkg`; a parent package run implicitly by
    Python is not counted (`test_subpackage_inits_import_nothing` keeps that harmless)."""
    modules = module_names(root, package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for module, names in _imports(path, name):
            submodules = {f"{module}.{n}" for n in names} & modules.keys()
            if submodules:
                targets |= submodules
            if module in modules and (not names or len(submodules) < len(names)):
                targets.add(module)
        graph[name] = targets - {name}
    return graph


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Each group of modules that import one another in a circle (Tarjan's strongly connected
    components of more than one module), as one circle through the group, for the message."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(_circle(graph, set(group)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def _circle(graph: Mapping[str, set[str]], group: set[str]) -> list[str]:
    """A shortest circle from the group's first module back to itself, within the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & group):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{sorted(group)} holds no circle")


@cache
def product_graph() -> dict[str, set[str]]:
    """Every product module's imports of product modules, across the packages."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        graph.update(import_graph(ROOT, package))
    every = set(graph)
    for name, path in module_paths().items():
        for module, names in _imports(path, name):
            root = module.split(".")[0]
            if root in PACKAGES and root != name.split(".")[0]:
                submodules = {f"{module}.{n}" for n in names} & every
                graph[name] |= submodules or ({module} & every)
    return graph


@cache
def module_paths() -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for package in PACKAGES:
        paths.update(module_names(ROOT, package))
    return paths


def proxy_graph() -> dict[str, set[str]]:
    return {k: v for k, v in product_graph().items() if k.split(".")[0] == "proxy"}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_inside_a_package(package: str) -> None:
    graph = import_graph(ROOT, package)
    circles = [" -> ".join(circle) for circle in find_cycles(graph)]
    assert circles == []


def test_no_import_circle_across_packages() -> None:
    circles = [" -> ".join(circle) for circle in find_cycles(product_graph())]
    assert circles == []


def test_the_check_catches_a_circle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.inner import b\n")
    (package / "inner" / "b.py").write_text("def f():\n    from pkg import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    (package / "d.py").write_text("import pkg.a\n")  # outside the circle
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.d"] == {"pkg.a"}
    assert find_cycles(graph) == [["pkg.a", "pkg.inner.b", "pkg.c", "pkg.a"]]


def reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
    seen = {start}
    frontier = [start]
    while frontier:
        node = frontier.pop()
        for target in graph.get(node, ()):
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def test_the_session_core_reaches_no_web_library() -> None:
    """Transitively: a module of `session/` imports none, nor does anything it imports."""
    graph, paths = product_graph(), module_paths()
    web = {}
    for name in sorted(n for n in graph if n.split(".")[0] == "session"):
        reached = reachable(graph, name)
        libraries = set().union(*(imported_roots(paths[m]) for m in reached)) & WEB
        outside = sorted(m for m in reached if m.split(".")[0] == "proxy")
        if libraries or outside:
            web[name] = sorted(libraries) + outside
    assert web == {}


def test_the_rest_imports_only_the_face_of_compression() -> None:
    reaching = {
        name: sorted(t for t in targets if t.startswith("compression."))
        for name, targets in product_graph().items()
        if not name.startswith("compression")
    }
    assert {k: v for k, v in reaching.items() if v} == {}


# --- the subpackages' directions --------------------------------------------------------------

# In the walk's order.
STAGES = ("proxy.edge", "proxy.gateway", "proxy.doors", "proxy.provider")
SHARED = {"proxy.config_file", "proxy.http_errors"}


def declared_imports(package: str) -> set[str]:
    """What a subpackage's `__init__` docstring says it may import of its own top-level
    package, outside itself (every package below it may always be imported)."""
    init = ROOT / package.replace(".", "/") / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    found = re.search(r"^May import:(.*?)(?:\n\n|\Z)", doc, re.M | re.S)
    assert found, f"{init.relative_to(ROOT)}: its docstring has no 'May import:' line"
    top = package.split(".")[0]
    return set(re.findall(rf"\b{top}(?:\.\w+)+", found.group(1).split("(")[0]))


def subpackages(top: str = "proxy") -> list[str]:
    return sorted(
        name
        for name, path in module_names(ROOT, top).items()
        if path.name == "__init__.py" and name != top
    )


def outside_imports(package: str, allowed: set[str]) -> dict[str, list[str]]:
    """The imports of `package`'s modules that leave it for a module of its own top-level
    package that `allowed` does not cover."""
    top = package.split(".")[0]
    graph = product_graph()
    inside = [name for name in graph if name == package or name.startswith(package + ".")]
    offenders = {}
    for name in inside:
        wrong = sorted(
            target
            for target in graph[name]
            if target.split(".")[0] == top
            and not target.startswith(package + ".")
            and not any(target == a or target.startswith(a + ".") for a in allowed)
        )
        if wrong:
            offenders[name] = wrong
    return offenders


@pytest.mark.parametrize("package", subpackages("proxy") + subpackages("session"))
def test_subpackage_imports_only_what_its_docstring_allows(package: str) -> None:
    assert outside_imports(package, declared_imports(package)) == {}


def test_the_stages_run_one_way() -> None:
    """Each stage may import only stages after it in the walk (and the shared modules)."""
    for i, stage in enumerate(STAGES):
        allowed = declared_imports(stage)
        assert allowed - SHARED <= set(STAGES[i + 1 :]), stage
    assert set(STAGES) == {p for p in subpackages() if p.count(".") == 1}


def test_the_shared_modules_import_no_stage() -> None:
    graph = {
        name: {t for t in targets if t.startswith("proxy.")}
        for name, targets in proxy_graph().items()
    }
    assert {name: sorted(graph[name] - SHARED) for name in SHARED if graph[name] - SHARED} == {}


@pytest.mark.parametrize("top", PACKAGES)
def test_subpackage_inits_import_nothing(top: str) -> None:
    """Python runs a package's `__init__` before any of its modules: one that imported would add
    edges the graph above does not see. Only the top-level `__init__`s re-export names."""
    heavy = {}
    for package in subpackages(top):
        init = ROOT / package.replace(".", "/") / "__init__.py"
        body = ast.parse(init.read_text(encoding="utf-8")).body
        if any(not isinstance(node, ast.Expr) for node in body) or len(body) != 1:
            heavy[package] = [type(node).__name__ for node in body]
    assert heavy == {}


def test_the_check_catches_a_wrong_direction() -> None:
    assert outside_imports("proxy.provider", set()) == {}  # it imports only the session core
    assert outside_imports("session.ledger", set()) != {}  # it imports session.ports
    assert outside_imports("proxy.doors.chat", declared_imports("proxy.doors.chat")) == {}
    gateway = outside_imports("proxy.gateway", {"proxy.provider", *SHARED})
    assert "proxy.gateway.gateway" in gateway
    assert "proxy.doors.registry" in gateway["proxy.gateway.gateway"]


# Inside the core a request is followed one way too: conversations call policy and compaction;
# none of these calls back up, and none reaches a door.
CORE_ORDER = {
    "session.policy": {
        "session.conversations",
        "session.compaction",
        "session.turn",
        "session.memory",
        "session.ports",
        "proxy",
    },
    "session.conversations": {"session.recall", "proxy"},
    "session.compaction": {"session.conversations", "session.policy", "proxy"},
    "session.turn": {"session.conversations", "session.compaction", "session.policy"},
    "session.recall.tool": {"session.conversations", "session.compaction", "proxy"},
    "session.recall.ahead": {"session.conversations", "session.compaction", "proxy"},
    "session.ports.frontdoor": {"proxy", "session.turn", "session.conversations"},
}


@pytest.mark.parametrize("module", sorted(CORE_ORDER))
def test_the_request_path_runs_one_way(module: str) -> None:
    forbidden = CORE_ORDER[module]
    targets = product_graph()[module]
    assert (
        sorted(t for t in targets if any(t == f or t.startswith(f + ".") for f in forbidden)) == []
    )


# --- folder sizes and names -------------------------------------------------------------------

MAX_MODULES = 15  # besides the `__init__`
MAX_LINES = 4000


def folders() -> list[Path]:
    return sorted({p.parent for top in PACKAGES for p in (ROOT / top).rglob("*.py")})


def test_no_folder_is_a_crowd() -> None:
    crowded = {}
    for folder in folders():
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in modules)
        if len(modules) > MAX_MODULES or lines > MAX_LINES:
            crowded[str(folder.relative_to(ROOT))] = (len(modules), lines)
    assert crowded == {}


def test_modules_imported_side_by_side_have_their_own_names() -> None:
    """A module whose imports include two modules of the same last name reads ambiguously
    (which `recall` is this?): every such pair is renamed."""
    clashes = {}
    for name, targets in product_graph().items():
        leaves: dict[str, list[str]] = {}
        for target in targets | {name}:
            if module_paths()[target].name != "__init__.py":
                leaves.setdefault(target.rsplit(".", 1)[-1], []).append(target)
        same = {leaf: sorted(ms) for leaf, ms in leaves.items() if len(ms) > 1}
        if same:
            clashes[name] = same
    assert clashes == {}


# --- the wire's shapes ------------------------------------------------------------------------

MAX_LOOSE_DICTS = 20  # `dict[str, Any]` in all of proxy/doors/
MAX_GETS_PER_1000_LINES = 40  # `.get("…")` reads, per folder of proxy/doors/


def test_the_doors_read_typed_shapes() -> None:
    """The doors read each API through TypedDicts and typed readers; a loose dict or a
    key looked up by its string here and there is how they would drift back."""
    doors = sorted((ROOT / "proxy" / "doors").rglob("*.py"))
    loose = sum(p.read_text(encoding="utf-8").count("dict[str, Any]") for p in doors)
    assert loose <= MAX_LOOSE_DICTS
    dense = {}
    for folder in sorted({p.parent for p in doors}):
        texts = [p.read_text(encoding="utf-8") for p in folder.glob("*.py")]
        lines = sum(len(t.splitlines()) for t in texts)
        gets = sum(t.count('.get("') for t in texts)
        if gets * 1000 > MAX_GETS_PER_1000_LINES * lines:
            dense[str(folder.relative_to(ROOT))] = (gets, lines)
    assert dense == {}
