"""The SQLite store's file: race-free creation, opening, pragmas, and the transactions
that create or upgrade its schema.

The schema itself is ``ddl``'s, and what makes a file sessionledger's is ``identity``'s;
their names are re-exported here, where the rest of the package and its tests import them.
A database this build must not use is refused before a single byte of it is written
(docs/formats.md, "SQLite").

Only ``sqlite3`` and OS errors escape from here (besides the refusals); the store
translates them at its one boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Final, Literal, TypeAlias

import aiosqlite

from sessionledger import ConfigError
from sessionledger._failpoints import failpoint
from sessionledger.storage import fsync_dir, make_private_dirs, open_private_file
from sessionledger_sqlite import names
from sessionledger_sqlite.ddl import (
    APPLICATION_ID,
    DDL,
    EXPECTED_OBJECTS,
    SCHEMA_VERSION,
    SEQ_MISMATCH,
    SHADOW_TABLES,
    UPGRADES,
    V1_DDL,
    V1_OBJECTS,
    SchemaObject,
)
from sessionledger_sqlite.identity import Identity, check_identity, read_identity

__all__ = [
    "APPLICATION_ID",
    "open_reader",
    "DDL",
    "EXPECTED_OBJECTS",
    "SHADOW_TABLES",
    "UPGRADES",
    "V1_DDL",
    "V1_OBJECTS",
    "Upgrader",
    "SCHEMA_VERSION",
    "SEQ_MISMATCH",
    "SchemaObject",
    "check_identity",
    "connect_daemon",
    "create_file",
    "open_database",
    "prepare",
    "read_identity",
]

#: Fills the summaries and search texts of a database upgraded from v1, inside its
#: transaction (``sessionledger_sqlite.upgrade``); raises a ``LedgerError`` to refuse the
#: upgrade.
Upgrader: TypeAlias = Callable[["aiosqlite.Connection"], Awaitable[None]]


async def _rollback(db: aiosqlite.Connection) -> None:
    # The error that made us roll back is the one worth reporting.
    with contextlib.suppress(sqlite3.Error):
        await db.execute_fetchall("ROLLBACK")


async def _begin_checked(
    db: aiosqlite.Connection, begin: str, location: str, *, upgrade: bool = False
) -> Identity:
    """Begin a transaction and say what the database is; a refused database is rolled
    back (nothing was written) and the refusal raised."""
    await db.execute_fetchall(begin)
    try:
        return check_identity(*await read_identity(db), location, upgrade=upgrade)
    except BaseException:
        await _rollback(db)
        raise


async def _initialize(db: aiosqlite.Connection, location: str) -> None:
    """Create the schema unless a concurrent opener did it first.

    Pristine is re-checked under ``BEGIN IMMEDIATE`` (the write lock), so of two
    processes opening a new file at once one creates and the other finds it created.
    """
    if await _begin_checked(db, "BEGIN IMMEDIATE", location) != "pristine":
        await db.execute_fetchall("COMMIT")
        return
    try:
        for statement in DDL:
            await db.execute_fetchall(statement)
        failpoint("sqlite.schema.after-ddl")
        # Pragma values cannot be bound parameters; both are integer constants.
        await db.execute_fetchall(f"PRAGMA application_id = {APPLICATION_ID:d}")
        await db.execute_fetchall(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
        failpoint("sqlite.schema.before-commit")
        await db.execute_fetchall("COMMIT")
        failpoint("sqlite.schema.after-commit")
    except BaseException:
        await _rollback(db)
        raise


async def _upgrade(db: aiosqlite.Connection, location: str, fill: Upgrader) -> None:
    """Upgrade an older database to this build's schema in one transaction, unless a
    concurrent opener did.

    The identity is re-read under the write lock; any failure (a session *fill* cannot
    read, a crash) rolls everything back and leaves the older database as it was.
    """
    if await _begin_checked(db, "BEGIN IMMEDIATE", location, upgrade=True) != "upgradable":
        await db.execute_fetchall("COMMIT")
        return
    try:
        (found,) = next(iter(await db.execute_fetchall("PRAGMA user_version")))
        for statement in UPGRADES[found]:
            await db.execute_fetchall(statement)
        failpoint("sqlite.upgrade.after-ddl")
        if found == 1:  # v2 computes summaries and texts from the events; v3 only indexes
            await fill(db)
        await db.execute_fetchall(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
        failpoint("sqlite.upgrade.before-commit")
        await db.execute_fetchall("COMMIT")
    except BaseException:
        await _rollback(db)
        raise


async def _expect(db: aiosqlite.Connection, pragma: str, expected: object) -> None:
    rows = list(await db.execute_fetchall(f"PRAGMA {pragma}"))
    value = rows[0][0] if rows else None
    if value != expected:
        raise ConfigError(f"SQLite refused PRAGMA {pragma}: reads back {value!r}, not {expected!r}")


_BUSY_CODES: Final = frozenset((5, 6))  # SQLITE_BUSY, SQLITE_LOCKED


async def _set_wal(db: aiosqlite.Connection, *, memory: bool, busy_timeout: float) -> None:
    """Switch to WAL; retry while another opener holds the lock the switch needs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + busy_timeout
    while True:
        try:
            rows = list(await db.execute_fetchall("PRAGMA journal_mode = WAL"))
            break
        except sqlite3.OperationalError as error:
            code = getattr(error, "sqlite_errorcode", 0) & 0xFF
            if code not in _BUSY_CODES or loop.time() >= deadline:
                raise
            await asyncio.sleep(0.01)
    mode = str(rows[0][0]).lower() if rows else None
    expected = "memory" if memory else "wal"
    if mode != expected:
        raise ConfigError(
            f"SQLite could not switch the database to WAL journaling (journal_mode is {mode!r}); "
            "is it on a file system without shared-memory support?"
        )


