"""Recall rounds: the model's calls to ctxgate's recall tool answered from the archive, and
the model called again, until it answers the client (see `session.recall.tool` for the tool and
its budget). Non-streamed answers are read whole; streams are held back until they show what
they are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace

import httpx

from compression import RECALL_TOOL
from proxy.doors.streaming import StreamRelay
from session.errors import ProxyError, UpstreamStatus
from session.metrics import Metrics
from session.ports.frontdoor import Usage
from session.ports.upstream import Answer
from session.recall.tool import Recaller
from session.turn import Turn

log = logging.getLogger("ctxgate.gateway")

# Opens a stream for a turn on a stack, recovering from overflows or not: the gateway's.
OpenStream = Callable[
    [Turn, AsyncExitStack, bool], Awaitable[tuple[Turn, httpx.Response, StreamRelay]]
]
# Records a recall round's usage in the ledger: the gateway's.
ChargeRound = Callable[[Turn, Usage | None], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Recalled:
    """What the recall rounds of one request came to."""

    turn: Turn  # the turn of the round the client got
    hidden: bool = False  # recall calls were kept from the client unanswered
    seconds: float = 0.0  # spent in recall rounds


class Rounds:
    def __init__(
        self,
        recaller: Recaller,
        metrics: Metrics,
        open_stream: OpenStream,
        charge: ChargeRound | None = None,
    ) -> None:
        self.recaller = recaller
        self.metrics = metrics
        self.open_stream = open_stream
        self.charge = charge

    async def complete(
        self, turn: Turn, response: Answer, headers: dict[str, str]
    ) -> tuple[Turn, Answer, bytes, Recalled]:
        """Answer the model's recall calls and call it again, until it answers the client (or
        the budget is spent: its last calls are then kept from the client)."""
        started = time.perf_counter()
        content, first = response.content, turn
        left = self.recaller.budget(turn)
        while (found := turn.door.tool_calls(content, RECALL_TOOL)) is not None:
            if left.rounds <= 0:
                break
            following, left = await self.recaller.answer(turn, found, left)
            again = await self._round(following, headers)
            if again is None:
                # The model asked for the archive and cannot have it: it answers the request
                # as the client sent it, without the tool.
                following = replace(first, tools=())
                again = await self._round(following, headers)
                if again is None:
                    break
            if self.charge is not None:
                await self.charge(following, following.door.usage(again.content))
            turn, response, content = following, again, again.content
        hidden = turn.door.tool_calls(content, RECALL_TOOL) is not None
        if hidden:
            self.metrics.recall_hidden.inc()
            content = turn.door.without_calls(content, RECALL_TOOL)
        return turn, response, content, Recalled(turn, hidden, time.perf_counter() - started)

    async def _round(self, turn: Turn, headers: dict[str, str]) -> Answer | None:
        """One more non-streamed call for `turn`; None (logged) when it fails."""
        sent = time.perf_counter()
        try:
            answer = await turn.upstream.call(
                "POST", turn.door.upstream_path, turn.upstream_body(), headers
            )
        except ProxyError as exc:
            log.warning("session %s: a recall round failed: %s", turn.key.key, exc)
            self.metrics.recalled("round_failed", 0)
            return None
        self.metrics.upstream_done(turn, sent, answer.status_code)
        if answer.status_code >= 400:
            log.warning(
                "session %s: a recall round got %d from the upstream",
                turn.key.key,
                answer.status_code,
            )
            self.metrics.recalled("round_failed", 0)
            return None
        return answer

    async def stream(
        self, turn: Turn, response: httpx.Response, relay: StreamRelay, stack: AsyncExitStack
    ) -> tuple[Turn, httpx.Response, StreamRelay, list[bytes]]:
        """Hold each stream back until it shows what it is: a stream that opens with recall
        calls is read to its end, answered from the archive and followed by a new round;
        the first that does not is the client's, its events held so far given first. Recall
        calls in the client's stream (after its text, or once the budget is spent) are
        filtered out of it. Every round's connection is on `stack`, the caller's."""
        left, first = self.recaller.budget(turn), turn
        read = AsyncExitStack()  # the round being read, closed once it is answered
        while True:
            answer = turn.door.answer_stream(RECALL_TOOL)
            held = await relay.hold(answer)
            found = None
            if answer.decided == "recall" and left.rounds > 0:
                held += await relay.hold(answer, to_end=True)
                found = turn.door.tool_calls(answer.answer(), RECALL_TOOL)
            if found is None or relay.watch.failed is not None:
                relay.filter = turn.door.call_filter(RECALL_TOOL)
                return turn, response, relay, held
            following, left = await self.recaller.answer(turn, found, left)
            opened = await self._open_round(following, stack)
            plain = opened is None
            if plain:
                # The model asked for the archive and cannot have it: it answers the request
                # as the client sent it, without the tool.
                self.metrics.recalled("round_failed", 0)
                opened = await self._open_round(replace(first, tools=()), stack)
            if opened is None:
                relay.filter = turn.door.call_filter(RECALL_TOOL)
                return turn, response, relay, held
            await read.aclose()  # the round answered is read: its connection can go
            if turn is not first and self.charge is not None:
                await self.charge(turn, relay.watch.usage)  # a recall round read to its end
            turn, response, relay, read = opened
            if plain:
                return turn, response, relay, []

    async def _open_round(
        self, turn: Turn, stack: AsyncExitStack
    ) -> tuple[Turn, httpx.Response, StreamRelay, AsyncExitStack] | None:
        """One more stream for `turn`, its connection on `stack` (and on the stack returned,
        to close it early); None (logged) when it fails."""
        call = AsyncExitStack()
        stack.push_async_exit(call)
        try:
            _, response, relay = await self.open_stream(turn, call, False)
        except (ProxyError, UpstreamStatus) as exc:
            await call.aclose()
            log.warning("session %s: a recall round failed: %s", turn.key.key, exc)
            return None
        return turn, response, relay, call
