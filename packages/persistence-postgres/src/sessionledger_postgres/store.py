"""``PostgresPersistence``: session logs in a PostgreSQL schema, through asyncpg.

The policy (committed region, repair, version and type checks, per-id locking, how a
refusal is worded) is the core's; ``PostgresLogStore`` moves rows. Many processes on
many machines may share one store:

- an append batch is one SQL statement, hence one transaction: it advances
  ``sessions.next_seq`` only where it still equals the batch's first seq and inserts the
  rows in the same statement. The row lock serializes writers of one session, and the
  re-check after the lock wait makes a stale writer insert nothing, so its batch is
  refused and the winner's rows are untouched. The primary key
  ``(session_id, seq)`` is the second guard;
- ownership (docs/durability.md): the one writer of a session holds a session-level
  advisory lock on a dedicated connection of its store, from the claim (resume, load, first write)
  until ``release``/``delete``/``close``. Any other store object, here or on another
  machine, gets ``SessionLockedError`` naming the holder (the lock connection's
  ``application_name`` carries host and pid). The server drops the lock with the
  connection, so a dead holder's claim ends by itself, when its process dies or, on a
  lost machine, when the server notices the connection is gone (TCP keepalives).

Connections come from an asyncpg pool, created (and the schema checked or created) on
first use; ``close()`` releases it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import socket
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final, final
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from sessionledger.errors import (
    ConfigError,
    CorruptLogError,
    LedgerError,
    SeqMismatchError,
    SessionLockedError,
    SessionNotFoundError,
)
from sessionledger.logstore import Batch, LogStore, RawLog, RawRecord, Repair, RepairReceipt
from sessionledger.persistence import SessionPersistence
from sessionledger.registry import EventTypeRegistry
from sessionledger_postgres import rows
from sessionledger_postgres import schema as schema_module
from sessionledger_postgres.schema import DEFAULT_SCHEMA, check_schema_name, quote

__all__ = ["PostgresLogStore", "PostgresPersistence"]

_HEADER_COLUMNS: Final = (
    "id, version, created_at, cwd, parent_session, seed_length, delegation_depth, title, meta"
)
_EVENT_COLUMNS: Final = "seq, type, time, data, source_event_seqs, surface_op, ignorable"
# The batch travels as seven parallel arrays: one message, one statement, any batch size.
_UNNEST: Final = (
    "unnest({0}::bigint[], {1}::text[], {2}::bigint[], {3}::text[], {4}::text[], {5}::text[], "
    "{6}::smallint[]) AS r (seq, type, time, data, source_event_seqs, surface_op, ignorable)"
)
_GRACEFUL_CLOSE_S: Final = 10.0
_SYNCHRONOUS_COMMIT: Final = "SELECT current_setting('synchronous_commit')"
_TRY_LOCK: Final = "SELECT pg_try_advisory_lock($1::bigint)"
_UNLOCK: Final = "SELECT pg_advisory_unlock($1::bigint)"
# Who holds a bigint advisory lock: its key is split into classid (high half) and objid
# (low half), objsubid 1. pg_stat_activity shows another role's application_name only to
# members of pg_read_all_stats; the holder is then unknown.
_HOLDER: Final = (
    "SELECT a.application_name, a.backend_start FROM pg_locks l "
    "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1 LIMIT 1"
)
#: application_name holds at most 63 bytes.
_NAME_BYTES: Final = 63


class _Statements:
    """The SQL text of one store, with its schema name spelled in (names cannot be bound)."""

    def __init__(self, schema: str) -> None:
        s = quote(schema)
        into_events = f"INSERT INTO {s}.events (session_id, {_EVENT_COLUMNS}) "
        self.select_session = (
            f"SELECT {_HEADER_COLUMNS}, incarnation, revision FROM {s}.sessions WHERE id = $1"
        )
        self.select_headers = (
            f"SELECT {_HEADER_COLUMNS}, incarnation, revision FROM {s}.sessions "
            "ORDER BY created_at, id"
        )
        self.select_events = (
            f"SELECT {_EVENT_COLUMNS} FROM {s}.events WHERE session_id = $1 ORDER BY seq"
        )
        # Start at the row that covers from_seq: a packed row can begin before it.
        self.select_events_from = (
            f"SELECT {_EVENT_COLUMNS} FROM {s}.events WHERE session_id = $1 AND seq >= "
            f"coalesce((SELECT max(seq) FROM {s}.events WHERE session_id = $1 AND seq <= $2), 0) "
            "ORDER BY seq"
        )
        # Materialize: the header row and the first batch in one statement. A concurrent
        # creator makes ON CONFLICT insert nothing, so no event row is inserted either.
        self.materialize = (
            f"WITH created AS (INSERT INTO {s}.sessions ({_HEADER_COLUMNS}, incarnation, "
            "revision, next_seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, $11) "
            "ON CONFLICT (id) DO NOTHING RETURNING id) "
            f"{into_events}SELECT created.id, r.* FROM created, "
            + _UNNEST.format("$12", "$13", "$14", "$15", "$16", "$17", "$18")
        )
        # Append: the stale-writer check, the revision bump and the rows in one statement
        # (docs/durability.md). Under READ COMMITTED a writer that waited for the row lock
        # re-evaluates next_seq = $3 on the winner's row version and updates nothing.
        self.advance = (
            f"WITH advanced AS (UPDATE {s}.sessions SET next_seq = $2, revision = revision + 1 "
            "WHERE id = $1 AND next_seq = $3 RETURNING id) "
            f"{into_events}SELECT advanced.id, r.* FROM advanced, "
            + _UNNEST.format("$4", "$5", "$6", "$7", "$8", "$9", "$10")
        )
        self.revision = f"SELECT incarnation, revision FROM {s}.sessions WHERE id = $1"
        self.lock_session = f"{self.revision} FOR UPDATE"
        self.delete_tail = f"DELETE FROM {s}.events WHERE session_id = $1 AND seq >= $2"
        self.count_tail = f"SELECT count(*) FROM {s}.events WHERE session_id = $1 AND seq >= $2"
        self.select_tail = (
            f"SELECT seq, ignorable, data FROM {s}.events WHERE session_id = $1 "
            "ORDER BY seq DESC LIMIT 1"
        )
        self.set_end = (
            f"UPDATE {s}.sessions SET next_seq = $2, revision = revision + 1 WHERE id = $1"
        )
        self.delete = f"DELETE FROM {s}.sessions WHERE id = $1 RETURNING 1"


def _count(status: str) -> int:
    """Return the row count of a command status such as ``INSERT 0 12``."""
    return int(status.rsplit(" ", 1)[-1])


def _redact(dsn: str) -> str:
    """Return *dsn* without its password and query, for messages."""
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc.rpartition("@")
        user = netloc[0].partition(":")[0]
        host = f"{user}@{netloc[2]}" if netloc[1] else netloc[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "postgresql://?"


def _lock_key(schema: str, session_id: str) -> int:
    """Return the 64-bit advisory-lock key of one session of one schema."""
    text = f"{schema}\0{session_id}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def _holder_name() -> str:
    """The lock connection's ``application_name``: who holds its sessions."""
    name = f"sessionledger pid {os.getpid()} on {socket.gethostname()}"
    return name.encode("utf-8")[:_NAME_BYTES].decode("utf-8", "ignore")


