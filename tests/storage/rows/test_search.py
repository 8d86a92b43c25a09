"""Recall's reads of the archive: full-text search through the database's own index (FTS5 on
SQLite, tsvector + GIN on PostgreSQL), handle fetches, the index's migration, and the one
normaliser both sides of a search go through."""

from __future__ import annotations

import re
import string
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.pool import Pool

from storage import SessionKey, SessionStore
from storage.database.db import Database
from storage.rows import search
from storage.rows.search import TABLE
from storage.rows.terms import MAX_TERM, STOP_WORDS, search_terms
from tests.storage.factories import chain_digests, commit, history

SK = SessionKey("scope-a", "session-1")
DIGESTS = chain_digests(history(40))
INNER = "./:@#~+-"

FILLER = [
    {"role": "user", "content": "Tidy the handlers and run the tests again."},
    {"role": "assistant", "content": "Done; the tests pass on the second try."},
]
PLANTED: list[dict[str, Any]] = [
    {"role": "tool", "tool_call_id": "c1", "content": "Ticket ID-7 is blocked on review."},
    {"role": "tool", "tool_call_id": "c2", "content": "Loaded settings from src/app/config.py"},
    {"role": "user", "content": "Reservation RES-2024-0042 is for the north gate."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c9",
                "type": "function",
                "function": {"name": "grep", "arguments": '{"pattern": "pkg.mod.func"}'},
            }
        ],
    },
    {"role": "user", "content": [{"type": "text", "text": "The lagoon code is LG-31."}]},
]


def archive_of(messages: list[dict[str, Any]], start: int = 1) -> list[tuple[int, Any]]:
    return [(start + i, m) for i, m in enumerate(messages)]


async def archived_store(store: SessionStore) -> list[tuple[int, Any]]:
    archived = archive_of([*FILLER, *PLANTED, *FILLER])
    await store.commit_compression(commit(SK, DIGESTS, 12, archived=archived))
    return archived


async def positions(store: SessionStore, query: str, sk: SessionKey = SK) -> list[int]:
    return [a.position for a in await store.search_archive(sk, query)]


# -- through the store, on both databases -------------------------------------------------


async def test_identifiers_are_found_with_punctuation_around_them(store: SessionStore) -> None:
    await archived_store(store)
    assert (await positions(store, "ID-7:"))[0] == 3
    assert (await positions(store, "id-7"))[0] == 3
    assert (await positions(store, "config.py."))[0] == 4
    assert (await positions(store, "(src/app/config.py)"))[0] == 4
    assert (await positions(store, "RES-2024-0042?"))[0] == 5
    assert (await positions(store, "`pkg.mod.func`"))[0] == 6  # a call's arguments count
    assert (await positions(store, "LG-31."))[0] == 7  # so do text parts


async def test_an_identifier_inside_a_longer_one_is_found(store: SessionStore) -> None:
    """Its whole is no term of the longer one, nor is what it ends with (`3.html`); its
    segments and words are, and the second, looser reading asks for those."""
    link = "See https://dicom.example/chtml/part03/sect_C.7.6.3.html#table_C.7-11c first."
    said = [*FILLER, {"role": "user", "content": link}, *FILLER]
    await store.commit_compression(commit(SK, DIGESTS, 12, archived=archive_of(said)))
    assert await positions(store, "part03/sect_C.7.6.3.html:") == [3]
    assert await positions(store, "part03/sect_C.7.6.4.html") == []
    # Cut inside the longer one's segment: at a dot (its last segment is no segment there)...
    assert await positions(store, "part03/sect_C.7.6") == [3]
    # ...or before it (its first one): `chtml/part03` is preceded by `dicom.example/`.
    assert await positions(store, "example/chtml/part03") == [3]


async def test_a_path_inside_a_longer_file_name_is_found(store: SessionStore) -> None:
    said = [*FILLER, {"role": "user", "content": "kept as backup/src/app/config.py.bak"}]
    await store.commit_compression(commit(SK, DIGESTS, 12, archived=archive_of(said)))
    assert await positions(store, "src/app/config.py") == [3]
    assert await positions(store, "src/app/settings.py") == []


