"""`POST /v1/responses/compact` answered by ctxgate's compressor: a smaller history the client
uses as it is, valid for the provider; a `compaction_trigger` input goes to the provider."""

from __future__ import annotations

import openai
import pytest

from proxy.config_file import parse_settings
from session.config.settings import Settings
from tests.proxy.responses_agent import INSTRUCTIONS, ResponsesAgent
from tests.servers import ProxyServer
from tests.simulator import ModelSpec, Simulator
from tests.simulator.shell_agent import ShellAgent

MODEL = "agent-16k"
WINDOW = 16384


def settings(sim: Simulator, db_path: str, apis: list[str]) -> Settings:
    document = {
        "upstreams": {"sim": {"base_url": sim.base_url, "api_key": "sk-up", "apis": apis}},
        "models": [{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        "storage": {"url": f"sqlite+aiosqlite:///{db_path}"},
        "logging": {"json": False, "level": "warning"},
    }
    return parse_settings(document, {})


@pytest.mark.parametrize("apis", [["chat", "responses"], ["responses"]])
def test_compact_returns_a_smaller_valid_history(db_path: str, apis: list[str]) -> None:
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}) as sim:
        sim.responder = ShellAgent(turns=50)
        with ProxyServer(settings(sim, db_path, apis)) as proxy:
            sdk = openai.OpenAI(base_url=proxy.base_url, api_key="sk-agent", max_retries=0)
            agent = ResponsesAgent(sdk, MODEL, "compact-1", output_lines=40)
            for turn in range(14):
                assert agent.turn(stream=turn % 2 == 1)
            before = list(agent.items)
            raw = sdk.responses.with_raw_response.compact(
                model=MODEL,
                input=before,
                instructions=INSTRUCTIONS,  # type: ignore[arg-type]
            )
            compacted = raw.parse()
            output = raw.http_response.json()["output"]  # used as it is, like Codex does
            agent.items = output
            assert agent.turn(stream=True)  # the compacted history works as the next input
        forwarded = sim.responses_requests
        summaries = [r for r in sim.received if r.is_summary]
    assert compacted.object == "response.compaction" and compacted.id.startswith("cmp_")
    assert compacted.usage.output_tokens < compacted.usage.input_tokens * 0.75
    assert len(output) < len(before)
    assert output[:2] == before[:2]  # the developer message and the task: the fixed head
    assert any("CONTEXT COMPACTION" in str(item.get("content")) for item in output)
    newest = [item for item in before if item.get("type") == "reasoning"][-1]
    assert newest in output
    assert [r.problems for r in forwarded] == [[] for _ in forwarded]
    assert all(r.status == 200 for r in forwarded)
    assert len(summaries) == 1
    assert summaries[0].path == (
        "/v1/responses" if apis == ["responses"] else "/v1/chat/completions"
    )
    assert not any(r.path.endswith("/compact") for r in sim.received)


def test_compact_with_a_compaction_trigger_goes_to_the_provider(db_path: str) -> None:
    with Simulator(default=ModelSpec(window=WINDOW)) as sim:
        with ProxyServer(settings(sim, db_path, ["chat", "responses"])) as proxy:
            sdk = openai.OpenAI(base_url=proxy.base_url, api_key="sk-agent", max_retries=0)
            items = [{"role": "user", "content": "hi"}, {"type": "compaction_trigger"}]
            raw = sdk.responses.with_raw_response.compact(model=MODEL, input=items)  # type: ignore[arg-type]
            answer = raw.http_response.json()
    assert raw.headers["x-ctxgate-reason"].startswith("compaction_trigger")
    assert raw.headers["x-ctxgate-compressed"] == "false"
    assert [(r.method, r.path) for r in sim.received] == [("POST", "/v1/responses/compact")]
    assert sim.received[0].raw == raw.http_request.content
    assert answer["output"][-1]["type"] == "compaction"  # the provider's own compaction
