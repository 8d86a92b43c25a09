from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compression.summary.handoff import Handoff, parse_handoff, render_handoff
from compression.summary.prompts import ANCHORS_HEADER
from compression.verbatim.anchors import (
    GLOSS,
    GLOSS_SHARE,
    MAX_GLOSS_CHARS,
    SCAN_HEAD_CHARS,
    SEPARATOR,
    AnchorIndex,
    Collector,
    find_anchors,
    gloss,
    parse_anchors,
    render_anchors,
    select_anchors,
)
from compression.verbatim.labels import MAX_LABEL_CHARS, keyed, keyed_as, kind, label, says_more
from tests.compression.counters import CharCounter

COUNT = CharCounter().count_text


def test_ids_codes_paths_errors_and_urls_are_found_in_order() -> None:
    text = (
        '{"reservation_id": "XEWRD9", "user_id": "james_lee_6136", "flight": "HAT052", '
        '"payment_id": "gift_card_4643416"}\n'
        'File "/repo/src/app.py", line 3\nZeroDivisionError: division by zero\n'
        "see https://example.com/issues/12 and ./run.sh, config.yaml, commit 4f2a9c1e\n"
        "The deploy password hint is NEEDLE-0a1b2c3d4e."
    )
    assert find_anchors(text) == (
        "XEWRD9",
        "james_lee_6136",
        "HAT052",
        "gift_card_4643416",
        "/repo/src/app.py",
        "ZeroDivisionError",
        "https://example.com/issues/12",
        "./run.sh",
        "config.yaml",
        "4f2a9c1e",
        "NEEDLE-0a1b2c3d4e",
    )


def test_words_numbers_dates_and_fractions_are_not_anchors() -> None:
    text = (
        "Please book the flight on 2024-05-20 at 2024-05-07T19:17:06 for 255 dollars; "
        "n/a and/or 1/2 utf-8 snake_case_name value=12 </returncode> ok"
    )
    assert find_anchors(text) == ()


def test_parts_of_key_value_and_path_line_tokens_are_found() -> None:
    assert find_anchors("id=abc_12345 at src/app.py:12: raise ValueError") == (
        "abc_12345",
        "src/app.py",
        "ValueError",
    )


def test_a_long_text_is_scanned_at_its_head_and_tail() -> None:
    text = "head_id_001 " + "filler words " * 2_000 + "middle_id_002 " + "x " * 2_000
    text += "tail_id_003"
    assert len(text) > 2 * SCAN_HEAD_CHARS
    assert find_anchors(text) == ("head_id_001", "tail_id_003")


def test_a_value_belongs_to_the_best_tier_it_was_seen_in() -> None:
    collector = Collector(per_tier=10)
    collector.add(2, ["a_001", "b_002"])
    collector.add(0, ["b_002"])
    collector.add(1, ["a_001", "b_002", "c_003"])
    assert collector.candidates() == (["b_002"], ["a_001", "c_003"], [])


def test_a_full_tier_stops_scanning() -> None:
    collector = Collector(per_tier=2)
    collector.scan(2, "one_001 two_002 three_003")
    collector.scan(2, "four_004")
    assert collector.candidates()[2] == ["one_001", "two_002", "three_003"]
    assert not collector.wants(2) and collector.wants(0)


def test_each_tier_gets_its_share_then_the_leftovers_flow_down() -> None:
    users = [f"user_{n:03d}" for n in range(50)]
    tools = [f"tool_{n:03d}" for n in range(50)]
    index = select_anchors([users, [], tools], 100, COUNT, lambda _: False, line_room=0)
    assert index.agent == ()
    assert 0 < len(index.user) < 50 and 0 < len(index.tools) < 50
    cost = sum(COUNT(v + SEPARATOR) for tier in index.tiers() for v in tier)
    assert 90 <= cost <= 100
    assert index.user == tuple(users[: len(index.user)])  # newest first, in order


