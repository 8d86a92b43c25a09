"""Charges and shadow checks: recorded, summed by group, read back (SQLite and PostgreSQL)."""

from __future__ import annotations

from storage import SessionKey, SessionStore
from storage.rows.charges import ChargeGroup, ChargeRow, ShadowGroup, ShadowRow

A = SessionKey("s", "a")
B = SessionKey("s", "b")


def charge(sk: SessionKey, at: float, kind: str, compressed: bool, uncached: int) -> ChargeRow:
    return ChargeRow(sk, at, "m", kind, compressed, uncached, 10, 5, 7, 100, 20, 3, 123)


async def test_charges_are_summed_per_group_and_session(store: SessionStore) -> None:
    await store.record_charges(
        [
            charge(A, 1.0, "request", False, 1),
            charge(A, 2.0, "request", True, 2),
            charge(A, 3.0, "request", True, 4),
            charge(A, 3.5, "summary", True, 8),
            charge(B, 4.0, "request", True, 16),
        ]
    )
    groups = sorted(await store.charge_groups(), key=lambda g: (g.kind, g.compressed))
    assert groups[0] == ChargeGroup(None, None, "m", "request", False, 1, 1, 10, 5, 7, 100, 20, 3)
    assert groups[1] == ChargeGroup(None, None, "m", "request", True, 3, 22, 30, 15, 21, 300, 60, 9)
    assert groups[2].kind == "summary" and groups[2].uncached == 8
    only_b = await store.charge_groups([B], per_session=True)
    assert [(g.scope, g.key, g.uncached) for g in only_b] == [("s", "b", 16)]
    assert await store.charge_groups([], per_session=True) == []
    assert await store.last_full_prompt(A) == (123, 3.0)  # the newest request, not the summary
    assert await store.last_full_prompt(SessionKey("s", "none")) is None
    rows = await store.charges_of(A, limit=3)
    assert [(r.at, r.kind) for r in rows] == [(2.0, "request"), (3.0, "request"), (3.5, "summary")]


async def test_shadow_checks_are_counted_per_model_and_trigger(store: SessionStore) -> None:
    for agrees, noise in ((True, True), (False, True), (True, False)):
        await store.record_shadow(ShadowRow(A, 1.0, "m", "hygiene", agrees, noise, 100))
    await store.record_shadow(ShadowRow(B, 1.0, "m", "checkpoint", True, True, 50))
    groups = sorted(await store.shadow_groups(), key=lambda g: g.trigger)
    assert groups == [
        ShadowGroup("m", "checkpoint", 1, 1, 1, 50),
        ShadowGroup("m", "hygiene", 3, 2, 2, 300),
    ]
    assert await store.shadow_groups(B) == [ShadowGroup("m", "checkpoint", 1, 1, 1, 50)]
