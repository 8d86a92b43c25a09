"""OpenAI-compatible provider simulator for ctxgate's tests and benchmarks.

    from tests.simulator import Simulator, ModelSpec, Reply, Fail, Hang, Disconnect, Received

See README.md in this directory.
"""

from .agent import ScriptedAgent, is_claude_code_compaction
from .anthropic_prompt import count_messages_tokens
from .anthropic_rules import ThinkingSigner
from .dialects import overflow_error, requested_max_tokens, tool_pairing_problems
from .in_view import InViewModel, Need, step_result
from .models import (
    DIALECTS,
    Behaviour,
    Disconnect,
    Fail,
    Hang,
    ModelSpec,
    Received,
    Reply,
    StreamError,
)
from .replies import (
    END_OF_SUMMARY_MARKER,
    SUMMARY_HEADINGS,
    SUMMARY_MARKER,
    build_summary,
    default_reply,
    is_summary_request,
)
from .server import Simulator
from .shell_agent import ShellAgent
from .tokens import count_prompt_tokens, count_text, get_encoding

__all__ = [
    "DIALECTS",
    "END_OF_SUMMARY_MARKER",
    "SUMMARY_HEADINGS",
    "SUMMARY_MARKER",
    "Behaviour",
    "Disconnect",
    "Fail",
    "Hang",
    "InViewModel",
    "ModelSpec",
    "Need",
    "Received",
    "Reply",
    "ScriptedAgent",
    "ShellAgent",
    "Simulator",
    "StreamError",
    "ThinkingSigner",
    "build_summary",
    "count_messages_tokens",
    "count_prompt_tokens",
    "count_text",
    "default_reply",
    "get_encoding",
    "is_claude_code_compaction",
    "is_summary_request",
    "overflow_error",
    "step_result",
    "requested_max_tokens",
    "tool_pairing_problems",
]
