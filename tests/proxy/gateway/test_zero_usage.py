"""A provider that reports no prompt tokens (0) teaches ctxgate's calibration nothing: the
figure is not a count of the prompt, and learning from it would shrink every later estimate
(compressions too late). openai SDK -> ctxgate -> the provider simulator."""

from __future__ import annotations

from typing import Any

import openai

from tests.proxy.fixtures import proxy_fixture
from tests.servers import ProxyServer
from tests.simulator import Reply, Simulator

proxy = proxy_fixture(models=[{"match": "*", "upstream": "sim", "context_length": 8192}])


def test_a_reported_zero_prompt_is_not_a_calibration_sample(
    sim: Simulator, proxy: ProxyServer
) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        return Reply(content="ok", prompt_tokens=0)

    sim.responder = respond
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-c", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Count the files in /srv/app " * 400}]
    for turn in range(3):
        answer = client.chat.completions.create(
            model="gpt-4o", messages=messages, extra_headers={"x-session-id": "zero-usage"}
        )
        assert answer.usage is not None and answer.usage.prompt_tokens == 0
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"{turn}"}]
    calibration = proxy.services.models.calibration("gpt-4o")
    assert calibration.samples == 0 and calibration.ratio == 1.0
