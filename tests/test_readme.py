"""README.md and the documentation site stay true to the code: README is a front page whose
commands, links, examples and settings hold; the generated configuration reference, the metric
names, the walk through the code and the marked blocks other tools read (.ci/run's test command,
the results blocks) live in the docs pages that now hold the text."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import unicodedata
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from proxy.config_file import load_settings
from proxy.edge.run.agents import AGENTS
from session.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SCRIPT = ROOT / "scripts" / "config_reference.py"
MAX_README_LINES = 300
SERVE_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/ctxgate serve"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest -q"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


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


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc (MkDocs) and GitHub give a heading of plain words."""
    text = unicodedata.normalize("NFKD", heading.replace("`", "")).encode("ascii", "ignore")
    words = re.sub(r"[^\w\s-]", "", text.decode("ascii")).strip().lower()
    return re.sub(r"[-\s]+", "-", words)


def anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings (lines starting with # outside code fences)."""
    found, fenced = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"^#{1,6} (.+)$", line)):
            found.add(slug(heading.group(1)))
    return found


def fenced(markdown: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", markdown, re.M | re.S)


# --- README: the front page -------------------------------------------------------------


def test_readme_is_a_front_page(readme: str) -> None:
    lines = readme.count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move text into docs/"


def test_readme_has_exactly_the_two_setup_commands(readme: str) -> None:
    """One command installs and runs the proxy, one installs and runs the tests: a newcomer
    pastes them on a fresh machine, and nothing else in README creates a virtual environment."""
    setups = [
        line
        for block in fenced(readme, "bash")
        for line in block.splitlines()
        if "python3 -m venv" in line
    ]
    assert setups == [SERVE_COMMAND, TEST_COMMAND]


def test_marked_blocks_are_present(readme: str) -> None:
    assert readme.count("<!-- test-command -->") == 1
    assert readme.count("<!-- /test-command -->") == 1
    # .ci/run runs the lines of the test-command block that are neither markers nor fences.
    block = re.search(r"<!-- test-command -->\n(.*?)<!-- /test-command -->", readme, re.S)
    assert block is not None
    commands = [
        line for line in block.group(1).splitlines() if not line.startswith(("<!--", "```"))
    ]
    assert commands == [TEST_COMMAND]
    for name, marker in (("benchmarks.md", "bench-tables"), ("quality.md", "eval-results")):
        text = page(name)
        assert text.count(f"<!-- {marker} -->") == 1, marker
        assert text.count(f"<!-- /{marker} -->") == 1, marker


def test_ci_extracts_the_readme_test_command(tmp_path: Path) -> None:
    """The shell pipeline .ci/run uses finds README's test command, and only it."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    pipeline = re.search(r'test_command="\$\((.*?)\)"\n', script, re.S)
    assert pipeline is not None, ".ci/run no longer reads the test command from README.md"
    found = subprocess.run(
        ["bash", "-c", pipeline.group(1)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == TEST_COMMAND


def test_readme_gives_a_quick_start_for_every_agent(readme: str) -> None:
    quick = readme[readme.index("## Quick start per agent") : readme.index("## Essential")]
    for name in AGENTS:
        assert f".venv/bin/ctxgate run {name}" in quick, name
    for heading in ("Codex CLI", "Claude Code", "Gemini CLI", "OpenCode", "aider", "Plain SDKs"):
        assert re.search(rf"^### {heading}", quick, re.M), heading
    assert 'base_url="http://127.0.0.1:8400/v1"' in quick  # OpenAI SDKs: with /v1
    assert 'base_url="http://127.0.0.1:8400"' in quick  # Anthropic SDK: without
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:8400`" in quick
    assert "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8400`" in quick


def test_codex_provider_block_matches_the_agents_page(readme: str) -> None:
    """README's Codex provider is the one docs/agents.md documents, line for line."""
    (provider,) = [b for b in fenced(readme, "toml") if "[model_providers.ctxgate]" in b]
    documented = [b for b in fenced(page("agents.md"), "toml") if provider in b]
    assert documented, "README's [model_providers.ctxgate] differs from docs/agents.md's"


@pytest.mark.parametrize("source", ["README.md", "docs/configuration.md", "docs/agents.md"])
def test_config_examples_load(source: str, tmp_path: Path) -> None:
    """Every whole config file shown (a YAML block with upstreams) starts ctxgate's loader."""
    blocks = fenced((ROOT / source).read_text(encoding="utf-8"), "yaml")
    whole = [b for b in blocks if re.search(r"^upstreams:", b, re.M)]
    assert whole, f"{source} shows no config file"
    for i, block in enumerate(whole):
        path = tmp_path / f"example-{i}.yaml"
        path.write_text(block, encoding="utf-8")
        settings = load_settings(path, {"OPENAI_API_KEY": "sk-test", "GEMINI_API_KEY": "g"})
        assert settings.upstreams and settings.models


def test_essential_settings_are_real_keys(readme: str, reference: ModuleType) -> None:
    section = readme[readme.index("## Essential settings") : readme.index("## Documentation")]
    rendered = reference.render()
    rows = re.findall(r"^\| (`[^|]+) \|", section, re.M)
    assert len(rows) >= 6
    for row in rows:
        names = re.findall(r"`([\w.\[\]]+)`", row)
        prefix = names[0].rsplit(".", 1)[0]
        for name in names:
            key = name if "." in name else f"{prefix}.{name}"
            assert f"| `{key}` |" in rendered, f"README names {key}, which is not a setting"


def test_readme_links_resolve(readme: str) -> None:
    """Every relative link of README points at a file of the repository, and every anchor at a
    heading of the page it names (GitHub renders README; MkDocs checks docs/ itself)."""
    targets = [a or b for a, b in LINK.findall(readme)]
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else README
        assert file.exists(), f"README links to {path}, which does not exist"
        if anchor:
            assert anchor in anchors(file.read_text(encoding="utf-8")), target


def test_the_picture_is_an_svg_in_docs(readme: str) -> None:
    pictures = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", readme)
    assert pictures == ["docs/assets/ctxgate.svg"]
    root = ElementTree.parse(ROOT / pictures[0]).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    words = " ".join(root.itertext())
    for part in ("edge", "gateway", "doors", "provider", "session core", "compressor", "storage"):
        assert part in words, part


# --- docs/: the pages that hold the rest ------------------------------------------------


def test_every_page_is_in_the_nav() -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]

    def files(entries: list[object]) -> Iterator[str]:
        for entry in entries:
            if isinstance(entry, str):
                yield entry
            elif isinstance(entry, dict):
                for value in entry.values():
                    yield from files(value if isinstance(value, list) else [value])

    listed = list(files(nav))
    assert len(listed) == len(set(listed)), "a page is in the nav twice"
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md"))


def test_config_reference_matches_the_settings_code(reference: ModuleType) -> None:
    assert reference.PAGE == DOCS / "configuration-reference.md"
    assert reference.PAGE.read_text(encoding="utf-8") == reference.render_page(), (
        "docs/configuration-reference.md differs from session/config/settings.py and "
        f"compression/options.py; regenerate it with: {reference.COMMAND}"
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


def test_every_metric_is_documented() -> None:
    operations = page("operations.md")
    exposition = Metrics().render().decode()
    names = {
        line.split()[2]
        for line in exposition.splitlines()
        if line.startswith("# TYPE ") and not line.split()[2].endswith("_created")
    }
    assert names, "no metrics rendered"
    missing = sorted(name for name in names if f"`{name}`" not in operations)
    assert not missing, f"docs/operations.md's metrics table lacks {missing}"


def test_the_walk_and_the_tree_agree() -> None:
    """docs/development.md names each folder of proxy/ once, in the walk's order, each
    subpackage of compression/ and storage/, and every file it names exists."""
    development = page("development.md")
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
