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
from sessionledger.listing import SessionQuery, StoredSummary
from sessionledger.logstore import Batch, LogStore, RawLog, Repair, RepairReceipt, SearchRow
from sessionledger.persistence import SessionPersistence
from sessionledger.registry import EventTypeRegistry
from sessionledger.searching import IndexedText, TextQuery
from sessionledger.summaries import SessionSummary
from sessionledger_sqlite import indexes, schema, upgrade
from sessionledger_sqlite.failures import translate
from sessionledger_sqlite.reading import EVENT_COLUMNS, SESSION_COLUMNS, raw_log, row_end

__all__ = ["MEMORY", "SqliteLogStore", "SqlitePersistence"]

#: The path that names a private in-memory database (``sqlite::memory:``).
MEMORY: Final = ":memory:"

_HEADER_COLUMNS: Final = (
    "id, version, created_at, cwd, parent_session, seed_length, delegation_depth, title, meta"
)
_SELECT_SESSION: Final = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
_SELECT_HEADERS: Final = (
    f"SELECT {_HEADER_COLUMNS}, incarnation, revision FROM sessions ORDER BY created_at, id"
)
_SUMMARY_ROW: Final = f"{_HEADER_COLUMNS}, incarnation, revision, {indexes.SUMMARY_COLUMNS}"
_SELECT_SUMMARIES: Final = f"SELECT {_SUMMARY_ROW} FROM sessions ORDER BY created_at, id"
# The partial index ``sessions_unsummarized`` answers this without reading the table.
_ANY_UNSUMMARIZED: Final = "SELECT 1 FROM sessions WHERE events IS NULL LIMIT 1"
_EVENT_COLUMNS: Final = EVENT_COLUMNS
_SELECT_EVENTS: Final = f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? ORDER BY seq"
# Start at the row that covers from_seq: a packed row can begin before it.
_SELECT_EVENTS_FROM: Final = (
    f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ?1 AND seq >= coalesce("
    "(SELECT max(seq) FROM events WHERE session_id = ?1 AND seq <= ?2), 0) ORDER BY seq"
)
_INSERT_SESSION: Final = (
    f"INSERT INTO sessions ({_HEADER_COLUMNS}, incarnation, revision, next_seq, "
    f"{indexes.SUMMARY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING RETURNING 1"
)
#: Rows per INSERT statement: well below SQLite's limit of 32,766 bound variables.
_ROWS_PER_STATEMENT: Final = 500


@functools.lru_cache(maxsize=64)
def _insert_events(count: int) -> str:
    """The INSERT of *count* event rows (the schema's triggers check and advance the log)."""
    placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    return f"INSERT INTO events (session_id, {_EVENT_COLUMNS}, members) VALUES {placeholders}"


@functools.lru_cache(maxsize=64)
def _append_rows(count: int) -> str:
    """The INSERT of *count* rows into the ``batch_rows`` view (schema v2): events, their
    search texts and, on the last row, the session's summary, in one statement."""
    placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    return (
        f"INSERT INTO batch_rows (session_id, {_EVENT_COLUMNS}, members, text, "
        f"summary_events, first_activity, last_activity, open_turn, closes) VALUES {placeholders}"
    )


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
    indexes_text = True  # FTS5 (schema v2)
    keeps_audit = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 5.0,
        upgrade: bool = False,
    ) -> None:
        if type(upgrade) is not bool:
            raise ConfigError(f"upgrade must be a bool, got {upgrade!r}")
        self.path: Final = _check_path(path)
        #: Whether opening upgrades a v1 database in place (``upgrade=1``).
        self.upgrade: Final = upgrade
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
            upgrade=(
                functools.partial(upgrade.fill_v2, location=self._location)
                if self.upgrade
                else None
            ),
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
        if self._db is not None or self.path == MEMORY or self.upgrade:
            return await self._connect()  # an upgrade writes, so it needs the writer
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
        return raw_log(head[0], event_rows, self._location)

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
                created = await self._create(batch, event_rows)
                if not created:
                    return False
            elif (appended := _appended_rows(event_rows, batch)) is not None:
                # The common append: one statement into the ``batch_rows`` view, whose
                # triggers check that the rows continue the stored log (a stale writer
                # is refused), advance its end and revision, and store the texts and the
                # summary: committed on its own, one round trip. Texts also need their
                # FTS5 entries, in the same transaction.
                values = _flat(appended)
                if not batch.texts:
                    async with self._connection(session_id) as db:
                        failpoint("sqlite.write.before-statement")
                        await db.execute_fetchall(_append_rows(len(appended)), values)
                else:
                    async with self._transaction("BEGIN IMMEDIATE", session_id) as db:
                        failpoint("sqlite.write.before-statement")
                        await db.execute_fetchall(_append_rows(len(appended)), values)
                        await indexes.index_texts(db, session_id, batch.texts[0].seq)
                        failpoint("sqlite.write.before-commit")
            else:
                # A batch of many rows: statement by statement, in one transaction.
                async with self._transaction("BEGIN IMMEDIATE", session_id) as db:
                    failpoint("sqlite.write.after-begin")
                    await _insert_all(db, event_rows)
                    await indexes.write_summary(db, session_id, batch.summary)
                    await indexes.insert_texts(db, session_id, batch.texts)
                    failpoint("sqlite.write.before-commit")
        except _Refused:
            return False
        failpoint("sqlite.write.after-commit")
        return True

    async def _create(self, batch: Batch, event_rows: list[tuple[Any, ...]]) -> bool:
        """Insert the session row (with the batch's summary) and its first batch in one
        transaction; False (nothing inserted) when the id is taken. The row starts at
        seq 0, and the schema's triggers advance it as the events go in."""
        header = batch.header
        summary = list(indexes.summary_values(batch.summary))
        if summary[2] is None:
            summary[2] = header.created_at
        async with self._transaction("BEGIN IMMEDIATE", header.id) as db:
            failpoint("sqlite.write.after-begin")
            inserted = await db.execute_fetchall(
                _INSERT_SESSION,
                (*rows.header_columns(header), uuid.uuid4().hex, 0, *summary),
            )
            if not list(inserted):
                return False
            failpoint("sqlite.write.after-session-row")
            await _insert_all(db, event_rows)
            await indexes.insert_texts(db, header.id, batch.texts)
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
                    end = row_end(list(await db.execute_fetchall(_SELECT_TAIL, (session_id,))))
                    await db.execute_fetchall(
                        "UPDATE sessions SET next_seq = ?, revision = revision + 1 WHERE id = ?",
                        (end, session_id),
                    )
                    kept = end if repair.kept_events is None else repair.kept_events
                    await indexes.delete_texts(db, session_id, kept)
                elif repair.kept_events is not None:
                    await indexes.delete_texts(db, session_id, repair.kept_events)
                await _insert_all(db, closers)
                if repair.closers is not None:
                    await indexes.insert_texts(db, session_id, repair.closers.texts)
                await indexes.write_summary(db, session_id, repair.summary)
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
            # The text index has no cascade: it forgets the texts while they still exist.
            await indexes.delete_texts(db, session_id)
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

    # -- listing, search, audit (docs/listing.md) ------------------------------------------

    async def list_summaries(self) -> list[StoredSummary]:
        async with self._reading(None) as db:
            if db is None:
                return []
            found = list(await db.execute_fetchall(_SELECT_SUMMARIES))
        return [_stored_summary(row) for row in found]

    async def save_summary(self, session_id: str, revision: str, summary: SessionSummary) -> None:
        async with self._transaction("BEGIN IMMEDIATE", session_id) as db:
            if await self._revision_in(db, session_id) == revision:
                await indexes.write_summary(db, session_id, summary)

    async def query_sessions(self, query: SessionQuery) -> list[StoredSummary] | None:
        """Answer *query* with one keyset scan of the index of its order; None (the policy
        selects over ``list_summaries``) while some summary is untrusted."""
        sql, parameters = _session_query(query)
        async with self._reading(None) as db:
            if db is None:
                return []
            if list(await db.execute_fetchall(_ANY_UNSUMMARIZED)):
                return None
            found = list(await db.execute_fetchall(sql, parameters))
        return [_stored_summary(row) for row in found]

    async def search_text(self, query: TextQuery) -> list[SearchRow] | None:
        """Match every word of *query* as an FTS5 phrase (implicit AND)."""
        sql, parameters = _text_query(query)
        async with self._reading(query.session) as db:
            if db is None:
                return []
            found = list(await db.execute_fetchall(sql, parameters))
        return [SearchRow(row[0], IndexedText(row[1], row[2], row[3], row[4])) for row in found]

    async def rewrite_index(
        self,
        header: SessionHeader,
        revision: str,
        summary: SessionSummary,
        texts: Sequence[IndexedText],
    ) -> bool:
        async with self._transaction("BEGIN IMMEDIATE", header.id) as db:
            if await self._revision_in(db, header.id) != revision:
                return False
            await indexes.write_summary(db, header.id, summary)
            await indexes.delete_texts(db, header.id)
            await indexes.insert_texts(db, header.id, texts)
        return True

    async def stored_bytes(self, session_id: str) -> int | None:
        """Return the UTF-8 bytes of the session's stored text: its header columns, every
        ``events`` row's text columns (``data`` above all) and its search texts. SQLite's
        page and b-tree overhead and the FTS5 index's share are not counted: what
        deleting the session frees is about this much, once the file is vacuumed."""
        async with self._reading(session_id) as db:
            if db is None:
                return None
            found = list(await db.execute_fetchall(_STORED_BYTES, (session_id,)))
        return None if not found or found[0][0] is None else int(found[0][0])

    async def append_audit(self, record: Mapping[str, Any]) -> None:
        """Append *record*: one autocommit INSERT, durable as ``synchronous`` makes every
        commit (FULL by default)."""
        text = rows.json_text(record)
        async with self._connection(None) as db:
            await db.execute_fetchall("INSERT INTO audit (record) VALUES (?)", (text,))

    async def read_audit(self) -> list[Mapping[str, Any]]:
        async with self._reading(None) as db:
            if db is None:
                return []
            found = list(await db.execute_fetchall("SELECT record FROM audit ORDER BY seq"))
        return [rows.parse_json_text(row[0]) for row in found]

    async def _revision_in(self, db: aiosqlite.Connection, session_id: str) -> str | None:
        found = list(await db.execute_fetchall(_SELECT_REVISION, (session_id,)))
        return rows.revision_string(*found[0]) if found else None

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


