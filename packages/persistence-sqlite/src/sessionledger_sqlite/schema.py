"""The SQLite store's file: DDL, identity, pragmas, race-free creation, opening.

A database belongs to sessionledger when its ``application_id`` is ``0x534C4447``
("SLDG"), its ``user_version`` is ``SCHEMA_VERSION`` and its schema objects are exactly
the ones below. Anything else is refused with ``FormatUnsupportedError`` before a single
byte of the file is written: bump and reject, never a silent migration.

Only ``sqlite3`` and OS errors escape from here (besides the refusals); the store
translates them at its one boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
import threading
import urllib.parse
from collections.abc import Sequence
from typing import Final, Literal, NamedTuple

import aiosqlite

from sessionledger._failpoints import failpoint
from sessionledger.errors import ConfigError, FormatUnsupportedError
from sessionledger.files import fsync_dir, make_private_dirs, open_private_file

__all__ = [
    "APPLICATION_ID",
    "open_reader",
    "DDL",
    "EXPECTED_OBJECTS",
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

#: ``PRAGMA application_id`` of a sessionledger database: ASCII "SLDG".
APPLICATION_ID: Final = 0x534C4447
#: ``PRAGMA user_version``: the schema version this build reads and writes.
SCHEMA_VERSION: Final = 1

_SESSIONS: Final = """CREATE TABLE sessions (
  id               TEXT NOT NULL PRIMARY KEY,
  version          INTEGER NOT NULL,
  created_at       INTEGER NOT NULL,
  cwd              TEXT,
  parent_session   TEXT,
  seed_length      INTEGER,
  delegation_depth INTEGER NOT NULL,
  title            TEXT,
  meta             TEXT,
  incarnation      TEXT NOT NULL,
  revision         INTEGER NOT NULL,
  next_seq         INTEGER NOT NULL
) STRICT"""

# ``ignorable = 0`` marks a packed chunk row (docs/formats.md, "SQLite"); NULL or 1 an event.
_EVENTS: Final = """CREATE TABLE events (
  session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  seq               INTEGER NOT NULL,
  type              TEXT NOT NULL,
  time              INTEGER NOT NULL,
  data              TEXT NOT NULL,
  source_event_seqs TEXT,
  surface_op        TEXT,
  ignorable         INTEGER CHECK (ignorable IN (0, 1)),
  members           INTEGER NOT NULL DEFAULT 1 CHECK (members >= 1),
  PRIMARY KEY (session_id, seq)
) STRICT"""

# The database itself keeps each log contiguous, so an append is one INSERT statement
# (one round trip, committed atomically on its own): a row must start where the stored
# log ends, and each row moves that end on by the events it holds (``members``: 1, or
# the member count of a packed row). A stale writer's first row fails the check and the
# whole statement is rolled back (docs/durability.md). No SQL function is used: with
# ``trusted_schema=OFF`` SQLite allows only innocuous ones in triggers.
_CONTINUE: Final = """CREATE TRIGGER events_continue_the_log BEFORE INSERT ON events
WHEN NEW.seq IS NOT (SELECT next_seq FROM sessions WHERE id = NEW.session_id)
BEGIN SELECT RAISE(ABORT, 'sessionledger: seq mismatch'); END"""
_ADVANCE: Final = """CREATE TRIGGER events_advance_the_log AFTER INSERT ON events
BEGIN UPDATE sessions SET next_seq = NEW.seq + NEW.members, revision = revision + 1
WHERE id = NEW.session_id; END"""

#: The message of the ``RAISE`` above, which the store turns into ``SeqMismatchError``.
SEQ_MISMATCH: Final = "sessionledger: seq mismatch"

# ``list`` reads sessions in (created_at, id) order straight from this index.
_SESSIONS_ORDER: Final = "CREATE INDEX sessions_by_created_at ON sessions (created_at, id)"

#: The statements that create the schema, in order.
DDL: Final = (_SESSIONS, _EVENTS, _SESSIONS_ORDER, _CONTINUE, _ADVANCE)


class SchemaObject(NamedTuple):
    """One row of ``sqlite_schema`` (internal ``sqlite_*`` objects excluded)."""

    type: str
    name: str
    table: str
    sql: str | None


def _normalize(sql: str | None) -> str | None:
    return None if sql is None else " ".join(sql.split())


#: What ``sqlite_schema`` holds for a database this build created, sorted by (type, name).
#: SQLite keeps each CREATE statement's text as it was executed.
EXPECTED_OBJECTS: Final = tuple(
    sorted(
        (
            SchemaObject("table", "sessions", "sessions", _normalize(_SESSIONS)),
            SchemaObject("table", "events", "events", _normalize(_EVENTS)),
            SchemaObject(
                "index", "sessions_by_created_at", "sessions", _normalize(_SESSIONS_ORDER)
            ),
            SchemaObject("trigger", "events_continue_the_log", "events", _normalize(_CONTINUE)),
            SchemaObject("trigger", "events_advance_the_log", "events", _normalize(_ADVANCE)),
        ),
        key=lambda item: (item.type, item.name),
    )
)

_IDS: Final = "SELECT application_id, user_version FROM pragma_application_id, pragma_user_version"
_OBJECTS: Final = (
    "SELECT type, name, tbl_name, sql FROM sqlite_schema "
    "WHERE substr(name, 1, 7) <> 'sqlite_' ORDER BY type, name"
)


async def read_identity(db: aiosqlite.Connection) -> tuple[int, int, list[SchemaObject]]:
    """Return ``(application_id, user_version, schema objects)``; call inside a transaction
    so the three come from one snapshot."""
    ids = list(await db.execute_fetchall(_IDS))
    objects = [
        SchemaObject(row[0], row[1], row[2], _normalize(row[3]))
        for row in await db.execute_fetchall(_OBJECTS)
    ]
    return int(ids[0][0]), int(ids[0][1]), objects


def check_identity(
    application_id: int, user_version: int, objects: Sequence[SchemaObject], location: str
) -> bool:
    """Return True for a pristine database (to be initialized), False for one of ours.

    Raise ``FormatUnsupportedError``: ``FOREIGN_STORE`` for another application's database
    or schema objects that differ from ours, ``FORMAT_NEWER`` / ``FORMAT_OLDER`` for our
    application id with another schema version.
    """
    if application_id == APPLICATION_ID:
        if user_version > SCHEMA_VERSION:
            raise FormatUnsupportedError(
                f"database schema v{user_version} was written by a newer sessionledger (this "
                f"build reads v{SCHEMA_VERSION}); upgrade sessionledger-sqlite to open it",
                code="FORMAT_NEWER",
                path=location,
            )
        if user_version < SCHEMA_VERSION:
            raise FormatUnsupportedError(
                f"database schema v{user_version} is older than v{SCHEMA_VERSION} and this "
                "build has no upgrade path for it",
                code="FORMAT_OLDER",
                path=location,
            )
        if tuple(objects) != EXPECTED_OBJECTS:
            found = ", ".join(f"{item.type} {item.name}" for item in objects) or "none"
            raise FormatUnsupportedError(
                "database has sessionledger's identity but not its schema objects "
                f"(found: {found}); refusing to use it",
                code="FOREIGN_STORE",
                path=location,
            )
        return False
    if application_id == 0 and user_version == 0 and not objects:
        return True
    raise FormatUnsupportedError(
        f"not a sessionledger database (application_id {application_id:#x}, user_version "
        f"{user_version}, {len(objects)} schema objects; expected application_id "
        f"{APPLICATION_ID:#x}); refusing to use it",
        code="FOREIGN_STORE",
        path=location,
    )


async def _rollback(db: aiosqlite.Connection) -> None:
    # The error that made us roll back is the one worth reporting.
    with contextlib.suppress(sqlite3.Error):
        await db.execute_fetchall("ROLLBACK")


async def _begin_checked(db: aiosqlite.Connection, begin: str, location: str) -> bool:
    """Begin a transaction and return whether the database is pristine; a refused
    database is rolled back (nothing was written) and the refusal raised."""
    await db.execute_fetchall(begin)
    try:
        return check_identity(*await read_identity(db), location)
    except BaseException:
        await _rollback(db)
        raise


async def _initialize(db: aiosqlite.Connection, location: str) -> None:
    """Create the schema unless a concurrent opener did it first.

    Pristine is re-checked under ``BEGIN IMMEDIATE`` (the write lock), so of two
    processes opening a new file at once one creates and the other finds it created.
    """
    if not await _begin_checked(db, "BEGIN IMMEDIATE", location):
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


def create_file(path: str) -> None:
    """Create the database file with mode 0600 (and its directory, 0700) if missing.

    SQLite would create it with the umask's permissions; a session log holds prompts and
    tool output, so it is private from the first byte. The WAL and shared-memory files
    inherit the database file's permissions.
    """
    directory = os.path.dirname(path)
    make_private_dirs(directory, fsync=True)
    try:
        os.close(open_private_file(path, os.O_WRONLY | os.O_EXCL))
    except FileExistsError:
        return
    fsync_dir(directory)  # the new file's entry is durable before anything is stored in it
    failpoint("sqlite.schema.after-create-file")


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
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as error:  # a parent that is a file, a directory it may not search
        raise ConfigError(f"cannot open the database {path!r}: {error.strerror}") from error
    if not stat.S_ISREG(found.st_mode):
        raise ConfigError(f"cannot open the database {path!r}: it is not a regular file")
    location = "file:" + urllib.parse.quote(path)
    for options in _READ_ONLY_OPENS:
        if options != _READ_ONLY_OPENS[0] and _wal_size(path):
            # An immutable open ignores the WAL: it would not see transactions still in it.
            raise ConfigError(
                f"the database {path!r} cannot be read where it is (its directory takes no "
                "new files, as on read-only media) without missing the transactions its "
                "-wal file still holds; copy the database and its -wal file to a writable "
                "directory and read it there"
            )
        db = await connect_daemon(f"{location}?{options}", busy_timeout, uri=True)
        try:
            await db.execute_fetchall("PRAGMA trusted_schema = OFF")
            await db.execute_fetchall("BEGIN")
            try:
                pristine = check_identity(*await read_identity(db), path)
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
    path: str, *, memory: bool, synchronous: Literal["FULL", "NORMAL"], busy_timeout: float
) -> aiosqlite.Connection:
    """Open the database at *path* (creating the file), check it and configure it.

    Raises ``FormatUnsupportedError`` for a database this build must not use, leaving the
    file untouched; only ``sqlite3.Error`` and ``OSError`` escape otherwise.
    """
    if not memory:
        await asyncio.to_thread(create_file, path)
    db = await connect_daemon(path, busy_timeout)
    try:
        await prepare(
            db, location=path, memory=memory, synchronous=synchronous, busy_timeout=busy_timeout
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
) -> None:
    """Configure a fresh connection and check (or create) the schema.

    Order matters: connection-level pragmas first, then the identity check, and only for
    a database that is ours (or pristine and now initialized) anything that writes to the
    file, such as switching the journal mode to WAL.
    """
    await db.execute_fetchall("PRAGMA trusted_schema = OFF")
    await _expect(db, "trusted_schema", 0)
    await db.execute_fetchall("PRAGMA foreign_keys = ON")
    await _expect(db, "foreign_keys", 1)
    # One read snapshot first: a foreign file is refused without taking the write lock.
    pristine = await _begin_checked(db, "BEGIN", location)
    await db.execute_fetchall("COMMIT")
    if pristine:
        await _initialize(db, location)
    await _set_wal(db, memory=memory, busy_timeout=busy_timeout)
    failpoint("sqlite.schema.after-wal")
    await db.execute_fetchall(f"PRAGMA synchronous = {synchronous}")
    await _expect(db, "synchronous", 2 if synchronous == "FULL" else 1)
