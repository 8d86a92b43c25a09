"""Client-placed content through ctxgate at an 8K window: aider's added files stay in every
request after compressions, a file that cannot fit is clipped with a header (the original
archived), and one that cannot fit even clipped gets the provider's `context_length_exceeded`
instead of a request that silently lacks it."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest

from compression.verbatim.pins import PIN_MARKER
from session.identity import scope_for
from tests.compression import aider
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture

WINDOW = 8192
MODEL = "aider-8k"
ADMIN = {"Authorization": "Bearer adm"}
KEY = "sk-aider"
answer_like_aider = aider.answering(25)
ASKS = aider.ASKS

sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW)}, responder=lambda: answer_like_aider, validate_messages=True
)


def proxy_for(sim: Simulator, db_path: str) -> ProxyServer:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    return ProxyServer(
        settings_for(sim.base_url, db_path, models=models, auth={"admin_key": "adm"})
    )


def forwarded(sim: Simulator) -> list[list[dict[str, Any]]]:
    return [r.body["messages"] for r in sim.chat_requests if not r.is_summary]


def compressed(view: list[dict[str, Any]]) -> bool:
    return any("CONTEXT COMPACTION" in str(m.get("content")) for m in view)


def holds(view: list[dict[str, Any]], text: str) -> bool:
    return any(text in str(m.get("content")) for m in view)


def run_aider(sim: Simulator, db_path: str, file_text: str, asks: list[str]) -> list[httpx.Headers]:
    headers = []
    with proxy_for(sim, db_path) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        for made in range(1, len(asks) + 1):
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=aider.request(  # type: ignore[arg-type]
                    asks[:made], file_text=file_text, reminder=True
                ),
            )
            headers.append(raw.headers)
    return headers


def test_aiders_added_file_is_in_every_request_after_compressions(
    sim: Simulator, db_path: str
) -> None:
    # At 3,300 tokens the file fits the window, but not the tail of a compressed view: it was
    # summarized away from every request after the first compression.
    file_text = aider.source_file(3300)
    headers = run_aider(sim, db_path, file_text, ASKS)
    views = forwarded(sim)
    assert len(views) == len(ASKS)
    assert sum(compressed(view) for view in views) >= 3, "too few compressed requests to test"
    missing = [n for n, view in enumerate(views) if not holds(view, file_text)]
    assert missing == []
    assert all("x-ctxgate-clipped" not in h for h in headers)


def test_a_file_larger_than_the_window_gets_context_length_exceeded(
    sim: Simulator, db_path: str
) -> None:
    file_text = aider.source_file(17_700)
    with proxy_for(sim, db_path) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(
                model=MODEL,
                messages=aider.request(ASKS[:3], file_text=file_text),  # type: ignore[arg-type]
            )
    error = raised.value
    assert error.code == "context_length_exceeded"
    assert "aider's added files" in error.message and "/drop" in error.message
    views = forwarded(sim)
    assert views, "the provider was never asked"
    # Never a request that lacks the file: whatever reached the provider held all of it.
    assert all(holds(view, file_text) for view in views)


def test_a_marker_pinned_message_survives_compressions(sim: Simulator, db_path: str) -> None:
    rules = " ".join(f"rule{n}=keep" for n in range(120))
    spec = f"{PIN_MARKER} {ASKS[0]}\n\nFollow this style guide: {rules}"
    asks = [spec, *ASKS[1:]]
    run_aider(sim, db_path, "def fetch(url, timeout): ...", asks)
    views = forwarded(sim)
    assert sum(compressed(view) for view in views) >= 3, "too few compressed requests to test"
    assert all(holds(view, spec) for view in views)


def test_a_file_over_the_pin_share_is_clipped_with_a_header_and_archived(
    sim: Simulator, db_path: str
) -> None:
    file_text = aider.source_file(4600)
    files = aider.FILES_PREFIX + "net/client.py\n```\n" + file_text + "\n```"
    with proxy_for(sim, db_path) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        clipped: list[str] = []
        session = ""
        for made in range(1, 7):
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=aider.request(ASKS[:made], file_text=file_text),  # type: ignore[arg-type]
            )
            session = raw.headers["x-session-id"]
            if "x-ctxgate-clipped" in raw.headers:
                clipped.append(raw.headers["x-ctxgate-clipped"])
        root = proxy.base_url.removesuffix("/v1")
        url = f"{root}/admin/sessions/{scope_for(KEY)}/{quote(session, safe='')}/archive"
        archive = httpx.get(url, headers=ADMIN).json()["data"]
    assert clipped, "no response said what was clipped"
    position, sizes = clipped[-1].split(":")
    kept, original = (int(n) for n in sizes.split("/"))
    assert position.startswith("m") and kept < original
    assert original * 0.5 <= kept
    views = forwarded(sim)
    last = views[-1]
    assert not holds(last, file_text)  # clipped: its head and tail, not all of it
    head, tail = file_text[:300], file_text[-300:]
    assert holds(last, head) and holds(last, tail)
    assert any(row["message"]["content"] == files for row in archive)
