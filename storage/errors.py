"""The errors storage raises, and the one place database exceptions are mapped to them.

    StorageError            every failed public call (bad URL, server gone, constraint broken)
     ├── DatabaseBusy       the database stayed locked past busy_timeout / a lock or
     │                      serialisation conflict; retrying later may succeed
     └── LockTimeout        SessionLocks.require() could not take a session lock in time

Callers decide policy by type, never by message text: the proxy goes on uncompressed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

# SQLite primary result codes SQLITE_BUSY and SQLITE_LOCKED.
_SQLITE_BUSY_CODES = frozenset({5, 6})
# PostgreSQL: serialization_failure, deadlock_detected, lock_not_available, query_canceled.
_PG_BUSY_STATES = frozenset({"40001", "40P01", "55P03", "57014"})


class StorageError(Exception):
    """A storage operation failed; nothing of it was committed."""


class DatabaseBusy(StorageError):
    """The database was busy for longer than we are willing to wait."""


class LockTimeout(StorageError):
    """A session lock could not be taken within the wait budget."""


@contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raise database and driver errors as StorageError (DatabaseBusy when transient)."""
    try:
        yield
    except StorageError:
        raise
    except DBAPIError as exc:
        kind = DatabaseBusy if _is_busy(exc) else StorageError
        raise kind(_describe(exc)) from exc
    except (SQLAlchemyError, OSError, TimeoutError) as exc:
        raise StorageError(_describe(exc)) from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # A value the driver or json cannot store (an int past 64 bits, bytes in a dict).
        raise StorageError(f"cannot store value: {_describe(exc)}") from exc


def _is_busy(exc: DBAPIError) -> bool:
    orig = exc.orig
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _SQLITE_BUSY_CODES:
        return True
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in _PG_BUSY_STATES:
        return True
    # Older drivers only say it in words; this is the one text check we keep.
    text = str(orig).lower()
    return "database is locked" in text or "database is busy" in text


def _describe(exc: BaseException) -> str:
    # The first line of the driver message names the problem; the SQL and parameters
    # that SQLAlchemy appends can hold message bodies, so they stay out.
    orig = getattr(exc, "orig", None) or exc
    first_line = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    return f"{type(orig).__name__}: {first_line}"[:300]
