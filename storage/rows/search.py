"""The archive's full-text index and the reads recall makes of the archive.

SQLite keeps an FTS5 table ranked by bm25, PostgreSQL a tsvector column under a GIN index
ranked by ts_rank. Either holds, per archived row (same id), the terms of `storage.rows.terms` for
the message as the model saw it: whole terms in one place, their parts in another that weighs
less. Rows are indexed in the transaction that archives them and leave the index with them (a
trigger on SQLite, a cascading key on PostgreSQL). A search ranks only the newest
`CANDIDATES` of the lineage's rows the index finds (one index for the database: every
session's) and reads back `limit` of them, so what ranking costs stays flat as the archive
grows, however common the query's words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Row, event, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import codec
from storage.database.inline import Executor
from storage.database.tables import archived_messages
from storage.records import ArchivedMessage, Message
from storage.rows.terms import Identifier, Terms, search_terms

TABLE = "archive_search"
MAX_QUERY_IDENTIFIERS = 16
_MAX_TSVECTOR = 400_000  # characters; PostgreSQL refuses a tsvector over 1 MB
_MAX_POSITIONS = 8  # per lexeme: ts_rank's weight of repeats flattens out long before this
_MAX_POSITION = 16383  # PostgreSQL's largest
_BACKFILL_BATCH = 1000

_SQLITE_DDL = (
    # tokenchars: a whole term stays one token; FTS5 reads a query's phrase the same way.
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5("
    "whole, parts, tokenize = \"unicode61 tokenchars '-./:@#+~_'\")",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_forget AFTER DELETE ON archived_messages "
    f"BEGIN DELETE FROM {TABLE} WHERE rowid = old.id; END",
)
_POSTGRES_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    "id INTEGER PRIMARY KEY REFERENCES archived_messages(id) ON DELETE CASCADE, "
    "terms TSVECTOR NOT NULL)",
    # fastupdate off: new entries go into the index itself, not a pending list that every
    # search reads through until a vacuum merges it (searches grew with recent writes).
    f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_terms ON {TABLE} USING gin (terms) "
    "WITH (fastupdate = off)",
    # A lineage's newest row, where a search's windows start (see _POSTGRES_SEARCH).
    "CREATE INDEX IF NOT EXISTS ix_archive_session_newest ON archived_messages (session_id, id)",
)

# (archived_messages.session_id, client positions below which its rows count; None: all)
Span = tuple[int, int | None]

_COLUMNS = "a.position, a.message, a.checkpoint_id, a.archived_at"
# A search ranks at most this many matches of the lineage, its newest (by archive row, so by
# when they were archived): a query of common words matches a share of the whole archive, and
# ranking every match grew with it. A hundred covers what a conversation recalls (a
# 1,000-message archive has a few dozen matches for three common words) and keeps the cost
# flat: PostgreSQL reads each candidate's row to check and rank it (500 cost it 3.4x at
# 100,000 messages against 1,000, 100 cost 1.7x); an older match shows up only when the query
# narrows it down.
CANDIDATES = 100
# FTS5 yields the matches newest first (ORDER BY rowid DESC, from the index) and the lineage's
# filters apply to each before LIMIT counts it, so another session's newer matches are walked
# past, never counted; bm25 is computed for the candidates only. CROSS JOIN keeps SQLite from
# walking the session's rows and probing the index with each.
_SQLITE_SEARCH = (
    f"SELECT {_COLUMNS} FROM (SELECT a.id, a.position, bm25({TABLE}, 1.0, 0.4) AS rank "
    f"FROM {TABLE} CROSS JOIN archived_messages AS a "
    f"WHERE {TABLE} MATCH :query AND a.id = {TABLE}.rowid AND {{spans}} AND {{newest}} "
    f"ORDER BY {TABLE}.rowid DESC LIMIT :candidates) AS c "
    "CROSS JOIN archived_messages AS a ON a.id = c.id "
    "ORDER BY c.rank, c.position DESC LIMIT :limit"
)
# PostgreSQL's GIN index yields matches in no order, so each row's terms also hold a bucket
# of its id (`~b` and id // BUCKET: no query's term, as `storage.rows.terms` starts every term with
# a letter or digit), and a search asks the index for the query's matches within the newest
# buckets first, the window growing fourfold from the lineage's newest row (its id by the index on
# session and id) until `candidates` pass the lineage's filters or every bucket is covered.
# GIN intersects the buckets' posting lists with the query's without the heap: rows are read
# for the matches in the windows only. Past MAX_WINDOW buckets the rest goes at once as the
# plain query (a window ORing thousands of buckets costs GIN more than the rows it spares).
# A row indexed without its bucket (by a ctxgate older than the buckets, still writing beside
# a newer one in a rolling upgrade, after the migration gave the rows then present theirs) is
# in no window: found only by a query with fewer than FEW matches or past MAX_WINDOW buckets.
BUCKET = 1024
MAX_WINDOW = 64
_BUCKET_TERM = "array_to_tsvector(ARRAY['~b' || ({id}) / " + str(BUCKET) + "])"
_LOW = "CASE WHEN w.k > :max_window THEN 0 ELSE GREATEST(w.hi - w.k + 1, 0) END"
_WINDOW_QUERY = (
    "terms @@ CAST(:query AS tsquery) AND terms @@ "
    "CASE WHEN w.k > :max_window THEN CAST(:query AS tsquery) "
    "ELSE (SELECT CAST(string_agg(quote_literal('~b' || g), ' | ') "
    f"AS tsquery) FROM generate_series({_LOW}, w.hi) AS g) END"
)
# Fewer than FEW matches in the whole index (an id, a rare word, words seldom together): one
# plain search, no windows. GIN finds those at once, and even a bucket that holds none of them
# costs each window a look.
FEW = 32
_FEW = (
    f"(SELECT count(*) FROM (SELECT 1 FROM {TABLE} WHERE terms @@ CAST(:query AS tsquery) "
    f"LIMIT {FEW}) AS f) < {FEW}"
)
# OFFSET 0 keeps each subquery whole: the id bounds are checked on the index's matches, never
# by walking the primary key and testing each row (slow when matches are rare); the lineage's
# filters per match by its key, as a planner misjudging a fresh table would hash the session.
_POSTGRES_SEARCH = (
    "WITH RECURSIVE w(k, hi, ids) AS ("
    f"SELECT CASE WHEN {_FEW} THEN :max_window + 1 ELSE 1 END, {{top}} / {BUCKET}, "
    "CAST(ARRAY[] AS integer[]) "
    f"UNION ALL SELECT w.k * 4, {_LOW} - 1, w.ids || ARRAY("
    f"SELECT m.id FROM (SELECT id FROM {TABLE} WHERE {_WINDOW_QUERY} "
    f"AND id + 0 >= CAST({_LOW} AS bigint) * {BUCKET} "
    f"AND id + 0 < CAST(w.hi + 1 AS bigint) * {BUCKET} "
    "ORDER BY id DESC OFFSET 0) "
    "AS m CROSS JOIN LATERAL (SELECT 1 FROM archived_messages AS a "
    "WHERE a.id = m.id AND {spans} AND {newest} OFFSET 0) AS a "
    "ORDER BY m.id DESC LIMIT :candidates - cardinality(w.ids)) "
    "FROM w WHERE w.hi >= 0 AND cardinality(w.ids) < :candidates), "
    "c AS MATERIALIZED (SELECT id FROM unnest((SELECT ids FROM w ORDER BY k DESC LIMIT 1)) "
    "AS id ORDER BY id DESC LIMIT :candidates), "
    "r AS MATERIALIZED (SELECT r.id, r.rank, r.position FROM c CROSS JOIN LATERAL (SELECT a.id, "
    f"a.position, ts_rank(s.terms, CAST(:query AS tsquery)) AS rank FROM {TABLE} AS s "
    "JOIN archived_messages AS a ON a.id = s.id WHERE s.id = c.id OFFSET 0) AS r "
    "ORDER BY r.rank DESC, r.position DESC LIMIT :limit) "
    # The messages of the `limit` best only.
    f"SELECT {_COLUMNS} FROM r CROSS JOIN LATERAL (SELECT {_COLUMNS} "
    "FROM archived_messages AS a WHERE a.id = r.id OFFSET 0) AS a "
    "ORDER BY r.rank DESC, r.position DESC"
)
# In the driver's own placeholders, for its executemany with plain tuples: SQLAlchemy's
# handling of each row's parameters cost more than the insert of a large archive.
_INSERT = {
    "sqlite": f"INSERT INTO {TABLE} (rowid, whole, parts) VALUES (?, ?, ?)",
    "postgresql": f"INSERT INTO {TABLE} (id, terms) VALUES ($1, CAST($2 AS tsvector) || "
    + _BUCKET_TERM.format(id="CAST($1 AS integer)")
    + ")",
}


def create(conn: Connection) -> None:
    """The index's table (and on SQLite its trigger), when missing."""
    ddl = _POSTGRES_DDL if conn.dialect.name == "postgresql" else _SQLITE_DDL
    for statement in ddl:
        conn.execute(text(statement))