async def test_more_of_the_query_ranks_first_and_nothing_matches_nothing(
    store: SessionStore,
) -> None:
    await archived_store(store)
    assert (await positions(store, "north gate reservation"))[0] == 5
    assert await positions(store, "zebra-99") == []
    # Nothing holds every word: those holding the most come first.
    assert (await positions(store, "north gate zebra"))[0] == 5
    assert await positions(store, "the, of; and!") == []  # nothing to search for
    assert await positions(store, "tests")  # FILLER at 1-2 and 8-9
    assert await positions(store, "ID-7", SessionKey(SK.scope, "someone-else")) == []


async def test_a_limit_bounds_the_hits_and_newer_positions_win_ties(store: SessionStore) -> None:
    same = [{"role": "user", "content": "deploy the build"} for _ in range(8)]
    await store.commit_compression(commit(SK, DIGESTS, 12, archived=archive_of(same)))
    found = await store.search_archive(SK, "deploy", limit=3)
    assert [a.position for a in found] == [8, 7, 6]


async def test_search_and_fetch_follow_the_rotation_lineage(store: SessionStore) -> None:
    await store.commit_compression(commit(SK, DIGESTS, 6, archived=archive_of(PLANTED[:2])))
    child = SessionKey(SK.scope, "session-1-next")
    rotated = commit(SK, DIGESTS, 12, archived=archive_of(PLANTED[2:], 10), rotate_to=child.key)
    await store.commit_compression(rotated)
    assert await positions(store, "ID-7", child) == [1]  # the parent's archive
    assert await positions(store, "RES-2024-0042", child) == [10]
    assert await positions(store, "RES-2024-0042", SK) == []  # not the child's
    fetched = await store.fetch_archived(child, [12, 1, 2, 30])
    assert [a.position for a in fetched] == [1, 2, 12]
    assert fetched[0].message == PLANTED[0]


async def test_a_span_below_a_fork_reads_only_the_positions_it_shares(
    store: SessionStore, store_url: str
) -> None:
    """A fork shares its first positions with the row it came from: only those count."""
    await archived_store(store)  # positions 1-9, RES-2024-0042 at 5
    db = Database.connect(store_url)
    try:

        async def read(conn: AsyncConnection) -> tuple[list[int], ...]:
            row_id = (await conn.execute(text("SELECT id FROM sessions"))).scalar_one()
            below = [(row_id, 5)]
            return (
                [a.position for a in await search.search(conn, below, "ID-7", 5)],
                [a.position for a in await search.search(conn, below, "RES-2024-0042", 5)],
                [a.position for a in await search.fetch(conn, below, [3, 4, 5, 6])],
            )

        assert await db.read(read) == ([3], [], [3, 4])
    finally:
        await db.dispose()


async def test_the_newest_copy_of_a_position_is_the_one_read(store: SessionStore) -> None:
    old = {"role": "user", "content": "The gate code is GC-1."}
    new = {"role": "user", "content": "The gate code is GC-2 (changed)."}
    await store.commit_compression(commit(SK, DIGESTS, 6, archived=[(3, old)]))
    await store.commit_compression(commit(SK, DIGESTS, 8, archived=[(3, new)]))
    assert await positions(store, "GC-1") == []  # position 3 now reads otherwise
    assert [a.message for a in await store.search_archive(SK, "GC-2")] == [new]
    assert [a.message for a in await store.fetch_archived(SK, [3])] == [new]


async def test_a_deleted_session_leaves_nothing_in_the_index(
    store: SessionStore, store_url: str
) -> None:
    archived = await archived_store(store)
    assert await index_rows(store_url) == len(archived)
    await store.delete_session(SK)
    assert await index_rows(store_url) == 0
    assert await positions(store, "ID-7") == []


async def test_a_database_archived_before_the_index_gets_it_built(store_url: str) -> None:
    """A database made before the index: opening it indexes what it archived."""
    store = await SessionStore.open(store_url)
    try:
        await archived_store(store)
    finally:
        await store.close()
    await make_it_old(store_url)
    assert not await has_index(store_url)
    store = await SessionStore.open(store_url)
    try:
        assert (await positions(store, "config.py."))[0] == 4
        assert (await positions(store, "ID-7:"))[0] == 3
    finally:
        await store.close()
    assert await index_rows(store_url) == 2 * len(FILLER) + len(PLANTED)


