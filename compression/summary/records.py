"""What the summary model reads: the middle of the view as labelled records, bounded.

Each message becomes a record (role, text, tool calls, results); long texts keep their head
and tail. When the records exceed the input budget, the oldest tool results are replaced by
their one-liners first, then the middle of the whole text is elided, so the summary call can
never overflow the summary model's own window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compression.messages.content import clip_middle, content_text
from compression.messages.toolpairs import ToolPairing, call_parts, tool_calls_of
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.summary.handoff import handoff_text, parse_handoff, without_restatement
from compression.verbatim.observations import is_observation

ARGUMENT_CLIP_CHARS = 1500
HEAD_SHARE = 0.73  # of a clipped message: the head carries the command, the tail the outcome


@dataclass(frozen=True, slots=True)
class Record:
    text: str
    result_of: int | None = None  # view index of a tool result, which has a one-line stand-in


def render_records(
    original: Sequence[Message],
    pruned: Sequence[Message],
    start: int,
    end: int,
    pairing: ToolPairing,
    options: CompressorOptions,
) -> list[Record]:
    """Records of `pruned[start:end]`; one-liners are built from the unpruned originals."""
    records: list[Record] = []
    for index in range(start, end):
        record = _record(index, original, pruned[index], pairing, options)
        if record is not None:
            records.append(record)
    return records


def _record(
    index: int,
    original: Sequence[Message],
    message: Message,
    pairing: ToolPairing,
    options: CompressorOptions,
) -> Record | None:
    role = str(message.get("role") or "unknown")
    summary = handoff_text(message)
    if summary is not None:
        parsed = parse_handoff(summary)
        text = without_restatement(parsed.remainder) if parsed is not None else ""
        if not text.strip():
            return None  # the previous summary itself is given to the model separately
    else:
        text = content_text(message)
        text = without_restatement(text) if role == "user" else text
    text = clip_middle(text, options.summary_message_max_chars, HEAD_SHARE)
    if role == "tool":
        name = _tool_name(original, index, pairing, message)
        return Record(f"[#{index} TOOL RESULT {name}]\n{text}", index)
    # Text-action agents get their command output back as a user message: labelled USER, the
    # summary model would file a test log under what the user asked for.
    label = "TOOL OUTPUT" if role == "user" and is_observation(original, index) else role.upper()
    lines = [f"[#{index} {label}]"]
    if text:
        lines.append(text)
    for call in tool_calls_of(message):
        called, arguments = call_parts(call)
        clipped = clip_middle(arguments or "", ARGUMENT_CLIP_CHARS, 0.8)
        lines.append(f"-> calls {called or 'unknown'}({clipped})")
    return Record("\n".join(lines))


def _tool_name(
    original: Sequence[Message], index: int, pairing: ToolPairing, message: Message
) -> str:
    found = pairing.owner.get(index)
    if found is not None:
        called = call_parts(tool_calls_of(original[found[0]])[found[1]])[0]
        if called:
            return called
    name = message.get("name")
    return name if isinstance(name, str) else "tool"


def fit_records(
    records: Sequence[Record],
    cap_tokens: int,
    tokens_per_char: float,
    one_line: Callable[[int], str],
) -> str:
    """Join the records within `cap_tokens`: one-liners for the oldest results, then elide."""
    cap_chars = max(200, int(cap_tokens / tokens_per_char))
    texts = [record.text for record in records]
    total = sum(len(text) + 2 for text in texts)
    for position, record in enumerate(records):
        if total <= cap_chars:
            break
        if record.result_of is None:
            continue
        short = f"[#{record.result_of} TOOL RESULT] {one_line(record.result_of)}"
        if len(short) < len(record.text):
            total -= len(record.text) - len(short)
            texts[position] = short
    joined = "\n\n".join(texts)
    if len(joined) <= cap_chars:
        return joined
    keep = max(cap_chars - 120, 0)
    head = int(keep * 0.45)
    tail = keep - head
    omitted = len(joined) - head - tail
    marker = (
        f"\n…[summary input truncated: {omitted:,} chars omitted from the middle to keep "
        "this prompt bounded]…\n"
    )
    return joined[:head] + marker + (joined[len(joined) - tail :] if tail else "")


def bounded_previous(previous: str | None, cap_tokens: int, tokens_per_char: float) -> str | None:
    if not previous:
        return None
    return clip_middle(previous, max(200, int(cap_tokens / tokens_per_char)), 0.6)