def test_what_the_view_holds_is_skipped() -> None:
    index = select_anchors([["a_001", "b_002"], [], []], 100, COUNT, {"a_001"}.__contains__)
    assert index.user == ("b_002",)


def test_render_and_parse_round_trip() -> None:
    index = AnchorIndex(("mia_li_3668",), (), ("/repo/a.py", "ZeroDivisionError"))
    text = render_anchors(index, ANCHORS_HEADER)
    assert text.splitlines()[1:] == [
        "- user: mia_li_3668",
        "- tools: /repo/a.py, ZeroDivisionError",
    ]
    assert parse_anchors(text.split("\n", 1)[1]) == index


def test_a_handoff_reads_its_anchors_back() -> None:
    index = AnchorIndex(("u_0001",), ("HAT136",), ("t_0002",))
    quoted = f"my notes:\n{ANCHORS_HEADER}\n- user: fake_0003"
    handoff = Handoff("## Goal\nShip.", (quoted,), "Done.", index)
    parsed = parse_handoff(render_handoff(handoff))
    assert parsed is not None and parsed.handoff == handoff
    assert parse_handoff(render_handoff(Handoff("## Goal\nShip."))).handoff.anchors == AnchorIndex()  # type: ignore[union-attr]


ANCHOR = st.from_regex(r"[A-Za-z][A-Za-z0-9_./-]{2,30}[0-9]", fullmatch=True)
TIER = st.lists(ANCHOR, max_size=30, unique=True)


@given(
    tiers=st.tuples(TIER, TIER, TIER),
    budget=st.integers(-10, 400),
    held=st.sets(ANCHOR, max_size=10),
)
def test_selection_stays_in_budget_in_order_and_skips_what_is_held(
    tiers: tuple[list[str], list[str], list[str]], budget: int, held: set[str]
) -> None:
    index = select_anchors(tiers, budget, COUNT, held.__contains__)
    chosen = [value for tier in index.tiers() for value in tier]
    # without lines to write, the names take the lines' room too
    total = max(budget, 0) + int(max(budget, 0) * GLOSS_SHARE)
    labels = sum(
        COUNT(f"{GLOSS}{label}\n- tools: ")
        for tier in index.tiers()
        for label in {kind(v) for v in tier}
    )
    used = sum(COUNT(v + SEPARATOR) for v in chosen) + labels
    assert used <= total or budget <= 0
    assert not set(chosen) & held
    said = index.glosses()
    assert set(said) == set(chosen)  # no bare names
    for picked, offered in zip(index.tiers(), tiers, strict=True):
        positions = [offered.index(value) for value in picked]
        for line in {said[value] for value in picked}:
            # anchors sharing a label are written together, newest first within it
            group = [p for p, value in zip(positions, picked, strict=True) if said[value] == line]
            assert group == sorted(group)
            start = positions.index(group[0])
            assert positions[start : start + len(group)] == group
        # a candidate passed over did not fit what was left (with its tier's dearest label)
        dearest = max(COUNT(f"{GLOSS}{k}\n- tools: ") for k in ("id", "file", "path"))
        for value in offered:
            if value not in held and value not in picked and budget > 0:
                assert COUNT(value + SEPARATOR) + dearest > total - used
    assert select_anchors(tiers, budget, COUNT, held.__contains__) == index  # deterministic


@given(tiers=st.tuples(TIER, TIER, TIER))
def test_any_index_round_trips_through_its_text(
    tiers: tuple[list[str], list[str], list[str]],
) -> None:
    index = AnchorIndex(*(tuple(tier) for tier in tiers))
    text = render_anchors(index, ANCHORS_HEADER)
    assert parse_anchors(text.split("\n", 1)[1] if "\n" in text else "") == index


@given(st.text(max_size=300))
def test_every_anchor_is_a_verbatim_substring(text: str) -> None:
    found = find_anchors(text)
    assert len(found) == len(set(found))
    assert all(value in text and SEPARATOR not in value for value in found)


# --- anchors with their meaning -----------------------------------------------------------


