"""``SqlitePersistence``: session logs in one SQLite database, through aiosqlite (SPEC §13).

The policy (committed region, repair, version and type checks, per-id locking) is the
core's; this module moves rows. One connection serves the store: every transaction runs
under one ``asyncio.Lock``, so transactions of different sessions never interleave on it.
Other processes may open the same file; SQLite's write lock (``BEGIN IMMEDIATE``)
serializes writers across them, and each write re-checks the stored next seq inside its
transaction, so a stale writer fails with ``SeqMismatchError`` and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import sqlite3
import threading
import uuid
import warnings
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final, Literal, final

import aiosqlite

from sessionledger import rows as layout
from sessionledger._failpoints import failpoint
from sessionledger.errors import (
    ConfigError,
    CorruptLogError,
    FormatUnsupportedError,
    LedgerError,
    SeqMismatchError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
)
from sessionledger.events import SessionHeader
from sessionledger.persistence import UNPARSABLE, RawLog, RawRecord, SessionPersistence
from sessionledger.registry import EventTypeRegistry
from sessionledger_sqlite import schema

__all__ = ["MEMORY", "SqlitePersistence"]

#: The path that names a private in-memory database (``sqlite::memory:``).
MEMORY: Final = ":memory:"

_HEADER_COLUMNS: Final = (
    "id, version, created_at, cwd, parent_session, seed_length, delegation_depth, title, meta"
)
_SELECT_SESSION: Final = (
    f"SELECT {_HEADER_COLUMNS}, incarnation, revision, next_seq FROM sessions WHERE id = ?"
)
_SELECT_HEADERS: Final = (
    f"SELECT {_HEADER_COLUMNS}, incarnation, revision FROM sessions ORDER BY created_at, id"
)
_EVENT_COLUMNS: Final = "seq, type, time, data, source_event_seqs, surface_op, ignorable"
_SELECT_EVENTS: Final = f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? ORDER BY seq"
# Start at the row that covers from_seq: a packed row can begin before it.
_SELECT_EVENTS_FROM: Final = (
    f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ?1 AND seq >= coalesce("
    "(SELECT max(seq) FROM events WHERE session_id = ?1 AND seq <= ?2), 0) ORDER BY seq"
)
_INSERT_SESSION: Final = (
    f"INSERT INTO sessions ({_HEADER_COLUMNS}, incarnation, revision, next_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?) ON CONFLICT (id) DO NOTHING RETURNING 1"
)
#: Rows per INSERT statement: well below SQLite's limit of 32,766 bound variables.
_ROWS_PER_STATEMENT: Final = 500


@functools.lru_cache(maxsize=64)
def _insert_events(count: int) -> str:
    """The INSERT of *count* event rows (the schema's triggers check and advance the log)."""
    placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    return f"INSERT INTO events (session_id, {_EVENT_COLUMNS}, members) VALUES {placeholders}"


_SELECT_TAIL: Final = (
    "SELECT seq, ignorable, data FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1"
)

# SQLite primary result codes (the low byte of an extended code).
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_READONLY: Final = 8
_SQLITE_CORRUPT: Final = 11
_SQLITE_CANTOPEN: Final = 14
_SQLITE_NOTADB: Final = 26


def _flat(rows: list[tuple[Any, ...]]) -> list[Any]:
    return [value for row in rows for value in row]


def _row_end(tail: Sequence[Any]) -> int:
    """Return the next seq after the last stored row (0 when there is none)."""
    return layout.row_end(*tail[0]) if tail else 0


def _check_options(synchronous: str, busy_timeout: float) -> Literal["FULL", "NORMAL"]:
    mode = synchronous.upper() if type(synchronous) is str else synchronous
    if mode not in ("FULL", "NORMAL"):
        raise ConfigError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
    if (
        type(busy_timeout) not in (int, float)
        or not math.isfinite(busy_timeout)
        or busy_timeout < 0
    ):
        raise ConfigError(
            f"busy_timeout must be a non-negative number of seconds, got {busy_timeout!r}"
        )
    return "FULL" if mode == "FULL" else "NORMAL"


def _check_path(path: str | os.PathLike[str]) -> str:
    try:
        text = os.fspath(path)
    except TypeError as error:
        raise ConfigError(f"database path must be a str or path, got {path!r}") from error
    if type(text) is not str or not text or "\0" in text:
        raise ConfigError(f"invalid database path {path!r}")
    return text if text == MEMORY else os.path.abspath(os.path.expanduser(text))


def _abandon(db: aiosqlite.Connection, path: str) -> None:
    """Stop the connection of a store that was dropped without ``close()``.

    aiosqlite's worker thread keeps its connection reachable while it waits for work, so
    an unclosed connection is never collected: its thread and SQLite handle would live as
    long as the process. Committed batches are durable and transactions are atomic, so
    stopping it loses nothing. ``stop()`` is called from a helper thread, which has no
    event loop: the worker then reports to no loop at all (the loop the store used may
    already be closed when the garbage collector gets here).
    """
    threading.Thread(target=db.stop, name="sessionledger-sqlite-stop", daemon=True).start()
    warnings.warn(
        f"SqlitePersistence({path!r}) was dropped without close(); its connection was stopped",
        ResourceWarning,
        stacklevel=2,
    )


@final
class SqlitePersistence(SessionPersistence):
    """Keep session logs in one SQLite database file (or ``:memory:``), through aiosqlite.

    Construction is synchronous and touches nothing; the file is created (mode 0600) and
    checked on first use. ``synchronous="NORMAL"`` trades the durability of the last
    commits on power loss (not on a process crash) for fewer fsyncs; ``busy_timeout`` is
    how long a write waits, in seconds, for another connection's write lock.
    """

    scheme = "sqlite"
    can_tear = False  # a transaction is all or nothing
    max_row_members = 1024
    max_row_bytes = 1 << 20

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        event_types: EventTypeRegistry | None = None,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 5.0,
    ) -> None:
        super().__init__(event_types=event_types)
        self._path = _check_path(path)
        self._synchronous = _check_options(synchronous, busy_timeout)
        self._busy_timeout = float(busy_timeout)
        self._db: aiosqlite.Connection | None = None
        self._finalizer: weakref.finalize[[aiosqlite.Connection, str], SqlitePersistence] | None = (
            None
        )
        self._gate = asyncio.Lock()
        self._shut = False
        # The revision each session had when this instance last read it: a truncation
        # (repair) applies only to the log it was computed from.
        self._seen: dict[str, str] = {}

    @property
    def path(self) -> str:
        """The database path (absolute), or ``":memory:"``."""
        return self._path

    def locate(self, header: SessionHeader) -> str | None:
        """Return the database file (it holds every session), or None in memory."""
        return None if self._path == MEMORY else self._path

    def __repr__(self) -> str:
        return f"SqlitePersistence({self._path!r})"

    # -- connection and transactions -----------------------------------------------------

    async def _connect(self) -> aiosqlite.Connection:
        """Open and check the database; called under the gate."""
        if self._shut:
            raise ConfigError(f"SQLite store {self._path!r} is closed")
        if self._db is not None:
            return self._db
        db = await schema.open_database(
            self._path,
            memory=self._path == MEMORY,
            synchronous=self._synchronous,
            busy_timeout=self._busy_timeout,
        )
        self._db = db
        self._finalizer = weakref.finalize(self, _abandon, db, self._path)
        self._finalizer.atexit = False  # at exit the daemon worker ends with the process
        return db

    @contextlib.asynccontextmanager
    async def _transaction(
        self, begin: str | None, session_id: str | None = None
    ) -> AsyncIterator[aiosqlite.Connection]:
        """Run the body as one transaction (``begin`` is ``BEGIN`` or ``BEGIN IMMEDIATE``;
        None runs single autocommit statements) and translate driver errors."""
        async with self._gate:
            try:
                db = await self._connect()
                if db.in_transaction:  # an earlier rollback was itself interrupted
                    await db.execute_fetchall("ROLLBACK")
                if begin is None:
                    yield db
                    return
                await db.execute_fetchall(begin)
                try:
                    yield db
                    await db.execute_fetchall("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        await db.execute_fetchall("ROLLBACK")
                    raise
            except (sqlite3.Error, OSError) as error:
                raise self._translate(error, session_id) from error

    def _translate(self, error: sqlite3.Error | OSError, session_id: str | None) -> LedgerError:
        """Map a driver or OS error to the library's errors (the only place that does)."""
        where = self._path
        if isinstance(error, OSError):
            return ConfigError(f"cannot create the database file {where!r}: {error}")
        code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return SessionLockedError(
                f"the database is locked by another connection and stayed locked for the "
                f"busy timeout ({self._busy_timeout:g} s): {error}",
                session_id=session_id,
            )
        if code == _SQLITE_NOTADB:
            return FormatUnsupportedError(
                f"not a SQLite database: {error}", code="FOREIGN_STORE", path=where
            )
        if isinstance(error, sqlite3.IntegrityError) and schema.SEQ_MISMATCH in str(error):
            return SeqMismatchError(
                "the batch does not continue the stored log (another writer appended first, "
                "or the session was deleted meanwhile); load the session again",
                session_id=session_id,
            )
        if code == _SQLITE_CORRUPT or isinstance(error, sqlite3.IntegrityError):
            # A constraint failure means the stored rows disagree with the sessions table.
            return CorruptLogError(
                f"the database is damaged: {error}", session_id=session_id, path=where
            )
        if code == _SQLITE_CANTOPEN:
            return ConfigError(f"cannot open the database {where!r}: {error}")
        if code == _SQLITE_READONLY:
            return ConfigError(f"the database {where!r} is read-only here: {error}")
        return LedgerError(f"SQLite failed on {where!r}: {error}", session_id=session_id)

    # -- storage primitives ----------------------------------------------------------------

    async def _read(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        async with self._transaction("BEGIN", session_id) as db:
            head = list(await db.execute_fetchall(_SELECT_SESSION, (session_id,)))
            if not head:
                return None
            if from_seq > 0:
                rows = list(await db.execute_fetchall(_SELECT_EVENTS_FROM, (session_id, from_seq)))
            else:
                rows = list(await db.execute_fetchall(_SELECT_EVENTS, (session_id,)))
        session = head[0]
        revision = layout.revision_string(session[9], session[10])
        self._seen[session_id] = revision
        records = [
            RawRecord(layout.record_from_columns(*row), row[0], f"row seq {row[0]}") for row in rows
        ]
        location = None if self._path == MEMORY else self._path
        header = layout.header_json(session)
        if header.get("meta") is UNPARSABLE:
            raise CorruptLogError(
                "stored header meta is not valid JSON", session_id=session_id, path=location
            )
        torn_at = None
        last = rows[-1] if rows else None
        end = 0 if last is None else _row_end([(last[0], last[6], last[3])])
        if session[11] != end:
            # The stored next seq disagrees with the rows (rows lost at the end, or a
            # damaged counter): like a torn tail, load cuts there, which rewrites the
            # counter; otherwise every repair append would fail its seq check forever.
            torn_at = end
        return RawLog(header, records, revision, location, torn_at)

    async def _write(
        self,
        header: SessionHeader,
        records: list[dict[str, Any]],
        *,
        next_seq: int,
        materialize: bool,
    ) -> None:
        session_id = header.id
        # Serialize before writing: a value that cannot be stored writes nothing.
        rows = [
            (session_id, *layout.event_columns(record), layout.member_count(record))
            for record in records
        ]
        try:
            await self._insert(header, rows, next_seq=next_seq, materialize=materialize)
        except SeqMismatchError as error:
            raise await self._stale(session_id, next_seq) from error
        failpoint("sqlite.write.after-commit")

    async def _insert(
        self,
        header: SessionHeader,
        rows: list[tuple[Any, ...]],
        *,
        next_seq: int,
        materialize: bool,
    ) -> None:
        session_id = header.id
        if not materialize and len(rows) <= _ROWS_PER_STATEMENT:
            # The common append: one statement, committed on its own, whose triggers
            # check that it continues the stored log (a stale writer is refused) and
            # advance the log's end and revision: one round trip to the database.
            async with self._transaction(None, session_id) as db:
                failpoint("sqlite.write.before-statement")
                await db.execute_fetchall(_insert_events(len(rows)), _flat(rows))
            return
        async with self._transaction("BEGIN IMMEDIATE", session_id) as db:
            failpoint("sqlite.write.after-begin")
            if materialize:
                inserted = await db.execute_fetchall(
                    _INSERT_SESSION, (*layout.header_columns(header), uuid.uuid4().hex, next_seq)
                )
                if not list(inserted):
                    raise SessionExistsError(
                        "session already has a stored log", session_id=session_id
                    )
                failpoint("sqlite.write.after-session-row")
            for start in range(0, len(rows), _ROWS_PER_STATEMENT):
                part = rows[start : start + _ROWS_PER_STATEMENT]
                await db.execute_fetchall(_insert_events(len(part)), _flat(part))
            failpoint("sqlite.write.before-commit")

    async def _stale(self, session_id: str, seq: int) -> LedgerError:
        """Say why a batch starting at *seq* was refused (the error path reads once more)."""
        async with self._transaction(None, session_id) as db:
            stored = list(
                await db.execute_fetchall(
                    "SELECT next_seq FROM sessions WHERE id = ?", (session_id,)
                )
            )
        if not stored:
            return SessionNotFoundError(
                "session is no longer stored (deleted by another writer?)", session_id=session_id
            )
        return SeqMismatchError(
            f"batch starts at seq {seq} but the stored log continues at seq {stored[0][0]} "
            "(another writer appended first)",
            session_id=session_id,
            seq=seq,
        )

    async def _truncate(self, session_id: str, position: Any) -> None:
        seen = self._seen.pop(session_id, None)
        async with self._transaction("BEGIN IMMEDIATE", session_id) as db:
            current = list(
                await db.execute_fetchall(
                    "SELECT incarnation, revision FROM sessions WHERE id = ?", (session_id,)
                )
            )
            if not current:
                raise SessionNotFoundError("session not found", session_id=session_id)
            if seen is not None and layout.revision_string(*current[0]) != seen:
                raise SeqMismatchError(
                    f"stored log changed since it was read; not truncating it at seq {position}",
                    session_id=session_id,
                    seq=position,
                )
            await db.execute_fetchall(
                "DELETE FROM events WHERE session_id = ? AND seq >= ?", (session_id, position)
            )
            end = _row_end(list(await db.execute_fetchall(_SELECT_TAIL, (session_id,))))
            await db.execute_fetchall(
                "UPDATE sessions SET next_seq = ?, revision = revision + 1 WHERE id = ?",
                (end, session_id),
            )
            failpoint("sqlite.truncate.before-commit")
        failpoint("sqlite.truncate.after-commit")

    async def _stored_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        async with self._transaction(None) as db:
            rows = await db.execute_fetchall(_SELECT_HEADERS)
        return [(layout.header_json(row), layout.revision_string(row[9], row[10])) for row in rows]

    async def _revision(self, session_id: str) -> str | None:
        async with self._transaction(None, session_id) as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT incarnation, revision FROM sessions WHERE id = ?", (session_id,)
                )
            )
        return layout.revision_string(*rows[0]) if rows else None

    async def _forget(self, session_id: str) -> None:
        self._seen.pop(session_id, None)

    async def _delete(self, session_id: str) -> bool:
        self._seen.pop(session_id, None)
        async with self._transaction("BEGIN IMMEDIATE", session_id) as db:
            # ON DELETE CASCADE (foreign_keys=ON is checked at open) removes the rows.
            deleted = bool(
                list(
                    await db.execute_fetchall(
                        "DELETE FROM sessions WHERE id = ? RETURNING 1", (session_id,)
                    )
                )
            )
            failpoint("sqlite.delete.before-commit")
        failpoint("sqlite.delete.after-commit")
        return deleted

    async def _close(self) -> None:
        async with self._gate:
            self._shut = True
            db, self._db = self._db, None
            if self._finalizer is not None:
                self._finalizer.detach()
            if db is not None:
                try:
                    await db.close()
                except sqlite3.Error as error:
                    raise self._translate(error, None) from error
