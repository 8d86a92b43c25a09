"""A request's tool schemas are counted once per list object: a conversation's grown bodies
share their tools list with the body they grew from; a new list is counted afresh."""

from __future__ import annotations

import copy
from typing import Any

from compression.counting.tokens import TOOL_LISTS_HELD, TiktokenCounter

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "Looks a thing up. " * 10,
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    }
    for i in range(8)
]


class NotingTools(TiktokenCounter):
    """The tiktoken counter, noting every tools list it writes out and counts."""

    def __init__(self) -> None:
        super().__init__("o200k_base")
        self.written = 0

    def _count_tools(self, tools: Any) -> int:
        self.written += 1
        return super()._count_tools(tools)


def test_the_same_list_is_counted_once_and_a_new_one_afresh() -> None:
    counter, plain = NotingTools(), TiktokenCounter("o200k_base")
    expected = plain.count_tools(TOOLS)
    assert counter.count_tools(TOOLS) == expected
    assert counter.count_messages([], TOOLS) == counter.count_messages([]) + expected
    assert counter.written == 1
    fewer = copy.deepcopy(TOOLS[:3])  # a new list: its own count, whatever came before
    assert counter.count_tools(fewer) == plain.count_tools(fewer) < expected
    assert counter.written == 2


def test_lists_beyond_those_held_are_counted_again_with_the_same_figure() -> None:
    counter = NotingTools()
    lists = [copy.deepcopy(TOOLS[: 1 + i % 8]) for i in range(TOOL_LISTS_HELD + 4)]
    first = [counter.count_tools(tools) for tools in lists]
    assert [counter.count_tools(tools) for tools in lists] == first
    assert len(lists) < counter.written <= 2 * len(lists)
