"""Persistent session state for ctxgate: SQLite (default) or PostgreSQL via SQLAlchemy async.

The only package that imports sqlalchemy. Values in and out are frozen dataclasses.
"""

from storage.errors import DatabaseBusy, LockTimeout, StorageError
from storage.locks import SessionLocks, wait_budget
from storage.records import (
    PROMPT_TOKENS_PENDING,
    UNSET,
    ArchivedMessage,
    ArchiveFacts,
    Checkpoint,
    CheckpointInfo,
    CompressionCommit,
    Event,
    EventRecord,
    Fork,
    JSONObject,
    Message,
    SessionDetail,
    SessionKey,
    SessionRecord,
    StoreStats,
    Unset,
    UsagePoint,
    UsageRecord,
    evolved,
)
from storage.replay import journal_directory
from storage.rows.retention import DailyUsage
from storage.rows.search import read_terms_with
from storage.rows.terms import Terms, search_terms
from storage.store import SessionStore
from storage.sweeper import RetentionPolicy, Sweeper, SweepReport, daily_usage

__all__ = [
    "PROMPT_TOKENS_PENDING",
    "UNSET",
    "ArchiveFacts",
    "ArchivedMessage",
    "Checkpoint",
    "CheckpointInfo",
    "CompressionCommit",
    "DailyUsage",
    "DatabaseBusy",
    "Event",
    "EventRecord",
    "Fork",
    "JSONObject",
    "LockTimeout",
    "Message",
    "RetentionPolicy",
    "SessionDetail",
    "SessionKey",
    "SessionLocks",
    "SessionRecord",
    "SessionStore",
    "StorageError",
    "StoreStats",
    "SweepReport",
    "Sweeper",
    "Terms",
    "Unset",
    "UsagePoint",
    "UsageRecord",
    "daily_usage",
    "evolved",
    "journal_directory",
    "read_terms_with",
    "search_terms",
    "wait_budget",
]