def test_each_anchor_comes_with_the_line_that_says_what_it_is() -> None:
    collector = Collector(50)
    collector.scan(
        2,
        "booking confirmed\nreservation_id: XEWRD9\nmax_retry_ms=3000 (from conf/app.yaml)\nXEWRD9",
    )
    found = collector.candidates()
    index = select_anchors(
        found, 400, COUNT, lambda _: False, collector.meaning, None, collector.labels
    )
    text = render_anchors(index, ANCHORS_HEADER)
    assert text.splitlines()[1:] == [
        "- tools: reservation_id: XEWRD9",  # `key: value` says what it is
        "- tools: conf/app.yaml — max_retry_ms=3000 (from conf/app.yaml)",
    ]
    assert parse_anchors(text.split("\n", 1)[1]) == index


def test_a_long_listing_keeps_its_names_and_the_best_ranked_carry_their_lines() -> None:
    """Tool output of 60 handler lines, and one id the user's words put in the working set:
    as many names as without lines (an id out of view is worse than one without its line),
    the best-ranked first with the line that says what it is, all within half as much again."""
    listing = "\n".join(
        f"src/app/module_32.py:{n}: handler_32_{n}(request) -> status {200 + n % 3}"
        for n in range(60)
    )
    collector = Collector(100)
    collector.scan(2, listing + "\nhandler_32_7 is the one that drops the header")
    found = collector.candidates()
    bare = select_anchors(found, 300, COUNT, lambda _: False)
    index = select_anchors(
        found,
        300,
        COUNT,
        lambda _: False,
        collector.meaning,
        lambda v: 0 if v == "handler_32_7" else 5,
    )
    assert len(index.tools) == len(bare.tools)
    lines = render_anchors(index, ANCHORS_HEADER).splitlines()[1:]
    assert lines[0] == (
        "- tools: handler_32_7 — src/app/module_32.py:7: handler_32_7(request) -> status 201"
    )
    assert COUNT("\n".join(lines)) <= 450 + 4 * len(lines)  # "- tools: " is the header's


def test_a_handoff_keeps_the_meaning_through_the_next_compression() -> None:
    index = AnchorIndex(("u_0001",), (), ("t_0002",), (("t_0002", "order t_0002: 3 lamps"),))
    parsed = parse_handoff(render_handoff(Handoff("## Goal\nShip.", anchors=index)))
    assert parsed is not None and parsed.handoff.anchors == index
    collector = Collector(10)
    collector.add(2, index.tools, meaning=index.glosses())
    assert collector.meaning == {"t_0002": "order t_0002: 3 lamps"}


GLOSS_TEXT = (
    st.text(st.characters(blacklist_characters="\n\r—"), min_size=1, max_size=40)
    .map(lambda t: " ".join(t.split()))
    .filter(bool)
)


@given(tiers=st.tuples(TIER, TIER, TIER), data=st.data())
def test_any_index_with_meaning_round_trips(
    tiers: tuple[list[str], list[str], list[str]], data: st.DataObject
) -> None:
    values = sorted({v for tier in tiers for v in tier})
    said = data.draw(
        st.dictionaries(st.sampled_from(values), GLOSS_TEXT) if values else st.just({})
    )
    tiers = tuple([v for v in tier if v not in seen(tiers, i)] for i, tier in enumerate(tiers))  # type: ignore[assignment]
    meaning = tuple((v, said[v]) for tier in tiers for v in tier if v in said)
    index = AnchorIndex(*(tuple(tier) for tier in tiers), meaning)
    text = render_anchors(index, ANCHORS_HEADER)
    assert parse_anchors(text.split("\n", 1)[1] if "\n" in text else "") == index


def seen(tiers: tuple[list[str], ...], upto: int) -> set[str]:
    return {v for tier in tiers[:upto] for v in tier}


# --- no bare names: a label for every anchor without its line ------------------------------