@event.listens_for(archived_messages, "after_create")
def _created(_table: Any, conn: Connection, **_kw: Any) -> None:
    # A fresh database records every migration as applied: the index comes with the archive.
    create(conn)


def add_buckets(conn: Connection) -> None:
    """Give each PostgreSQL row its bucket term (see _POSTGRES_SEARCH; a migration step)."""
    if conn.dialect.name == "postgresql":
        create(conn)
        # Rebuilt once after the update: updating every row under the index costs ~7x more.
        conn.execute(text(f"DROP INDEX IF EXISTS ix_{TABLE}_terms"))
        conn.execute(text(f"UPDATE {TABLE} SET terms = terms || " + _BUCKET_TERM.format(id="id")))
        create(conn)


def rebuild(conn: Connection) -> None:
    """Create the index and fill it from every archived row (a migration step)."""
    create(conn)
    conn.execute(text(f"DELETE FROM {TABLE}"))
    a = archived_messages.c
    last = 0
    while True:
        batch = conn.execute(
            select(a.id, a.message).where(a.id > last).order_by(a.id).limit(_BACKFILL_BATCH)
        ).all()
        if not batch:
            return
        rows = [(int(row.id), codec.loads(row.message)) for row in batch]
        conn.exec_driver_sql(_insert(conn.dialect.name), _index_rows(conn.dialect.name, rows))
        last = rows[-1][0]


