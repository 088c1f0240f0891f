"""``SqlitePersistence``: session logs in one SQLite database, through aiosqlite.

The policy (committed region, repair, version and type checks, per-id locking, how a
refusal is worded) is the core's; ``SqliteLogStore`` moves rows. One connection serves
the store: every statement runs under one ``asyncio.Lock``, so transactions of different
sessions never interleave on it. Other processes may open the same file; SQLite's write
lock serializes writers across them, and the schema's triggers re-check the stored next
seq inside each write, so a stale writer's batch is refused and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import hashlib
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

from sessionledger import rows
from sessionledger._failpoints import failpoint
from sessionledger.claims import Claims
from sessionledger.errors import (
    ConfigError,
    LedgerError,
)
from sessionledger.events import SessionHeader
from sessionledger.files import fsync_dir, make_private_dirs, open_private_file
from sessionledger.logstore import Batch, LogStore, RawLog, RawRecord, Repair, RepairReceipt
from sessionledger.persistence import SessionPersistence
from sessionledger.registry import EventTypeRegistry
from sessionledger_sqlite import schema
from sessionledger_sqlite.failures import translate

__all__ = ["MEMORY", "SqliteLogStore", "SqlitePersistence"]

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

_SELECT_REVISION: Final = "SELECT incarnation, revision FROM sessions WHERE id = ?"
_EVENT_COLUMN_NAMES: Final = tuple(_EVENT_COLUMNS.split(", "))
_SELECT_EVENTS_AFTER: Final = (
    f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq"
)


def _flat(event_rows: list[tuple[Any, ...]]) -> list[Any]:
    return [value for row in event_rows for value in row]


def _row_end(tail: Sequence[Any]) -> int:
    """Return the next seq after the last stored row (0 when there is none)."""
    return rows.row_end(*tail[0]) if tail else 0


class _Refused(Exception):
    """A write the schema's triggers refused: the batch does not continue the stored log."""


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
class SqliteLogStore(LogStore):
    """The storage primitives of the SQLite backend: rows of one database file (or
    ``:memory:``), through one aiosqlite connection opened on first use."""

    scheme = "sqlite"
    can_tear = False  # a transaction is all or nothing
    max_row_members = 1024
    max_row_bytes = 1 << 20

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 5.0,
    ) -> None:
        self.path: Final = _check_path(path)
        self.synchronous: Final = _check_options(synchronous, busy_timeout)
        self.busy_timeout: Final = float(busy_timeout)
        self._location = None if self.path == MEMORY else self.path
        self._db: aiosqlite.Connection | None = None
        self._finalizer: weakref.finalize[[aiosqlite.Connection, str], SqliteLogStore] | None = None
        self._reader: aiosqlite.Connection | None = None  # read-only, until a write opens _db
        self._reader_finalizer: weakref.finalize[..., SqliteLogStore] | None = None
        self._gate = asyncio.Lock()
        self._shut = False
        #: Rows repairs of an in-memory database moved aside (its quarantine).
        self.quarantined: list[bytes] = []
        self._claims = (
            None
            if self.path == MEMORY
            else Claims(
                f"{self.path}.locks",
                f"{self.path}.owners",
                # No reference back to the store: its finalizer must still run on drop.
                prepare=functools.partial(
                    make_private_dirs, os.path.dirname(self.path), fsync=True
                ),
            )
        )

    @property
    def connection(self) -> aiosqlite.Connection | None:
        """The open connection (None before first use and after ``close``)."""
        return self._db

    def locate(self, header: SessionHeader) -> str | None:
        """Return the database file (it holds every session), or None in memory."""
        return self._location

    def __repr__(self) -> str:
        return f"SqliteLogStore({self.path!r})"

    # -- connection and transactions -----------------------------------------------------

    async def _connect(self) -> aiosqlite.Connection:
        """Open and check the database for writing (creating it); called under the gate."""
        if self._shut:
            raise ConfigError(f"SQLite store {self.path!r} is closed")
        if self._db is not None:
            return self._db
        await self._close_reader()  # the writer sees everything from now on
        db = await schema.open_database(
            self.path,
            memory=self.path == MEMORY,
            synchronous=self.synchronous,
            busy_timeout=self.busy_timeout,
        )
        self._db = db
        self._finalizer = weakref.finalize(self, _abandon, db, self.path)
        self._finalizer.atexit = False  # at exit the daemon worker ends with the process
        return db

    async def _connect_reader(self) -> aiosqlite.Connection | None:
        """The connection reads use: the writer once there is one, else a read-only one
        that creates nothing (None: there is no database to read yet)."""
        if self._shut:
            raise ConfigError(f"SQLite store {self.path!r} is closed")
        if self._db is not None or self.path == MEMORY:
            return await self._connect()
        if self._reader is None:
            self._reader = await schema.open_reader(self.path, self.busy_timeout)
            if self._reader is not None:
                finalizer = weakref.finalize(self, _abandon, self._reader, self.path)
                finalizer.atexit = False
                self._reader_finalizer = finalizer
        return self._reader

    async def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if self._reader_finalizer is not None:
            self._reader_finalizer.detach()
            self._reader_finalizer = None
        if reader is not None:
            with contextlib.suppress(sqlite3.Error):
                await reader.close()

    @contextlib.asynccontextmanager
    async def _reading(self, session_id: str | None) -> AsyncIterator[aiosqlite.Connection | None]:
        """Lend the connection reads use (None when there is no database yet) in one read
        transaction; translate driver errors."""
        async with self._gate:
            try:
                db = await self._connect_reader()
                if db is None:
                    yield None
                    return
                if db.in_transaction:
                    await db.execute_fetchall("ROLLBACK")
                await db.execute_fetchall("BEGIN")
                try:
                    yield db
                finally:
                    with contextlib.suppress(sqlite3.Error):
                        await db.execute_fetchall("ROLLBACK")
            except (sqlite3.Error, OSError) as error:
                raise self._translate(error, session_id) from error

    @contextlib.asynccontextmanager
    async def _connection(self, session_id: str | None) -> AsyncIterator[aiosqlite.Connection]:
        """Lend the writing connection for the body (its statements commit one by one)
        and translate driver errors; a refused batch surfaces as ``_Refused``."""
        async with self._gate:
            try:
                db = await self._connect()
                if db.in_transaction:  # an earlier rollback was itself interrupted
                    await db.execute_fetchall("ROLLBACK")
                yield db
            except sqlite3.IntegrityError as error:
                if schema.SEQ_MISMATCH in str(error):
                    raise _Refused from error
                raise self._translate(error, session_id) from error
            except (sqlite3.Error, OSError) as error:
                raise self._translate(error, session_id) from error

    @contextlib.asynccontextmanager
    async def _transaction(
        self, begin: str, session_id: str | None = None
    ) -> AsyncIterator[aiosqlite.Connection]:
        """Run the body as one transaction (``begin`` is ``BEGIN`` or ``BEGIN IMMEDIATE``)."""
        async with self._connection(session_id) as db:
            await db.execute_fetchall(begin)
            try:
                yield db
                await db.execute_fetchall("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    await db.execute_fetchall("ROLLBACK")
                raise

    def _translate(self, error: sqlite3.Error | OSError, session_id: str | None) -> LedgerError:
        """The library's error for a driver or OS error (``failures.translate``)."""
        return translate(error, self.path, self.busy_timeout, session_id)

    # -- reading ---------------------------------------------------------------------------

    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        async with self._reading(session_id) as db:
            if db is None:
                return None
            head = list(await db.execute_fetchall(_SELECT_SESSION, (session_id,)))
            if not head:
                return None
            if from_seq > 0:
                found = await db.execute_fetchall(_SELECT_EVENTS_FROM, (session_id, from_seq))
            else:
                found = await db.execute_fetchall(_SELECT_EVENTS, (session_id,))
            event_rows = list(found)
        session = head[0]
        records = [
            RawRecord(rows.record_from_columns(*row), row[0], f"row seq {row[0]}")
            for row in event_rows
        ]
        torn_at = None
        last = event_rows[-1] if event_rows else None
        end = 0 if last is None else _row_end([(last[0], last[6], last[3])])
        if session[11] != end:
            # The stored next seq disagrees with the rows (rows lost at the end, or a
            # damaged counter): like a torn tail, load cuts there, which rewrites the
            # counter; otherwise every repair append would fail its seq check forever.
            torn_at = end
        revision = rows.revision_string(session[9], session[10])
        return RawLog(rows.header_json(session), records, revision, self._location, torn_at)

    async def read_revision(self, session_id: str) -> str | None:
        async with self._reading(session_id) as db:
            if db is None:
                return None
            found = list(await db.execute_fetchall(_SELECT_REVISION, (session_id,)))
        return rows.revision_string(*found[0]) if found else None

    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        async with self._reading(None) as db:
            if db is None:
                return []
            found = list(await db.execute_fetchall(_SELECT_HEADERS))
        return [(rows.header_json(row), rows.revision_string(row[9], row[10])) for row in found]

    # -- claims ----------------------------------------------------------------------------

    async def claim(self, session_id: str) -> None:
        """Claim through ``<database>.locks`` (``sessionledger.claims``); a private
        in-memory database has no other writer."""
        if self._claims is None:
            return
        try:
            await asyncio.to_thread(self._claims.claim, session_id)
        except OSError as error:
            raise self._translate(error, session_id) from error

    async def release(self, session_id: str) -> None:
        if self._claims is not None:
            self._claims.release(session_id)

    # -- writing ---------------------------------------------------------------------------

    async def write_batch(self, batch: Batch) -> bool:
        session_id = batch.header.id
        # Serialize before writing: a value that cannot be stored writes nothing.
        event_rows = _event_rows(session_id, batch)
        try:
            if batch.creates:
                created = await self._create(batch.header, event_rows)
                if not created:
                    return False
            elif len(event_rows) <= _ROWS_PER_STATEMENT:
                # The common append: one statement, committed on its own, whose triggers
                # check that it continues the stored log (a stale writer is refused) and
                # advance the log's end and revision: one round trip to the database.
                async with self._connection(session_id) as db:
                    failpoint("sqlite.write.before-statement")
                    await db.execute_fetchall(_insert_events(len(event_rows)), _flat(event_rows))
            else:
                async with self._transaction("BEGIN IMMEDIATE", session_id) as db:
                    failpoint("sqlite.write.after-begin")
                    await _insert_all(db, event_rows)
                    failpoint("sqlite.write.before-commit")
        except _Refused:
            return False
        failpoint("sqlite.write.after-commit")
        return True

    async def _create(self, header: SessionHeader, event_rows: list[tuple[Any, ...]]) -> bool:
        """Insert the session row and its first batch in one transaction; False (nothing
        inserted) when the id is taken. The row starts at seq 0, and the schema's
        triggers advance it as the events go in."""
        async with self._transaction("BEGIN IMMEDIATE", header.id) as db:
            failpoint("sqlite.write.after-begin")
            inserted = await db.execute_fetchall(
                _INSERT_SESSION, (*rows.header_columns(header), uuid.uuid4().hex, 0)
            )
            if not list(inserted):
                return False
            failpoint("sqlite.write.after-session-row")
            await _insert_all(db, event_rows)
            failpoint("sqlite.write.before-commit")
        return True

    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        session_id = repair.header.id
        closers = [] if repair.closers is None else _event_rows(session_id, repair.closers)
        receipt = RepairReceipt()
        try:
            async with self._transaction("BEGIN IMMEDIATE", session_id) as db:
                current = list(await db.execute_fetchall(_SELECT_REVISION, (session_id,)))
                if not current or rows.revision_string(*current[0]) != repair.revision:
                    return None
                if repair.cut_at is not None:
                    cut = [
                        tuple(row)
                        for row in await db.execute_fetchall(
                            _SELECT_EVENTS_AFTER, (session_id, repair.cut_at)
                        )
                    ]
                    if cut:
                        # Moved aside, durably, before the delete can commit.
                        receipt = await asyncio.to_thread(self._quarantine, session_id, cut)
                    await db.execute_fetchall(
                        "DELETE FROM events WHERE session_id = ? AND seq >= ?",
                        (session_id, repair.cut_at),
                    )
                    end = _row_end(list(await db.execute_fetchall(_SELECT_TAIL, (session_id,))))
                    await db.execute_fetchall(
                        "UPDATE sessions SET next_seq = ?, revision = revision + 1 WHERE id = ?",
                        (end, session_id),
                    )
                await _insert_all(db, closers)
                failpoint("sqlite.repair.before-commit")
        except _Refused:
            return None
        failpoint("sqlite.repair.after-commit")
        return receipt

    def _quarantine(self, session_id: str, cut: list[tuple[Any, ...]]) -> RepairReceipt:
        """Write rows a repair cuts to a new file beside the database (one JSON object of
        columns per line, ``0600``), fsynced with its directory; in memory, keep them."""
        lines = b"".join(
            rows.json_text(dict(zip(_EVENT_COLUMN_NAMES, row, strict=True))).encode() + b"\n"
            for row in cut
        )
        if self.path == MEMORY:
            self.quarantined.append(lines)
            return RepairReceipt(f"{MEMORY} quarantine #{len(self.quarantined)}", len(lines))
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        digest = hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=6)
        target = f"{self.path}.quarantine-{digest.hexdigest()}-{stamp}.jsonl"
        fd = open_private_file(target, os.O_WRONLY | os.O_EXCL)
        try:
            os.write(fd, lines)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(os.path.dirname(target))
        return RepairReceipt(target, len(lines))

    async def delete_log(self, session_id: str) -> bool:
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

    async def close(self) -> None:
        if self._claims is not None:
            self._claims.release_all()
        async with self._gate:
            self._shut = True
            db, self._db = self._db, None
            await self._close_reader()
            if self._finalizer is not None:
                self._finalizer.detach()
            if db is not None:
                try:
                    await db.close()
                except sqlite3.Error as error:
                    raise self._translate(error, None) from error


