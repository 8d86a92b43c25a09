"""Scripted async summarizers: each call is recorded and answered from a script."""

from __future__ import annotations

import asyncio

from compression.engine import SummaryCall, SummaryReply

SUMMARY_BODY = (
    "## Historical Task Snapshot\nThe user asked for help.\n## Goal\nFinish the task.\n"
    "## Constraints & Preferences\nNone.\n## Completed Actions\n1. READ files — ok [tool: read]\n"
    "## Active State\nWorking.\n## Blocked\nNone.\n## Key Decisions\nNone.\n"
    "## Errors & Fixes\nNone.\n## Resolved Questions\nNone.\n## Relevant Files\nNone.\n"
    "## Critical Context\nNone."
)


class ScriptedSummarizer:
    """Answers each call with the next scripted reply (an exception is raised instead)."""

    def __init__(self, *script: SummaryReply | BaseException, default: str = SUMMARY_BODY) -> None:
        self.script = list(script)
        self.default = default
        self.calls: list[SummaryCall] = []

    async def __call__(self, call: SummaryCall) -> SummaryReply:
        self.calls.append(call)
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, BaseException):
                raise step
            return step
        return SummaryReply(text=self.default, finish_reason="stop")

    @property
    def prompt(self) -> str:
        """The user prompt of the last call."""
        content = self.calls[-1].messages[-1].get("content")
        assert isinstance(content, str)
        return content


class StalledSummarizer:
    """Never answers: waits on an event nobody sets (for the engine's own timeout)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, call: SummaryCall) -> SummaryReply:
        self.calls += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