INDEX_BATCH = 1000  # rows a statement indexes
Offload = Callable[..., Awaitable[Any]]
_offload: list[Offload] = []  # where the terms of archived rows are read: see `read_terms_with`


def read_terms_with(offload: Offload | None) -> None:
    """Have `offload(function, *args)` read archived rows' search terms (a process pool's call);
    None: a thread of this process."""
    _offload[:] = [offload] if offload is not None else []


async def index(conn: AsyncConnection, rows: Sequence[tuple[int, Message]]) -> None:
    """Index newly archived rows: (archived_messages.id, message)."""
    if rows:
        await write_index(conn, await read_index_rows(conn.dialect.name, rows))


def read_index_rows(
    dialect: str, rows: Sequence[tuple[int, Message]]
) -> asyncio.Future[list[IndexRow]]:
    """The index rows of newly archived rows, read elsewhere: reading a large archive's terms
    takes seconds of CPU, in a worker process (else a thread) the event loop is not held up
    by it, and the caller goes on writing meanwhile."""
    offload = _offload[0] if _offload else asyncio.to_thread
    return asyncio.ensure_future(offload(_index_rows, dialect, rows))


async def write_index(conn: AsyncConnection, values: Sequence[IndexRow]) -> None:
    """Write index rows of `read_index_rows` (in the transaction that archived their rows)."""
    statement = _insert(conn.dialect.name)
    for start in range(0, len(values), INDEX_BATCH):  # the loop's turn between batches
        await conn.exec_driver_sql(statement, list(values[start : start + INDEX_BATCH]))


