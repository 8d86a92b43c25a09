"""`evolved`: the copy of a frozen value made on every request is `dataclasses.replace`'s."""

import dataclasses
from typing import Any

import pytest

from storage import SessionKey, SessionRecord, UsageRecord, evolved


def _row() -> SessionRecord:
    return SessionRecord(
        scope="scope-a",
        key="k",
        model="gpt-test",
        created_at=1.0,
        updated_at=2.0,
        last_prompt_tokens=None,
        last_completion_tokens=None,
        last_message_count=None,
        last_usage_estimated=False,
        last_usage_at=None,
        request_count=3,
        compression_count=0,
        total_prompt_tokens=10,
        total_completion_tokens=4,
        engine_state={"strikes": 1},
        parent_key=None,
        child_key=None,
        last_compression_at=None,
        root_key="k",
    )


def test_evolved_is_replace() -> None:
    row = _row()
    changes: dict[str, Any] = {"model": "other", "request_count": 4, "last_prompt_tokens": 900}
    copy = evolved(row, **changes)
    assert copy == dataclasses.replace(row, **changes)
    assert copy is not row and row.model == "gpt-test"  # the original is untouched
    assert evolved(row) == row
    usage = UsageRecord(SessionKey("s", "k"), "m", 5, 6, 7, at=1.0)
    assert evolved(usage, at=2.0) == dataclasses.replace(usage, at=2.0)


def test_evolved_refuses_a_field_the_value_lacks() -> None:
    with pytest.raises(TypeError):
        evolved(_row(), no_such_field=1)


@dataclasses.dataclass(frozen=True)
class _KeywordOnly:
    a: int
    b: int = dataclasses.field(default=0, kw_only=True)


@dataclasses.dataclass(frozen=True)
class _Derived:
    a: int
    b: int = dataclasses.field(init=False, default=5)


def test_evolved_leaves_other_shapes_to_replace() -> None:
    assert evolved(_KeywordOnly(1, b=2), b=3) == _KeywordOnly(1, b=3)
    assert evolved(_Derived(1), a=2) == _Derived(2)
    with pytest.raises(TypeError):
        evolved(_KeywordOnly(1), c=1)
