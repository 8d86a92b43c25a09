"""An aider-shaped conversation through ctxgate at a small window: its canned opening (worked
example, reset, repository map) stays verbatim at the head of every compressed view, and the
original request the summary carries is the user's first request, not aider's example."""

from __future__ import annotations

import openai

from compression.summary.handoff import handoff_text, parse_handoff
from tests.compression import aider
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator

WINDOW = 8192
MODEL = "aider-8k"
answer_like_aider = aider.answering()
ASKS = aider.ASKS


def test_the_canned_opening_is_kept_and_the_users_request_carried(db_path: str) -> None:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}, validate_messages=True) as sim:
        sim.responder = answer_like_aider
        with ProxyServer(settings_for(sim.base_url, db_path, models=models)) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-aider", max_retries=0)
            ids, compressed = set(), []
            for made in range(1, len(ASKS) + 1):
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=aider.request(ASKS[:made], reminder=True),  # type: ignore[arg-type]
                )
                ids.add(raw.headers["x-session-id"])
                compressed.append(raw.headers["x-ctxgate-compressed"])
    assert len(ids) == 1  # no session header: one derived id for the whole conversation
    assert "true" in compressed
    views = [r.body["messages"] for r in sim.chat_requests if not r.is_summary]
    summarized = [v for v in views if any(handoff_text(m) is not None for m in v)]
    assert summarized, "no compressed view reached the upstream"
    for view in summarized:
        assert view[: len(aider.opening())] == aider.opening()
        texts = [handoff_text(m) for m in view]
        parsed = [parse_handoff(t) for t in texts if t is not None]
        users = parsed[0].handoff.user_messages if parsed and parsed[0] else ()
        assert aider.EXAMPLE_REQUEST not in users
        assert all(not u.startswith(aider.RESET) for u in users)
    last = [parse_handoff(t) for t in (handoff_text(m) for m in summarized[-1]) if t]
    assert last and last[0] is not None
    # Every ask is in view verbatim: carried (oldest first), or quoted by the summary itself.
    carried = last[0].handoff.user_messages
    seen = "\n".join(str(m.get("content")) for m in summarized[-1])
    assert [ask for ask in ASKS if ask not in seen] == []
    assert list(carried) == [ask for ask in ASKS if ask in carried]
