"""One request on its way through the proxy: its session, its view, what was done to it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from compression.state import EngineState
from compression.types import Message
from proxy.frontdoor import FrontDoor, WireRequest
from proxy.identity import Identity
from proxy.settings import ModelRule
from proxy.upstream import Upstream
from storage import SessionKey, SessionRecord


@dataclass(frozen=True, slots=True)
class CompressionNote:
    """What a compression did to this request (reported in response headers)."""

    trigger: str
    outcome: str
    tokens_before: int
    tokens_after: int
    checkpoint_id: int | None


@dataclass(slots=True)
class Turn:
    """Mutable while the request is served: retries replace the view and max_tokens."""

    ident: Identity
    key: SessionKey
    door: FrontDoor
    request: WireRequest
    rule: ModelRule
    upstream: Upstream
    client_headers: Mapping[str, str]
    session: SessionRecord | None
    state: EngineState
    context_length: int
    view: list[Message]
    prefix_len: int = 0  # client messages covered by the checkpoint in use
    replacement_len: int = 0  # leading view messages that came from that checkpoint
    checkpoint_id: int | None = None
    max_tokens: int | None = None
    estimate: int | None = None  # ctxgate's token figure for the view, when computed
    started_at: float = 0.0
    anchored: bool = True  # the session's last real figure was measured on a prefix of this view
    notes: list[CompressionNote] = field(default_factory=list)

    @property
    def messages(self) -> list[Message]:
        return self.request.messages

    @property
    def view_changed(self) -> bool:
        return self.checkpoint_id is not None or self.view is not self.request.messages

    def use_view(self, view: list[Message], *, prefix_len: int, checkpoint_id: int | None) -> None:
        self.view = view
        self.prefix_len = prefix_len
        self.replacement_len = len(view) - (len(self.messages) - prefix_len)
        self.checkpoint_id = checkpoint_id
        self.estimate = None

    def upstream_body(self) -> bytes:
        """The body to send: the client's bytes when nothing changed, else the view rendered."""
        return self.door.render(self.request, self.view, self.max_tokens)

    def response_headers(self) -> dict[str, str]:
        headers = {"x-session-id": self.ident.session_id}
        if self.request.passthrough:
            headers["x-ctxgate-reason"] = self.request.passthrough
        if self.checkpoint_id is not None:
            headers["x-ctxgate-checkpoint"] = str(self.checkpoint_id)
        if not self.notes:
            headers["x-ctxgate-compressed"] = "true" if self.checkpoint_id is not None else "false"
            return headers
        last = self.notes[-1]
        headers.update(
            {
                "x-ctxgate-compressed": "true",
                "x-ctxgate-trigger": last.trigger,
                "x-ctxgate-outcome": last.outcome,
                "x-ctxgate-tokens-before": str(self.notes[0].tokens_before),
                "x-ctxgate-tokens-after": str(last.tokens_after),
            }
        )
        return headers
