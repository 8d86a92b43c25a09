"""Reference arms computed by counting, without a proxy: the full history, and observation
masking (JetBrains "The Complexity Trap": tool outputs older than the last M are replaced by a
placeholder; reasoning, actions and user turns stay). M=10 follows the paper's SWE-agent setup.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from bench.evaluation.corpus import Message, Session
from tests.simulator.tokens import message_tokens

MASK_KEEP = 10


def placeholder(message: Message) -> Message:
    content = message.get("content")
    lines = content.count("\n") + 1 if isinstance(content, str) else 0
    masked = dict(message)
    masked["content"] = f"[Old tool output omitted: {lines} lines]"
    return masked


@dataclass
class ArmSeries:
    """Tokens of every request an arm would send (one per replayed turn) and cache reuse."""

    tokens: list[int]
    cached_prefix: list[int]  # tokens shared with the previous request (prompt-cache hits)

    def total(self) -> int:
        return sum(self.tokens)

    def fits(self, window: int) -> int:
        return sum(1 for t in self.tokens if t <= window)


def full_history(session: Session) -> ArmSeries:
    """The client's own history at each turn; each request extends the previous one."""
    fixed = session.tools_tokens() + 3
    starts = [0, *accumulate(session.message_tokens())]
    tokens = [fixed + starts[p] for p in session.points()]
    return ArmSeries(tokens, [0, *tokens[:-1]])


def masked_view(session: Session, end: int, keep: int = MASK_KEEP) -> list[Message]:
    """What the masking agent sends for the prefix `messages[:end]`."""
    observed = [i for i in session.observations if i < end]
    hidden = set(observed[:-keep] if keep else observed)
    return [placeholder(m) if i in hidden else m for i, m in enumerate(session.messages[:end])]


def masking(session: Session, keep: int = MASK_KEEP) -> ArmSeries:
    """Token cost of the masking arm; its prefix breaks where an output was newly masked."""
    fixed = session.tools_tokens() + 3
    sizes = session.message_tokens()
    masked_sizes = {
        i: message_tokens(placeholder(session.messages[i])) for i in session.observations
    }
    tokens: list[int] = []
    cached: list[int] = []
    previous_hidden: set[int] = set()
    previous_end = 0
    for end in session.points():
        observed = [i for i in session.observations if i < end]
        hidden = set(observed[:-keep] if keep else observed)
        per_message = [masked_sizes[i] if i in hidden else sizes[i] for i in range(end)]
        tokens.append(fixed + sum(per_message))
        changed = min(hidden - previous_hidden, default=previous_end)
        shared = min(changed, previous_end)
        cached.append(fixed + sum(per_message[:shared]) if previous_end else 0)
        previous_hidden, previous_end = hidden, end
    return ArmSeries(tokens, cached)
