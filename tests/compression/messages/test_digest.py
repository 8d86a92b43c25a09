"""Message digests: what counts as "the same message", and the chained prefix digests."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compression.messages.digest import (
    DIGEST_VERSION,
    EMPTY_PREFIX_DIGEST,
    _frames,
    canonical_form,
    chain_digest,
    chained_digests,
    message_digest,
    message_digests,
    prefix_digest,
)


def call(id_: str = "call_1", name: str = "read_file", args: str = '{"path":"a.py"}') -> Any:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


def assistant_calls(*calls: Any, **extra: Any) -> Any:
    return {"role": "assistant", "tool_calls": list(calls), **extra}


def test_digest_is_sha256_hex() -> None:
    d = message_digest({"role": "user", "content": "hi"})
    assert len(d) == 64
    int(d, 16)


def test_golden_value_changes_only_with_the_version() -> None:
    # If this fails, the normalisation changed: bump DIGEST_VERSION (stored checkpoints must
    # stop matching instead of matching wrongly), then update the value.
    assert DIGEST_VERSION == "ctxgate-digest-v1"
    assert message_digest({"role": "user", "content": "hello"}) == (
        "7aabd7906d76dca433040785a3dd2c0e7611c40738c75e2d67302bda0843f756"
    )


def test_key_order_is_ignored() -> None:
    a = {"role": "assistant", "content": "x", "tool_calls": [call()]}
    b = {
        "tool_calls": [
            {
                "function": {"arguments": '{"path":"a.py"}', "name": "read_file"},
                "type": "function",
                "id": "call_1",
            }
        ],
        "content": "x",
        "role": "assistant",
    }
    assert message_digest(a) == message_digest(b)


def test_key_order_inside_unknown_content_parts_is_ignored() -> None:
    a = {
        "role": "user",
        "content": [{"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}],
    }
    b = {
        "role": "user",
        "content": [{"input_audio": {"format": "wav", "data": "AA"}, "type": "input_audio"}],
    }
    assert message_digest(a) == message_digest(b)


def test_cache_control_and_image_detail_are_ignored() -> None:
    plain = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    }
    decorated = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"},
                "cache_control": {"type": "ephemeral"},
            },
        ],
    }
    assert message_digest(plain) == message_digest(decorated)


def test_sdk_volatile_top_level_fields_are_ignored() -> None:
    a = {"role": "assistant", "content": "done"}
    b = {"role": "assistant", "content": "done", "refusal": None, "annotations": [], "audio": None}
    assert message_digest(a) == message_digest(b)


def test_content_none_absent_and_empty_are_equal_for_tool_call_messages() -> None:
    absent = assistant_calls(call())
    none = assistant_calls(call(), content=None)
    empty = assistant_calls(call(), content="")
    empty_list = assistant_calls(call(), content=[])
    assert len({message_digest(m) for m in (absent, none, empty, empty_list)}) == 1


def test_stream_index_and_missing_type_of_tool_calls_are_ignored() -> None:
    streamed = assistant_calls({**call(), "index": 0})
    untyped = assistant_calls({k: v for k, v in call().items() if k != "type"})
    assert message_digest(streamed) == message_digest(assistant_calls(call()))
    assert message_digest(untyped) == message_digest(assistant_calls(call()))


def test_single_text_part_equals_plain_string() -> None:
    s = {"role": "user", "content": "hello"}
    parts = {"role": "user", "content": [{"type": "text", "text": "hello"}]}
    assert message_digest(s) == message_digest(parts)
    two = {
        "role": "user",
        "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}],
    }
    assert message_digest(two) != message_digest(s)


def test_different_tool_call_ids_differ() -> None:
    assert message_digest(assistant_calls(call("call_1"))) != message_digest(
        assistant_calls(call("call_2"))
    )
    assert message_digest({"role": "tool", "tool_call_id": "a", "content": "ok"}) != message_digest(
        {"role": "tool", "tool_call_id": "b", "content": "ok"}
    )


def test_every_meaningful_field_matters() -> None:
    base = {"role": "user", "content": "hi"}
    variants = [
        {"role": "system", "content": "hi"},
        {"role": "user", "content": "hi "},
        {"role": "user", "content": "hi", "name": "bob"},
        {"role": "user", "content": "hi", "tool_call_id": "x"},
        {**base, "function_call": {"name": "f", "arguments": "{}"}},
        assistant_calls(call(args='{"path": "a.py"}')),  # whitespace in arguments is meaning
        assistant_calls(call(name="write_file")),
        assistant_calls(call(), call("call_2")),
    ]
    digests = {message_digest(base)} | {message_digest(v) for v in variants}
    assert len(digests) == 1 + len(variants)
    assert message_digest(assistant_calls(call())) not in digests


def test_framing_is_unambiguous_across_field_boundaries() -> None:
    a = {"role": "user", "content": "ab", "name": "c"}
    b = {"role": "user", "content": "a", "name": "bc"}
    c = {"role": "usera", "content": "b", "name": "c"}
    assert len({message_digest(m) for m in (a, b, c)}) == 3


def test_dict_arguments_are_canonical_json() -> None:
    a = assistant_calls({"id": "1", "function": {"name": "f", "arguments": {"x": 1, "y": 2}}})
    b = assistant_calls({"id": "1", "function": {"name": "f", "arguments": {"y": 2, "x": 1}}})
    assert message_digest(a) == message_digest(b)


def test_garbage_never_raises() -> None:
    for weird in (
        "not a message",
        {"role": "user", "content": 42},
        {"role": "user", "content": [1, None, "x"]},
        {"role": "assistant", "tool_calls": "nope"},
        {"role": "assistant", "tool_calls": [None, {"function": "x"}]},
        {"role": "user", "content": "lone surrogate \ud800"},
    ):
        assert len(message_digest(weird)) == 64  # type: ignore[arg-type]


def test_digest_is_linear_and_json_roundtrip_stable() -> None:
    big = {"role": "tool", "tool_call_id": "c", "content": "x" * 1_000_000}
    assert message_digest(json.loads(json.dumps(big))) == message_digest(big)


# -- chains --------------------------------------------------------------------------------


def test_empty_prefix() -> None:
    assert chained_digests([]) == []
    assert prefix_digest([]) == EMPTY_PREFIX_DIGEST


def test_chain_definition() -> None:
    ms = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    out = chained_digests(ms)
    h0 = chain_digest(EMPTY_PREFIX_DIGEST, message_digest(ms[0]))
    assert out == [h0, chain_digest(h0, message_digest(ms[1]))]
    assert prefix_digest(ms) == out[-1]
    assert prefix_digest(ms[:1]) == out[0]


def test_precomputed_digests_give_the_same_chain() -> None:
    ms = [{"role": "user", "content": str(i)} for i in range(5)]
    ds = message_digests(ms)
    assert chained_digests(ms, digests=ds) == chained_digests(ms)
    assert prefix_digest(ms, digests=ds) == prefix_digest(ms)


def test_precomputed_digests_of_wrong_length_raise() -> None:
    import pytest

    with pytest.raises(ValueError):
        chained_digests([{"role": "user", "content": "x"}], digests=[])


def test_order_matters_in_a_chain() -> None:
    a, b = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}
    assert prefix_digest([a, b]) != prefix_digest([b, a])


_text = st.text(max_size=12)
_message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant"]), "content": _text}
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": st.one_of(st.none(), _text),
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {
                        "id": _text,
                        "type": st.just("function"),
                        "function": st.fixed_dictionaries({"name": _text, "arguments": _text}),
                    }
                ),
                max_size=3,
            ),
        }
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": _text, "content": _text}),
)
_messages = st.lists(_message, max_size=8)


@settings(max_examples=200, deadline=None)
@given(_messages, _messages)
def test_chain_prefix_property(a: list[Any], b: list[Any]) -> None:
    whole = chained_digests(a + b)
    assert whole[: len(a)] == chained_digests(a)
    assert prefix_digest(a) == (whole[len(a) - 1] if a else EMPTY_PREFIX_DIGEST)


@settings(max_examples=200, deadline=None)
@given(_messages)
def test_chain_survives_reserialisation(ms: list[Any]) -> None:
    shuffled = [dict(reversed(list(m.items()))) for m in json.loads(json.dumps(ms))]
    assert chained_digests(shuffled) == chained_digests(ms)


# Every shape a field may take, the odd ones included: the one-pass form of the common shapes
# must hash what the general framing hashes, and hand every other shape to it.
_loose = st.one_of(
    st.none(), st.just(""), st.text(max_size=6), st.integers(-2, 2), st.just([]), st.just({})
)
_function = st.one_of(
    st.fixed_dictionaries({}, optional={"name": _loose, "arguments": _loose | st.just({"a": 1})}),
    _loose,
)
_call = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"id": _loose, "type": _loose, "function": _function, "index": _loose}
    ),
    _loose,
)
_text_part = st.fixed_dictionaries({"type": st.just("text"), "text": _text})
_any_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "tool"]) | _loose,
        "content": _loose | st.lists(_text_part),
        "name": _loose,
        "tool_call_id": _loose,
        "tool_calls": st.lists(_call, max_size=3) | _loose,
        "function_call": _loose | st.fixed_dictionaries({"name": _text, "arguments": _text}),
        "refusal": _loose,
    },
)


@settings(max_examples=600, deadline=None)
@given(_any_message)
def test_the_one_pass_form_is_the_general_framing(message: Any) -> None:
    assert canonical_form(message) == b"".join(_frames(message))


def test_golden_values_of_a_tool_call_and_its_result() -> None:
    """Digests stored in checkpoints before the one-pass form: the same values still."""
    args = '{"user_id": "mia"}'
    calling = assistant_calls(call("call_1", "get_user", args), content=None)
    content = '{"name": "Mia Li"}'
    result = {"role": "tool", "tool_call_id": "call_1", "name": "get_user", "content": content}
    assert message_digest(calling) == (
        "4eccee06b834a644da432b6f3884d303431aee60f1cad914817e06f6a0092233"
    )
    assert message_digest(result) == (
        "99ca348d4f18e6a76c07f1a0e412decefb30e908fca84e2486407aa2a4426736"
    )
