"""The dashboard: its files are served, and headless Chromium renders a compressed session.

Chromium is driven with its own command-line modes (`--dump-dom`, `--screenshot`), not a
browser-automation library. The page writes what it rendered into data-* attributes, so the
DOM dump says whether the table, the chart and the summary made it; console messages (errors,
CSP violations, failed loads) are read from Chromium's log on stderr. The screenshot is kept in
tests/output/dashboard.png for a human to look at.
"""

from __future__ import annotations

import re
import subprocess
import time
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import openai
import pytest

from session.identity import scope_for
from tests.proxy.agent_loop import AgentLoop
from tests.proxy.fixtures import proxy_fixture
from tests.servers import ProxyServer
from tests.simulator import Simulator

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Chromium at /usr/bin/chromium: "
    "apt-get install -y --no-install-recommends chromium (.ci/run installs it)",
)
OUTPUT = Path(__file__).parents[2] / "output"
ADMIN_KEY = "adm"
AGENT_KEY = "sk-agent"
SESSION = "agent/one"
FLAGS = [
    "--headless",
    "--no-sandbox",  # we run as root here
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
    # Virtual time runs until the page is idle (fetches done) or the budget is spent.
    "--virtual-time-budget=20000",
    "--window-size=1280,1700",
]


proxy = proxy_fixture(
    models=[{"match": "*", "upstream": "sim", "context_length": 8192}],
    compression={
        "background": False,
        "shadow": {"enabled": True, "sample_rate": 1.0, "max_tokens": 64},
    },
    auth={"admin_key": ADMIN_KEY},
    prices=[{"match": "small-8k", "input": 2.0, "cached_input": 0.5, "output": 8.0}],
)


def root(proxy: ProxyServer) -> str:
    return proxy.base_url.removesuffix("/v1")


def grow_compressed(sim: Simulator, proxy: ProxyServer) -> AgentLoop:
    """An agent conversation through ctxgate, long enough for a few compressions on 8K."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key=AGENT_KEY, max_retries=0)
    loop = AgentLoop(client, "small-8k", session_id=SESSION)
    loop.script(sim)
    for step in range(24):
        loop.step(step)
    assert "true" in loop.compressed_headers, "ctxgate never compressed the conversation"
    proxy.run(proxy.services.store.flush())
    return loop


def charges_settled(proxy: ProxyServer, requests: int, shadow_samples: int) -> dict[str, Any]:
    """/admin/savings once each request's charge and the shadow checks are in (both are
    recorded after the answer)."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for _ in range(400):
        figures: dict[str, Any] = httpx.get(f"{root(proxy)}/admin/savings", headers=admin).json()
        checked = figures["shadow"]["total"]["samples"]
        if figures["total"]["requests"] >= requests and checked >= shadow_samples:
            return figures
        time.sleep(0.05)
    raise AssertionError(f"charges of {requests} requests not recorded: {figures['total']}")


