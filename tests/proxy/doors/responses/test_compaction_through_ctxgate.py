"""OpenAI Responses `compaction` items through ctxgate, for real: the `openai` SDK -> ctxgate
-> the simulator, whose `/v1/responses/compact` issues a sealed compaction item (an altered one
is rejected there, so an item forwarded other than byte for byte shows as a problem).

OpenAI's compaction guide lets a client drop the items before the newest compaction item; it
does not say whether the API counts them when they are sent, so ctxgate takes the guide at its
word and counts only what follows (the research note on provider compaction artefacts). The
simulator still counts every item, so it is given a window large enough for all of them while
ctxgate is told a 16K one.

Checked: a history far past ctxgate's window whose part after the newest compaction item fits
is forwarded as the client's bytes (and the same history without the compaction item is
compressed, so it is the item that made the difference); when the live part itself outgrows the
window, ctxgate compresses it and the items up to the compaction item reach the provider as the
client sent them, first and in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.edge.app import create_app
from tests.servers import Recorder, ThreadedServer, settings_for
from tests.simulator import ModelSpec, Simulator

MODEL = "sim-responses"
WINDOW = 16_384  # what ctxgate is told
KEY = "sk-client"


def text(tag: str, lines: int = 40) -> str:
    return "\n".join(f"{tag} line {n}: handler_{n}(request) returned {n * 7}" for n in range(lines))


def history(tag: str, turns: int) -> list[dict[str, Any]]:
    """`turns` user/assistant exchanges of about 1,000 tokens each."""
    items: list[dict[str, Any]] = []
    for n in range(turns):
        items.append({"role": "user", "content": f"{tag} question {n}:\n" + text(f"{tag}{n}q")})
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text(f"{tag}{n}a")}],
            }
        )
    return items


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(models={MODEL: ModelSpec(window=400_000)}) as simulator:
        yield simulator


@pytest.fixture
def proxy(sim: Simulator, db_path: str) -> Iterator[tuple[ThreadedServer, Recorder]]:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    settings = settings_for(sim.base_url, db_path, api_key=None, models=models)
    recorder = Recorder(create_app(settings), "/v1/responses")
    with ThreadedServer(recorder, name="ctxgate", lifespan="on") as server:
        yield server, recorder


def compacted(sim: Simulator, items: list[dict[str, Any]]) -> dict[str, Any]:
    """A genuine compaction item for `items`, from the provider's `/responses/compact`."""
    answer = httpx.post(
        f"{sim.base_url}/responses/compact",
        json={"model": MODEL, "input": items},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    answer.raise_for_status()
    item: dict[str, Any] = answer.json()["output"][-1]
    assert item["type"] == "compaction"
    return item


def send(server: ThreadedServer, items: list[dict[str, Any]], session: str) -> str:
    """One request through ctxgate; its `x-ctxgate-compressed` header."""
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{server.port}/v1", api_key=KEY, max_retries=0, timeout=60
    )
    raw = client.responses.with_raw_response.create(
        model=MODEL,
        input=items,
        prompt_cache_key=session,
        store=False,  # type: ignore[arg-type]
    )
    return raw.headers["x-ctxgate-compressed"]


def turns_to_provider(sim: Simulator) -> list[Any]:
    return [r for r in sim.responses_requests if not r.is_summary and r.path.endswith("responses")]


def test_only_what_follows_the_newest_compaction_item_is_counted(
    sim: Simulator, proxy: tuple[ThreadedServer, Recorder]
) -> None:
    server, recorder = proxy
    dead = history("old", 24)  # about 24K tokens: past the window on its own
    item = compacted(sim, dead)
    live = [{"role": "user", "content": "Go on from the summary."}]
    sim.clear()
    assert send(server, [*dead, item, *live], "with-compaction") == "false"
    with_item = turns_to_provider(sim)
    summaries = [r for r in sim.received if r.is_summary]
    sim.clear()
    assert send(server, [*dead, *live], "without-compaction") == "true"
    without_item = turns_to_provider(sim)
    assert summaries == []
    assert len(with_item) == 1 and with_item[0].problems == []
    assert with_item[0].raw == recorder.bodies[0]  # the client's bytes, untouched
    # The control: the same history without the item is past the window, and compressed.
    assert len(without_item) == 1
    assert len(without_item[0].body["input"]) < len(dead) + 1


def test_a_compressed_live_part_keeps_everything_up_to_the_compaction_item(
    sim: Simulator, proxy: tuple[ThreadedServer, Recorder]
) -> None:
    server, recorder = proxy
    dead = history("old", 8)
    item = compacted(sim, dead)
    live = history("new", 24)  # the live part alone is past the window
    sim.clear()
    assert send(server, [*dead, item, *live], "live-overflow") == "true"
    forwarded = turns_to_provider(sim)
    assert len(forwarded) == 1 and forwarded[0].problems == []
    sent = orjson.loads(recorder.bodies[0])["input"]
    received = forwarded[0].body["input"]
    head = len(dead) + 1
    assert [orjson.dumps(i) for i in received[:head]] == [orjson.dumps(i) for i in sent[:head]]
    assert received[len(dead)] == item
    assert len(received) < len(sent)  # the live part was compressed
    assert [r for r in sim.received if r.is_summary]