def _key_halves(key: int) -> tuple[int, int]:
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


def _check_options(
    pool_min_size: int, pool_max_size: int, connect_timeout: float, command_timeout: float | None
) -> None:
    for name, size, low in (
        ("pool_min_size", pool_min_size, 0),
        ("pool_max_size", pool_max_size, 1),
    ):
        if type(size) is not int or size < low:
            raise ConfigError(f"{name} must be an integer >= {low}, got {size!r}")
    if pool_min_size > pool_max_size:
        raise ConfigError(f"pool_min_size {pool_min_size} exceeds pool_max_size {pool_max_size}")
    timeouts = [("connect_timeout", connect_timeout)]
    if command_timeout is not None:
        timeouts.append(("command_timeout", command_timeout))
    for name, value in timeouts:
        if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")


@final
class PostgresLogStore(LogStore):
    """The storage primitives of the PostgreSQL backend (options as ``PostgresPersistence``)."""

    scheme = "postgresql"
    can_tear = False  # a transaction is all or nothing
    quarantines = False  # a repair that would delete rows is refused
    max_row_members = 1024
    max_row_bytes = 1 << 20

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        pool_min_size: int = 1,
        pool_max_size: int = 8,
        exclusive: bool = True,
        connect_timeout: float = 10.0,
        command_timeout: float | None = None,
    ) -> None:
        if type(dsn) is not str or urlsplit(dsn).scheme not in ("postgresql", "postgres"):
            raise ConfigError(f"expected a postgresql:// URL, got {dsn!r}")
        _check_options(pool_min_size, pool_max_size, connect_timeout, command_timeout)
        if exclusive is not True:
            raise ConfigError(
                f"exclusive={exclusive!r}: every session has one writer, always (see "
                "docs/durability.md); the option remains only so that exclusive=true keeps "
                "working"
            )
        self._dsn = dsn
        self._schema = check_schema_name(schema)
        self._sql = _Statements(self._schema)
        self._pool_sizes = (pool_min_size, pool_max_size)
        self._connect_timeout = float(connect_timeout)
        self._command_timeout = None if command_timeout is None else float(command_timeout)
        self._location = f"{_redact(dsn)} (schema {self._schema})"
        self._pool: asyncpg.Pool | None = None
        self._gate = asyncio.Lock()
        self._shut = False
        # The connection holding this store's claims (advisory locks), and the claims.
        self._lock_conn: asyncpg.Connection | None = None
        self._lock_gate = asyncio.Lock()
        self._held: set[str] = set()

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    def __repr__(self) -> str:
        return f"PostgresLogStore({_redact(self._dsn)!r}, schema={self._schema!r})"

    # -- pool, connections and errors ------------------------------------------------------

    async def _create_pool(self, server_settings: dict[str, str] | None) -> asyncpg.Pool:
        minimum, maximum = self._pool_sizes
        try:
            return await asyncpg.create_pool(
                self._dsn,
                min_size=minimum,
                max_size=maximum,
                timeout=self._connect_timeout,
                command_timeout=self._command_timeout,
                server_settings=server_settings,
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
            raise ConfigError(
                f"cannot connect to PostgreSQL at {self._location}: {error}"
            ) from error

    async def _get_pool(self) -> asyncpg.Pool:
        async with self._gate:
            if self._shut:
                raise ConfigError(f"PostgreSQL store {self._location} is closed")
            if self._pool is not None:
                return self._pool
            pool = await self._create_pool(None)
            try:
                async with pool.acquire() as conn:
                    await schema_module.prepare(conn, self._schema)
                    durable = await conn.fetchval(_SYNCHRONOUS_COMMIT) != "off"
                if not durable:
                    # The server (or the URL) acknowledges commits before they are flushed;
                    # appends must resolve only after durability. A startup
                    # setting, unlike SET, survives the pool's RESET ALL between uses.
                    await pool.close()
                    pool = await self._create_pool({"synchronous_commit": "on"})
            except BaseException as error:
                await pool.close()
                if isinstance(error, (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
                    raise self._translate(error, None) from error
                raise
            self._pool = pool
            return pool

    @contextlib.asynccontextmanager
    async def connection(self, session_id: str | None = None) -> AsyncIterator[PoolConnectionProxy]:
        """Lend a pooled connection for the body; translate driver errors on the way out."""
        # Public for white-box tests of connection settings; the primitives use it too.
        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn:
                yield conn
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
            raise self._translate(error, session_id) from error

    def _translate(self, error: Exception, session_id: str | None) -> LedgerError:
        """Map a driver or OS error to the library's errors (the only place that does)."""
        where = self._location
        if isinstance(error, asyncpg.UniqueViolationError):
            return SeqMismatchError(
                f"rows already stored at the batch's seqs (written past next_seq?): {error}",
                session_id=session_id,
            )
        if isinstance(error, asyncpg.ForeignKeyViolationError):
            return SessionNotFoundError(
                "session is no longer stored (deleted by another writer?)", session_id=session_id
            )
        if isinstance(
            error,
            (
                asyncpg.LockNotAvailableError,
                asyncpg.DeadlockDetectedError,
                asyncpg.SerializationError,
            ),
        ):
            return SessionLockedError(f"PostgreSQL refused a lock: {error}", session_id=session_id)
        if isinstance(
            error,
            (
                asyncpg.InvalidAuthorizationSpecificationError,
                asyncpg.InvalidCatalogNameError,
                asyncpg.InsufficientPrivilegeError,
            ),
        ):
            return ConfigError(f"PostgreSQL at {where} refused access: {error}")
        if isinstance(error, asyncpg.DataCorruptedError):
            return CorruptLogError(
                f"PostgreSQL reports damaged data: {error}", session_id=session_id, path=where
            )
        if isinstance(error, (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError)):
            return LedgerError(
                f"lost the connection to PostgreSQL at {where} (a write in flight may or may "
                f"not have committed; reload the session to know): {error}",
                session_id=session_id,
            )
        return LedgerError(f"PostgreSQL failed on {where}: {error}", session_id=session_id)

    # -- ownership -------------------------------------------------------------------------

    async def claim(self, session_id: str) -> None:
        """Take the session's advisory lock on this store's lock connection, at once, or
        raise ``SessionLockedError`` naming the holder."""
        await self._hold(session_id)

    async def _hold(self, session_id: str) -> None:
        """Take (once) the advisory lock of *session_id*, or raise ``SessionLockedError``;
        a claim whose connection was lost is refused, since another writer may have
        taken over."""
        async with self._lock_gate:
            conn = self._lock_conn
            if session_id in self._held:
                if conn is None or conn.is_closed():
                    raise SessionLockedError(
                        "the connection holding this session's claim was lost; another "
                        "writer may have taken over (release the session and resume it)",
                        session_id=session_id,
                    )
                return
            key = _lock_key(self._schema, session_id)
            try:
                if conn is None or conn.is_closed():
                    self._held.clear()  # locks die with their connection
                    conn = self._lock_conn = await asyncpg.connect(
                        self._dsn,
                        timeout=self._connect_timeout,
                        server_settings={"application_name": _holder_name()},
                    )
                taken = await conn.fetchval(_TRY_LOCK, key)
                holder = None if taken else await conn.fetchrow(_HOLDER, *_key_halves(key))
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
                raise self._translate(error, session_id) from error
            if not taken:
                raise SessionLockedError(
                    f"another writer holds the session ({_describe(holder)}); it is released "
                    "when that writer releases or closes it, or its process ends",
                    session_id=session_id,
                )
            self._held.add(session_id)

    async def _release(self, session_id: str) -> None:
        async with self._lock_gate:
            conn = self._lock_conn
            if session_id not in self._held:
                return
            self._held.discard(session_id)
            if conn is not None and not conn.is_closed():
                with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    await conn.fetchval(_UNLOCK, _lock_key(self._schema, session_id))

    # -- storage primitives ----------------------------------------------------------------

    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        if rows.text_flaw(session_id) is not None:
            return None  # such an id can never have been stored
        async with (
            self.connection(session_id) as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            head = await conn.fetchrow(self._sql.select_session, session_id)
            if head is None:
                return None
            if from_seq > 0:
                found = await conn.fetch(self._sql.select_events_from, session_id, from_seq)
            else:
                found = await conn.fetch(self._sql.select_events, session_id)
        records = [
            RawRecord(rows.storage_record(row), row[0], f"row seq {row[0]}") for row in found
        ]
        revision = rows.revision_string(head[9], head[10])
        return RawLog(rows.header_json(head), records, revision, self._location)

    async def read_revision(self, session_id: str) -> str | None:
        if rows.text_flaw(session_id) is not None:
            return None
        async with self.connection(session_id) as conn:
            row = await conn.fetchrow(self._sql.revision, session_id)
        return None if row is None else rows.revision_string(row[0], row[1])

    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        async with self.connection() as conn:
            found = await conn.fetch(self._sql.select_headers)
        return [(rows.header_json(row), rows.revision_string(row[9], row[10])) for row in found]

    async def write_batch(self, batch: Batch) -> bool:
        header = batch.header
        session_id = header.id
        # Serialize before touching the server: a value that cannot be stored writes nothing.
        rows.plain_text(session_id, "session id", session_id)
        columns = rows.batch_columns(session_id, batch.records)
        await self._hold(session_id)  # the policy claimed it; this checks the claim holds
        async with self.connection(session_id) as conn:
            if batch.creates:
                status = await conn.execute(
                    self._sql.materialize,
                    session_id,
                    header.version,
                    header.created_at,
                    rows.plain_text(header.cwd, "cwd", session_id),
                    rows.plain_text(header.parent_session, "parent session", session_id),
                    header.seed_length,
                    header.delegation_depth,
                    rows.plain_text(header.title, "title", session_id),
                    None if header.meta is None else rows.json_text(header.meta),
                    uuid.uuid4().hex,
                    batch.end_seq,
                    *columns,
                )
            else:
                status = await conn.execute(
                    self._sql.advance, session_id, batch.end_seq, batch.first_seq, *columns
                )
        return _count(status) > 0

    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        session_id = repair.header.id
        closers = repair.closers
        columns = None if closers is None else rows.batch_columns(session_id, closers.records)
        await self._hold(session_id)
        try:
            async with self.connection(session_id) as conn, conn.transaction():
                current = await conn.fetchrow(self._sql.lock_session, session_id)
                if current is None or rows.revision_string(*current) != repair.revision:
                    return None
                if repair.cut_at is not None:
                    if await conn.fetchval(self._sql.count_tail, session_id, repair.cut_at):
                        raise ConfigError(
                            "this PostgreSQL store keeps no quarantine, and a repair never "
                            "deletes rows it cannot move aside: copy the session out "
                            "(sessionledger copy) before cutting it",
                            session_id=session_id,
                        )
                    await conn.execute(self._sql.delete_tail, session_id, repair.cut_at)
                    end = rows.row_end(await conn.fetchrow(self._sql.select_tail, session_id))
                    await conn.execute(self._sql.set_end, session_id, end)
                if closers is not None and columns is not None:
                    status = await conn.execute(
                        self._sql.advance, session_id, closers.end_seq, closers.first_seq, *columns
                    )
                    if _count(status) == 0:
                        raise _Refused  # rolls the cut back too
        except _Refused:
            return None
        return RepairReceipt()

    async def delete_log(self, session_id: str) -> bool:
        if rows.text_flaw(session_id) is not None:
            return False
        async with self.connection(session_id) as conn:
            # ON DELETE CASCADE removes the event rows in the same statement.
            deleted = await conn.fetchval(self._sql.delete, session_id)
        await self._release(session_id)
        return deleted is not None

    async def release(self, session_id: str) -> None:
        await self._release(session_id)

    async def close(self) -> None:
        async with self._gate:
            self._shut = True
            pool, self._pool = self._pool, None
        async with self._lock_gate:
            conn, self._lock_conn = self._lock_conn, None
            self._held.clear()
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            if conn is not None:
                await conn.close(timeout=_GRACEFUL_CLOSE_S)
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), _GRACEFUL_CLOSE_S)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pool.terminate()


def _describe(holder: asyncpg.Record | None) -> str:
    """Name a lock holder from its connection's application name and start time."""
    if holder is None or not holder[0]:
        return "holder unknown"
    since = (
        "" if holder[1] is None else f", connected since {holder[1].isoformat(timespec='seconds')}"
    )
    return f"{str(holder[0])[:_NAME_BYTES]}{since}"


class _Refused(Exception):
    """The closers of a repair did not continue the log: roll the repair back."""


@final
class PostgresPersistence(SessionPersistence):
    """Keep session logs in a PostgreSQL schema, shared by any number of processes.

    Construction is synchronous and touches nothing; the pool is created and the schema
    checked (or created, race-free) on first use. *dsn* is a ``postgresql://`` URL as
    asyncpg takes it (``?host=/socket/dir`` for a Unix socket); *schema* names the
    PostgreSQL schema holding the tables; *pool_min_size* / *pool_max_size* size the
    connection pool; *connect_timeout* and *command_timeout* are in seconds. Each store
    object keeps one more connection, holding its sessions' claims (see the module docs);
    *exclusive* remains for compatibility and must be true.
    """

    def __init__(
        self,
        dsn: str,
        *,
        event_types: EventTypeRegistry | None = None,
        schema: str = DEFAULT_SCHEMA,
        pool_min_size: int = 1,
        pool_max_size: int = 8,
        exclusive: bool = True,
        connect_timeout: float = 10.0,
        command_timeout: float | None = None,
    ) -> None:
        self._postgres = PostgresLogStore(
            dsn,
            schema=schema,
            pool_min_size=pool_min_size,
            pool_max_size=pool_max_size,
            exclusive=exclusive,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
        )
        super().__init__(self._postgres, event_types=event_types)

    @property
    def log_store(self) -> PostgresLogStore:
        """The PostgreSQL storage primitives this backend drives."""
        return self._postgres

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._postgres.schema

    def __repr__(self) -> str:
        return repr(self._postgres).replace("PostgresLogStore", "PostgresPersistence", 1)
