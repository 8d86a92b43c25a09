"""ctxgate's compressor: pure message-list transforms plus one injected summary call.

    engine = load_engine("compressor", options)
    result = await engine.compress(view, CompressionContext(...))
    if result.outcome in ("compressed", "fallback"): commit result.messages / result.state

Its passes, one subpackage each, in the order a compression runs them:

- `compression.messages`: the chat-shaped wire types, reading content, tool pairs, digests;
- `compression.counting`: token estimates (tiktoken, offline), calibration, a pass's figures;
- `compression.assembly`: a pass's inputs and where to cut (planning), splicing the handoff
  in, the invariants;
- `compression.pruning`: deterministic prune passes over old tool output;
- `compression.verbatim`: what the handoff carries as it was (user words, file reads, pins,
  instructions, anchors, a client's canned opening);
- `compression.summary`: the summary call, its input and prompt, the handoff, handles, the
  mechanical fallback and the failure classes.

The engine's contract (`engine.py`), its options, thresholds, state, registry and the two
engines (`compressor.py`, `passthrough.py`) sit at the top. This module is the package's face:
the rest of the product imports only the names below. The package imports nothing from the
proxy, the session core or storage, and no web, HTTP or database library.
"""

from compression.assembly.invariants import CompressionInvariantError, check_invariants
from compression.assembly.planning import budgets_for
from compression.compressor import Compressor
from compression.counting.calibration import Calibration
from compression.counting.seen import SeenMessages, seen_messages
from compression.counting.tokens import IMAGE_PARTS, count_each, counter_for_model
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
from compression.messages.content import content_text
from compression.messages.digest import chain_digest, chained_digests, message_digest
from compression.messages.toolpairs import sanitize_tool_pairs, tool_calls_of
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
from compression.state import EngineState, blocked_reason, record_real_usage, with_failure
from compression.summary.failures import (
    ABORT_CLASSES,
    SummaryFailure,
    classify_error,
    cooldown_seconds,
)
from compression.summary.handles import (
    RECALL_TOOL,
    clipped_originals,
    handle,
    parse_handles,
    with_handles,
)
from compression.summary.handoff import handoff_text, parse_handoff, view_summaries
from compression.summary.prompts import RECALLED_CLOSE, RECALLED_OPEN, USER_CLOSE, USER_OPEN
from compression.thresholds import (
    Limits,
    agent_threshold,
    effective_window,
    hygiene_due,
    limits_for,
)
from compression.verbatim.anchors import find_anchors
from compression.verbatim.fileops import FileOp, file_ops
from compression.verbatim.preamble import preamble_end, system_end

__all__ = [
    "ABORT_CLASSES",
    "ENGINES",
    "FAILURE_CLASSES",
    "IMAGE_PARTS",
    "RECALLED_CLOSE",
    "RECALLED_OPEN",
    "RECALL_TOOL",
    "USER_CLOSE",
    "USER_OPEN",
    "Calibration",
    "CompressionContext",
    "CompressionInvariantError",
    "CompressionResult",
    "Compressor",
    "CompressorOptions",
    "ContentPart",
    "ContextEngine",
    "EngineState",
    "FileOp",
    "FunctionCall",
    "Limits",
    "Message",
    "Outcome",
    "PassthroughEngine",
    "Role",
    "SeenMessages",
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
    "budgets_for",
    "chain_digest",
    "chained_digests",
    "check_invariants",
    "classify_error",
    "clipped_originals",
    "content_text",
    "count_each",
    "cooldown_seconds",
    "counter_for_model",
    "effective_window",
    "engine_limits",
    "file_ops",
    "find_anchors",
    "handle",
    "handoff_text",
    "hygiene_due",
    "limits_for",
    "load_engine",
    "message_digest",
    "parse_handles",
    "parse_handoff",
    "preamble_end",
    "record_real_usage",
    "sanitize_tool_pairs",
    "seen_messages",
    "system_end",
    "tool_calls_of",
    "view_summaries",
    "with_failure",
    "with_handles",
]
