"""The SQLite store's file: DDL, identity, pragmas, race-free creation, opening.

A database belongs to sessionledger when its ``application_id`` is ``0x534C4447``
("SLDG"), its ``user_version`` is ``SCHEMA_VERSION`` and its schema objects are exactly
the ones below. Anything else is refused with ``FormatUnsupportedError`` before a single
byte of the file is written: bump and reject, never a silent migration. The one way
forward is asked for by name: ``upgrade=1`` upgrades a v1 database in place, in one
transaction (docs/formats.md, "SQLite").

Schema v2 is v1 plus ``UPGRADE_DDL``: a new database runs both lists, a v1 database the
second, so the two end with the very same schema text.

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
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Literal, NamedTuple, TypeAlias

import aiosqlite

from sessionledger._failpoints import failpoint
from sessionledger.errors import ConfigError, FormatUnsupportedError
from sessionledger.files import fsync_dir, make_private_dirs, open_private_file

__all__ = [
    "APPLICATION_ID",
    "open_reader",
    "DDL",
    "EXPECTED_OBJECTS",
    "SHADOW_TABLES",
    "UPGRADE_DDL",
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

#: ``PRAGMA application_id`` of a sessionledger database: ASCII "SLDG".
APPLICATION_ID: Final = 0x534C4447
#: ``PRAGMA user_version``: the schema version this build reads and writes.
SCHEMA_VERSION: Final = 2

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

#: The statements that created schema v1 (the stored format of earlier releases).
V1_DDL: Final = (_SESSIONS, _EVENTS, _SESSIONS_ORDER, _CONTINUE, _ADVANCE)

# v2: each session's summary (docs/listing.md), written in the transaction of each batch.
# ``events`` NULL marks a summary the store cannot trust (the policy rebuilds it);
# ``last_activity`` is the last event's time, or ``created_at`` while there is none, so
# both listing orders are one index scan.
_SUMMARY_COLUMNS: Final = (
    "events INTEGER CHECK (events >= 0)",
    "first_activity INTEGER",
    "last_activity INTEGER NOT NULL DEFAULT 0",
    "open_turn INTEGER",
)
_BY_ACTIVITY: Final = "CREATE INDEX sessions_by_last_activity ON sessions (last_activity DESC, id)"
_BY_CREATION: Final = "CREATE INDEX sessions_newest_first ON sessions (created_at DESC, id)"
# Finding a summary to rebuild must not read every session row.
_UNSUMMARIZED: Final = "CREATE INDEX sessions_unsummarized ON sessions (id) WHERE events IS NULL"
# The searchable texts (sessionledger.searching), and an FTS5 index over them that keeps
# no copy (external content). FTS5 tables cannot be written from triggers under
# ``trusted_schema=OFF`` (nor cascade): the store writes and deletes both explicitly, in
# the transaction of the events they come from.
_TEXTS: Final = """CREATE TABLE search_texts (
  id         INTEGER PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  seq        INTEGER NOT NULL,
  type       TEXT NOT NULL,
  time       INTEGER NOT NULL,
  text       TEXT NOT NULL
) STRICT"""
_TEXTS_BY_SESSION: Final = "CREATE INDEX search_texts_by_session ON search_texts (session_id, seq)"
# unicode61 without diacritic folding splits words at punctuation and "_" and folds case,
# as ``sessionledger.searching.words`` does.
_TEXT_INDEX: Final = (
    "CREATE VIRTUAL TABLE search_index USING fts5(text, content = 'search_texts', "
    "content_rowid = 'id', tokenize = \"unicode61 remove_diacritics 0\")"
)
#: The tables FTS5 creates for ``search_index``: their text is SQLite's, not ours.
SHADOW_TABLES: Final = frozenset(
    f"search_index_{suffix}" for suffix in ("data", "idx", "docsize", "config")
)
_AUDIT: Final = """CREATE TABLE audit (
  seq    INTEGER PRIMARY KEY,
  record TEXT NOT NULL
) STRICT"""
# Append-only in the file itself: nothing, not even another program's SQL, rewrites it.
_AUDIT_NO_UPDATE: Final = """CREATE TRIGGER audit_is_append_only BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'sessionledger: the audit log is append-only'); END"""
_AUDIT_NO_DELETE: Final = """CREATE TRIGGER audit_keeps_its_records BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'sessionledger: the audit log is append-only'); END"""

# An append is one INSERT into this view, committed on its own (one round trip, as in v1):
# its trigger inserts each event row (the events triggers check and advance the log), the
# row's search text when it has one, and, on the batch's last row (``closes``), the
# session's summary. Only the FTS5 index cannot be written here (no virtual table in a
# trigger under ``trusted_schema=OFF``): a batch with texts adds it in a transaction.
_BATCH_ROWS: Final = """CREATE VIEW batch_rows (
  session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable, members,
  text, summary_events, first_activity, last_activity, open_turn, closes
) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL WHERE 0"""
_APPEND: Final = """CREATE TRIGGER batch_rows_append INSTEAD OF INSERT ON batch_rows
BEGIN
INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op,
  ignorable, members)
