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
)
from storage.store import SessionStore
from storage.terms import Terms, search_terms

__all__ = [
    "PROMPT_TOKENS_PENDING",
    "UNSET",
    "ArchiveFacts",
    "ArchivedMessage",
    "Checkpoint",
    "CheckpointInfo",
    "CompressionCommit",
    "DatabaseBusy",
    "Event",
    "EventRecord",
    "Fork",
    "JSONObject",
    "LockTimeout",
    "Message",
    "SessionDetail",
    "SessionKey",
    "SessionLocks",
    "SessionRecord",
    "SessionStore",
    "StorageError",
    "StoreStats",
    "Terms",
    "Unset",
    "UsagePoint",
    "UsageRecord",
    "search_terms",
    "wait_budget",
]
