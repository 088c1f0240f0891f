"""The SQLite store's hold on its database: one connection, opened on first use.

Reads use a read-only connection that creates nothing until the first write opens the
writing one (docs/durability.md); from then on the writer serves both. Every statement
runs under one ``asyncio.Lock``, so transactions of different sessions never interleave
on it, and driver errors become the library's here, at the store's one boundary
(``failures.translate``). A store dropped without ``close()`` has its connections stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
import warnings
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Final, Literal, final

import aiosqlite

from sessionledger import ConfigError, LedgerError
from sessionledger._failpoints import failpoint
from sessionledger.storage import in_thread, uninterrupted
from sessionledger_sqlite import failures, names, schema, upgrade
from sessionledger_sqlite.options import MEMORY
from sessionledger_sqlite.writing import Statement

__all__ = ["Refused", "StoreConnection"]


class Refused(Exception):
    """A write the schema's triggers refused: the batch does not continue the stored log.

    ``StoreConnection.writing`` raises it; the store's write path turns it into its
    "not written" answer."""


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


async def _settle(db: aiosqlite.Connection) -> None:
    """Leave *db* with nothing pending and no transaction open, even if cancelled again
    meanwhile. The connection's worker runs what it is given in order, so a ROLLBACK
    runs after every statement an interrupted body had queued (a cancelled await does
    not unqueue it): once one returns, the next unit cannot join a transaction that was
    left open. It is queued by the task that unwinds, at once, never by a new task (one
    the loop's shutdown could cancel before it ran)."""
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            with contextlib.suppress(sqlite3.Error, ValueError):  # none open; or closed
                await db.execute_fetchall("ROLLBACK")
        except asyncio.CancelledError as error:
            cancelled = error  # the ROLLBACK still runs: wait behind it for another
            continue
        break
    if cancelled is not None:
        raise cancelled


def _transact(
    connection: sqlite3.Connection,
    begin: str | None,
    statements: Sequence[Statement],
    points: tuple[str | None, str | None],
) -> None:
    """Run *statements* (after *begin*, then ``COMMIT``, when given) on the connection's
    own thread, in one call: a rollback on any error, the failpoints *points* (after the
    begin, before the commit) between them, as the store hits them on every path."""
    try:
        if begin is not None:
            connection.execute(begin)
        if points[0] is not None:
            failpoint(points[0])
        for sql, values in statements:
            connection.execute(sql, values).fetchall()
        if points[1] is not None:
            failpoint(points[1])
        if begin is not None:
            connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
        raise


async def _in_steps(
    db: aiosqlite.Connection,
    begin: str | None,
    statements: Sequence[Statement],
    points: tuple[str | None, str | None],
) -> None:
    """``_transact`` through aiosqlite's public methods, one hop per statement (the
    caller's ``_lent`` rolls back what an error or a cancellation leaves open)."""
    if begin is not None:
        await db.execute_fetchall(begin)
    if points[0] is not None:
        failpoint(points[0])
    for sql, values in statements:
        await db.execute_fetchall(sql, values)
    if points[1] is not None:
        failpoint(points[1])
    if begin is not None:
        await db.execute_fetchall("COMMIT")


@final
class StoreConnection:
    """The connections of one ``SqliteLogStore``: lent for a read snapshot, for statements
    that commit one by one, or for one transaction; closed with the store."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: Literal["FULL", "NORMAL"],
        busy_timeout: float,
        upgrade: bool,
    ) -> None:
        self.path: Final = path
        self.synchronous: Final = synchronous
        self.busy_timeout: Final = busy_timeout
        self.upgrade: Final = upgrade
        self._location = None if path == MEMORY else path
        self._db: aiosqlite.Connection | None = None
        self._finalizer: weakref.finalize[[aiosqlite.Connection, str], StoreConnection] | None = (
            None
        )
        self._reader: aiosqlite.Connection | None = None  # read-only, until a write opens _db
        self._reader_finalizer: weakref.finalize[..., StoreConnection] | None = None
        self._gate = asyncio.Lock()
        self._shut = False
        #: The database file the connections were opened on (names.file_identity), kept
        #: so that a claim can tell the path still names it.
        self.opened: names.FileIdentity | None = None

    @property
    def db(self) -> aiosqlite.Connection | None:
        """The open writing connection (None before first write and after ``close``)."""
        return self._db

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
        await self._pin(db)
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
            reader = await schema.open_reader(self.path, self.busy_timeout)
            if reader is not None:
                await self._pin(reader)
            self._reader = reader
            if self._reader is not None:
                finalizer = weakref.finalize(self, _abandon, self._reader, self.path)
                finalizer.atexit = False
                self._reader_finalizer = finalizer
        return self._reader

    async def _pin(self, db: aiosqlite.Connection) -> None:
        """Note which file *db* was opened on (the same one as before, if any)."""
        if self.path == MEMORY:
            return
        try:
            self.opened = await asyncio.to_thread(names.check_same_file, self.path, self.opened)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await db.close()
            raise

    async def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if self._reader_finalizer is not None:
            self._reader_finalizer.detach()
            self._reader_finalizer = None
        if reader is not None:
            with contextlib.suppress(sqlite3.Error):
                await reader.close()

    @contextlib.asynccontextmanager
    async def reading(self, session_id: str | None) -> AsyncIterator[aiosqlite.Connection | None]:
        """Lend the connection reads use (None when there is no database yet) in one read
        transaction; translate driver errors."""
        async with self._gate:
            try:
                db = self._db if self._db is not None else self._reader
                if db is None:
                    db = await uninterrupted(self._connect_reader())
                if db is None:
                    yield None
                    return
                try:
                    if db.in_transaction:  # an earlier rollback itself failed
                        await db.execute_fetchall("ROLLBACK")
                    await db.execute_fetchall("BEGIN")
                    yield db
                finally:
                    await _settle(db)
            except (sqlite3.Error, OSError) as error:
                raise await self.translate(error, session_id) from error

    @contextlib.asynccontextmanager
    async def writing(self, session_id: str | None) -> AsyncIterator[aiosqlite.Connection]:
        """Lend the writing connection for the body (its statements commit one by one)
        and translate driver errors; a refused batch surfaces as ``Refused``."""
        async with self._lent(session_id) as db:
            yield db

    @contextlib.asynccontextmanager
    async def transaction(
        self, begin: str, session_id: str | None = None
    ) -> AsyncIterator[aiosqlite.Connection]:
        """Run the body as one transaction (``begin`` is ``BEGIN`` or ``BEGIN IMMEDIATE``)."""
        async with self._lent(session_id) as db:
            await db.execute_fetchall(begin)
            yield db
            await db.execute_fetchall("COMMIT")

    async def run(
        self,
        session_id: str | None,
        begin: str | None,
        statements: Sequence[Statement],
        points: tuple[str | None, str | None],
    ) -> None:
        """Run *statements* as one transaction (*begin*, e.g. ``BEGIN IMMEDIATE``; None:
        one statement that commits on its own) in one hop to the connection's thread:
        a write costs one wake-up of the event loop, not one per statement. Cancelled,
        it still ends whole on that thread, committed or rolled back (the policy then
        tells which from storage). *points* are its failpoints (after the begin, before
        the commit)."""
        async with self._lent(session_id) as db:
            # aiosqlite runs each call it is given on its thread, in order, through
            # ``Connection._execute`` (every public method goes through it), on the
            # sqlite3 connection ``_conn``: it has no public way to hand the thread more
            # than one statement at once (tests/test_structure.py, THIRD_PARTY_REACHES).
            try:
                queue, connection = db._execute, db._conn
            except AttributeError:  # an aiosqlite without them: one hop per statement
                await _in_steps(db, begin, statements, points)
            else:
                await queue(_transact, connection, begin, statements, points)  # type: ignore[no-untyped-call]

    @contextlib.asynccontextmanager
    async def _lent(self, session_id: str | None) -> AsyncIterator[aiosqlite.Connection]:
        """Hold the gate and lend the writing connection; whatever ends the body early (an
        error, a cancelled await) is settled before the gate opens again."""
        async with self._gate:
            try:
                db = self._db if self._db is not None else await uninterrupted(self._connect())
                try:
                    if db.in_transaction:  # an earlier rollback itself failed
                        await db.execute_fetchall("ROLLBACK")
                    yield db
                except BaseException:
                    await _settle(db)
                    raise
            except sqlite3.IntegrityError as error:
                if schema.SEQ_MISMATCH in str(error):
                    raise Refused from error
                raise await self.translate(error, session_id) from error
            except (sqlite3.Error, OSError) as error:
                raise await self.translate(error, session_id) from error

    async def translate(
        self, error: sqlite3.Error | OSError, session_id: str | None
    ) -> LedgerError:
        """The library's error for a driver or OS error (``failures.translate``), found in
        a worker thread: telling a full disk asks the file system."""
        return await in_thread(failures.translate, error, self.path, self.busy_timeout, session_id)

    def abandon(self) -> None:
        """Stop both connections' threads without awaiting them (the loop they answered
        is gone); every later use is refused with ``ConfigError``. Committed batches are
        durable and transactions atomic, so stopping loses nothing acknowledged."""
        self._shut = True
        for db, finalizer in ((self._db, self._finalizer), (self._reader, self._reader_finalizer)):
            if finalizer is not None:
                finalizer.detach()
            if db is not None:
                db.stop()
        self._db = self._reader = None
        self._finalizer = self._reader_finalizer = None

    async def close(self) -> None:
        """Close both connections; every later use is refused with ``ConfigError``."""
        async with self._gate:
            await uninterrupted(self._close())

    async def _close(self) -> None:
        """``close`` under the gate: begun, it ends whole (a cancelled caller waits)."""
        self._shut = True
        db, self._db = self._db, None
        await self._close_reader()
        if self._finalizer is not None:
            self._finalizer.detach()
        if db is not None:
            try:
                await db.close()
            except sqlite3.Error as error:
                raise await self.translate(error, None) from error