def test_a_label_is_the_key_the_words_before_or_the_kind() -> None:
    record = (
        '{"reservation_id": "4BMN53", "user_id": "mia_li_3668", '
        '"flights": [{"flight_number": "HAT009"'
    )
    cases = [
        (record, "mia_li_3668", "user_id"),
        (record, "HAT009", "flight_number"),
        ('"reservations": ["AB12CD", "XY34ZZ"]', "XY34ZZ", "reservations"),
        ("max_retry_ms=3000 for worker_pool_7", "worker_pool_7", "max_retry_ms"),
        ("Your reservation 4BMN53 is confirmed", "4BMN53", "reservation"),
        ("see https://x.org/a_12345 for more", "https://x.org/a_12345", "url"),
        ("/repo/src/app.py", "/repo/src/app.py", "file"),
        ("raised ZeroDivisionError", "ZeroDivisionError", "error"),
        ("4BMN53", "4BMN53", "id"),
        ("the old HAT083 or the HAT097", "HAT097", "old"),  # an id's letters are no word
    ]
    assert [label(line, value) for line, value, _ in cases] == [said for *_, said in cases]


@given(st.text(max_size=200), st.integers(0, 200), st.integers(1, 20))
def test_a_label_is_never_empty_and_fits_one_gloss(text: str, at: int, size: int) -> None:
    value = text[at : at + size] or "x_0001"
    said = label(text, value)
    assert said and len(said) <= MAX_LABEL_CHARS
    assert "\n" not in said and GLOSS not in said


def test_a_listing_of_records_says_what_each_id_is_on_shared_lines() -> None:
    """Tool output of 40 flight records: the best-ranked id keeps its whole line, every other
    one is written after its key (`key: value`), ids of one key on one line; none bare."""
    listing = "\n".join(
        f'{{"flight_number": "HAT{n:03d}", "origin": "JFK", "payment_id": "gift_card_{n:07d}"}}'
        for n in range(40)
    )
    collector = Collector(100)
    collector.scan(2, listing)
    found = collector.candidates()
    index = select_anchors(
        found, 200, COUNT, lambda _: False, collector.meaning, None, collector.labels
    )
    lines = render_anchors(index, ANCHORS_HEADER).splitlines()[1:]
    assert all(GLOSS in line or ": " in line.removeprefix("- tools: ") for line in lines)
    keyed = [
        line
        for line in lines
        if line.startswith(("- tools: flight_number: HAT", "- tools: payment_id: gift_card_"))
    ]
    assert len(keyed) == 2 and all(line.count(SEPARATOR) >= 3 for line in keyed)
    assert parse_anchors("\n".join(lines)) == index
    assert len(index.tools) >= 12


def test_a_key_on_a_later_line_names_what_the_value_is() -> None:
    text = "The access code for the south gate is NEEDLE-ae47.\nGATE_CODE: NEEDLE-ae47"
    assert label(text, "NEEDLE-ae47") == "GATE_CODE"
    collector = Collector(10)
    collector.scan(0, text)
    index = select_anchors(
        collector.candidates(), 40, COUNT, lambda _: False, {}, None, collector.labels
    )
    assert render_anchors(index, ANCHORS_HEADER).endswith("- user: GATE_CODE: NEEDLE-ae47")


def test_a_key_on_a_later_line_wins_over_the_sentence_and_a_bare_use_of_the_value() -> None:
    """The sentence before the `KEY: value` line, and a newer command that passes the value
    bare, neither take the key's place: the handoff writes `GATE_CODE: value`."""
    text = "The access code for the south gate is NEEDLE-ae47.\nGATE_CODE: NEEDLE-ae47"
    collector = Collector(10)
    collector.scan(1, '{"command": "open --code NEEDLE-ae47"}')
    collector.scan(2, text)
    assert collector.labels["NEEDLE-ae47"] == "GATE_CODE"
    assert "NEEDLE-ae47" not in collector.meaning
    index = select_anchors(
        collector.candidates(),
        40,
        COUNT,
        lambda _: False,
        collector.meaning,
        None,
        collector.labels,
    )
    assert render_anchors(index, ANCHORS_HEADER).endswith("- agent: GATE_CODE: NEEDLE-ae47")
    assert keyed_as("see GATE_CODE: NEEDLE-ae47", "NEEDLE-ae47", "GATE_CODE")
    assert keyed_as('{"gate_code": "NEEDLE-ae47"}', "NEEDLE-ae47", "gate_code")
    assert not keyed_as("open --code NEEDLE-ae47", "NEEDLE-ae47", "GATE_CODE")


