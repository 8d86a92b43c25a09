"""The newest read of each file, kept in view for the edits that depend on it."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.summary.handoff import Handoff, parse_handoff, render_handoff
from compression.summary.prompts import (
    FILES_HEADER,
    RECALLED_CLOSE,
    RECALLED_OPEN,
    USER_CLOSE,
    USER_OPEN,
)
from compression.verbatim.fileops import file_ops
from compression.verbatim.reads import (
    SUPERSEDED_NOTE,
    FileRead,
    newest_reads,
    priority,
    read_candidates,
    select_files,
    superseded,
)
from tests.compression.builders import CORPUS, context, corpus_conversations, system, text_of, user
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer

COUNT = CharCounter().count_text
FILE_SHARE = CompressorOptions().file_share


def file_text(name: str, lines: int = 40) -> str:
    return "\n".join(f"{n:4}\t{name}_line_{n} = compute_{name}({n})" for n in range(1, lines + 1))


def read(call_id: str, path: str, text: str) -> list[Message]:
    """Claude Code's Read tool, and what it returned."""
    return _tool(call_id, "Read", {"file_path": path}, text)


def edit(call_id: str, path: str) -> list[Message]:
    arguments = {"file_path": path, "old_string": "a = 1", "new_string": "a = 2"}
    return _tool(call_id, "Edit", arguments, "The file has been updated.")


def shell(call_id: str, command: str, output: str) -> list[Message]:
    return _tool(call_id, "Bash", {"command": command}, output)


def _tool(call_id: str, name: str, arguments: dict[str, str], output: str) -> list[Message]:
    ask: Message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return [ask, {"role": "tool", "tool_call_id": call_id, "content": output}]


def session(*turns: list[Message]) -> list[Message]:
    messages = [system(), user("Fix the failing tests in src/.")]
    for turn in turns:
        messages += turn
    return messages


# --- which read is the newest, and what goes first ---------------------------------------------


def test_the_newest_read_of_each_file_is_found_with_what_followed_it() -> None:
    messages = session(
        read("c1", "src/a.py", file_text("old_a")),
        read("c2", "src/b.py", file_text("b")),
        read("c3", "src/a.py", file_text("a")),
        edit("c4", "src/a.py"),
        shell("c5", "pytest -q", "3 passed"),
    )
    reads = {r.path: r for r in newest_reads(messages)}
    assert set(reads) == {"src/a.py", "src/b.py"}
    assert reads["src/a.py"].text == file_text("a") and reads["src/a.py"].edited
    assert reads["src/a.py"].at == 7 and reads["src/a.py"].touched == 9  # the edit's result
    assert not reads["src/b.py"].edited and reads["src/b.py"].touched == reads["src/b.py"].at


def test_a_read_the_agent_wrote_over_since_is_out_of_date() -> None:
    messages = session(
        read("c1", "src/a.py", file_text("a")),
        _tool("c2", "Write", {"file_path": "src/a.py", "content": "new"}, "File written."),
        read("c3", "src/b.py", file_text("b")),
    )
    assert [r.path for r in newest_reads(messages)] == ["src/b.py"]


def test_edited_and_revisited_files_go_first_newest_first() -> None:
    plain_old = FileRead("old.py", "x", at=2, touched=2, edited=False)
    plain_new = FileRead("new.py", "x", at=9, touched=9, edited=False)
    edited = FileRead("edited.py", "x", at=3, touched=5, edited=True)
    revisited = FileRead("seen.py", "x", at=4, touched=11, edited=False)
    order = [r.path for r in priority([plain_old, plain_new, edited, revisited])]
    assert order == ["seen.py", "edited.py", "new.py", "old.py"]


def test_only_reads_of_the_summarized_region_are_candidates() -> None:
    reads = [FileRead(p, "x", at, at, False) for p, at in (("a", 1), ("b", 5), ("c", 9))]
    assert [r.path for r in read_candidates(reads, 2, 9)] == ["b"]


# --- what fits ----------------------------------------------------------------------------------