def create_file(path: str) -> os.stat_result:
    """Create the database file with mode 0600 (and its directory, 0700) if missing, and
    return its status once it and the files beside it are checked to be the store's own
    (``names.check_names``: no link, no other name; ``ConfigError`` otherwise).

    SQLite would create it with the umask's permissions; a session log holds prompts and
    tool output, so it is private from the first byte. The WAL and shared-memory files
    inherit the database file's permissions.
    """
    names.check_names(path)  # a link refused before anything is created
    directory = os.path.dirname(path)
    make_private_dirs(directory, fsync=True)
    try:
        os.close(open_private_file(path, os.O_WRONLY | os.O_EXCL))
    except FileExistsError:
        pass  # an existing file, or a link (O_EXCL never follows one): checked below
    else:
        fsync_dir(directory)  # the new file's entry is durable before anything is stored in it
        failpoint("sqlite.schema.after-create-file")
    status = names.check_names(path)
    if status is None:
        raise ConfigError(f"the database {path!r} was removed while it was being opened")
    return status


async def connect_daemon(
    path: str, busy_timeout: float, *, uri: bool = False
) -> aiosqlite.Connection:
    """Open an aiosqlite connection whose worker thread is a daemon thread.

    A thread takes its daemon flag from the thread that constructs it, and
    ``aiosqlite.connect()`` constructs the worker; calling it from a daemon helper makes
    the worker a daemon too. So a store the program never closed cannot keep the
    interpreter from exiting: an abandoned connection is like a crash, after which SQLite
    still has every committed transaction and no half-done one.
    """
    loop = asyncio.get_running_loop()
    built: asyncio.Future[aiosqlite.Connection] = loop.create_future()

    def build() -> None:
        try:
            # isolation_level=None: the sqlite3 module never opens a transaction on its
            # own; every transaction here is an explicit BEGIN ... COMMIT/ROLLBACK.
            connection = aiosqlite.connect(
                path, isolation_level=None, timeout=busy_timeout, uri=uri
            )
        except BaseException as error:
            loop.call_soon_threadsafe(built.set_exception, error)
        else:
            loop.call_soon_threadsafe(built.set_result, connection)

    threading.Thread(target=build, name="sessionledger-sqlite-open", daemon=True).start()
    return await (await built)  # the second await starts the worker and connects


_READ_ONLY_OPENS: Final = ("mode=ro", "mode=ro&immutable=1")


