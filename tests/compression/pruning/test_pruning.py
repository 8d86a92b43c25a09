from __future__ import annotations

import copy
import json

from hypothesis import given
from hypothesis import strategies as st

from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.pruning.oneliners import describe_result
from compression.pruning.passes import (
    DUPLICATE_NOTE,
    IMAGE_NOTE,
    prune_messages,
    shrink_arguments,
)
from tests.compression.builders import call, calls, result, system, text_of, user

OPTIONS = CompressorOptions()
FILE = "def main():\n    return 1\n" * 40


def test_repeated_reads_keep_the_newest_copy() -> None:
    messages = [
        system(),
        user("look"),
        calls(call("a", "read_file", path="app.py")),
        result("a", FILE),
        calls(call("b", "read_file", path="app.py")),
        result("b", FILE),
    ]
    before = copy.deepcopy(messages)
    pruned = prune_messages(messages, 0, 6, OPTIONS, one_liners=False)
    assert messages == before
    assert text_of(pruned.messages[3]) == DUPLICATE_NOTE
    assert pruned.messages[5] is messages[5]
    assert pruned.pruned == {3}


def test_short_duplicates_are_kept() -> None:
    messages = [user("x"), calls(call("a")), result("a", "ok"), calls(call("b")), result("b", "ok")]
    assert prune_messages(messages, 0, 5, OPTIONS).pruned == frozenset()


def test_prune_touches_only_its_range() -> None:
    messages = [
        user("x"),
        calls(call("a", "bash", command="make")),
        result("a", "building\n" * 100),
        calls(call("b", "bash", command="make")),
        result("b", "building again\n" * 100),
    ]
    pruned = prune_messages(messages, 0, 3, OPTIONS)
    assert pruned.pruned == {2}
    assert pruned.messages[4] is messages[4]


def test_shell_one_liner_keeps_command_exit_code_and_error() -> None:
    output = (
        "collected 47 items\n" + "test ok\n" * 44 + "FAILED test_x - AssertionError\nexit code: 1"
    )
    line = describe_result("bash", json.dumps({"command": "pytest -q"}), output)
    assert line.startswith("[bash] ran `pytest -q` -> exit 1, 47 lines output")
    assert "error: FAILED test_x - AssertionError" in line


def test_shell_one_liner_reads_mini_swe_agent_return_codes() -> None:
    line = describe_result("terminal", '{"cmd": "ls"}', "<returncode>0</returncode>\n<output>a\nb")
    assert line == "[terminal] ran `ls` -> exit 0, 3 lines output"


def test_long_commands_are_shortened() -> None:
    line = describe_result("bash", json.dumps({"command": "echo " + "x" * 200}), "x")
    assert "..." in line and len(line) < 140


def test_file_one_liners() -> None:
    read = describe_result("read_file", '{"path": "config.py", "offset": 10}', "x" * 3400)
    assert read == "[read_file] read config.py from line 10 (3,400 chars)"
    write = describe_result("write_file", json.dumps({"path": "a.py", "content": "1\n2\n3"}), "ok")
    assert write == "[write_file] wrote to a.py (3 lines)"
    edit = describe_result(
        "str_replace_editor", '{"command": "str_replace", "path": "b.py"}', "edited" * 50
    )
    assert edit == "[str_replace_editor] str_replace in b.py (300 chars result)"
    view = describe_result("str_replace_editor", '{"command": "view", "path": "c.py"}', "y" * 99)
    assert view == "[str_replace_editor] viewed c.py (99 chars)"


def test_search_and_web_one_liners() -> None:
    grep = describe_result("grep", '{"pattern": "TODO", "path": "src"}', "a\nb\nc")
    assert grep == "[grep] search for 'TODO' in src -> 3 lines (5 chars)"
    search = describe_result("web_search", '{"query": "tiktoken offline"}', "r" * 1200)
    assert search == "[web_search] query='tiktoken offline' (1,200 chars result)"
    fetch = describe_result("web_fetch", '{"url": "https://example.com/a"}', "p" * 500)
    assert fetch == "[web_fetch] https://example.com/a (500 chars)"