def test_reads_are_carried_whole_while_they_fit_then_clipped_head_and_tail() -> None:
    first = FileRead("src/a.py", file_text("a", 30), at=3, touched=9, edited=True)
    second = FileRead("src/b.py", file_text("b", 30), at=5, touched=5, edited=False)
    size = COUNT(first.text)
    chosen = select_files([first, second], size + size // 2 + 60, COUNT)
    assert chosen.files[0] == ("src/a.py", first.text)  # edited: whole, first claim
    path, clipped = chosen.files[1]
    assert path == "src/b.py" and clipped != second.text
    assert clipped.startswith(second.text[:40]) and clipped.endswith(second.text[-40:])
    assert [c.at for c in chosen.clipped] == [5] and chosen.clipped[0].original == COUNT(
        second.text
    )


def test_a_read_held_verbatim_elsewhere_is_not_copied() -> None:
    held = FileRead("src/a.py", file_text("a"), at=3, touched=3, edited=False)
    chosen = select_files([held], 10_000, COUNT, present=(file_text("a") + "\nmore").__contains__)
    assert chosen.files == () and chosen.tokens == 0


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=400), min_size=0, max_size=8),
    budget=st.integers(min_value=0, max_value=3000),
)
def test_the_selection_never_exceeds_its_budget(sizes: list[int], budget: int) -> None:
    reads = [
        FileRead(f"f{i}.py", "x" * (size * 4), at=i, touched=i, edited=i % 2 == 0)
        for i, size in enumerate(sizes)
    ]
    chosen = select_files(reads, budget, COUNT)
    assert chosen.tokens <= budget
    assert [path for path, _ in chosen.files] == sorted(
        (path for path, _ in chosen.files), key=lambda p: int(p[1:-3])
    )
    for path, text in chosen.files:
        original = next(r.text for r in reads if r.path == path)
        assert text == original or len(text) < len(original)


# --- the handoff carries them and reads them back -----------------------------------------------


def test_carried_files_round_trip_through_the_handoff() -> None:
    files = (("src/a.py", file_text("a")), ("dir with space/b.md", "# Title\n\n<<<not a tag"))
    text = render_handoff(Handoff("body", ("fix it",), None, files=files))
    assert FILES_HEADER in text
    parsed = parse_handoff(text)
    assert parsed is not None
    assert parsed.handoff.files == files and parsed.handoff.user_messages == ("fix it",)
    assert parsed.handoff.body == "body"


def test_user_markers_inside_a_carried_file_are_not_user_messages() -> None:
    page = "<html>\n<user>\nnot a user message\n</user>\n</html>"
    text = render_handoff(Handoff("body", ("real ask",), None, files=(("t.html", page),)))
    parsed = parse_handoff(text)
    assert parsed is not None
    assert parsed.handoff.user_messages == ("real ask",)
    assert parsed.handoff.files == (("t.html", page),)


def test_a_handoff_in_the_earlier_markers_is_still_read_back() -> None:
    text = render_handoff(Handoff("body", ("first ask", "second\nask")))
    old = text.replace(f"{USER_OPEN}\n", "<<<user message>>>\n").replace(
        f"\n{USER_CLOSE}", "\n<<<end user message>>>"
    )
    assert old != text
    parsed = parse_handoff(old)
    assert parsed is not None and parsed.handoff.user_messages == ("first ask", "second\nask")


def test_a_read_carried_by_an_earlier_handoff_counts_until_a_newer_read() -> None:
    handoff = render_handoff(Handoff("body", files=(("src/a.py", "OLD"), ("src/b.py", "B"))))
    messages = [system(), user(handoff), *read("c1", "src/a.py", "NEW")]
    reads = {r.path: r for r in newest_reads(messages)}
    assert reads["src/a.py"].text == "NEW" and reads["src/a.py"].result
    assert reads["src/b.py"].text == "B" and not reads["src/b.py"].result


# --- older reads superseded ---------------------------------------------------------------------


def test_an_older_read_is_superseded_by_a_newer_whole_read_and_pairs_stay_valid() -> None:
    messages = session(
        read("c1", "src/a.py", file_text("old_a")),
        shell("c2", "cat src/a.py src/b.py", file_text("both")),
        read("c3", "src/a.py", file_text("a")),
    )
    out = superseded(messages, 0, file_ops(messages))
    assert text_of(out[3]) == SUPERSEDED_NOTE.format(path="src/a.py")
    assert out[5] is messages[5]  # reads two files: the newer read of one leaves it whole
    assert out[7] is messages[7]
    check_invariants(out)


