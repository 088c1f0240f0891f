"""What the PostgreSQL store tells its caller when the driver, the socket or the server fails.

Every exception asyncpg or the operating system raises inside the store is turned into a
``LedgerError`` here, chained to the original (docs/errors.md): nothing asyncpg defines
reaches a caller. A connection lost in the middle of a write leaves its outcome unknown,
and the message says so; retrying is safe, since a batch that had landed is recognised
and not written twice (docs/durability.md, "write-behind").
"""

from __future__ import annotations

import asyncpg
from asyncpg.pgproto import pgproto

from sessionledger import (
    ConfigError,
    CorruptLogError,
    LedgerError,
    SeqMismatchError,
    SessionLockedError,
    SessionNotFoundError,
    StoreUnavailableError,
)

__all__ = ["LOST", "translate"]

#: How a lost connection shows up: the socket, the driver's own state after the loss, or
#: the server ending the session (administrator, shutdown, crash, starting up).
LOST = (
    OSError,  # includes TimeoutError and ConnectionError
    EOFError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # e.g. "cannot switch to state …" after the server hung up
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.IdleSessionTimeoutError,
    asyncpg.IdleInTransactionSessionTimeoutError,
)

_ACCESS = (
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.InvalidCatalogNameError,
    asyncpg.InsufficientPrivilegeError,
)
_LOCKING = (
    asyncpg.LockNotAvailableError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
)


def translate(error: BaseException, where: str, session_id: str | None = None) -> LedgerError:
    """Return the ``LedgerError`` that describes *error*, raised at the store *where*.

    A ``LedgerError`` is returned unchanged; the caller raises the result ``from error``.
    """
    if isinstance(error, LedgerError):
        return error
    if isinstance(error, asyncpg.UniqueViolationError):
        return SeqMismatchError(
            f"rows already stored at the batch's seqs (written past next_seq?): {error}",
            session_id=session_id,
        )
    if isinstance(error, asyncpg.ForeignKeyViolationError):
        return SessionNotFoundError(
            "session is no longer stored (deleted by another writer?)", session_id=session_id
        )
    if isinstance(error, _LOCKING):
        return SessionLockedError(f"PostgreSQL refused a lock: {error}", session_id=session_id)
    if isinstance(error, _ACCESS):
        return ConfigError(f"PostgreSQL at {where} refused access: {error}")
    if isinstance(error, asyncpg.DataCorruptedError):
        return CorruptLogError(
            f"PostgreSQL reports damaged data: {error}", session_id=session_id, path=where
        )
    if isinstance(error, pgproto.BufferError):
        # asyncpg's own BufferError (not Python's): a message too large for the protocol
        # (1 GiB), refused while it is built, before anything is sent; or a reply it could
        # not decode.
        return LedgerError(
            f"a message between this process and PostgreSQL at {where} is larger than the "
            "protocol carries (1 GiB) or malformed; a write refused this way sent nothing "
            f"({type(error).__name__}: {error})",
            session_id=session_id,
        )
    if isinstance(error, LOST):
        return StoreUnavailableError(
            f"lost the connection to PostgreSQL at {where}: a write in flight may or may "
            "not have committed; retrying it is safe, a batch that landed is recognised and "
            f"not written twice ({type(error).__name__}: {error})",
            session_id=session_id,
        )
    return LedgerError(
        f"PostgreSQL failed on {where} ({type(error).__name__}: {error})", session_id=session_id
    )