def _appended_rows(event_rows: list[tuple[Any, ...]], batch: Batch) -> list[tuple[Any, ...]] | None:
    """The ``batch_rows`` rows of a batch: each event row with its search text and, on the
    last, the summary; None when the batch is too large for one statement or has a text
    that is not one of its rows' (then it is written statement by statement)."""
    if not event_rows or len(event_rows) > _ROWS_PER_STATEMENT:
        return None
    texts = {item.seq: item for item in batch.texts}
    if len(texts) != len(batch.texts):
        return None
    appended: list[tuple[Any, ...]] = []
    for row in event_rows:
        item = texts.pop(row[1], None)
        if item is not None and (item.type, item.time) != (row[2], row[3]):
            return None
        appended.append((*row, None if item is None else item.text, None, None, None, None, 0))
    if texts:
        return None
    appended[-1] = (*appended[-1][:10], *indexes.summary_values(batch.summary), 1)
    return appended


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


def _bytes(column: str) -> str:
    return f"coalesce(length(CAST({column} AS BLOB)), 0)"


_STORED_BYTES: Final = (
    "SELECT ("
    + " + ".join(
        _bytes(column) for column in ("id", "cwd", "parent_session", "title", "meta", "incarnation")
    )
    + ") + (SELECT coalesce(sum("
    + " + ".join(_bytes(column) for column in ("type", "data", "source_event_seqs", "surface_op"))
    + "), 0) FROM events WHERE session_id = ?1) + (SELECT coalesce(sum("
    + " + ".join(_bytes(column) for column in ("type", "text"))
    + "), 0) FROM search_texts WHERE session_id = ?1) FROM sessions WHERE id = ?1"
)

