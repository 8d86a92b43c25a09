"""One summary call: the prompt, the call itself (the only I/O), and the gate on its reply.

The gate decides whether a reply may become a summary at all: empty text or a refusal / error
message instead of a summary count as a failed call, so an error text is never committed as the
history of a conversation. Output cut at the model's limit (finish_reason "length") is kept up
to its last complete line, marked as truncated: a small summary model often runs out of output
tokens, and discarding its work would leave such a session unable to compress at all.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from compression.counting.calibration import Calibration
from compression.engine import Summarizer, SummaryCall, SummaryReply, TokenCounter
from compression.summary.failures import SummaryFailure, classify_error
from compression.summary.prompts import (
    FIRST_PROMPT,
    FOCUS_LINE,
    SUMMARIZER_SYSTEM,
    TEMPLATE,
    UPDATE_PROMPT,
)

_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
# A reply cut at its output limit can stop inside its reasoning block.
_OPEN_THINK = re.compile(r"<think(?:ing)?>.*\Z", re.DOTALL | re.IGNORECASE)
_HEADING = re.compile(r"^\s*(#{1,6}\s|\*\*[^*]+\*\*:?\s*$)")
_SENTENCE_END = re.compile(r"[.!?](?=\s)")
_REFUSAL = re.compile(
    r"^(i'?m sorry|i am sorry|sorry,|i can(?:no|')t|i am unable|i'm unable|as an ai|"
    r"i apologi[sz]e|unfortunately,? i)",
    re.IGNORECASE,
)
_ERROR = re.compile(
    r"^(error\b|\{\s*\"error\"|traceback \(most recent call last\)|internal server error|"
    r"bad gateway|service unavailable|rate limit|<!doctype html|<html)",
    re.IGNORECASE,
)
FAILURE_TEXT_MAX_CHARS = 800
# Tokens of an unknown summary model per counted token, until its usage says otherwise: a
# llama-family tokenizer (SmolLM2, measured) counts ~1.21x tiktoken; 1.25 leaves some room.
UNKNOWN_TOKENIZER_MARGIN = 1.25


@dataclass(frozen=True, slots=True)
class SummaryPrompt:
    turns: str
    previous: str | None
    budget: int
    focus: str | None = None


def build_call(prompt: SummaryPrompt, max_tokens: int, model: str | None) -> SummaryCall:
    template = TEMPLATE.format(budget=f"{prompt.budget:,}")
    if prompt.focus:
        template += FOCUS_LINE.format(focus=prompt.focus)
    if prompt.previous:
        text = UPDATE_PROMPT.format(previous=prompt.previous, turns=prompt.turns, template=template)
    else:
        text = FIRST_PROMPT.format(turns=prompt.turns, template=template)
    return SummaryCall(
        messages=[
            {"role": "system", "content": SUMMARIZER_SYSTEM},
            {"role": "user", "content": text},
        ],
        max_tokens=max_tokens,
        model=model,
    )


async def request_summary(
    summarize: Summarizer, call: SummaryCall, timeout: float | None
) -> SummaryReply | SummaryFailure:
    try:
        if timeout is None:
            return await summarize(call)
        return await asyncio.wait_for(summarize(call), timeout)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # the summarizer is foreign code at the I/O edge
        return classify_error(error)


@dataclass(frozen=True, slots=True)
class GatedSummary:
    body: str
    truncated: bool = False  # cut at the model's output limit; kept to its last complete line


def gate_reply(
    reply: SummaryReply, budget: int, counter: TokenCounter
) -> GatedSummary | SummaryFailure:
    """The summary body to commit, or why this reply is a failed call."""
    truncated = reply.finish_reason == "length"
    text = _OPEN_THINK.sub("", _THINK.sub("", reply.text or "")).strip()
    if not text:
        return SummaryFailure("empty", "the summary model returned no text")
    if truncated:
        text = complete_part(text)
        if not text:
            return SummaryFailure(
                "truncated", "the summary model stopped at its output limit within its first line"
            )
    if looks_like_failure(text):
        return SummaryFailure("other", "the summary model answered with a refusal or an error")
    return GatedSummary(cut_to_budget(text, budget, counter), truncated)


def complete_part(text: str) -> str:
    """A cut-off reply up to its last complete line, without a heading left with no body.

    The last line is dropped even when it looks finished: the output limit can fall on a line
    end as well as anywhere else. A reply of a single unfinished line keeps its complete
    sentences.
    """
    end = text.rfind("\n")
    if end < 0:
        found = list(_SENTENCE_END.finditer(text))
        return text[: found[-1].end()].strip() if found else ""
    lines = text[:end].rstrip().splitlines()
    while lines and (not lines[-1].strip() or _HEADING.match(lines[-1])):
        lines.pop()
    return "\n".join(lines).strip()


def looks_like_failure(text: str) -> bool:
    if "##" in text or len(text) > FAILURE_TEXT_MAX_CHARS:
        return False
    return bool(_REFUSAL.match(text) or _ERROR.match(text))


def cut_to_budget(text: str, budget: int, counter: TokenCounter) -> str:
    """Cut an over-long summary to its budget at a line boundary."""
    if counter.count_text(text) <= budget:
        return text
    lines = text.splitlines()
    low, high = 0, len(lines)
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count_text("\n".join(lines[:middle])) <= budget:
            low = middle
        else:
            high = middle - 1
    if low > 0:
        return "\n".join(lines[:low]).rstrip()
    ratio = budget / max(counter.count_text(lines[0]), 1)
    return lines[0][: max(1, int(len(lines[0]) * ratio))]


@dataclass(frozen=True, slots=True)
class CallSize:
    budget: int  # summary tokens asked for in the prompt
    max_tokens: int  # output limit of the call
    input_tokens: int  # room for the turns and the previous summary


def size_call(
    budget: int, window: int, input_max: int, prompt_tokens: int, ratio: float = 1.0
) -> CallSize:
    """Fit the call into the summary model's own window (a small window shrinks, not refuses).

    `prompt_tokens` and the returned `input_tokens` are in our counter's tokens; `window` and
    `max_tokens` are the summary model's own. `ratio` (its tokens per counted token) converts:
    a llama-family tokenizer needs ~1.2 tokens where tiktoken counts one.
    """
    max_tokens = max(64, min(budget * 2, max(256, window // 4)))
    budget = max(48, min(budget, max_tokens * 3 // 4))
    room = int((window - max_tokens - window // 20) / max(ratio, 0.1)) - prompt_tokens
    return CallSize(budget, max_tokens, max(64, min(input_max, room)))


def summary_ratio(known: float | None, learned: Calibration) -> float:
    """Summary-model tokens per counted token: measured on its own summary prompts, else the
    caller's calibration of that model, else a margin for an unknown tokenizer."""
    if learned.samples > 0:
        return learned.ratio
    if known is not None and known > 0:
        return known
    return UNKNOWN_TOKENIZER_MARGIN


def prompt_overhead(counter: TokenCounter) -> int:
    """Tokens of the fixed prompt text around the turns."""
    template = TEMPLATE.format(budget="10,000") + FOCUS_LINE
    return counter.count_text(SUMMARIZER_SYSTEM + UPDATE_PROMPT + template) + 16
