"""What the Anthropic Messages API refuses before answering, with its wording: a missing
``anthropic-version`` header or required field, more than four ``cache_control`` breakpoints,
broken ``tool_use``/``tool_result`` pairing, a thinking block whose signature does not match
what the provider signed, and a tool loop in progress whose thinking was dropped."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

from .anthropic_compaction import compaction_problems
from .anthropic_prompt import MAX_BREAKPOINTS, prompt_of

NONCE_BYTES = 12

Problem = tuple[str, str]  # (kind, the provider's error message)


def anthropic_error(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


class ThinkingSigner:
    """Signs the thinking text of answers and recognises an unmodified thinking block sent
    back: the signature is base64 of a random nonce and the HMAC-SHA256 of nonce and text under
    a per-server key, so two blocks never share a signature, even with the same (or omitted)
    text."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)

    def _mac(self, nonce: bytes, thinking: str) -> bytes:
        return hmac.new(self._key, nonce + thinking.encode(), hashlib.sha256).digest()

    def sign(self, thinking: str) -> str:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return base64.b64encode(nonce + self._mac(nonce, thinking)).decode()

    def valid(self, thinking: Any, signature: Any) -> bool:
        if not isinstance(thinking, str) or not isinstance(signature, str):
            return False
        try:
            raw = base64.b64decode(signature, validate=True)
        except ValueError:
            return False
        nonce, mac = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        return len(nonce) == NONCE_BYTES and hmac.compare_digest(self._mac(nonce, thinking), mac)


def header_problem(headers: dict[str, str], require_version: bool) -> str | None:
    if require_version and not headers.get("anthropic-version"):
        return "anthropic-version: header is required"
    return None


def field_problem(body: Any, *, count_only: bool = False) -> str | None:
    """The first missing or mistyped required field (pydantic-style wording, as the API's)."""
    if not isinstance(body, dict):
        return "Input should be a valid dictionary"
    required = ("model", "messages") if count_only else ("model", "messages", "max_tokens")
    for name in required:
        if name not in body:
            return f"{name}: Field required"
    if not isinstance(body["messages"], list):
        return "messages: Input should be a valid list"
    if not count_only and (
        not isinstance(body["max_tokens"], int) or isinstance(body["max_tokens"], bool)
    ):
        return "max_tokens: Input should be a valid integer"
    return None


def breakpoint_problem(body: dict[str, Any]) -> str | None:
    found = prompt_of(body, whole=True).breakpoints
    if found > MAX_BREAKPOINTS:
        return (
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    return None


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _ids(message: Any, kind: str, key: str) -> list[str]:
    return [
        str(b.get(key))
        for b in _blocks(message)
        if isinstance(b, dict) and b.get("type") == kind and b.get(key) is not None
    ]


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _conversation(messages: list[Any]) -> list[tuple[int, Any]]:
    """The messages with their indices, ``role: system`` entries left out: Claude Code places
    them among the turns, and they do not separate a tool call from its result."""
    return [(i, m) for i, m in enumerate(messages) if _role(m) != "system"]


def _orphan_results(index: int, message: Any, previous: Any) -> list[Problem]:
    offered = set(_ids(previous, "tool_use", "id")) if _role(previous) == "assistant" else set()
    problems: list[Problem] = []
    for j, block in enumerate(_blocks(message)):
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        tool_use_id = block.get("tool_use_id")
        if tool_use_id not in offered:
            problems.append(
                (
                    "orphan_tool_result",
                    f"messages.{index}.content.{j}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {tool_use_id}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message.",
                )
            )
    return problems


def _unanswered_calls(
    index: int, message: Any, following: Any, following_index: int
) -> list[Problem]:
    calls = _ids(message, "tool_use", "id")
    if not calls:
        return []
    answered = set(_ids(following, "tool_result", "tool_use_id")) if _role(following) else set()
    missing = [c for c in calls if c not in answered]
    if missing:
        text = (
            f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message."
        )
        return [("unanswered_tool_use", text)]
    head = _blocks(following)[: len(calls)]
    if not all(isinstance(b, dict) and b.get("type") == "tool_result" for b in head):
        text = (
            f"messages.{following_index}: Did not find {len(calls)} `tool_result` block(s) at the "
            "beginning of this message. Messages following `tool_use` blocks must begin with "
            "a matching number of `tool_result` blocks."
        )
        return [("tool_result_not_first", text)]
    return []


def pairing_problems(messages: Any) -> list[Problem]:
    """Anthropic's tool-pairing rules: each ``tool_result`` answers a ``tool_use`` of the
    message just before, and each ``tool_use`` is answered at the start of the next message."""
    if not isinstance(messages, list):
        return []
    turns = _conversation(messages)
    problems: list[Problem] = []
    for pos, (index, message) in enumerate(turns):
        previous = turns[pos - 1][1] if pos > 0 else None
        following = turns[pos + 1][1] if pos + 1 < len(turns) else None
        if _role(message) == "user":
            problems.extend(_orphan_results(index, message, previous))
        elif _role(message) == "assistant":
            following_index = turns[pos + 1][0] if following is not None else index + 1
            problems.extend(_unanswered_calls(index, message, following, following_index))
    return problems


def signature_problems(messages: Any, signer: ThinkingSigner) -> list[Problem]:
    """Thinking blocks of assistant messages whose signature is not the provider's."""
    problems: list[Problem] = []
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if _role(message) != "assistant":
            continue
        for j, block in enumerate(_blocks(message)):
            if not isinstance(block, dict) or block.get("type") != "thinking":
                continue
            if not signer.valid(block.get("thinking"), block.get("signature")):
                text = f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                problems.append(("invalid_signature", text))
    return problems


_MISSING_THINKING = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


def open_loop_problems(body: dict[str, Any]) -> list[Problem]:
    """With thinking ``enabled``, the assistant message of the tool loop in progress (the last
    one, answered by the final user message's tool results) must start with its thinking."""
    thinking = body.get("thinking")
    messages = body.get("messages")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return []
    turns = _conversation(messages if isinstance(messages, list) else [])
    if len(turns) < 2 or not _ids(turns[-1][1], "tool_result", "tool_use_id"):
        return []
    index, assistant = turns[-2]
    blocks = _blocks(assistant)
    if _role(assistant) != "assistant" or not blocks:
        return []
    # A compaction block opening the turn comes before its thinking.
    opening = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "compaction")]
    if not opening:
        return []
    first = opening[0].get("type") if isinstance(opening[0], dict) else "text"
    if first in ("thinking", "redacted_thinking"):
        return []
    return [("missing_thinking", _MISSING_THINKING.format(index=index, found=first))]


def request_problems(body: dict[str, Any], signer: ThinkingSigner) -> list[Problem]:
    """Every rule the request breaks, in the order the provider reports them."""
    problems: list[Problem] = []
    breakpoints = breakpoint_problem(body)
    if breakpoints is not None:
        problems.append(("too_many_breakpoints", breakpoints))
    problems.extend(pairing_problems(body.get("messages")))
    problems.extend(signature_problems(body.get("messages"), signer))
    problems.extend(open_loop_problems(body))
    problems.extend(compaction_problems(body.get("messages")))
    return problems
