"""One request on its way through the proxy: its session, its view, what was done to it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from compression import EngineState, Message, ToolSchema, chained_digests, seen_messages
from session.config.settings import ModelRule
from session.identity import Identity
from session.ports.frontdoor import FrontDoor, WireRequest
from session.ports.upstream import Upstream
from storage import SessionKey, SessionRecord


@dataclass(frozen=True, slots=True)
class CompressionNote:
    """What a compression did to this request (reported in response headers)."""

    trigger: str
    outcome: str
    tokens_before: int
    tokens_after: int
    checkpoint_id: int | None
    # Pinned messages the compression clipped: "m<client position>:<kept>/<original tokens>".
    clipped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Turn:
    """One request's record; what happens to it (a checkpoint, a compression, a retry with a
    lower max_tokens) gives a new Turn, never changes this one."""

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
    # For each of those, the client position it holds verbatim (None: written by ctxgate);
    # None when the checkpoint was stored before checkpoints recorded it.
    sources: tuple[int | None, ...] | None = ()
    checkpoint_id: int | None = None
    checkpoint_key: str | None = None  # the session row (lineage) holding that checkpoint
    max_tokens: int | None = None
    estimate: int | None = None  # ctxgate's token figure for the view, when computed
    started_at: float = 0.0
    anchored: bool = True  # the session's last real figure was measured on a prefix of this view
    notes: tuple[CompressionNote, ...] = ()
    digests: tuple[str, ...] | None = None  # chained digests of the client's messages, once
    images_shrunk: bool = False  # the view's images were shrunk after a refusal (once only)
    tools: tuple[ToolSchema, ...] = ()  # ctxgate's own tools offered upstream (recall)
    recalls: int = 0  # recall rounds answered for this request
    recalled_tokens: int = 0  # tokens of archived text those rounds read back
    compression_off: bool = False  # switched off for the session: the view is the client's
    ahead: tuple[str, ...] = ()  # handles recall before asking put in view for this request
    # (view index, text) ctxgate adds to that message when forwarding (recall before
    # asking): in what the provider gets only, never in the view the session keeps.
    placed: tuple[tuple[int, str], ...] = ()
    ahead_tokens: int = 0  # what the lineage's placements add to the view

    @property
    def messages(self) -> list[Message]:
        return self.request.messages

    @property
    def root(self) -> SessionKey:
        """The client's session id: every lineage and rotation of the session is under it."""
        session = self.session
        return session.root if session is not None else self.key

    @property
    def view_changed(self) -> bool:
        return self.checkpoint_id is not None or self.view is not self.request.messages

    def with_digests(self) -> Turn:
        """This turn with the client messages' chained digests computed (once per request)."""
        if self.digests is not None:
            return self
        messages = self.messages
        digests = chained_digests(messages, digests=seen_messages().digests(messages))
        return replace(self, digests=tuple(digests))

    def with_view(
        self,
        view: list[Message],
        *,
        prefix_len: int,
        checkpoint_id: int | None,
        sources: tuple[int | None, ...] | None = (),
        checkpoint_key: str | None = None,
    ) -> Turn:
        """The turn forwarding `view`: a checkpoint's replacement (whose messages hold the
        client positions `sources` verbatim) plus the client messages after its first
        `prefix_len`, or a compression's result."""
        return replace(
            self,
            view=view,
            prefix_len=prefix_len,
            replacement_len=len(view) - (len(self.messages) - prefix_len),
            sources=sources,
            checkpoint_id=checkpoint_id,
            checkpoint_key=checkpoint_key,
            estimate=None,
            # Placements point into the view they were made for; a new view has none.
            placed=(),
            ahead_tokens=0,
        )

    def upstream_body(self) -> bytes:
        """The body to send: the client's bytes when nothing changed, else the view rendered."""
        return self.door.render(self.request, self.forwarded_view(), self.max_tokens, self.tools)

    def forwarded_view(self) -> list[Message]:
        """The view as forwarded: with the passages placed in it."""
        if not self.placed:
            return self.view
        view = list(self.view)
        for index, text in self.placed:
            if index < len(view):
                view[index] = with_passages(view[index], text)
        return view

    def response_headers(self) -> dict[str, str]:
        headers = {"x-session-id": self.ident.session_id}
        if self.request.passthrough:
            headers["x-ctxgate-reason"] = self.request.passthrough
        if self.compression_off:
            headers["x-ctxgate-compression"] = "off"
        if self.checkpoint_id is not None:
            headers["x-ctxgate-checkpoint"] = str(self.checkpoint_id)
        if self.recalls:
            headers["x-ctxgate-recalls"] = str(self.recalls)
        if self.ahead:
            headers["x-ctxgate-recalled-ahead"] = ",".join(self.ahead)
        if not self.notes:
            headers["x-ctxgate-compressed"] = "true" if self.checkpoint_id is not None else "false"
            return headers
        last = self.notes[-1]
        clipped = [label for note in self.notes for label in note.clipped]
        if clipped:
            headers["x-ctxgate-clipped"] = clipped_header(clipped)
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


CLIPPED_HEADER_CHARS = 240


def clipped_header(labels: list[str]) -> str:
    """The labels comma-separated, within a bounded length (the rest counted, not listed)."""
    value = ""
    for shown, label in enumerate(labels):
        rest = len(labels) - shown
        more = f",+{rest - 1} more" if rest > 1 else ""
        if len(value) + len(label) + 1 + len(more) > CLIPPED_HEADER_CHARS:
            return f"{value},+{rest} more" if value else f"+{rest} more"
        value = f"{value},{label}" if value else label
    return value


# Share of the window the output reservation may take, whatever max_tokens the client sends.
OUTPUT_SHARE = 0.25


def output_reservation(
    max_tokens: int | None, window: int, share: float = OUTPUT_SHARE
) -> int | None:
    """The output tokens to keep free when deciding whether the prompt fits.

    Claude Code asks for 32,000 whatever the model's window; reserving that much of a 16K
    window would leave no room for the prompt. The forwarded max_tokens is not changed.
    """
    return None if max_tokens is None else min(max_tokens, max(1, int(window * share)))


def reservation(turn: Turn) -> int | None:
    """The output tokens reserved out of the window: a retry's lowered max_tokens, else the
    client's, else the model rule's; at most a share of the window."""
    requested = turn.max_tokens or turn.request.max_tokens or turn.rule.max_output_tokens
    return output_reservation(requested, turn.context_length)


def with_passages(message: Message, text: str) -> Message:
    """`message` with `text` added to its content (a part of its own in a list): after a
    user's words, before a tool's output, whose end is where a tool reports how it went (an
    exit status, a test summary), so that stays the last thing the model reads."""
    content: Any = message.get("content")
    out = dict(message)
    first = message.get("role") == "tool"
    if isinstance(content, list):
        part = {"type": "text", "text": text}
        out["content"] = [part, *content] if first else [*content, part]
    elif first:
        out["content"] = f"{text}\n\n{content or ''}"
    else:
        out["content"] = f"{content or ''}\n\n{text}"
    return cast(Message, out)
