"""How the SQLite backend names what went wrong: driver and OS errors as the library's.

One place maps them, so every primitive refuses the same way: a held write lock is
``SessionLockedError``, a foreign file ``FormatUnsupportedError``, damage
``CorruptLogError``, a full disk or exhausted descriptors ``ResourceLimitError``, an
unusable path ``ConfigError``.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from typing import Final

from sessionledger._errors import (
    ConfigError,
    CorruptLogError,
    FormatUnsupportedError,
    LedgerError,
    ResourceLimitError,
    SessionLockedError,
)

__all__ = ["translate"]

# SQLite primary result codes (the low byte of an extended code).
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_READONLY: Final = 8
_SQLITE_CORRUPT: Final = 11
_SQLITE_CANTOPEN: Final = 14
_SQLITE_NOTADB: Final = 26
_SQLITE_FULL: Final = 13
_SQLITE_IOERR: Final = 10
#: Below this much free space an I/O error is taken for a full disk: SQLite reports a
#: failed write of its WAL or shared-memory file without the errno behind it.
_NEARLY_FULL_BYTES: Final = 64 * 1024
_EXHAUSTED: Final = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG))


def translate(
    error: sqlite3.Error | OSError, where: str, busy_timeout: float, session_id: str | None
) -> LedgerError:
    """Map a driver or OS error met on the database at *where* to the library's errors."""
    if isinstance(error, OSError):
        if error.errno in _EXHAUSTED:
            return ResourceLimitError(
                f"{error.filename or where}: {error.strerror or error}",
                errno=error.errno,
                session_id=session_id,
                path=where,
            )
        return ConfigError(f"cannot write beside the database {where!r}: {error}")
    code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
    if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return SessionLockedError(
            f"the database is locked by another connection and stayed locked for the "
            f"busy timeout ({busy_timeout:g} s): {error}",
            session_id=session_id,
        )
    if code == _SQLITE_NOTADB:
        return FormatUnsupportedError(
            f"not a SQLite database: {error}", code="FOREIGN_STORE", path=where
        )
    if code == _SQLITE_CORRUPT or isinstance(error, sqlite3.IntegrityError):
        # A constraint failure means the stored rows disagree with the sessions table.
        return CorruptLogError(
            f"the database is damaged: {error}", session_id=session_id, path=where
        )
    if code == _SQLITE_FULL or (code in (_SQLITE_IOERR, _SQLITE_CANTOPEN) and _disk_is_full(where)):
        return ResourceLimitError(
            f"the disk holding {where!r} is full: {error}",
            errno=errno.ENOSPC,
            session_id=session_id,
            path=where,
        )
    if code == _SQLITE_CANTOPEN:
        return ConfigError(f"cannot open the database {where!r}: {error}")
    if code == _SQLITE_READONLY:
        return ConfigError(f"the database {where!r} is read-only here: {error}")
    return LedgerError(f"SQLite failed on {where!r}: {error}", session_id=session_id)


def _disk_is_full(path: str) -> bool:
    """Whether the file system holding *path* has (next to) no space left."""
    try:
        status = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return status.f_bavail * status.f_frsize < _NEARLY_FULL_BYTES
