"""ctxgate's own error answers: the model APIs' request counter counts only their requests, and
an error met once the session is known carries the session's headers."""

from __future__ import annotations

import re
import socket

import httpx
import openai
import pytest

from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator


def requests_total(proxy: ProxyServer) -> float:
    text = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    return sum(float(v) for v in re.findall(r"^ctxgate_requests_total\{[^}]*\} (\S+)$", text, re.M))


def test_admin_errors_are_not_counted_as_model_requests(sim: Simulator, db_path: str) -> None:
    settings = settings_for(sim.base_url, db_path, auth={"admin_key": "adm"})
    with ProxyServer(settings) as proxy:
        root = proxy.base_url.removesuffix("/v1")
        assert httpx.get(root + "/admin/sessions").status_code == 401
        missing = httpx.get(
            root + "/admin/sessions/s/none", headers={"authorization": "Bearer adm"}
        )
        assert missing.status_code == 404
        assert requests_total(proxy) == 0
        client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="gpt-4o-mini", messages=[])
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
        assert requests_total(proxy) == 2


def test_ctxgates_own_502_carries_the_session_headers(sim: Simulator, db_path: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = settings_for(f"http://127.0.0.1:{port}/v1", db_path)
    with ProxyServer(settings) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"x-session-id": "s-502"},
                    stream=stream,
                )
            assert caught.value.status_code == 502
            headers = caught.value.response.headers
            assert headers["x-session-id"] == "s-502"
            assert headers["x-ctxgate-compressed"] == "false"
            assert caught.value.body["type"] == "upstream_error"  # type: ignore[index]
