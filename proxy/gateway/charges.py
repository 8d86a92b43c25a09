"""What each answered request is charged, and the shadow check it may be sampled for.

Recorded once the client has its answer, beside the request rather than in its way: a failure
here is logged, since nobody is left to report it to.
"""

from __future__ import annotations

import asyncio
import logging

from compression import TokenCounter
from session.conversations import Conversations
from session.ledger.book import Ledger, full_prompt
from session.ledger.history import History
from session.ledger.shadow import Shadow, ShadowJob
from session.ports.frontdoor import Usage
from session.ports.headers import upstream_request_headers
from session.pressure import LARGE_BODY_BYTES
from session.turn import Turn

log = logging.getLogger("ctxgate.gateway")


def upstream_headers(turn: Turn) -> dict[str, str]:
    """The headers a turn's upstream calls carry."""
    return upstream_request_headers(turn.client_headers.items(), turn.upstream.settings)


class Charges:
    def __init__(
        self, conversations: Conversations, ledger: Ledger | None, shadow: Shadow | None
    ) -> None:
        self.conversations = conversations
        self.ledger = ledger
        self.shadow = shadow

    async def request(
        self, turn: Turn, usage: Usage | None, shown: bytes | None, check: bool = True
    ) -> None:
        """The ledger's record of a client request's first round (its view's figures), and
        a shadow check of it when one is due (`shown`: the answer the client got, when it
        was not streamed)."""
        if self.ledger is None or usage is None or turn.request.passthrough:
            return
        counter = self.conversations.models.counter(turn.rule, turn.request.model)
        if len(turn.request.raw) > LARGE_BODY_BYTES:  # hashing, counting would hold the loop up
            full, history = await asyncio.to_thread(figures_of, turn, usage, counter)
        else:
            full, history = figures_of(turn, usage, counter)
        model = turn.request.model
        try:
            await self.ledger.request(
                turn.key,
                model,
                turn.door.api,
                usage,
                full,
                turn.view_changed,
                turn.started_at,
                history,
            )
        except Exception:  # the answer is already out; nothing left to report it to
            log.exception("recording a request's charge failed")
        shadow = self.shadow
        if check and shadow is not None and turn.view_changed:
            # B is the view without ctxgate's own tools: where they went upstream with it, the
            # client's answer is not B's (a model may take the tool offered first), so B is
            # sent again without them.
            answer = None if turn.tools else shown
            grant = shadow.admit(turn.door.api, full, turn.context_length, answer is not None)
            if grant is not None:
                shadow.start(shadow_job(turn, full, answer), grant)

    async def round(self, turn: Turn, usage: Usage | None) -> None:
        """A recall round's charge (a call compression made necessary), recorded beside the
        request rather than in its way."""
        if self.ledger is not None:
            charge = self.ledger.overhead(turn.key, turn.request.model, "recall", usage)
            self.conversations.sessions.spawn(charge)


def figures_of(turn: Turn, usage: Usage, counter: TokenCounter) -> tuple[int, History]:
    """`full_prompt` of the request and its client messages' `History` (their digests taken
    when the ledger asks, or here for a large body). The provider billed the passages recall
    before asking placed as well, which `turn.view` does not hold: scaled without them, or they
    would count as part of the client's history."""
    billed = usage.prompt_tokens
    if billed and turn.ahead_tokens:
        billed = max(1, billed - turn.ahead_tokens)
    size = len(turn.request.raw)
    full, history = full_prompt(
        billed, turn.messages, turn.view, turn.request.tools, counter, turn.tools, size
    )
    if size > LARGE_BODY_BYTES:  # here, off the loop, rather than when the ledger asks
        history.digest_now()
    return full, history


def shadow_job(turn: Turn, full: int, shown: bytes | None) -> ShadowJob:
    return ShadowJob(
        turn.key,
        turn.request.model,
        turn.notes[-1].trigger if turn.notes else None,
        turn.checkpoint_id,
        turn.door,
        turn.upstream,
        upstream_headers(turn),
        turn.request.raw,
        turn.door.render(turn.request, turn.view, turn.max_tokens, ()),
        shown,
        full,
    )