# --- through the compressor ---------------------------------------------------------------------


async def test_the_newest_read_of_an_edited_file_survives_a_compression_verbatim() -> None:
    turns = [shell(f"h{n}", f"ls src/{n}", "listing " * 100) for n in range(4)]
    turns.append(read("r0", "src/core.py", file_text("core", 60)))
    for n in range(30):
        turns.append(shell(f"s{n}", f"grep -rn thing{n} src/", "noise " * 300))
    turns.append(edit("e1", "src/core.py"))
    turns += [shell(f"t{n}", f"pytest -k t{n}", "ok " * 200) for n in range(6)]
    messages = session(*turns)
    out = await Compressor(CompressorOptions()).compress(
        messages, context(summarize=ScriptedSummarizer(), context_length=16_000)
    )
    assert out.outcome == "compressed"
    view = "\n".join(text_of(m) for m in out.messages)
    assert file_text("core", 60) in view
    kept_noise = sum(text_of(m) == "noise " * 300 for m in out.messages)
    assert kept_noise < 10  # most of the middle went into the summary
    check_invariants(out.messages)


async def test_without_a_budget_share_no_file_is_carried() -> None:
    turns = [shell(f"h{n}", f"ls src/{n}", "listing " * 100) for n in range(4)]
    turns.append(read("r0", "src/core.py", file_text("core", 60)))
    turns += [shell(f"s{n}", f"grep thing{n}", "noise " * 300) for n in range(30)]
    out = await Compressor(CompressorOptions(file_share=0.0)).compress(
        session(*turns), context(summarize=ScriptedSummarizer(), context_length=16_000)
    )
    assert out.outcome == "compressed"
    assert file_text("core", 60) not in "\n".join(text_of(m) for m in out.messages)


# --- the recorded transcripts -------------------------------------------------------------------


def _edits_with_reads(history: Sequence[Message]) -> list[tuple[int, str]]:
    """(position of the edit's call, newest earlier read's text) for each edit with a read."""
    ops = file_ops(history)
    found = []
    for op in ops:
        if op.kind != "edit":
            continue
        earlier = [r for r in ops if r.kind == "read" and r.path == op.path and r.result]
        earlier = [r for r in earlier if r.result is not None and r.result < op.call]
        if earlier and earlier[-1].result is not None:
            text = text_of(history[earlier[-1].result])
            if text.strip():
                found.append((op.call, text))
    return found


@pytest.mark.skipif(not CORPUS.exists(), reason="the shared corpus is not present")
async def test_recorded_coding_transcripts_keep_the_read_each_edit_needs() -> None:
    """Each edit of the recorded coding transcripts, with the history before it forced through
    a compression at a window that makes it summarize most of it: the newest read of the
    edited file is in the compressed view whenever it fits the file budget."""
    engine = Compressor(CompressorOptions(file_share=FILE_SHARE))
    kept = total = 0
    for name, history in corpus_conversations():
        if name.startswith("tau"):
            continue
        for call, text in _edits_with_reads(history)[:6]:
            before = history[:call]
            window = max(8_000, CharCounter().count_text(json.dumps(before)) // 2)
            if CharCounter().count_text(text) > window * 0.5 * FILE_SHARE * 0.9:
                continue  # over the file share at this window: clipped, not whole
            ctx = context(summarize=ScriptedSummarizer(), context_length=window, force=True)
            out = await engine.compress(before, ctx)
            if out.outcome not in ("compressed", "fallback"):
                continue
            total += 1
            kept += text in "\n".join(text_of(m) for m in out.messages)
    print(f"newest read in view at edit: {kept}/{total}")
    assert total >= 10
    assert kept >= 0.95 * total


def test_a_read_that_ctxgate_recalled_passages_into_is_carried_without_them() -> None:
    placed = f"def total(): ...\n\n{RECALLED_OPEN}\nm4 (tool): old notes\n{RECALLED_CLOSE}"
    messages: list[Message] = [
        {"role": "user", "content": "Fix a.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"file_path": "a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": placed},
    ]
    [read] = newest_reads(messages)
    assert read.text == "def total(): ..."
