"""How deep a body nests, as the gateway measures it to tell a client's too-deep JSON from a
bug when orjson refuses to write a value back."""

from __future__ import annotations

import pytest

from proxy.gateway.gateway import nesting


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (b"1", 0),
        (b'"text"', 0),
        (b"[]", 1),
        (b"{}", 1),
        (b'{"a": [{"b": 1}, 2]}', 3),
        (b'[[], [[["deepest"]]], {"x": {}}]', 4),
        (b"not json", 0),
    ],
)
def test_nesting_counts_arrays_and_objects(raw: bytes, depth: int) -> None:
    assert nesting(raw) == depth


def test_nesting_measures_what_orjson_reads_without_recursion() -> None:
    levels = 1000  # orjson reads up to 1,024; a recursive walk would hit Python's limit
    assert nesting(b"[" * levels + b"]" * levels) == levels
