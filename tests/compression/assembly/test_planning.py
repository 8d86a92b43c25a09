from __future__ import annotations

from compression.assembly.planning import (
    ANCHOR_ROOM_SHARE,
    MARKER_TOKENS,
    Budgets,
    budgets_for,
    head_end,
    newest_reply,
    plan_cut,
)
from compression.counting.figures import PassFigures
from compression.messages.toolpairs import pair_tool_calls
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.thresholds import limits_for
from tests.compression.builders import call, calls, reply, result, system, tool_round, user
from tests.compression.counters import CharCounter


def budgets(tail: int, floor: int = 2, reach: int | None = None) -> Budgets:
    return Budgets(
        target=10**9, tail=tail, reach=reach or tail, carry=1_000, summary_cap=1_000, floor=floor
    )


def plan(messages: list[Message], head: int, b: Budgets) -> tuple[int, int, int | None, int | None]:
    figures = PassFigures.measure(messages, CharCounter(), None)
    cut = plan_cut(messages, figures, pair_tool_calls(messages), head, b, 0)
    return cut.head_end, cut.tail_start, cut.restate, cut.reply


def test_head_is_the_system_prompt_plus_first_turns_until_the_first_compression() -> None:
    messages = [
        system(),
        {"role": "developer", "content": "d"},
        user("a"),
        reply("b"),
        user("c"),
        reply("d"),
    ]
    assert head_end(messages, 3, decayed=False) == 5
    assert head_end(messages, 3, decayed=True) == 2
    assert head_end([user("a"), reply("b")], 0, decayed=False) == 0


def test_head_never_ends_inside_a_tool_group() -> None:
    messages = [
        system(),
        user("a"),
        calls(call("x"), call("y")),
        result("x", "1"),
        result("y", "2"),
        reply("done"),
    ]
    assert head_end(messages, 2, decayed=False) == 5


def test_tail_never_starts_with_a_text_agents_observation() -> None:
    messages: list[Message] = [system(), user("fix it")]
    for step in range(4):
        messages.append(reply(f"step {step}\n```bash\nmake {step}\n```"))
        messages.append(user(f"<returncode>0</returncode>\n<output>\n{'x' * 200}\n</output>"))
    # a budget that reaches only the last observation: its action comes along
    assert plan(messages, 1, budgets(tail=60, floor=1))[1] == len(messages) - 2


def test_tail_cut_moves_back_to_the_owner_of_reused_ids() -> None:
    messages: list[Message] = [system(), user("go")]
    messages += tool_round("call_1", "a" * 400)
    messages.append(calls(call("call_1"), call("call_2")))  # reused id, parallel calls
    messages += [result("call_1", "b" * 400), result("call_2", "c" * 40)]
    messages.append(user("next"))
    # a budget that reaches only the last result and the user message
    assert plan(messages, 1, budgets(tail=40, floor=2))[1] == 4


def test_tail_keeps_a_floor_of_messages_even_over_budget() -> None:
    messages = [system()] + [m for i in range(6) for m in (user(f"q{i}" * 200), reply("r" * 800))]
    _, start, _, _ = plan(messages, 1, budgets(tail=1, floor=4))
    assert len(messages) - start == 4


def test_the_newest_user_message_is_reached_within_the_reach() -> None:
    messages = [system(), user("old"), reply("ok"), user("newest ask")]
    for step in range(6):
        messages += tool_round(f"t{step}", "x" * 200)
    _, start, restate, _ = plan(messages, 1, budgets(tail=150, floor=2, reach=2_000))
    assert start == 2 and restate is None  # back to the newest reply, too


def test_the_newest_user_message_is_restated_beyond_the_reach() -> None:
    messages = [system(), user("old"), reply("ok"), user("newest ask")]
    for step in range(20):
        messages += tool_round(f"t{step}", "x" * 200)
    _, start, restate, answer = plan(messages, 1, budgets(tail=150, floor=2, reach=300))
    assert restate == 3 and start > 3
    assert answer == 2  # the newest reply is carried inside the summary


def test_newest_reply_skips_tool_calling_turns() -> None:
    messages = [user("a"), reply("answer"), calls(call("x"), text="checking"), result("x", "1")]
    assert newest_reply(messages) == 1


def test_everything_protected_means_an_empty_plan() -> None:
    messages = [system(), user("a"), reply("b")]
    head, start, _, _ = plan(messages, 1, budgets(tail=10_000, floor=8))
    assert start == head


def test_budgets_shrink_with_the_level_and_fit_small_windows() -> None:
    options = CompressorOptions()
    limits = limits_for(options, 128_000, None)
    levels = [budgets_for(options, limits, 5_000, level) for level in (0, 1, 2)]
    assert levels[0].tail == 10_000
    assert levels[0].tail > levels[1].tail > levels[2].tail
    assert [b.floor for b in levels] == [8, 4, 2]
    small = budgets_for(options, limits_for(options, 4_096, 512), 300, 0)
    assert small.tail + small.summary_cap + small.carry < small.target


def test_the_anchors_keep_a_share_of_the_room_the_users_words_cannot_take() -> None:
    """However much the user's words would take, the anchors keep their share of the room:
    a pass whose words fill the handoff would carry no ids, and no later one brings them back."""
    options = CompressorOptions()
    limits = limits_for(options, 16_384, None)
    for level in range(3):
        lean = budgets_for(options, limits, 3_300, level, users=0)
        full = budgets_for(options, limits, 3_300, level, users=100_000)
        room = lean.target - 3_300 - min(MARKER_TOKENS, lean.target // 10)
        assert full.anchors >= int(room * ANCHOR_ROOM_SHARE) > 0
        assert full.carry + full.files + int(room * ANCHOR_ROOM_SHARE) <= room


def test_the_original_request_claims_its_room_before_the_file_reads() -> None:
    """Where the system prompt leaves little room, the original request is carried whole
    before the file reads take their share (a file can be read again; a clipped task
    statement is what every later handoff reads back), and later messages still get a share
    of what is left."""
    options = CompressorOptions()
    limits = limits_for(options, 8_192, None)
    fixed, files, origin = 4_500, 5_000, 700
    without = budgets_for(options, limits, fixed, 2, origin, files)
    assert without.carry < origin  # the files first: the request would be clipped
    first = budgets_for(options, limits, fixed, 2, origin, files, origin)
    assert first.carry >= origin and first.files < without.files
    more = budgets_for(options, limits, fixed, 2, origin + 400, files, origin)
    assert more.carry > first.carry
    room = first.target - fixed - min(MARKER_TOKENS, first.target // 10)
    huge = budgets_for(options, limits, fixed, 2, 50_000, files, 50_000)
    assert huge.carry <= room  # a huge request claims a share of the room, not all of it
    assert huge.files > 0 and huge.anchors >= int(room * ANCHOR_ROOM_SHARE)