async def test_sqlite_search_starts_from_the_full_text_index(sqlite_url: str) -> None:
    """The plan walks the FTS5 index and looks each hit up by id, never the session's rows."""
    store = await SessionStore.open(sqlite_url)
    await store.close()
    db = Database.connect(sqlite_url)
    try:

        async def plan(conn: AsyncConnection) -> list[str]:
            sql = (
                f"EXPLAIN QUERY PLAN SELECT a.position FROM {TABLE} CROSS JOIN "
                f"archived_messages AS a WHERE {TABLE} MATCH '\"x\"' AND a.id = {TABLE}.rowid "
                "AND a.session_id IN (1, 2) ORDER BY bm25(" + TABLE + ") LIMIT 5"
            )
            return [str(row[-1]) for row in await conn.execute(text(sql))]

        steps = await db.read(plan)
    finally:
        await db.dispose()
    assert steps[0].startswith(f"SCAN {TABLE} VIRTUAL TABLE")
    assert "USING INTEGER PRIMARY KEY" in steps[1]


async def index_rows(url: str) -> int:
    db = Database.connect(url)
    try:
        result = await db.read(lambda conn: conn.execute(text(f"SELECT count(*) FROM {TABLE}")))
        return int(result.scalar_one())
    finally:
        await db.dispose()


async def make_it_old(url: str) -> None:
    db = Database.connect(url)
    try:

        async def drop(conn: AsyncConnection) -> None:
            if conn.dialect.name == "sqlite":
                await conn.execute(text(f"DROP TRIGGER {TABLE}_forget"))
            await conn.execute(text(f"DROP TABLE {TABLE}"))
            await conn.execute(text("DELETE FROM schema_version WHERE name = 'archive_search'"))

        await db.write(drop)
    finally:
        await db.dispose()


