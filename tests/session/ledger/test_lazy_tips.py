"""The ledger digests a request's messages only when a later compressed request asks: the
figures it records are those of digesting every request at once, whether the link was digested
when asked, digested early past the byte budget, or never (replaced, or too old to be asked)."""

from __future__ import annotations

import hashlib

from compression import Message, counter_for_model, seen_messages
from compression.messages.digest import message_digests
from session.ledger.book import Ledger, full_prompt
from session.ledger.history import ASKED_WITHIN_S, History, Tip, Tips
from session.ports.frontdoor import Usage
from storage import SessionKey, SessionStore
from tests.session.ledger.test_money import settings_with

MODEL = "gpt-test-1"
COUNTER = counter_for_model("gpt-4o")


def turns(n: int, tag: str = "") -> list[Message]:
    return [
        {"role": "user" if i % 2 else "assistant", "content": f"{tag}turn {i} " + "word " * i}
        for i in range(n)
    ]


def history_of(messages: list[Message], eager: bool, size: int = 1000) -> History:
    _, history = full_prompt(1000, messages, messages, None, COUNTER, (), size)
    if eager:  # what the ledger did before: every request's digests taken on arrival
        history.digest_now()
    return history


async def session_figures(ledger: Ledger, eager: bool, gap: float = 60.0) -> list[int]:
    """A session forwarded as sent twice, then compressed twice (continuing, then edited),
    beside other sessions' requests: the full prompts the ledger records for it."""
    sk = SessionKey("scope", "s")
    first, grown = turns(10), turns(14)
    edited: list[Message] = [{"role": "user", "content": "rewritten"}, *turns(16)[1:]]
    other = SessionKey("scope", "other")
    out = []
    for at, messages, compressed in (
        (0.0, first, False),
        (gap, grown, False),
        (2 * gap, [*grown, *turns(16)[14:]], True),
        (3 * gap, edited, True),
    ):
        history = history_of(messages, eager)
        usage = Usage(5000 + int(at), 10)
        charged = await ledger.request(sk, MODEL, "chat", usage, 9999, compressed, at, history)
        assert charged.full is not None
        out.append(charged.full.prompt)
        # Another session's request in between (its own tips held beside this one's).
        await ledger.request(other, MODEL, "chat", usage, 1, False, at, history_of(turns(3), eager))
    return out


async def test_lazy_digests_give_the_figures_of_eager_ones(store: SessionStore) -> None:
    eager = await session_figures(Ledger(settings_with(None), store), eager=True)
    lazy = await session_figures(Ledger(settings_with(None), store), eager=False)
    assert lazy == eager
    # The third request is anchored on the second (its 5,060 plus what was appended), the
    # fourth, whose first message was edited, is not (the estimate, 9,999).
    assert eager[2] != 9999 and eager[2] > 5060 and eager[3] == 9999


async def test_a_tip_digested_past_the_budget_still_anchors(store: SessionStore) -> None:
    eager = await session_figures(Ledger(settings_with(None), store), eager=True)
    tight = Ledger(settings_with(None), store)
    tight._tips = Tips(budget=1500)  # each history is charged 1,000 bytes: one fits
    assert await session_figures(tight, eager=False) == eager


async def test_an_uncompressed_request_hashes_nothing(store: SessionStore) -> None:
    ledger = Ledger(settings_with(None), store)
    memo = seen_messages()
    before = memo.hashed
    for i in range(3):
        await ledger.request(
            SessionKey("scope", f"novel-{i}"), MODEL, "chat", Usage(100, 1), 100, False,
            float(i), history_of(turns(8, tag=f"unseen {i} "), eager=False),
        )  # fmt: skip
    assert memo.hashed == before


def test_tips_are_let_go_when_replaced_or_too_old_and_digested_past_the_budget() -> None:
    tips = Tips(budget=2500)
    made = [Tip(history_of(turns(4, tag=f"t{i} "), eager=False), float(i), 1000) for i in range(3)]
    for tip in made:
        tips.hold(tip, tip.at)
    # Three of 1,000 bytes in a budget of 2,500: the oldest digested, the others held.
    assert not made[0].held and made[0].digest() is not None
    assert made[1].held and made[2].held and tips.held_bytes == 2000
    tips.let_go(made[1])  # its session's next request replaced it
    assert not made[1].held and made[1].digest() is None and tips.held_bytes == 1000
    late = Tip(history_of(turns(2, tag="late "), eager=False), 2 + ASKED_WITHIN_S + 1, 10)
    tips.hold(late, late.at)  # made[2] can no longer be asked: let go undigested
    assert not made[2].held and made[2].digest() is None and tips.held_bytes == 10


def test_a_tip_the_next_request_digests_gives_its_bytes_back() -> None:
    """However a held tip ends (asked by a compressed request, replaced, too old, past the
    budget), its bytes leave the budget: a budget that only grew would digest every later
    request at once."""
    tips = Tips(budget=2500)
    made = [Tip(history_of(turns(3, tag=f"a{i} "), eager=False), float(i), 1000) for i in range(2)]
    for tip in made:
        tips.hold(tip, tip.at)
    assert tips.held_bytes == 2000
    assert made[0].digest() is not None  # a compressed request compared with it
    assert tips.held_bytes == 1000
    tips.let_go(made[0])  # then its session's next request replaced it
    assert tips.held_bytes == 1000
    later = [Tip(history_of(turns(3, tag=f"b{i} "), eager=False), 2.0 + i, 1000) for i in range(2)]
    for tip in later:
        tips.hold(tip, tip.at)
    # 3,000 bytes in a budget of 2,500: only the oldest still held is digested early.
    assert not made[1].held and later[0].held and later[1].held
    assert tips.held_bytes == 2000


def test_a_tip_digested_past_the_budget_leaves_nothing_in_the_memo() -> None:
    """A request digested only to let go of its messages (no later one asked yet) does not
    move them into the seen-messages memo, where they would stay held in its place."""
    memo = seen_messages()
    tips = Tips(budget=1500)
    first = turns(6, tag="m0 ")
    made = [
        Tip(history_of(m, eager=False), float(i), 1000)
        for i, m in enumerate([first, turns(6, tag="m1 ")])
    ]
    expected = hashlib.sha256("".join(message_digests(first)).encode("ascii")).hexdigest()
    held = len(memo)
    for tip in made:
        tips.hold(tip, tip.at)
    assert not made[0].held and made[1].held
    assert len(memo) == held
    assert made[0].digest() == expected
