"""Message validation: the fast path for common shapes agrees with the full check."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.doors.chat.request import _check_message, _check_message_fully
from session.errors import BadRequest

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x"])
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner)
)
good_calls = st.fixed_dictionaries(
    {"id": st.text(max_size=4), "function": st.fixed_dictionaries({"name": st.text(max_size=4)})}
)
calls = good_calls | st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=4) | scalars,
        "function": st.fixed_dictionaries({"name": st.text(max_size=4)}) | scalars,
    },
)
# Mostly well-formed messages, each field sometimes absent or of a wrong type: the shapes
# where a shortcut and the full check could disagree.
messages = st.fixed_dictionaries(
    {},
    optional={
        "role": roles | scalars,
        "content": st.text(max_size=8) | st.none() | st.lists(values, max_size=2) | values,
        "tool_call_id": st.text(max_size=4) | scalars,
        "tool_calls": st.lists(calls, max_size=3) | st.lists(calls | scalars, max_size=2) | scalars,
    },
)


def verdict(check: Any) -> str | None:
    try:
        check()
    except BadRequest as exc:
        return str(exc)
    return None


@settings(max_examples=1500, deadline=None)
@given(messages)
def test_the_fast_path_accepts_exactly_what_the_full_check_accepts(message: Any) -> None:
    fast = verdict(lambda: _check_message(3, message))
    full = verdict(
        lambda: _check_message_fully(
            "messages[3]", message, message.get("role"), message.get("content")
        )
    )
    assert fast == full
