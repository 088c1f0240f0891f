"""``SqlitePersistence``: session logs in one SQLite database, through aiosqlite.

The policy (committed region, repair, version and type checks, per-id locking, how a
refusal is worded) is the core's; ``SqliteLogStore`` moves rows. One connection serves
the store (``connection``): every statement runs under one ``asyncio.Lock``, so
transactions of different sessions never interleave on it. Other processes may open the
same file; SQLite's write lock serializes writers across them, and the schema's triggers
re-check the stored next seq inside each write, so a stale writer's batch is refused and
changes nothing.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, final

import aiosqlite

from sessionledger import ConfigError, EventTypeRegistry, LedgerError, SessionHeader
from sessionledger._failpoints import failpoint
from sessionledger.storage import (
    Batch,
    Claims,
    IndexedText,
    LogStore,
    RawLog,
    Repair,
    RepairReceipt,
    SearchRow,
    SessionPersistence,
    SessionQuery,
    SessionSummary,
    StoredSummary,
    TextQuery,
    _rows as rows,
    fsync_dir,
    in_thread,
    join_batches,
    make_private_dirs,
    open_private_file,
)
from sessionledger_sqlite import names, queries, writing
from sessionledger_sqlite.connection import Refused, StoreConnection
from sessionledger_sqlite.options import MEMORY, check_options, check_path
from sessionledger_sqlite.reading import (
    EVENT_COLUMNS,
    HEADER_COLUMNS,
    SESSION_COLUMNS,
    raw_log,
    row_end,
)

__all__ = ["MEMORY", "SqliteLogStore", "SqlitePersistence"]

logger = logging.getLogger("sessionledger")


#: How a write's transaction begins: it takes the write lock at once.
_BEGIN: Final = "BEGIN IMMEDIATE"
_SELECT_SESSION: Final = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
_SELECT_HEADERS: Final = (
    f"SELECT {HEADER_COLUMNS}, incarnation, revision FROM sessions ORDER BY created_at, id"
)
_SELECT_EVENTS: Final = f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? ORDER BY seq"
# Start at the row that covers from_seq: a packed row can begin before it.
_SELECT_EVENTS_FROM: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ?1 AND seq >= coalesce("
    "(SELECT max(seq) FROM events WHERE session_id = ?1 AND seq <= ?2), 0) ORDER BY seq"
)

_SELECT_TAIL: Final = (
    "SELECT seq, ignorable, data FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1"
)

_SELECT_REVISION: Final = "SELECT incarnation, revision FROM sessions WHERE id = ?"
_MERGE_TEXT_INDEX: Final = "INSERT INTO search_index (search_index) VALUES ('optimize')"
_EMPTY_WAL: Final = "PRAGMA wal_checkpoint(TRUNCATE)"
_EVENT_COLUMN_NAMES: Final = tuple(EVENT_COLUMNS.split(", "))
_SELECT_EVENTS_AFTER: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq"
)


@final
class SqliteLogStore(LogStore):
    """The storage primitives of the SQLite backend: rows of one database file (or
    ``:memory:``), through one aiosqlite connection opened on first use."""

    scheme = "sqlite"
    can_tear = False  # a transaction is all or nothing
    max_row_members = 1024
    max_row_bytes = 1 << 20
    max_event_bytes = writing.LARGEST_EVENT  # a row's limit (docs/backends.md)
    max_batch_bytes = writing.LARGEST_EVENT
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
        self.path: Final = check_path(path)
        #: Whether opening upgrades a v1 database in place (``upgrade=1``).
        self.upgrade: Final = upgrade
        self.synchronous: Final = check_options(synchronous, busy_timeout)
        self.busy_timeout: Final = float(busy_timeout)
        self._location = None if self.path == MEMORY else self.path
        self._connections = StoreConnection(
            self.path,
            synchronous=self.synchronous,
            busy_timeout=self.busy_timeout,
            upgrade=upgrade,
        )
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
        return self._connections.db

    def locate(self, header: SessionHeader) -> str | None:
        """Return the database file (it holds every session), or None in memory."""
        return self._location

    def __repr__(self) -> str:
        return f"SqliteLogStore({self.path!r})"

    # -- reading ---------------------------------------------------------------------------

    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        async with self._connections.reading(session_id) as db:
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
        async with self._connections.reading(session_id) as db:
            if db is None:
                return None
            found = list(await db.execute_fetchall(_SELECT_REVISION, (session_id,)))
        return rows.revision_string(*found[0]) if found else None

    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        async with self._connections.reading(None) as db:
            if db is None:
                return []
            found = list(await db.execute_fetchall(_SELECT_HEADERS))
        return [(rows.header_json(row), rows.revision_string(row[9], row[10])) for row in found]

    # -- claims ----------------------------------------------------------------------------

    async def claim(self, session_id: str) -> None:
        """Claim through ``<database>.locks`` (``sessionledger.storage._claims``); a private
        in-memory database has no other writer. The database's names are checked again
        first (``names``): a link made since the store opened it is refused here."""
        if self._claims is None:
            return
        try:
            await in_thread(self._claim, self._claims, session_id)  # a cancelled caller waits
        except OSError as error:
            raise await self._connections.translate(error, session_id) from error

    def _claim(self, claims: Claims, session_id: str) -> None:
        names.check_same_file(self.path, self._connections.opened)
        claims.claim(session_id)

    async def release(self, session_id: str) -> None:
        if self._claims is not None and self._claims.holds(session_id):
            await in_thread(self._claims.release, session_id)  # files: never on the loop

    # -- writing ---------------------------------------------------------------------------

    async def write_batch(self, batch: Batch) -> bool:
        """Write *batch* in one transaction (the common append: in one statement, which
        commits on its own when it has no text to index); False when the id is taken or
        the batch does not continue the stored log, with nothing written."""
        session_id = batch.header.id
        try:
            if batch.creates:
                if not await self._create(batch):
                    return False
            else:
                await self._append(session_id, writing.append_statements(batch))
        except Refused:
            return False
        failpoint("sqlite.write.after-commit")
        return True

    async def _append(self, session_id: str, append: writing.Append) -> None:
        """Run the statements of a batch that continues the stored log, in one hop to
        the connection's thread."""
        if append.one_statement and len(append.statements) == 1:
            # The common append with no text to index: one statement, committed on its own.
            points: tuple[str | None, str | None] = ("sqlite.write.before-statement", None)
            await self._connections.run(session_id, None, append.statements, points)
        elif append.one_statement:
            points = ("sqlite.write.before-statement", "sqlite.write.before-commit")
            await self._connections.run(session_id, _BEGIN, append.statements, points)
        else:
            points = ("sqlite.write.after-begin", "sqlite.write.before-commit")
            await self._connections.run(session_id, _BEGIN, append.statements, points)

    async def write_log(self, batches: Sequence[Batch], check: Callable[[RawLog], None]) -> bool:
        """Insert the whole log in one transaction (statements of at most a few hundred
        rows, as any batch's), read it back inside it for *check*, then commit."""
        try:
            if not await self._create(join_batches(batches), check):
                return False
        except Refused:
            return False
        failpoint("sqlite.write.after-commit")
        return True

    async def _create(self, batch: Batch, check: Callable[[RawLog], None] | None = None) -> bool:
        """Insert the session row (with the batch's summary) and its first batch in one
        transaction; False (nothing inserted) when the id is taken. *check* gets the log
        as read back before the commit (raising rolls it back)."""
        session_id = batch.header.id
        # Built before the transaction: a value that cannot be stored writes nothing.
        session_row, statements = writing.create_statements(batch, uuid.uuid4().hex)
        async with self._connections.transaction("BEGIN IMMEDIATE", session_id) as db:
            failpoint("sqlite.write.after-begin")
            if not list(await db.execute_fetchall(*session_row)):
                return False
            failpoint("sqlite.write.after-session-row")
            await _run(db, statements)
            if check is not None:
                head = list(await db.execute_fetchall(_SELECT_SESSION, (session_id,)))
                found = list(await db.execute_fetchall(_SELECT_EVENTS, (session_id,)))
                check(raw_log(head[0], found, self._location))
            failpoint("sqlite.write.before-commit")
        return True

    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        session_id = repair.header.id
        closers: list[writing.Statement] = []
        if repair.closers is not None:
            closers = [
                *writing.insert_events(writing.event_rows(session_id, repair.closers)),
                *writing.insert_texts(session_id, repair.closers.texts),
            ]
        receipt = RepairReceipt()
        try:
            async with self._connections.transaction("BEGIN IMMEDIATE", session_id) as db:
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
                        receipt = await in_thread(self._quarantine, session_id, cut)
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
                    await _run(db, writing.delete_texts(session_id, kept))
                elif repair.kept_events is not None:
                    await _run(db, writing.delete_texts(session_id, repair.kept_events))
                await _run(db, [*closers, writing.update_summary(session_id, repair.summary)])
                failpoint("sqlite.repair.before-commit")
        except Refused:
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
        async with self._connections.transaction("BEGIN IMMEDIATE", session_id) as db:
            # The text index has no cascade: it forgets the texts while they still exist.
            await _run(db, writing.delete_texts(session_id))
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

    async def scrub(self) -> None:
        """Leave nothing of deleted sessions in the files (docs/durability.md, "deleting
        leaves nothing"): every connection zeroes what a write frees (``secure_delete``);
        merging the text index drops the deleted texts' terms from its old segments (their
        pages zeroed as they are freed); a checkpoint then empties the write-ahead log,
        which still holds the pages as they were written. A reader that keeps the log
        busy, or a failure, is logged: the deletion itself stands."""
        try:
            async with self._connections.writing(None) as db:
                await db.execute_fetchall(_MERGE_TEXT_INDEX)
                busy, _, _ = next(iter(await db.execute_fetchall(_EMPTY_WAL)))
        except LedgerError as error:
            logger.warning("%s: after a deletion, scrubbing failed: %s", self._location, error)
            return
        if busy:
            logger.warning(
                "%s: after a deletion, a reader kept the write-ahead log from being emptied: "
                "deleted text stays in %s-wal until the next deletion empties it",
                self._location,
                self._location,
            )

    # -- listing, search, audit (docs/listing.md) ------------------------------------------

    async def list_summaries(self) -> list[StoredSummary]:
        async with self._connections.reading(None) as db:
            if db is None:
                return []
            found = list(await db.execute_fetchall(queries.SELECT_SUMMARIES))
        return [queries.stored_summary(row) for row in found]

    async def query_sessions(self, query: SessionQuery) -> list[StoredSummary] | None:
        """Answer *query* with one keyset scan of the index of its order; None (the policy
        selects over ``list_summaries``) while some summary is untrusted."""
        sql, parameters = queries.session_query(query)
        async with self._connections.reading(None) as db:
            if db is None:
                return []
            if list(await db.execute_fetchall(queries.ANY_UNSUMMARIZED)):
                return None
            found = list(await db.execute_fetchall(sql, parameters))
        return [queries.stored_summary(row) for row in found]

    async def search_text(self, query: TextQuery) -> list[SearchRow] | None:
        """Match every word of *query* as an FTS5 phrase (implicit AND), and in the texts
        that wait for their FTS5 entries, in one read transaction."""
        async with self._connections.reading(query.session) as db:
            if db is None:
                return []
            found = list(await db.execute_fetchall(*queries.text_query(query)))
            waiting = await db.execute_fetchall(*queries.waiting_texts(query))
        found.extend(row for row in waiting if query.matches(row[4]))
        return [SearchRow(row[0], IndexedText(row[1], row[2], row[3], row[4])) for row in found]

    async def rewrite_index(
        self,
        header: SessionHeader,
        revision: str,
        summary: SessionSummary,
        texts: Sequence[IndexedText],
    ) -> bool:
        async with self._connections.transaction("BEGIN IMMEDIATE", header.id) as db:
            if await self._revision_in(db, header.id) != revision:
                return False
            await _run(
                db,
                [
                    writing.update_summary(header.id, summary),
                    *writing.delete_texts(header.id),
                    *writing.insert_texts(header.id, texts),
                ],
            )
        return True

    async def stored_bytes(self, session_id: str) -> int | None:
        """Return the UTF-8 bytes of the session's stored text: its header columns, every
        ``events`` row's text columns (``data`` above all) and its search texts. SQLite's
        page and b-tree overhead and the FTS5 index's share are not counted: what
        deleting the session frees is about this much, once the file is vacuumed."""
        async with self._connections.reading(session_id) as db:
            if db is None:
                return None
            found = list(await db.execute_fetchall(queries.STORED_BYTES, (session_id,)))
        return None if not found or found[0][0] is None else int(found[0][0])

    async def stored_bytes_many(self, session_ids: Sequence[str]) -> list[int | None]:
        """``stored_bytes`` of each session, in one read transaction and a statement per
        ``STORED_BYTES_CHUNK`` sessions (a prune's plan of 10,000 sessions made 10,000
        round trips before)."""
        unique = list(dict.fromkeys(session_ids))
        sizes: dict[str, int] = {}
        async with self._connections.reading(None) as db:
            if db is None:
                return [None] * len(session_ids)
            step = queries.STORED_BYTES_CHUNK
            for start in range(0, len(unique), step):
                chunk = unique[start : start + step]
                found = await db.execute_fetchall(queries.stored_bytes_many(len(chunk)), chunk)
                sizes.update((str(row[0]), int(row[1])) for row in found)
        return [sizes.get(session_id) for session_id in session_ids]

    async def append_audit(self, record: Mapping[str, Any]) -> None:
        """Append *record*: one autocommit INSERT, durable as ``synchronous`` makes every
        commit (FULL by default)."""
        text = rows.json_text(record)
        async with self._connections.writing(None) as db:
            await db.execute_fetchall("INSERT INTO audit (record) VALUES (?)", (text,))

    async def read_audit(self) -> list[Mapping[str, Any]]:
        async with self._connections.reading(None) as db:
            if db is None:
                return []
            found = list(await db.execute_fetchall("SELECT record FROM audit ORDER BY seq"))
        return [rows.parse_json_text(row[0]) for row in found]

    async def _revision_in(self, db: aiosqlite.Connection, session_id: str) -> str | None:
        found = list(await db.execute_fetchall(_SELECT_REVISION, (session_id,)))
        return rows.revision_string(*found[0]) if found else None

    async def close(self) -> None:
        if self._claims is not None:
            await in_thread(self._claims.release_all)
        await self._connections.close()

    def abandon(self) -> None:
        if self._claims is not None:
            self._claims.release_all()
        self._connections.abandon()


async def _run(db: aiosqlite.Connection, statements: Sequence[writing.Statement]) -> None:
    """Run *statements* in order (inside the caller's transaction)."""
    for sql, values in statements:
        await db.execute_fetchall(sql, values)


@final
class SqlitePersistence(SessionPersistence):
    """Keep session logs in one SQLite database file (or ``:memory:``), through aiosqlite.

    Construction is synchronous and creates nothing; the file is created (mode 0600) and
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
        """The database path (absolute, its parent directories' links resolved), or
        ``":memory:"``."""
        return self._sqlite.path

    def __repr__(self) -> str:
        return f"SqlitePersistence({self.path!r})"
