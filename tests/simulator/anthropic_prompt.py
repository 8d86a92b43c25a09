"""An Anthropic Messages request as the simulated provider sees it: its prompt cut into the
ordered pieces that prompt caching hashes (tools, system blocks, message blocks), their token
counts, and the ``cache_control`` breakpoints among them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .anthropic_compaction import compaction_cut
from .tokens import IMAGE_TOKENS, REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE, count_text

MAX_BREAKPOINTS = 4
DOCUMENT_TOKENS = 1500  # flat cost of a PDF document block (its base64 length is not text)


@dataclass(frozen=True, slots=True)
class Piece:
    """One cacheable unit of the prompt, in order: a tool, a system block or a message block."""

    where: str  # "tools.0", "system.1", "messages.3.content.0"
    canonical: bytes  # what the prefix hash covers (cache_control removed)
    tokens: int
    breakpoint: bool


@dataclass(frozen=True, slots=True)
class Prompt:
    pieces: tuple[Piece, ...]
    total: int  # every counted token, the reply priming included, before token_factor

    @property
    def breakpoints(self) -> int:
        return sum(1 for p in self.pieces if p.breakpoint)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _without_cache_control(block: Any) -> Any:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _has_cache_control(block: Any) -> bool:
    return isinstance(block, dict) and isinstance(block.get("cache_control"), dict)


def block_tokens(block: Any) -> int:
    """Tokens of one content block: the text it carries, a flat figure for an image or a
    PDF, a tool call's name and input, a tool result's content."""
    if isinstance(block, str):
        return count_text(block)
    if not isinstance(block, dict):
        return count_text(_dumps(block))
    kind = block.get("type")
    if kind == "image":
        return IMAGE_TOKENS
    if kind == "document":
        source = block.get("source")
        if isinstance(source, dict) and isinstance(source.get("data"), str):
            if source.get("type") == "text":
                return count_text(source["data"])
        return DOCUMENT_TOKENS
    if kind == "tool_use":
        return count_text(str(block.get("name", ""))) + count_text(_dumps(block.get("input", {})))
    if kind == "tool_result":
        return content_tokens(block.get("content"))
    if kind == "thinking":
        return count_text(str(block.get("thinking", "")))
    if kind == "compaction":
        content = block.get("content")
        return count_text(content) if isinstance(content, str) else 0
    if kind == "redacted_thinking":
        return len(str(block.get("data", ""))) // 4
    if isinstance(block.get("text"), str):
        return count_text(block["text"])
    return count_text(_dumps(_without_cache_control(block)))


def content_tokens(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text(content)
    if isinstance(content, list):
        return sum(block_tokens(b) for b in content)
    return count_text(_dumps(content))


def _blocks(content: Any) -> list[Any]:
    """Content as blocks; a string is the text block it stands for (the same cached prefix)."""
    if isinstance(content, list):
        return content
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [content] if content is not None else []


def _message_pieces(index: int, message: Any, start: int = 0) -> list[Piece]:
    """The pieces of one message from its block `start` on (the blocks before the newest
    compaction block are not read)."""
    if not isinstance(message, dict):
        text = _dumps(message)
        return [Piece(f"messages.{index}", text.encode(), count_text(text), False)]
    role = str(message.get("role", ""))
    head = TOKENS_PER_MESSAGE + count_text(role)
    blocks = _blocks(message.get("content"))
    if not blocks:
        return [Piece(f"messages.{index}", f"<{role}>".encode(), head, False)]
    pieces = []
    for j, block in enumerate(blocks):
        if j < start:
            continue
        marker = f"<{role}>" if j == start else ""
        canonical = (marker + _dumps(_without_cache_control(block))).encode()
        tokens = block_tokens(block) + (head if j == start else 0)
        where = f"messages.{index}.content.{j}"
        pieces.append(Piece(where, canonical, tokens, _has_cache_control(block)))
    return pieces


def _system_pieces(system: Any) -> list[Piece]:
    if system is None or system == "" or system == []:
        return []
    head = TOKENS_PER_MESSAGE + count_text("system")
    pieces = []
    for j, block in enumerate(_blocks(system)):
        canonical = ("<system>" + _dumps(_without_cache_control(block))).encode()
        tokens = block_tokens(block) + (head if j == 0 else 0)
        pieces.append(Piece(f"system.{j}", canonical, tokens, _has_cache_control(block)))
    return pieces


def _tool_pieces(tools: Any) -> list[Piece]:
    pieces = []
    for j, tool in enumerate(tools if isinstance(tools, list) else []):
        text = _dumps(_without_cache_control(tool))
        marked = _has_cache_control(tool)
        pieces.append(Piece(f"tools.{j}", text.encode(), count_text(text), marked))
    return pieces


def prompt_of(body: dict[str, Any], *, whole: bool = False) -> Prompt:
    """The request's prompt in caching order: tools, then system, then messages, these from
    the newest compaction block on (the API reads nothing before it; `whole`: every block,
    as the request's checks see it)."""
    pieces = _tool_pieces(body.get("tools")) + _system_pieces(body.get("system"))
    messages = body.get("messages")
    cut = (None if whole else compaction_cut(messages)) or (0, 0)
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if i >= cut[0]:
            pieces.extend(_message_pieces(i, message, cut[1] if i == cut[0] else 0))
    total = sum(p.tokens for p in pieces) + REPLY_PRIMING_TOKENS
    return Prompt(tuple(pieces), total)


def count_messages_tokens(body: Any, token_factor: float = 1.0) -> int:
    """The simulator's "real" prompt size of a Messages request (what usage reports in all)."""
    if not isinstance(body, dict):
        return 0
    return int(prompt_of(body).total * token_factor)


def prefix_hashes(model: str, prompt: Prompt) -> list[tuple[int, str, bool]]:
    """For each piece: (raw tokens up to and including it, hash of that prefix, whether the
    piece is a breakpoint)."""
    digest = hashlib.sha256(model.encode() + b"\x00")
    seen = 0
    out = []
    for piece in prompt.pieces:
        digest.update(piece.canonical + b"\x00")
        seen += piece.tokens
        out.append((seen, digest.copy().hexdigest(), piece.breakpoint))
    return out