async def search(
    conn: Executor,
    spans: Sequence[Span],
    query: str,
    limit: int,
    *,
    candidates: int = CANDIDATES,
    max_window: int = MAX_WINDOW,
) -> list[ArchivedMessage]:
    """The archived messages of a lineage's `spans` that match `query` best, best first (a
    later position first among equals): those holding each of the query's words and
    identifiers (as terms of their own: see storage.rows.terms); when none does, those holding
    any of them or all of one's parts, the more the better. The strict reading first keeps
    an id's common parts (`res` of `RES-0042`) from ranking half the archive.

    Only the newest `candidates` matches of the lineage (by when they were archived) are
    ranked: over more, the best of those come back, not of every match. Another session's
    matches never take a candidate's place, though the index walks past them. `max_window`:
    PostgreSQL's widest window of buckets before the rest is searched at once."""
    groups = _groups(search_terms(query))
    if not groups or not spans or limit <= 0 or candidates <= 0:
        return []
    dialect = conn.dialect.name
    strict = _expression(dialect, groups, "AND", parts=False)
    bounds = {"limit": limit, "candidates": candidates, "max_window": max_window}
    found = await _search(conn, spans, strict, bounds)
    loose = _expression(dialect, groups, "OR", parts=True)
    if found or loose == strict:
        return found
    return await _search(conn, spans, loose, bounds)


async def _search(
    conn: Executor, spans: Sequence[Span], expression: str, bounds: dict[str, int]
) -> list[ArchivedMessage]:
    statement = text(search_sql(conn.dialect.name, spans))
    params: dict[str, Any] = {"query": expression, **bounds}
    if conn.dialect.name != "postgresql":
        del params["max_window"]
    return [_archived(row) for row in await conn.execute(statement, params | _spans_params(spans))]


def search_sql(dialect: str, spans: Sequence[Span]) -> str:
    """The search statement for `spans` (parameters: query, limit, candidates, on PostgreSQL
    max_window, and those of `_spans_params`)."""
    sql = _POSTGRES_SEARCH if dialect == "postgresql" else _SQLITE_SEARCH
    # Only the newest copy of a position is found: a client may have changed what it resent.
    newest = (
        "NOT EXISTS (SELECT 1 FROM archived_messages AS b WHERE b.position = a.position "
        f"AND b.id > a.id AND {_spans_sql('b', spans)})"
    )
    newest_rows = ", ".join(
        f"(SELECT max(id) FROM archived_messages WHERE session_id = :span{i})"
        for i in range(len(spans))
    )
    # GREATEST skips NULLs: a span's session may have archived nothing.
    top = f"GREATEST({newest_rows})"
    return sql.format(spans=_spans_sql("a", spans), newest=newest, top=top)


async def fetch(
    conn: Executor, spans: Sequence[Span], positions: Sequence[int]
) -> list[ArchivedMessage]:
    """The newest archived copy of each of `positions` in a lineage's `spans`, by position
    (positions nothing was archived at left out)."""
    if not spans or not positions:
        return []
    a = archived_messages.c
    statement = (
        select(a.position, a.message, a.checkpoint_id, a.archived_at)
        .where(text(_spans_sql("archived_messages", spans)), a.position.in_(list(positions)))
        .order_by(a.position, a.id)
    )
    found = await conn.execute(statement, _spans_params(spans))
    newest = {row.position: row for row in found}
    return [_archived(row) for _, row in sorted(newest.items())]


def _spans_sql(alias: str, spans: Sequence[Span]) -> str:
    """The rows of `spans` as a condition on `alias`, parameters named by `_spans_params`."""
    conditions = [
        f"{alias}.session_id = :span{i}"
        + ("" if cap is None else f" AND {alias}.position < :cap{i}")
        for i, (_, cap) in enumerate(spans)
    ]
    return "(" + " OR ".join(f"({c})" for c in conditions) + ")"