def test_unknown_tools_get_key_values_and_errors() -> None:
    line = describe_result(
        "book_reservation",
        json.dumps({"user_id": "mia_li_3668", "cabin": "economy", "notes": "n" * 100}),
        "Error: payment amount does not add up, total price is 305, but paid 255",
    )
    assert line.startswith("[book_reservation] user_id=mia_li_3668 cabin=economy notes=nnn")
    assert line.endswith(
        "; error: Error: payment amount does not add up, total price is 305, but paid 255"
    )


def test_one_liners_keep_the_first_exact_ids_the_line_does_not_name() -> None:
    record = json.dumps(
        {
            "reservation_id": "XEWRD9",
            "user_id": "james_lee_6136",
            "flights": [{"flight_number": f"HAT{n:03d}"} for n in range(40)],
        }
    )
    line = describe_result("get_reservation_details", '{"reservation_id": "XEWRD9"}', record)
    assert line.endswith("; refs: james_lee_6136, HAT000, HAT001, HAT002")
    output = "build log\n" * 400 + "artifact stored as build_7f3a91c2"
    shell = describe_result("bash", '{"command": "make"}', output)
    assert shell.endswith("-> exit ?, 401 lines output; refs: build_7f3a91c2")


def test_unparsable_arguments_still_describe_the_call() -> None:
    line = describe_result("custom", "not json", "r" * 300)
    assert line == "[custom] arguments=not json (300 chars result)"


def test_one_liner_uses_the_call_found_by_position_with_reused_ids() -> None:
    messages = [
        user("x"),
        calls(call("same", "bash", command="first")),
        result("same", "a" * 300),
        calls(call("same", "bash", command="second")),
        result("same", "b" * 300),
    ]
    pruned = prune_messages(messages, 0, 5, OPTIONS)
    assert "`first`" in text_of(pruned.messages[2])
    assert "`second`" in text_of(pruned.messages[4])


def test_long_arguments_stay_valid_json() -> None:
    arguments = json.dumps({"path": "big.py", "content": "x" * 5000, "nested": [{"s": "y" * 900}]})
    shrunk = shrink_arguments(arguments, 500)
    assert shrunk is not None and len(shrunk) < len(arguments)
    parsed = json.loads(shrunk)
    assert parsed["path"] == "big.py"
    assert (
        parsed["content"].startswith("x" * 200)
        and "4,800 of 5,000 chars omitted" in parsed["content"]
    )


def test_unparsable_or_short_arguments_are_left_alone() -> None:
    assert shrink_arguments("{broken" + "x" * 900, 500) is None
    assert shrink_arguments(json.dumps({"a": "b"}), 500) is None
    assert shrink_arguments(json.dumps({"n": list(range(400))}), 500) is None


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=400),
        lambda children: (
            st.lists(children, max_size=5)
            | st.dictionaries(st.text(max_size=8), children, max_size=5)
        ),
        max_leaves=30,
    )
)
def test_shrunk_arguments_always_parse(value: object) -> None:
    arguments = json.dumps(value, ensure_ascii=False)
    shrunk = shrink_arguments(arguments, 100)
    if shrunk is not None:
        json.loads(shrunk)
        assert len(shrunk) < len(arguments)


def image_result(call_id: str) -> Message:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": [
            {"type": "text", "text": "screenshot"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    }


def test_images_survive_only_on_the_newest_holders() -> None:
    messages: list[Message] = [user("shoot")]
    for index in range(5):
        messages += [calls(call(f"s{index}", "screenshot")), image_result(f"s{index}")]
    pruned = prune_messages(messages, 0, len(messages), CompressorOptions(keep_images=2))
    texts = [text_of(m) for m in pruned.messages if m["role"] == "tool"]
    assert [IMAGE_NOTE in t for t in texts] == [True, True, True, False, False]


def test_user_images_are_never_touched() -> None:
    photo: Message = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}],
    }
    pruned = prune_messages([photo, user("later")], 0, 2, CompressorOptions(keep_images=0))
    assert pruned.messages[0] is photo
