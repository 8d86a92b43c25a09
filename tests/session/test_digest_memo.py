"""A session's chained digests, reused for the messages its last request held as the same
objects: always what hashing every message gives."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compression import Message, chained_digests
from session.compaction import DigestMemo
from storage import SessionKey

KEY = SessionKey("scope", "s1")
OTHER = SessionKey("scope", "s2")

# Each step: keep a prefix of the last body (the same objects), then add new messages, some
# of them equal in content to earlier ones (new objects).
STEPS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=12), st.lists(st.text(max_size=5), max_size=4)),
    min_size=1,
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(STEPS, st.booleans())
def test_the_digests_equal_hashing_everything(steps: list[Any], interleave: bool) -> None:
    memo = DigestMemo(sessions=1)
    body: list[Message] = []
    for keep, added in steps:
        body = body[:keep] + [{"role": "user", "content": text} for text in added]
        assert memo.chained(KEY, body) == chained_digests(body)
        if interleave:  # another session pushes this one out of a one-session memo
            memo.chained(OTHER, [{"role": "user", "content": "x"}])


def test_a_grown_body_hashes_only_what_is_new() -> None:
    memo = DigestMemo()
    body: list[Message] = [{"role": "user", "content": f"m{i}"} for i in range(1000)]
    memo.chained(KEY, body)
    grown: list[Message] = [
        *body,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go"},
    ]
    before = memo.hashed
    assert memo.chained(KEY, grown) == chained_digests(grown)
    assert memo.hashed - before == 2