async def open_reader(path: str, busy_timeout: float) -> aiosqlite.Connection | None:
    """Open the database at *path* read-only, creating nothing (docs/durability.md).

    Returns None when there is nothing to read: no file, or an empty one (not yet a
    database). A database this build must not use is refused as ``open_database`` does.
    Where the directory cannot hold the ``-wal``/``-shm`` files a reader of a WAL
    database needs (read-only media), it opens the file as immutable instead.
    """
    found = await asyncio.to_thread(names.check_names, path)  # a link refused, typed
    if found is None:
        return None
    location = "file:" + urllib.parse.quote(path)
    for options in _READ_ONLY_OPENS:
        if options != _READ_ONLY_OPENS[0] and await asyncio.to_thread(_wal_size, path) > 0:
            # An immutable open ignores the WAL: it would not see transactions still in it.
            raise ConfigError(
                f"the database {path!r} cannot be read where it is (its directory takes no "
                "new files, as on read-only media) without missing the transactions its "
                "-wal file still holds; copy the database and its -wal file to a writable "
                "directory and read it there"
            )
        db = await connect_daemon(f"{location}?{options}", busy_timeout, uri=True)
        try:
            await asyncio.to_thread(names.check_same_file, path, names.file_identity(found))
            await db.execute_fetchall("PRAGMA trusted_schema = OFF")
            await db.execute_fetchall("BEGIN")
            try:
                pristine = check_identity(*await read_identity(db), path) == "pristine"
            finally:
                await _rollback(db)
        except sqlite3.OperationalError as error:
            await db.close()
            code = getattr(error, "sqlite_errorcode", 0) & 0xFF
            if code not in _UNREADABLE_IN_PLACE or options == _READ_ONLY_OPENS[-1]:
                raise
            continue
        except BaseException:
            await db.close()
            raise
        if pristine:
            await db.close()
            return None
        return db
    raise AssertionError("unreachable")  # the loop returns or raises


def _wal_size(path: str) -> int:
    try:
        return os.stat(f"{path}-wal").st_size
    except FileNotFoundError:
        return 0


#: Result codes of a read-only open that an immutable open may get past: the directory
#: cannot hold the shared-memory file (CANTOPEN, READONLY, IOERR).
_UNREADABLE_IN_PLACE: Final = frozenset((14, 8, 10))


async def open_database(
    path: str,
    *,
    memory: bool,
    synchronous: Literal["FULL", "NORMAL"],
    busy_timeout: float,
    upgrade: Upgrader | None = None,
) -> aiosqlite.Connection:
    """Open the database at *path* (creating the file), check it and configure it; with
    *upgrade*, an older database is upgraded (and *upgrade* fills the indexes a v1
    database lacks).

    Raises ``FormatUnsupportedError`` for a database this build must not use, leaving the
    file untouched; only ``sqlite3.Error`` and ``OSError`` escape otherwise.
    """
    opened = None if memory else names.file_identity(await asyncio.to_thread(create_file, path))
    db = await connect_daemon(path, busy_timeout)
    try:
        if opened is not None:  # the name SQLite opened is still the file checked
            await asyncio.to_thread(names.check_same_file, path, opened)
        await prepare(
            db,
            location=path,
            memory=memory,
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            upgrade=upgrade,
        )
    except BaseException:
        await db.close()
        raise
    return db


async def prepare(
    db: aiosqlite.Connection,
    *,
    location: str,
    memory: bool,
    synchronous: Literal["FULL", "NORMAL"],
    busy_timeout: float,
    upgrade: Upgrader | None = None,
) -> None:
    """Configure a fresh connection and check (or create, or upgrade) the schema.

    Order matters: connection-level pragmas first, then the identity check, and only for
    a database that is ours (or pristine and now initialized) anything that writes to the
    file, such as switching the journal mode to WAL.
    """
    await db.execute_fetchall("PRAGMA trusted_schema = OFF")
    await _expect(db, "trusted_schema", 0)
    await db.execute_fetchall("PRAGMA foreign_keys = ON")
    await _expect(db, "foreign_keys", 1)
    # What a write frees is zeroed, not left in free space (docs/durability.md,
    # "deleting leaves nothing").
    await db.execute_fetchall("PRAGMA secure_delete = ON")
    await _expect(db, "secure_delete", 1)
    # One read snapshot first: a foreign file is refused without taking the write lock.
    found = await _begin_checked(db, "BEGIN", location, upgrade=upgrade is not None)
    await db.execute_fetchall("COMMIT")
    if found == "pristine":
        await _initialize(db, location)
    elif found == "upgradable" and upgrade is not None:
        await _upgrade(db, location, upgrade)
    await _set_wal(db, memory=memory, busy_timeout=busy_timeout)
    failpoint("sqlite.schema.after-wal")
    await db.execute_fetchall(f"PRAGMA synchronous = {synchronous}")
    await _expect(db, "synchronous", 2 if synchronous == "FULL" else 1)
