"""`POST /v1/responses/compact`, answered by ctxgate's own compressor.

    {model, input, instructions?}  ->  {"id": "cmp_…", "object": "response.compaction",
                                        "created_at", "output": [items], "usage"}

The input goes through the request path of `/v1/responses` (session, checkpoint, arrival
triggers), then the configured engine runs on it with force, as a manual compression. The
output is the compressed view rendered as items: a valid history the client can use as it
is (calls paired with their outputs, reasoning and opaque items verbatim). `usage` gives
ctxgate's count of the input (`input_tokens`) and of the output (`output_tokens`).

A request the provider must answer itself (a `compaction_trigger` item, or history kept on the
provider) is forwarded there untouched.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from proxy.doors.responses.render import to_items
from proxy.doors.responses.responses_door import ResponsesDoor
from proxy.edge.relay import answered
from proxy.edge.services import Services
from session.config.settings import ModelRule
from session.errors import BadRequest, unknown_model
from session.identity import identify, scope_for
from session.ports.headers import upstream_request_headers

COMPACT_PATH = "/responses/compact"
DOOR = ResponsesDoor()


def compaction_body(output: list[Any], before: int, after: int, now: float) -> dict[str, Any]:
    return {
        "id": f"cmp_{uuid.uuid4().hex}",
        "object": "response.compaction",
        "created_at": int(now),
        "output": output,
        "usage": {
            "input_tokens": before,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": after,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": before + after,
        },
    }


async def compact(services: Services, headers: Mapping[str, str], raw: bytes) -> Response:
    credential = services.auth.client_credential(headers)
    request = DOOR.parse(raw)
    rule = services.settings.rule_for(request.model)
    if rule is None:
        raise unknown_model(request.model)
    forward = services.auth.forwardable(headers)
    if request.passthrough:
        return await _forwarded(services, rule, forward, raw, request.passthrough)
    ident = identify(headers, request.session_hint, request.messages, scope_for(credential))
    conversations = services.conversations
    turn = await conversations.prepare(DOOR, ident, request, rule, forward)
    counter = conversations.models.counter(rule, request.model)
    before = counter.count_messages(request.messages, request.tools)
    if not turn.notes:  # the arrival triggers may have compressed it already
        applied = await conversations.compactor.compress(
            turn,
            trigger="manual",
            counter=counter,
            summarize=conversations.summarizer(turn),
            force=True,
            summary_token_ratio=conversations.models.summary_token_ratio(request.model),
            summary_context_length=services.settings.compression.summary.context_length,
        )
        turn = applied.turn
    after = counter.count_messages(turn.view, request.tools)
    body = compaction_body(to_items(turn.view, request.messages), before, after, time.time())
    return Response(
        orjson.dumps(body), headers=turn.response_headers(), media_type="application/json"
    )


async def _forwarded(
    services: Services, rule: ModelRule, forward: Mapping[str, str], raw: bytes, reason: str
) -> Response:
    upstream = services.upstreams[rule.upstream]
    if DOOR.api not in upstream.settings.apis:
        raise BadRequest(
            f"This compaction must be done by the provider ({reason}), but the upstream "
            f"'{rule.upstream}' does not list 'responses' in `upstreams.{rule.upstream}.apis`.",
            param="model",
            code="api_not_served",
        )
    sent = upstream_request_headers(forward.items(), upstream.settings)
    answer = await upstream.call("POST", COMPACT_PATH, raw, sent)
    return answered(answer, {"x-ctxgate-compressed": "false", "x-ctxgate-reason": reason})