def chromium(url: str, profile: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    command = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *mode, url]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class Dom(HTMLParser):
    """The bits of a DOM dump the assertions need: elements by id and tag, text by id."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str]] = {}
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: dict[str, str] = {}
        self._open: list[str | None] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.tags.append((tag, values))
        if "id" in values:
            self.by_id[values["id"]] = values
        if tag not in VOID:
            self._open.append(values.get("id"))

    def handle_endtag(self, tag: str) -> None:
        if self._open and tag not in VOID:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for element_id in self._open:
            if element_id:
                self.text[element_id] = self.text.get(element_id, "") + data

    def count(self, tag: str, css_class: str | None = None) -> int:
        return sum(
            1
            for name, attrs in self.tags
            if name == tag and (css_class is None or css_class in attrs.get("class", "").split())
        )

    def find(self, tag: str) -> dict[str, str]:
        return next(attrs for name, attrs in self.tags if name == tag)


def dashboard_url(proxy: ProxyServer, **fragment: str) -> str:
    return f"{root(proxy)}/dashboard#" + urlencode(fragment, quote_via=quote)


# -- served files ------------------------------------------------------------------------------


def test_dashboard_files_are_packaged_and_served(proxy: ProxyServer) -> None:
    for name in ("dashboard.html", "dashboard.js", "dashboard.css"):
        assert files("proxy.edge").joinpath("static", name).is_file()
    page = httpx.get(f"{root(proxy)}/dashboard")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = httpx.get(f"{root(proxy)}/dashboard/dashboard.js")
    assert script.headers["content-type"].startswith("text/javascript")
    style = httpx.get(f"{root(proxy)}/dashboard/dashboard.css")
    assert style.headers["content-type"].startswith("text/css")
    missing = httpx.get(f"{root(proxy)}/dashboard/app.py")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    for body in (page.text, script.text, style.text):
        # Offline machines: nothing may come from another origin (the SVG namespace is a name).
        assert re.findall(r"https?://(?!www\.w3\.org/2000/svg)", body) == []


# -- in a browser ------------------------------------------------------------------------------


@needs_chromium
def test_dashboard_renders_a_compressed_session(
    sim: Simulator, proxy: ProxyServer, tmp_path: Path
) -> None:
    grow_compressed(sim, proxy)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    detail: dict[str, Any] = httpx.get(
        f"{root(proxy)}/admin/sessions/{scope_for(AGENT_KEY)}/{quote(SESSION, safe='')}",
        headers=admin,
    ).json()
    # The requests whose uncompressed history still fit the 8K window were shadow-checked.
    savings = charges_settled(proxy, detail["session"]["request_count"], shadow_samples=1)
    # Compression switched off for the session: the list and the panel say so.
    path = f"/admin/sessions/{scope_for(AGENT_KEY)}/{quote(SESSION, safe='')}/compression"
    switched = httpx.put(root(proxy) + path, json={"enabled": False}, headers=admin)
    assert switched.json()["compression"] == "off"
    url = dashboard_url(proxy, key=ADMIN_KEY, session=f"{scope_for(AGENT_KEY)}/{SESSION}")

    dumped = chromium(url, tmp_path / "profile-dom", "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    assert console_lines(dumped.stderr) == []
    dom = Dom(dumped.stdout)
    body = dom.find("body")
    assert body.get("data-state") == "ready", body
    assert "data-errors" not in body
    assert dom.by_id["sessions-table"]["data-sessions"] == "1"
    assert SESSION in dom.text["sessions-table"]
    chart = dom.find("svg")
    assert chart["data-points"] == str(len(detail["usage"]))
    assert chart["data-events"] == str(len(detail["events"]))
    assert chart["data-limits"] == "3"
    assert dom.count("circle", "pt") == len(detail["usage"])
    assert dom.count("g", "event") == len(detail["events"]) >= 2
    assert dom.count("polyline", "usage-line") == 1
    assert f"context window {detail['limits']['context_length']:,}" in dom.text["chart"]
    assert f"agent threshold {detail['limits']['threshold']:,}" in dom.text["chart"]
    assert dom.text["summary"] == detail["summary"]
    assert dom.by_id["events-table"]["data-events"] == str(len(detail["events"]))
    # Savings: the total, a row per model, the session list's column and the session's panel.
    assert dom.by_id["savings"]["data-models"] == "1"
    assert "small-8k" in dom.text["savings-table"]
    # Side by side, in tokens and money: what compression saved, what the shadow checks
    # spent, and the net of both.
    total = savings["total"]

    def usd(value: float) -> str:
        return f"{'-' if value < 0 else ''}${abs(value):.4f}"

    facts = dom.text["savings-total"]
    assert usd(total["compression"]["usd_saved"]) in facts
    assert usd(total["shadow_checks"]["usd"]) in facts
    assert usd(total["usd_saved"]) in facts
    assert total["shadow_checks"]["usd"] > 0
    assert total["compression"]["usd_saved"] == pytest.approx(
        total["usd_saved"] + total["shadow_checks"]["usd"]
    )
    for name in ("saved by compression", "spent on shadow checks", "net saved"):
        assert name in facts and name in dom.text["session-savings"]
    assert " tok, " in dom.text["sessions-table"]
    assert dom.count("td", "compression-saved") == dom.count("td", "shadow-spent") == 1
    assert dom.by_id["detail"]["data-compression"] == "off"
    assert "off for this session" in dom.text["facts"]
    assert dom.count("td", "switch") == 1 and "off" in dom.text["sessions-table"]
    assert dom.by_id["session-savings"]["data-priced"] == "true"
    # Shadow checks: a row per model with its agreement, noise floor and samples.
    assert dom.by_id["savings"]["data-shadow-models"] == "1"
    shadow = savings["shadow"]["models"]["small-8k"]
    assert f"{100 * shadow['noise_floor_agreement']:.1f}%" in dom.text["shadow-table"]

    OUTPUT.mkdir(exist_ok=True)
    shot = OUTPUT / "dashboard.png"
    shot.unlink(missing_ok=True)
    taken = chromium(url, tmp_path / "profile-shot", f"--screenshot={shot}")
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_dashboard_asks_again_for_a_wrong_key(proxy: ProxyServer, tmp_path: Path) -> None:
    dumped = chromium(
        dashboard_url(proxy, key="not-the-key-7f3a"), tmp_path / "profile", "--dump-dom"
    )
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Dom(dumped.stdout)
    assert dom.find("body").get("data-state") == "login"
    assert "hidden" not in dom.by_id["login"]
    assert "hidden" in dom.by_id["main"]
    assert dom.text["login-error"] == "Invalid admin key."
    assert "not-the-key-7f3a" not in dumped.stdout  # the key is not left in the page


@needs_chromium
def test_dashboard_without_a_key_shows_the_login_form(proxy: ProxyServer, tmp_path: Path) -> None:
    dumped = chromium(dashboard_url(proxy), tmp_path / "profile", "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    assert console_lines(dumped.stderr) == []
    dom = Dom(dumped.stdout)
    assert dom.find("body").get("data-state") == "login"
    assert "hidden" not in dom.by_id["login"]
