"""ctxgate's compressor: pure message-list transforms plus one injected summary call.

    engine = load_engine("compressor", options)
    result = await engine.compress(view, CompressionContext(...))
    if result.outcome in ("compressed", "fallback"): commit result.messages / result.state

This package imports nothing from the proxy or storage, and no web, HTTP or database library.
"""

from compression.assembly.invariants import CompressionInvariantError, check_invariants
from compression.compressor import Compressor
from compression.engine import (
    CompressionContext,
    CompressionResult,
    ContextEngine,
    Outcome,
    Summarizer,
    SummaryCall,
    SummaryCallError,
    SummaryReply,
    TokenCounter,
    Trigger,
)
from compression.messages.toolpairs import sanitize_tool_pairs
from compression.messages.types import (
    ContentPart,
    FunctionCall,
    Message,
    Role,
    ToolCall,
    ToolSchema,
)
from compression.options import FAILURE_CLASSES, CompressorOptions
from compression.passthrough import PassthroughEngine
from compression.registry import ENGINES, engine_limits, load_engine
from compression.state import EngineState, blocked_reason, record_real_usage
from compression.summary.failures import ABORT_CLASSES, SummaryFailure, classify_error
from compression.summary.handoff import view_summaries
from compression.thresholds import (
    Limits,
    agent_threshold,
    effective_window,
    hygiene_due,
    limits_for,
)

__all__ = [
    "ABORT_CLASSES",
    "ENGINES",
    "FAILURE_CLASSES",
    "CompressionContext",
    "CompressionInvariantError",
    "CompressionResult",
    "Compressor",
    "CompressorOptions",
    "ContentPart",
    "ContextEngine",
    "EngineState",
    "FunctionCall",
    "Limits",
    "Message",
    "Outcome",
    "PassthroughEngine",
    "Role",
    "Summarizer",
    "SummaryCall",
    "SummaryCallError",
    "SummaryFailure",
    "SummaryReply",
    "TokenCounter",
    "ToolCall",
    "ToolSchema",
    "Trigger",
    "agent_threshold",
    "blocked_reason",
    "check_invariants",
    "classify_error",
    "effective_window",
    "engine_limits",
    "hygiene_due",
    "limits_for",
    "load_engine",
    "record_real_usage",
    "sanitize_tool_pairs",
    "view_summaries",
]
