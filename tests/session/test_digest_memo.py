"""A session's chained digests, reused for the messages its last request held as the same
objects: always what hashing every message gives."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compression import Message, chained_digests, seen_messages
from session.compaction import HASHED_ON_LOOP, DigestMemo
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


class _Watched(dict[str, Any]):
    """A message that notes the thread each read of it ran in."""

    threads: set[int] = set()

    def get(self, key: str, default: Any = None) -> Any:
        _Watched.threads.add(threading.get_ident())
        return super().get(key, default)


def test_a_long_first_seen_history_is_hashed_off_the_event_loop() -> None:
    memo = DigestMemo()
    body: list[Message] = [
        _Watched(role="user", content=f"m{i}")  # type: ignore[misc]
        for i in range(HASHED_ON_LOOP)
    ]
    grown: list[Message] = [*body, _Watched(role="user", content="go")]  # type: ignore[list-item]
    expected, expected_grown = chained_digests(body), chained_digests(grown)
    loop_thread = threading.get_ident()  # asyncio.run's loop runs in this thread
    _Watched.threads.clear()
    assert asyncio.run(memo.chained_off_loop(KEY, body)) == expected
    assert _Watched.threads and loop_thread not in _Watched.threads
    # Grown by one message: that one is hashed where the loop runs, the rest reused.
    _Watched.threads.clear()
    before = memo.hashed
    assert asyncio.run(memo.chained_off_loop(KEY, grown)) == expected_grown
    assert memo.hashed - before == 1
    assert _Watched.threads == {loop_thread}


def test_a_body_edited_from_the_one_before_hashes_only_its_edit() -> None:
    """A new session whose body is the last request's with one message edited (the same
    objects around it, as a body parsed as an edit of the one before keeps them): only the
    edited message is hashed, whatever session sent the body before."""
    memo, seen = DigestMemo(), seen_messages()
    body: list[Message] = [{"role": "user", "content": f"m{i}"} for i in range(50)]
    memo.chained(KEY, body)
    edited: list[Message] = [body[0], {"role": "user", "content": "m1, edited"}, *body[2:]]
    before = seen.hashed
    assert memo.chained(OTHER, edited) == chained_digests(edited)
    assert seen.hashed - before == 1
    # Equal content in new objects is hashed again: identity, not equality, is what is kept.
    copied: list[Message] = [dict(m) for m in edited]  # type: ignore[misc]
    before = seen.hashed
    assert memo.chained(SessionKey("scope", "s3"), copied) == chained_digests(copied)
    assert seen.hashed - before == len(copied)
