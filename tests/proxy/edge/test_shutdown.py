"""Stopping the app writes out the usage it queued in memory, also into a store it does not own
(an embedding application's): nothing waits for the next batch that will never come."""

from __future__ import annotations

import httpx

from proxy.edge.app import create_app
from storage import SessionKey, SessionStore
from tests.servers import settings_for
from tests.simulator import Simulator


async def test_app_shutdown_flushes_usage_into_an_injected_store(
    sim: Simulator, db_path: str
) -> None:
    settings = settings_for(sim.base_url, db_path)
    store = await SessionStore.open(settings.storage.url)
    reader = await SessionStore.open(settings.storage.url)
    try:
        app = create_app(settings, store=store)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://ctxgate") as http:
                for i in range(5):
                    response = await http.post(
                        "/v1/chat/completions",
                        json={
                            "model": "gpt-4o-mini",
                            "messages": [{"role": "user", "content": f"q{i}"}],
                        },
                        headers={"x-session-id": "embedded"},
                    )
                    assert response.status_code == 200
        # The app has stopped; its store is still open (the embedder closes it later).
        assert store.stats.usage_pending == 0
        session = await reader.get_session(SessionKey("anon", "embedded"))
        assert session is not None and session.request_count == 5
    finally:
        await reader.close()
        await store.close()
