"""The engine that never compresses (`compression.engine: passthrough`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compression.engine import CompressionContext, CompressionResult
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.thresholds import Limits, limits_for


class PassthroughEngine:
    name = "passthrough"

    def __init__(self) -> None:
        self.options = CompressorOptions()

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> PassthroughEngine:
        if options:
            raise ValueError(
                f"the passthrough engine takes no options (got {', '.join(sorted(options))})"
            )
        return cls()

    def limits(self, context_length: int, max_output_tokens: int | None) -> Limits:
        return limits_for(self.options, context_length, max_output_tokens)

    async def compress(
        self, messages: Sequence[Message], ctx: CompressionContext
    ) -> CompressionResult:
        tokens = (
            ctx.current_tokens
            if ctx.current_tokens is not None
            else ctx.counter.count_messages(messages, ctx.tools)
        )
        return CompressionResult(
            messages=list(messages),
            outcome="skipped",
            state=ctx.state,
            tokens_before=tokens,
            tokens_after=tokens,
            error="compression is off (passthrough engine)",
        )