def _event_rows(session_id: str, batch: Batch) -> list[tuple[Any, ...]]:
    """The ``events`` rows of a batch: each record's columns and its member count."""
    return [
        (session_id, *rows.event_columns(record), rows.member_count(record))
        for record in batch.records
    ]


async def _insert_all(db: aiosqlite.Connection, event_rows: list[tuple[Any, ...]]) -> None:
    """Insert rows in statements of at most ``_ROWS_PER_STATEMENT`` (inside a transaction)."""
    for start in range(0, len(event_rows), _ROWS_PER_STATEMENT):
        part = event_rows[start : start + _ROWS_PER_STATEMENT]
        await db.execute_fetchall(_insert_events(len(part)), _flat(part))


@final
class SqlitePersistence(SessionPersistence):
    """Keep session logs in one SQLite database file (or ``:memory:``), through aiosqlite.

    Construction is synchronous and touches nothing; the file is created (mode 0600) and
    checked on first use. ``synchronous="NORMAL"`` trades the durability of the last
    commits on power loss (not on a process crash) for fewer fsyncs; ``busy_timeout`` is
    how long a write waits, in seconds, for another connection's write lock.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        event_types: EventTypeRegistry | None = None,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 5.0,
    ) -> None:
        self._sqlite = SqliteLogStore(path, synchronous=synchronous, busy_timeout=busy_timeout)
        super().__init__(self._sqlite, event_types=event_types)

    @property
    def log_store(self) -> SqliteLogStore:
        """The SQLite storage primitives this backend drives."""
        return self._sqlite

    @property
    def path(self) -> str:
        """The database path (absolute), or ``":memory:"``."""
        return self._sqlite.path

    def __repr__(self) -> str:
        return f"SqlitePersistence({self.path!r})"