def test_a_long_line_is_cut_from_the_start_of_the_sentence_that_names_the_anchor() -> None:
    line = "x" * 150 + ". The access code for the east gate is NEEDLE-311b. " + "y" * 150
    said = gloss(line, "NEEDLE-311b")
    assert said.startswith("…The access code for the east gate is NEEDLE-311b.")
    assert len(said) <= MAX_GLOSS_CHARS + 2


def test_a_value_of_a_key_is_written_as_key_value_and_its_line_is_spared() -> None:
    assert keyed('"reservations": ["AB12CD", "XY34ZZ"]', "XY34ZZ") == "reservations"
    assert keyed('{"flight_number": "HAT009", "date": "2024-05-01"}', "HAT009") == "flight_number"
    assert keyed("max_retry_ms=3000 (from conf/app.yaml)", "conf/app.yaml") == ""
    assert keyed("The code for the gate is NEEDLE-ae47.", "NEEDLE-ae47") == ""
    collector = Collector(10)
    collector.scan(2, 'lookup done\n{"flight_number": "HAT009", "origin": "JFK"}')
    assert "HAT009" not in collector.meaning and collector.labels["HAT009"] == "flight_number"


def test_a_handoffs_labels_and_keys_survive_the_next_compression() -> None:
    first = Collector(10)
    first.scan(2, '{"flight_number": "HAT009"}\nsee HAT011 and the rest')
    index = select_anchors(
        first.candidates(), 60, COUNT, lambda _: False, first.meaning, None, first.labels
    )
    parsed = parse_anchors(render_anchors(index, ANCHORS_HEADER).split("\n", 1)[1])
    again = Collector(10)
    for tier, values in enumerate(parsed.tiers()):
        again.add(tier, values, meaning=parsed.glosses())
    assert again.labels["HAT009"] == "flight_number" and "HAT009" not in again.meaning


def test_an_anchor_too_long_for_what_is_left_does_not_stop_the_shorter_ones() -> None:
    tools = ["a_very_long_identifier_that_costs_a_great_deal_0001", "ab_01", "cd_02"]
    index = select_anchors([[], [], tools], 8, COUNT, lambda _: False, line_room=0)
    assert index.tools == ("ab_01", "cd_02")


def test_a_line_that_says_no_more_than_a_label_is_left_for_the_names() -> None:
    collector = Collector(50)
    collector.scan(1, "2. **Flight HAT102**\n3. **Flight HAT174**\n")
    collector.scan(1, "The access code for the south gate is NEEDLE-ae4777f219.")
    index = select_anchors(
        collector.candidates(),
        60,
        COUNT,
        lambda _: False,
        collector.meaning,
        None,
        collector.labels,
    )
    said = index.glosses()
    assert said["NEEDLE-ae4777f219"].startswith("The access code for the south gate")
    assert said["HAT102"] == said["HAT174"] == "Flight"  # one label line for both
    assert not says_more("2. **Flight HAT102**", "HAT102")
    assert says_more("max_retry_ms=3000 (from conf/app.yaml)", "conf/app.yaml")


def test_the_room_the_lines_leave_goes_to_more_names() -> None:
    tools = [f"rec_{n:04d}_x" for n in range(100)]
    bare = select_anchors([[], [], tools], 60, COUNT, lambda _: False, line_room=0)
    roomy = select_anchors([[], [], tools], 60, COUNT, lambda _: False, line_room=40)
    assert len(roomy.tools) > len(bare.tools)
    assert roomy.tools[: len(bare.tools)] == bare.tools  # newest first, the same ones first
