"""The requests Claude Code logged itself, rebuilt as it sent them (pure).

Recent Claude Code versions log each API request beside the conversation: `api-request-shape`
(a request's `system` and `tools`, by hash), `api-request-blob` (a message, by hash) and
`api-request` (its `params`, its shape's hash, the request it continues (`base`), how many of
that request's messages it keeps (`keep`), the hashes of the messages after them (`tail`) and
where its cache breakpoints are (`cacheControl`)). An answer of the model is logged only as the
conversation's `assistant` lines: a tail hash that names no blob is the next answer. A log may
hold several chains of requests (a sub-agent's, a title's); the longest is the session.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from proxy.edge.replay.readers.recording import Body

_NOT_BODY = ("betas",)  # sent as a header


def logged_requests(lines: Sequence[dict[str, Any]], answers: list[Body]) -> list[Body]:
    """The longest chain of logged requests, rebuilt; [] when the log holds none."""
    requests = [line for line in lines if line.get("type") == "api-request" and "tail" in line]
    if not requests:
        return []
    shapes = {
        x.get("shapeHash"): x.get("shape") for x in lines if x.get("type") == "api-request-shape"
    }
    blobs = {x.get("hash"): x.get("message") for x in lines if x.get("type") == "api-request-blob"}
    chain = _longest_chain(requests)
    pending = iter(answers)
    messages: dict[str, list[Any]] = {}
    bodies = []
    for request in chain:
        base = messages.get(str(request.get("base")), [])[: int(request.get("keep") or 0)]
        tail = [blobs[h] if h in blobs else next(pending, None) for h in request["tail"]]
        if any(m is None for m in tail):
            break  # an answer the log lost: the requests after it cannot be rebuilt
        messages[str(request.get("id"))] = [*base, *tail]
        shape = shapes.get(request.get("shapeHash"))
        params = request.get("params")
        body: Body = {
            **{k: v for k, v in (params if isinstance(params, dict) else {}).items()
               if k not in _NOT_BODY},
            **(shape if isinstance(shape, dict) else {}),
            "messages": [*base, *tail],
            "stream": False,
        }  # fmt: skip
        bodies.append(_with_breakpoints(body, request.get("cacheControl")))
    return bodies


def _of(lines: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("type") == kind]


def _longest_chain(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {str(r.get("id")): r for r in requests}
    depth: dict[str, int] = {}
    for r in requests:  # logged in order: a request's base comes before it
        base = str(r.get("base"))
        depth[str(r.get("id"))] = depth.get(base, 0) + 1 if base in by_id else 1
    chain = []
    rid: str | None = max(depth, key=lambda r: depth[r])
    while rid is not None and rid in by_id:
        chain.append(by_id[rid])
        previous = by_id[rid].get("base")
        rid = str(previous) if previous is not None else None
    return chain[::-1]


def _with_breakpoints(body: Body, places: Any) -> Body:
    """The body with `cache_control` set where the log says Claude Code put it."""
    if not isinstance(places, list) or not places:
        return body
    body = {**body, "system": copy.deepcopy(body.get("system")), "messages": list(body["messages"])}
    for place in places:
        path, value = place.get("path"), place.get("value")
        if not isinstance(path, list) or len(path) < 2:
            continue
        if path[0] == "messages" and isinstance(path[1], int) and path[1] < len(body["messages"]):
            body["messages"][path[1]] = copy.deepcopy(body["messages"][path[1]])
        target: Any = body
        try:
            for step in path:
                target = target[step]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(target, dict):
            target["cache_control"] = value
    return body