VALUES (NEW.session_id, NEW.seq, NEW.type, NEW.time, NEW.data, NEW.source_event_seqs,
  NEW.surface_op, NEW.ignorable, NEW.members);
INSERT INTO search_texts (session_id, seq, type, time, text)
SELECT NEW.session_id, NEW.seq, NEW.type, NEW.time, NEW.text WHERE NEW.text IS NOT NULL;
UPDATE sessions SET events = NEW.summary_events, first_activity = NEW.first_activity,
  last_activity = CASE WHEN NEW.last_activity IS NULL THEN created_at
  ELSE NEW.last_activity END, open_turn = NEW.open_turn
WHERE id = NEW.session_id AND NEW.closes = 1;
END"""

#: What turns schema v1 into v2, in order.
UPGRADE_DDL: Final = (
    *(f"ALTER TABLE sessions ADD COLUMN {column}" for column in _SUMMARY_COLUMNS),
    _BY_ACTIVITY,
    _BY_CREATION,
    _UNSUMMARIZED,
    _TEXTS,
    _TEXTS_BY_SESSION,
    _TEXT_INDEX,
    _AUDIT,
    _AUDIT_NO_UPDATE,
    _AUDIT_NO_DELETE,
    _BATCH_ROWS,
    _APPEND,
)

#: The statements that create the schema, in order.
DDL: Final = (*V1_DDL, *UPGRADE_DDL)

#: Fills the summaries and search texts of an upgraded database, inside its transaction
#: (``sessionledger_sqlite.upgrade``); raises a ``LedgerError`` to refuse the upgrade.
Upgrader: TypeAlias = Callable[["aiosqlite.Connection"], Awaitable[None]]


class SchemaObject(NamedTuple):
    """One row of ``sqlite_schema`` (internal ``sqlite_*`` objects excluded)."""

    type: str
    name: str
    table: str
    sql: str | None


def _normalize(sql: str | None) -> str | None:
    return None if sql is None else " ".join(sql.split())


def _sorted(objects: Sequence[SchemaObject]) -> tuple[SchemaObject, ...]:
    return tuple(sorted(objects, key=lambda item: (item.type, item.name)))


#: What ``sqlite_schema`` holds for a v1 database, sorted by (type, name).
V1_OBJECTS: Final = _sorted(
    (
        SchemaObject("table", "sessions", "sessions", _normalize(_SESSIONS)),
        SchemaObject("table", "events", "events", _normalize(_EVENTS)),
        SchemaObject("index", "sessions_by_created_at", "sessions", _normalize(_SESSIONS_ORDER)),
        SchemaObject("trigger", "events_continue_the_log", "events", _normalize(_CONTINUE)),
        SchemaObject("trigger", "events_advance_the_log", "events", _normalize(_ADVANCE)),
    )
)

# ``ALTER TABLE ... ADD COLUMN`` stores the table's text with ", <column>" put before
# its closing parenthesis.
_SESSIONS_V2: Final = (
    _SESSIONS.removesuffix(") STRICT") + ", " + ", ".join(_SUMMARY_COLUMNS) + ") STRICT"
)

#: What ``sqlite_schema`` holds for a database this build created, sorted by (type, name).
#: SQLite keeps each CREATE statement's text as it was executed; the text of the FTS5
#: shadow tables is SQLite's own and is not compared (``read_identity`` reads it as None).
EXPECTED_OBJECTS: Final = _sorted(
    (
        *(item for item in V1_OBJECTS if item.name != "sessions"),
        SchemaObject("table", "sessions", "sessions", _normalize(_SESSIONS_V2)),
        SchemaObject("index", "sessions_by_last_activity", "sessions", _normalize(_BY_ACTIVITY)),
        SchemaObject("index", "sessions_newest_first", "sessions", _normalize(_BY_CREATION)),
        SchemaObject("index", "sessions_unsummarized", "sessions", _normalize(_UNSUMMARIZED)),
        SchemaObject("table", "search_texts", "search_texts", _normalize(_TEXTS)),
        SchemaObject(
            "index", "search_texts_by_session", "search_texts", _normalize(_TEXTS_BY_SESSION)
        ),
        SchemaObject("table", "search_index", "search_index", _normalize(_TEXT_INDEX)),
        *(SchemaObject("table", name, name, None) for name in SHADOW_TABLES),
        SchemaObject("table", "audit", "audit", _normalize(_AUDIT)),
        SchemaObject("trigger", "audit_is_append_only", "audit", _normalize(_AUDIT_NO_UPDATE)),
        SchemaObject("trigger", "audit_keeps_its_records", "audit", _normalize(_AUDIT_NO_DELETE)),
        SchemaObject("view", "batch_rows", "batch_rows", _normalize(_BATCH_ROWS)),
        SchemaObject("trigger", "batch_rows_append", "batch_rows", _normalize(_APPEND)),
    )
)

_IDS: Final = "SELECT application_id, user_version FROM pragma_application_id, pragma_user_version"
_OBJECTS: Final = (
    "SELECT type, name, tbl_name, sql FROM sqlite_schema "
    "WHERE substr(name, 1, 7) <> 'sqlite_' ORDER BY type, name"
)


def _shown_sql(name: str, sql: str | None) -> str | None:
    return None if name in SHADOW_TABLES else _normalize(sql)


async def read_identity(db: aiosqlite.Connection) -> tuple[int, int, list[SchemaObject]]:
    """Return ``(application_id, user_version, schema objects)``; call inside a transaction
    so the three come from one snapshot."""
    ids = list(await db.execute_fetchall(_IDS))
    objects = [
        # The text of FTS5's shadow tables is SQLite's, and may change with its version.
        SchemaObject(row[0], row[1], row[2], _shown_sql(row[1], row[3]))
        for row in await db.execute_fetchall(_OBJECTS)
    ]
    return int(ids[0][0]), int(ids[0][1]), objects


#: What ``check_identity`` found: a new file, one of ours, or a v1 database to upgrade.
Identity: TypeAlias = Literal["pristine", "current", "upgradable"]

_HOW_TO_UPGRADE: Final = (
    "open it once with upgrade=1 (sqlite:PATH?upgrade=1, or SqlitePersistence(path, "
    "upgrade=True)) to upgrade it in place in one transaction; releases before v2 cannot "
    "read it afterwards, so copy the file first to keep a copy they can"
)


def _foreign(objects: Sequence[SchemaObject], location: str) -> FormatUnsupportedError:
    found = ", ".join(f"{item.type} {item.name}" for item in objects) or "none"
    return FormatUnsupportedError(
        "database has sessionledger's identity but not its schema objects "
        f"(found: {found}); refusing to use it",
        code="FOREIGN_STORE",
        path=location,
    )


def check_identity(
    application_id: int,
    user_version: int,
    objects: Sequence[SchemaObject],
    location: str,
    *,
    upgrade: bool = False,
) -> Identity:
    """Say whether the database is pristine (to be initialized), ours, or (only when
    *upgrade* is asked for) an intact v1 database to upgrade.

    Raise ``FormatUnsupportedError``: ``FOREIGN_STORE`` for another application's database
    or schema objects that differ from ours, ``FORMAT_NEWER`` / ``FORMAT_OLDER`` for our
    application id with another schema version (a v1 one says how to upgrade it).
    """
    if application_id == APPLICATION_ID:
        if user_version > SCHEMA_VERSION:
            raise FormatUnsupportedError(
                f"database schema v{user_version} was written by a newer sessionledger (this "
                f"build reads v{SCHEMA_VERSION}); upgrade sessionledger-sqlite to open it",
                code="FORMAT_NEWER",
                path=location,
            )
        if user_version == 1:
            if tuple(objects) != V1_OBJECTS:
                raise _foreign(objects, location)
            if upgrade:
                return "upgradable"
            raise FormatUnsupportedError(
                f"database schema v1 is older than v{SCHEMA_VERSION}: {_HOW_TO_UPGRADE}",
                code="FORMAT_OLDER",
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
            raise _foreign(objects, location)
        return "current"
    if application_id == 0 and user_version == 0 and not objects:
        return "pristine"
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
    """Upgrade a v1 database to v2 in one transaction, unless a concurrent opener did.

    The identity is re-read under the write lock; any failure (a session *fill* cannot
    read, a crash) rolls everything back and leaves the v1 database as it was.
    """
    if await _begin_checked(db, "BEGIN IMMEDIATE", location, upgrade=True) != "upgradable":
        await db.execute_fetchall("COMMIT")
        return
    try:
        for statement in UPGRADE_DDL:
            await db.execute_fetchall(statement)
        failpoint("sqlite.upgrade.after-ddl")
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
    *upgrade*, a v1 database is upgraded (and *upgrade* fills its new indexes).

    Raises ``FormatUnsupportedError`` for a database this build must not use, leaving the
    file untouched; only ``sqlite3.Error`` and ``OSError`` escape otherwise.
    """
    if not memory:
        await asyncio.to_thread(create_file, path)
    db = await connect_daemon(path, busy_timeout)
    try:
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
