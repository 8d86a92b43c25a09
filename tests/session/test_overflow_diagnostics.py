"""A request whose system prompt and tools alone fill the window: the client is told so."""

from __future__ import annotations

import openai
import pytest

from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator


def test_the_client_error_names_a_system_prompt_over_the_window(
    sim: Simulator, db_path: str
) -> None:
    settings = settings_for(
        sim.base_url,
        db_path,
        models=[{"match": "small-8k", "upstream": "sim", "context_length": 8192}],
    )
    messages = [
        {"role": "system", "content": "Follow rule number 7 always. " * 1_800},
        {"role": "user", "content": "Hello."},
    ]
    with ProxyServer(settings) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="small-8k", messages=messages)
    message = caught.value.message
    assert "system prompt and tool definitions alone take" in message
    assert "8,192" in message
    assert sim.summary_requests == []
    assert all(r.outcome == "overflow" for r in sim.chat_requests)
