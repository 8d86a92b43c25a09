"""Context-overflow errors, per provider dialect, with the exact wording providers use
(see /work/shared/research/reliability.md §1.1-1.3)."""

from __future__ import annotations

from typing import Any

from .models import Fail, ModelSpec


def requested_max_tokens(body: Any) -> int | None:
    """The completion budget a request asks for (max_completion_tokens wins over max_tokens)."""
    if not isinstance(body, dict):
        return None
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _openai_error(message: str, type_: str, param: Any, code: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _anthropic_error(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def overflow_error(spec: ModelSpec, prompt: int, body: Any, raw_len: int) -> Fail | None:
    """The error the provider sends for this request, or None when it fits the window."""
    n = spec.window
    dialect = spec.dialect
    asked = requested_max_tokens(body)
    completion = asked if asked is not None else spec.default_max_tokens
    counted = completion if spec.counts_max_tokens else 0

    if dialect == "anthropic413" and raw_len > spec.body_limit:
        return Fail(
            413,
            _anthropic_error(
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes. "
                f"The maximum request size is {spec.body_limit} bytes for standard API endpoints.",
            ),
        )

    if prompt + counted <= n:
        return None

    if dialect == "openai":
        if counted:
            msg = (
                f"This model's maximum context length is {n} tokens. However, you requested "
                f"{prompt + counted} tokens ({prompt} in the messages, "
                f"{counted} in the completion). "
                "Please reduce the length of the messages or completion."
            )
        else:
            msg = (
                f"This model's maximum context length is {n} tokens. However, your messages "
                f"resulted in {prompt} tokens. Please reduce the length of the messages."
            )
        return Fail(
            400, _openai_error(msg, "invalid_request_error", "messages", "context_length_exceeded")
        )

    if dialect == "vllm":
        if prompt > n or not counted:
            msg = (
                f"This model's maximum context length is {n} tokens. However, your request has "
                f"{prompt} input tokens. Please reduce the length of the input messages."
            )
        else:
            msg = (
                f"'max_tokens' or 'max_completion_tokens' is too large: {counted}. This model's "
                f"maximum context length is {n} tokens and your request has {prompt} input tokens "
                f"({counted} > {n} - {prompt}). None"
            )
        return Fail(400, _openai_error(msg, "BadRequestError", None, 400))

    if dialect == "llamacpp":
        return Fail(
            400,
            {
                "error": {
                    "code": 400,
                    "message": (
                        f"request ({prompt} tokens) exceeds the available context size "
                        f"({n} tokens), try increasing it"
                    ),
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": prompt,
                    "n_ctx": n,
                }
            },
        )

    if dialect in ("anthropic", "anthropic413"):
        if prompt > n or not counted:
            msg = f"prompt is too long: {prompt} tokens > {n} maximum"
        else:
            msg = (
                f"input length and `max_tokens` exceed context limit: {prompt} + {counted} > {n}, "
                "decrease input length or `max_tokens` and try again"
            )
        return Fail(400, _anthropic_error("invalid_request_error", msg))

    if dialect == "deepseek":
        msg = (
            f"This model's maximum context length is {n} tokens. However, you requested "
            f"{prompt + counted} tokens ({prompt} in the messages, {counted} in the completion). "
            "Please reduce the length of the messages or completion."
        )
        return Fail(400, _openai_error(msg, "invalid_request_error", None, "invalid_request_error"))

    if dialect == "tgi":
        return Fail(
            422,
            {
                "error": (
                    f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= {n}. "
                    f"Given: {prompt} `inputs` tokens and {counted} `max_new_tokens`"
                ),
                "error_type": "validation",
            },
        )

    if dialect == "numberless":
        msg = (
            "Your input exceeds the context window of this model. "
            "Please adjust your input and try again."
        )
        return Fail(
            400, _openai_error(msg, "invalid_request_error", "input", "context_length_exceeded")
        )

    if dialect == "bare413":
        return Fail(413, None)

    raise AssertionError(f"unhandled dialect {dialect}")  # ModelSpec validates dialects


def tool_pairing_problems(messages: Any) -> list[tuple[int, str, str]]:
    """OpenAI's tool-pairing rules: every tool message answers a call of the assistant message
    just before it (tool messages may follow each other), and every assistant tool call is
    answered before the next non-tool message (or the end of the list).
    Returns (message index, kind, OpenAI's error text), kind "orphan_tool" or "unanswered_call"."""
    problems: list[tuple[int, str, str]] = []
    if not isinstance(messages, list):
        return problems
    pending: list[str] = []  # call ids of the current assistant message not yet answered
    owner: int | None = None  # index of that assistant message

    def close_open() -> None:
        if owner is not None and pending:
            problems.append(
                (
                    owner,
                    "unanswered_call",
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                    f"response messages: {', '.join(pending)}",
                )
            )

    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if owner is not None and call_id in pending:
                pending.remove(call_id)
            else:
                problems.append(
                    (
                        i,
                        "orphan_tool",
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.",
                    )
                )
            continue
        close_open()
        owner, pending = None, []
        calls = msg.get("tool_calls") if isinstance(msg, dict) else None
        if role == "assistant" and isinstance(calls, list) and calls:
            owner = i
            pending = [
                c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)
            ]
    close_open()
    return problems
