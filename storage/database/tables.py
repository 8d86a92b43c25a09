"""SQLAlchemy Core tables. They never leave storage/.

Children hang off sessions.id with ON DELETE CASCADE, so deleting a session row removes its
checkpoints, archive, events and usage in the same statement. Leases are keyed by
(scope, key) instead: a lease may be taken before the session row exists.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String, nullable=False),
    Column("key", String, nullable=False),
    Column("model", String, nullable=False, default=""),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    Column("last_prompt_tokens", BigInteger),
    Column("last_completion_tokens", BigInteger),
    Column("last_message_count", Integer),
    Column("last_usage_estimated", Boolean, nullable=False, default=False),
    Column("last_usage_at", Double),
    Column("request_count", Integer, nullable=False, default=0),
    Column("compression_count", Integer, nullable=False, default=0),
    Column("total_prompt_tokens", BigInteger, nullable=False, default=0),
    Column("total_completion_tokens", BigInteger, nullable=False, default=0),
    Column("engine_state", Text, nullable=False, default="{}"),
    Column("parent_key", String),
    Column("child_key", String),
    Column("last_compression_at", Double),
    # Lineages: every row of one client session id (rotations, forks) names it as its root.
    Column("root_key", String),
    Column("fork_of", String),  # the row whose history a fork shares, up to fork_len
    Column("fork_len", Integer),
    # The client prefix (length, chained digest) of the lineage's latest request: a request
    # belongs to the lineage whose tip it extends.
    Column("tip_len", Integer),
    Column("tip_digest", String),
    UniqueConstraint("scope", "key", name="uq_sessions_scope_key"),
    Index("ix_sessions_updated_at", "updated_at"),
    Index("ix_sessions_scope_updated_at", "scope", "updated_at"),
    Index("ix_sessions_scope_root", "scope", "root_key"),
)


def _session_fk() -> ForeignKey:
    return ForeignKey("sessions.id", ondelete="CASCADE")


def _checkpoint_fk() -> ForeignKey:
    return ForeignKey("checkpoints.id", ondelete="SET NULL")


checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Integer, _session_fk(), nullable=False),
    Column("prefix_len", Integer, nullable=False),
    Column("prefix_digest", String, nullable=False),
    Column("messages", Text, nullable=False),
    Column("message_count", Integer, nullable=False),
    Column("tokens_before", BigInteger, nullable=False),
    Column("tokens_after", BigInteger, nullable=False),
    Column("summary", Text),
    Column("created_at", Double, nullable=False),
    # JSON: for each replacement message, the client position it holds verbatim, or null.
    Column("sources", Text),
    CheckConstraint("prefix_len >= 0", name="ck_checkpoints_prefix_len"),
    # find_checkpoint: candidate digests first, then a walk down by length (checkpoints.find).
    Index("ix_checkpoints_session_digest", "session_id", "prefix_digest"),
    Index("ix_checkpoints_session_len", "session_id", "prefix_len"),
)

archived_messages = Table(
    "archived_messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Integer, _session_fk(), nullable=False),
    Column("checkpoint_id", Integer, _checkpoint_fk()),
    Column("position", Integer, nullable=False),
    Column("digest", String, nullable=False),
    Column("message", Text, nullable=False),
    Column("archived_at", Double, nullable=False),
    # The dedupe key: a message replaced again by a later compression is stored once.
    UniqueConstraint("session_id", "position", "digest", name="uq_archive_position_digest"),
    # Deleting a checkpoint sets this to NULL: without an index, each deleted checkpoint
    # would scan the whole archive (SQLite and PostgreSQL alike).
    Index("ix_archive_checkpoint", "checkpoint_id"),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Integer, _session_fk(), nullable=False),
    Column("checkpoint_id", Integer, _checkpoint_fk()),
    Column("at", Double, nullable=False),
    Column("trigger", String, nullable=False),
    Column("outcome", String, nullable=False),
    Column("tokens_before", BigInteger, nullable=False),
    Column("tokens_after", BigInteger, nullable=False),
    Column("messages_before", Integer, nullable=False),
    Column("messages_after", Integer, nullable=False),
    Column("duration_ms", Double, nullable=False),
    Column("error", Text),
    CheckConstraint(
        "tokens_before >= 0 AND tokens_after >= 0 AND messages_before >= 0"
        " AND messages_after >= 0 AND duration_ms >= 0",
        name="ck_events_non_negative",
    ),
    Index("ix_events_session_at", "session_id", "at"),
    Index("ix_events_checkpoint", "checkpoint_id"),  # as ix_archive_checkpoint
)

usage = Table(
    "usage",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Integer, _session_fk(), nullable=False),
    Column("at", Double, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("message_count", Integer, nullable=False),
    Column("estimated", Boolean, nullable=False),
    Index("ix_usage_session_at", "session_id", "at"),
)

# The usage of deleted sessions (storage.rows.retention), summed per UTC day, scope and model, so
# token accounting outlives the sessions.
usage_daily = Table(
    "usage_daily",
    metadata,
    Column("day", String, primary_key=True),  # "YYYY-MM-DD", UTC
    Column("scope", String, primary_key=True),
    Column("model", String, primary_key=True),
    Column("requests", BigInteger, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
)

# Whose turn it is to sweep (storage.rows.retention): a row lease that lasts one interval.
retention_turns = Table(
    "retention_turns",
    metadata,
    Column("name", String, primary_key=True),
    Column("owner", String, nullable=False),
    Column("expires_at", Double, nullable=False),
)

model_windows = Table(
    "model_windows",
    metadata,
    Column("model", String, primary_key=True),
    Column("tokens", BigInteger, nullable=False),
    Column("updated_at", Double, nullable=False),
)

leases = Table(
    "leases",
    metadata,
    Column("scope", String, primary_key=True),
    Column("key", String, primary_key=True),
    Column("owner", String, nullable=False),
    Column("expires_at", Double, nullable=False),
)

schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String, nullable=False),
    Column("applied_at", Double, nullable=False),
)

# How far each accounting journal (storage.journal) is written: its records up to `seq` are in
# the tables, moved in the transaction that wrote them.
journal_marks = Table(
    "journal_marks",
    metadata,
    Column("journal", String, primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("updated_at", Double, nullable=False),
)