def _spans_params(spans: Sequence[Span]) -> dict[str, int]:
    params: dict[str, int] = {}
    for i, (row_id, cap) in enumerate(spans):
        params[f"span{i}"] = row_id
        if cap is not None:
            params[f"cap{i}"] = cap
    return params


def message_text(message: Message) -> str:
    """What the model saw of an archived message: its text and the calls it made."""
    content: Any = message.get("content")
    pieces: list[str] = []
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list):
        pieces += [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            pieces += [str(function.get("name") or ""), str(function.get("arguments") or "")]
    return "\n".join(pieces)


def _insert(dialect: str) -> str:
    return _INSERT["postgresql" if dialect == "postgresql" else "sqlite"]


IndexRow = tuple[int, str] | tuple[int, str, str]  # the parameters of `_INSERT`, by dialect


def _index_rows(dialect: str, rows: Sequence[tuple[int, Message]]) -> list[IndexRow]:
    out: list[IndexRow] = []
    for row_id, message in rows:
        terms = search_terms(message_text(message) if isinstance(message, dict) else "")
        if dialect == "postgresql":
            out.append((row_id, _tsvector(terms)))  # the bucket: _INSERT
        else:
            out.append((row_id, " ".join(terms.whole), " ".join(terms.parts)))
    return out


def _tsvector(terms: Terms) -> str:
    """A tsvector literal: whole terms weigh A, parts B; positions count repeats."""
    positions: dict[str, list[str]] = {}
    size = 0
    weighted = [(t, "A") for t in terms.whole] + [(t, "B") for t in terms.parts]
    for at, (term, weight) in enumerate(weighted, start=1):
        held = positions.get(term)
        if held is None:
            size += len(term) + 16
            if size > _MAX_TSVECTOR:
                continue
            held = positions[term] = []
        if len(held) < _MAX_POSITIONS:
            held.append(f"{min(at, _MAX_POSITION)}{weight}")
    return " ".join(f"{_quoted(term)}:{','.join(at)}" for term, at in positions.items())


def _groups(terms: Terms) -> list[Identifier]:
    """The query's identifiers, each once, at most MAX_QUERY_IDENTIFIERS of them."""
    return list(dict.fromkeys(terms.identifiers))[:MAX_QUERY_IDENTIFIERS]


def _expression(
    dialect: str, groups: Sequence[Identifier], conjunction: str, *, parts: bool
) -> str:
    """FTS5's MATCH text or a tsquery: each identifier (with `parts`: or all its segments and
    words; without a whole, always all its parts), the identifiers joined by `conjunction`."""
    postgres = dialect == "postgresql"
    quoted = _quoted if postgres else _phrase
    ops = {"AND": " & ", "OR": " | "} if postgres else {"AND": " AND ", "OR": " OR "}
    found = []
    for group in groups:
        options = [quoted(group.whole)] if group.whole is not None else []
        if group.parts and (parts or not options):
            # Read loosely, an identifier is also found inside a longer one, which holds its
            # segments and words but not what it ends with (`7.html` of `sect_7.html`).
            pieces = group.atoms if parts and group.atoms else group.parts
            options.append("(" + ops["AND"].join(quoted(p) for p in pieces) + ")")
        found.append(options[0] if len(options) == 1 else "(" + ops["OR"].join(options) + ")")
    return ops[conjunction].join(found)


def _quoted(term: str) -> str:
    """A lexeme as tsvector and tsquery input read it, taken as it is."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _phrase(term: str) -> str:
    # A quoted phrase: FTS5 reads no operator or column name inside one.
    return '"' + term.replace('"', '""') + '"'


def _archived(row: Row[Any]) -> ArchivedMessage:
    return ArchivedMessage(
        row.position, codec.loads(row.message), row.checkpoint_id, row.archived_at
    )