_SEARCH: Final = (
    "SELECT t.session_id, t.seq, t.type, t.time, t.text FROM search_index "
    "JOIN search_texts AS t ON t.id = search_index.rowid WHERE search_index MATCH ?"
)


def _stored_summary(row: Sequence[Any]) -> StoredSummary:
    """A listing row of ``_SUMMARY_ROW`` columns."""
    return StoredSummary(
        rows.header_json(row),
        rows.revision_string(row[9], row[10]),
        indexes.summary_from_columns(*row[11:15]),
    )


#: The JSON type ``json_each`` reports for each kind of ``meta`` filter value.
def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "integer" if type(value) is int else "text"


_INT64: Final = range(-(1 << 63), 1 << 63)
# A ``meta`` that is not JSON (a damaged row) matches no filter instead of failing the
# query; the policy skips such a header anyway.
_META_ITEMS: Final = (
    "json_each(CASE WHEN json_valid(meta) THEN meta END) WHERE key = ? AND type = ?"
)


def _bounded(
    where: list[str], parameters: list[Any], condition: str, value: int, *, keeps_all: bool
) -> None:
    if value in _INT64:
        where.append(condition)
        parameters.append(value)
    elif not keeps_all:
        where.append("0")


def _session_query(query: SessionQuery) -> tuple[str, list[Any]]:
    """The SQL of ``listing.select`` for *query*: the same filters, order and keyset."""
    key = "last_activity" if query.order == "last_activity" else "created_at"
    where: list[str] = []
    parameters: list[Any] = []
    if query.title is not None:
        # SQLite's lower() folds ASCII letters only, as ``listing.ascii_lower`` does.
        where.append("instr(lower(title), lower(?)) > 0")
        parameters.append(query.title)
    for name, value in query.meta:
        # json_each reads the key unquoted (any character), and its type tells 1, true
        # and "1" apart.
        kind = _json_type(value)
        if kind in ("integer", "text"):
            if kind == "integer" and value not in _INT64:
                where.append("0")  # SQLite keeps no such integer
                continue
            where.append(f"EXISTS (SELECT 1 FROM {_META_ITEMS} AND atom = ?)")
            parameters.extend((name, kind, value))
        else:
            where.append(f"EXISTS (SELECT 1 FROM {_META_ITEMS})")
            parameters.extend((name, kind))
    # Times beyond SQLite's 64-bit integers cannot be bound, and every stored time is
    # within them: such a bound keeps every row or none.
    if query.since is not None:
        _bounded(where, parameters, "last_activity >= ?", query.since, keeps_all=query.since < 0)
    if query.until is not None:
        _bounded(where, parameters, "last_activity < ?", query.until, keeps_all=query.until > 0)
    if query.after is not None:
        # The first condition is the index range; the second skips the ties already shown.
        last, last_id = query.after
        if last in _INT64:
            where.append(f"{key} <= ? AND ({key} < ? OR id > ?)")
            parameters.extend((last, last, last_id))
        elif last < 0:
            where.append("0")
    sql = f"SELECT {_SUMMARY_ROW} FROM sessions"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY {key} DESC, id"
    if query.limit is not None:
        sql += " LIMIT ?"
        parameters.append(query.limit + 1)
    return sql, parameters


