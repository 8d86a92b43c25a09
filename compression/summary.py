"""One summary call: the prompt, the call itself (the only I/O), and the gate on its reply.

The gate decides whether a reply may become a summary at all: empty text, truncated output
(finish_reason "length") or a refusal / error message instead of a summary count as a failed
call, so an error text is never committed as the history of a conversation.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from compression.engine import Summarizer, SummaryCall, SummaryReply, TokenCounter
from compression.failures import SummaryFailure, classify_error
from compression.prompts import (
    FIRST_PROMPT,
    FOCUS_LINE,
    SUMMARIZER_SYSTEM,
    TEMPLATE,
    UPDATE_PROMPT,
)

_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
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


def gate_reply(reply: SummaryReply, budget: int, counter: TokenCounter) -> str | SummaryFailure:
    """The summary body to commit, or why this reply is a failed call."""
    if reply.finish_reason == "length":
        return SummaryFailure("truncated", "the summary model stopped at its output limit")
    text = _THINK.sub("", reply.text or "").strip()
    if not text:
        return SummaryFailure("empty", "the summary model returned no text")
    if looks_like_failure(text):
        return SummaryFailure("other", "the summary model answered with a refusal or an error")
    return cut_to_budget(text, budget, counter)


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


def size_call(budget: int, window: int, input_max: int, prompt_tokens: int) -> CallSize:
    """Fit the call into the summary model's own window (a small window shrinks, not refuses)."""
    max_tokens = max(64, min(budget * 2, max(256, window // 4)))
    budget = max(48, min(budget, max_tokens * 3 // 4))
    room = window - max_tokens - prompt_tokens - window // 20
    return CallSize(budget, max_tokens, max(64, min(input_max, room)))


def prompt_overhead(counter: TokenCounter) -> int:
    """Tokens of the fixed prompt text around the turns."""
    template = TEMPLATE.format(budget="10,000") + FOCUS_LINE
    return counter.count_text(SUMMARIZER_SYSTEM + UPDATE_PROMPT + template) + 16