async def has_index(url: str) -> bool:
    db = Database.connect(url)
    try:

        async def tables(conn: AsyncConnection) -> set[str]:
            sql = (
                "SELECT name FROM sqlite_master"
                if conn.dialect.name == "sqlite"
                else "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            )
            return set((await conn.execute(text(sql))).scalars())

        return TABLE in await db.read(tables)
    finally:
        await db.dispose()


# -- the normaliser -----------------------------------------------------------------------

word = st.text(string.ascii_letters + string.digits, min_size=2, max_size=8)
identifier = st.builds(
    lambda first, rest: first + "".join(sep + w for sep, w in rest),
    word,
    st.lists(st.tuples(st.sampled_from(list(INNER)), word), max_size=4),
)
before = st.text(" \n\t([{<\"'`,;!?", max_size=3)
after = st.text(" \n\t)]}>\"'`,;!?:.", max_size=3)


def test_examples() -> None:
    terms = search_terms("See src/app/config.py: ID-7, then RES-2024-0042.")
    assert terms.whole == ("see", "src/app/config.py", "id-7", "res-2024-0042")
    assert set(terms.parts) >= {"config.py", "config", "py", "src", "app", "id", "7", "2024"}
    assert set(terms.parts) >= {"app/config.py", "src/app", "2024-0042", "res-2024"}
    assert search_terms("ID-7:").distinct() == ("id-7", "7", "id")
    assert search_terms("snake_case_name").parts == ("snake", "case", "name")


def test_the_atoms_are_the_inner_segments_and_the_words() -> None:
    (found,) = search_terms("part03/sect_C.7.6.3.html:").identifiers
    assert found.atoms == ("part03", "sect", "7", "6", "3", "html")
    assert {"3.html", "part03/sect_c.7", "sect_c.7.6.3.html"} <= set(found.parts) - set(found.atoms)
    (found,) = search_terms("ab.cd/src/app/ef.gh").identifiers
    assert found.atoms == ("src", "app", "ab", "cd", "ef", "gh")
    assert search_terms("plain").identifiers[0].atoms == ()


@given(before, identifier, after)
def test_an_identifier_is_whole_whatever_surrounds_it(pre: str, ident: str, post: str) -> None:
    expected = ident.lower()
    if len(expected) <= MAX_TERM and expected not in STOP_WORDS:
        assert search_terms(pre + ident + post).whole == (expected,)


@given(st.lists(st.tuples(before, identifier, after), min_size=1, max_size=6), st.data())
def test_a_query_for_what_a_text_holds_finds_its_terms(
    pieces: list[tuple[str, str, str]], data: st.DataObject
) -> None:
    document = " ".join(pre + ident + post for pre, ident, post in pieces)
    _, ident, _ = data.draw(st.sampled_from(pieces))
    query = data.draw(before) + ident + data.draw(after)
    assert set(search_terms(query).distinct()) <= set(search_terms(document).distinct())


@given(before, st.lists(word, min_size=2, max_size=9), st.data(), after)
def test_what_an_identifier_ends_with_is_a_term_of_its_own(
    pre: str, words: list[str], data: st.DataObject, post: str
) -> None:
    """`app/config.py` (or `config.py`) finds `src/app/config.py` as a term, not as parts."""
    separators = data.draw(st.lists(st.sampled_from(list(INNER)), min_size=len(words) - 1))
    ident = words[0] + "".join(sep + w for sep, w in zip(separators, words[1:], strict=False))
    cut = data.draw(st.integers(max(1, len(words) - 8), len(words) - 1))
    tail = words[cut] + "".join(
        sep + w for sep, w in zip(separators[cut:], words[cut + 1 :], strict=False)
    )
    query = search_terms(data.draw(before) + tail + data.draw(after))
    document = search_terms(pre + ident + post)
    if query.whole:
        assert query.whole[0] in document.distinct()


@given(st.text(max_size=200))
def test_terms_are_clean_and_stable(raw: str) -> None:
    terms = search_terms(raw)
    for term in terms.distinct():
        assert re.fullmatch(r"\w(.*\w)?", term, re.DOTALL)  # no punctuation at either end
        assert not any(c.isspace() for c in term)
        assert len(term) <= MAX_TERM and term not in STOP_WORDS
    again = search_terms(" ".join(terms.whole))
    assert again.whole == terms.whole


async def test_an_archive_larger_than_a_batch_is_stored_and_found_whole(
    store: SessionStore,
) -> None:
    """Thousands of archived rows go in batches (the loop serves others between them): every
    row is archived and indexed, the last batch's as well as the first's."""
    from storage.rows.checkpoints import ARCHIVE_BATCH
    from storage.rows.search import INDEX_BATCH

    count = max(ARCHIVE_BATCH, INDEX_BATCH) * 2 + 7
    messages = [{"role": "user", "content": f"note ZX-{i:05d} here"} for i in range(count)]
    await store.commit_compression(commit(SK, DIGESTS, 12, archived=archive_of(messages)))
    assert await positions(store, "ZX-00000") == [1]
    assert await positions(store, f"ZX-{count - 1:05d}") == [count]
    assert await positions(store, f"ZX-{ARCHIVE_BATCH:05d}") == [ARCHIVE_BATCH + 1]


async def test_several_searches_take_one_read_and_answer_as_each_alone(
    store: SessionStore,
) -> None:
    """Recall before asking looks up every name of a turn and its question: one read of the
    database for all of them (a read through the pool costs more than a small search; on
    SQLite none goes through it)."""
    await archived_store(store)
    queries = [("ID-7", 2), ("config.py", 2), ("nothing-like-it", 2), ("which gate is it?", 5)]
    alone = [await store.search_archive(SK, q, n) for q, n in queries]
    checkouts: list[object] = []

    def note(*args: object) -> None:
        checkouts.append(args[0])

    event.listen(Pool, "checkout", note)
    try:
        together = await store.search_archive_each(SK, queries)
    finally:
        event.remove(Pool, "checkout", note)
    assert together == alone and [len(hits) for hits in together][:3] == [1, 1, 0]
    assert len(checkouts) <= 1
    assert await store.search_archive_each(SK, []) == []