def _text_query(query: TextQuery) -> tuple[str, list[Any]]:
    """The FTS5 query of *query*: each word a quoted phrase, all of them required."""
    match = " ".join('"' + word.replace('"', '""') + '"' for word in query.words)
    sql = _SEARCH
    parameters: list[Any] = [match]
    if query.session is not None:
        sql += " AND t.session_id = ?"
        parameters.append(query.session)
    if query.types is not None:
        chosen = sorted(query.types)
        sql += f" AND t.type IN ({', '.join('?' * len(chosen))})"
        parameters.extend(chosen)
    sql += " ORDER BY t.time DESC, t.session_id, t.seq DESC LIMIT ?"
    parameters.append(query.limit)
    return sql, parameters


@final
class SqlitePersistence(SessionPersistence):
    """Keep session logs in one SQLite database file (or ``:memory:``), through aiosqlite.

    Construction is synchronous and touches nothing; the file is created (mode 0600) and
    checked on first use. ``synchronous="NORMAL"`` trades the durability of the last
    commits on power loss (not on a process crash) for fewer fsyncs; ``busy_timeout`` is
    how long a write waits, in seconds, for another connection's write lock.
    ``upgrade=True`` upgrades a database of schema v1 in place when it is opened
    (docs/formats.md, "SQLite"); without it such a database is refused.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        event_types: EventTypeRegistry | None = None,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 5.0,
        upgrade: bool = False,
    ) -> None:
        self._sqlite = SqliteLogStore(
            path, synchronous=synchronous, busy_timeout=busy_timeout, upgrade=upgrade
        )
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
