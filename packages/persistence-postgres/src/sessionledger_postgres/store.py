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
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final, final
from urllib.parse import urlsplit

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
from sessionledger.events import SessionHeader
from sessionledger.listing import SessionQuery, StoredSummary
from sessionledger.logstore import (
    Batch,
    LogStore,
    RawLog,
    RawRecord,
    Repair,
    RepairReceipt,
    SearchRow,
)
from sessionledger.persistence import SessionPersistence
from sessionledger.registry import EventTypeRegistry
from sessionledger.searching import IndexedText, TextQuery
from sessionledger.summaries import SessionSummary
from sessionledger_postgres import claims, options, queries, rows
from sessionledger_postgres import schema as schema_module
from sessionledger_postgres.schema import DEFAULT_SCHEMA, check_schema_name
from sessionledger_postgres.statements import Statements
from sessionledger_postgres.upgrade import upgrade_v1

__all__ = ["PostgresLogStore", "PostgresPersistence"]

_GRACEFUL_CLOSE_S: Final = 10.0
_SYNCHRONOUS_COMMIT: Final = "SELECT current_setting('synchronous_commit')"


def _count(status: str) -> int:
    """Return the row count of a command status such as ``INSERT 0 12``."""
    return int(status.rsplit(" ", 1)[-1])


@final
class PostgresLogStore(LogStore):
    """The storage primitives of the PostgreSQL backend (options as ``PostgresPersistence``)."""

    scheme = "postgresql"
    can_tear = False  # a transaction is all or nothing
    quarantines = False  # a repair that would delete rows is refused
    max_row_members = 1024
    max_row_bytes = 1 << 20
    indexes_text = True  # search_text, written with each batch
    keeps_audit = True  # the audit table

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
        upgrade: bool = False,
    ) -> None:
        if type(dsn) is not str or urlsplit(dsn).scheme not in ("postgresql", "postgres"):
            raise ConfigError(f"expected a postgresql:// URL, got {dsn!r}")
        options.check_options(pool_min_size, pool_max_size, connect_timeout, command_timeout)
        if exclusive is not True:
            raise ConfigError(
                f"exclusive={exclusive!r}: every session has one writer, always (see "
                "docs/durability.md); the option remains only so that exclusive=true keeps "
                "working"
            )
        if type(upgrade) is not bool:
            raise ConfigError(f"upgrade must be true or false, got {upgrade!r}")
        self._dsn = dsn
        self._upgrade = upgrade
        self._schema = check_schema_name(schema)
        self._sql = Statements(self._schema)
        self._pool_sizes = (pool_min_size, pool_max_size)
        self._connect_timeout = float(connect_timeout)
        self._command_timeout = None if command_timeout is None else float(command_timeout)
        self._location = f"{options.redact(dsn)} (schema {self._schema})"
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
        return f"PostgresLogStore({options.redact(self._dsn)!r}, schema={self._schema!r})"

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
                    await schema_module.prepare(
                        conn, self._schema, upgrade_v1 if self._upgrade else None
                    )
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
            key = claims.lock_key(self._schema, session_id)
            try:
                if conn is None or conn.is_closed():
                    self._held.clear()  # locks die with their connection
                    conn = self._lock_conn = await asyncpg.connect(
                        self._dsn,
                        timeout=self._connect_timeout,
                        server_settings={"application_name": claims.holder_name()},
                    )
                taken = await conn.fetchval(claims.TRY_LOCK, key)
                holder = (
                    None if taken else await conn.fetchrow(claims.HOLDER, *claims.key_halves(key))
                )
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
                raise self._translate(error, session_id) from error
            if not taken:
                raise SessionLockedError(
                    f"another writer holds the session ({claims.describe(holder)}); it is released "
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
                    await conn.fetchval(claims.UNLOCK, claims.lock_key(self._schema, session_id))

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
        summary = rows.summary_columns(batch.summary, header.created_at)
        texts = rows.text_columns(batch.texts)
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
                    *summary,
                    *texts,
                )
            else:
                status = await conn.execute(
                    self._sql.advance,
                    session_id,
                    batch.end_seq,
                    batch.first_seq,
                    *columns,
                    *summary,
                    *texts,
                )
        return _count(status) > 0

    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        session_id = repair.header.id
        closers = repair.closers
        columns = None if closers is None else rows.batch_columns(session_id, closers.records)
        created_at = repair.header.created_at
        summary = rows.summary_columns(repair.summary, created_at)
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
                if repair.kept_events is not None:
                    await conn.execute(self._sql.delete_texts_from, session_id, repair.kept_events)
                if closers is not None and columns is not None:
                    status = await conn.execute(
                        self._sql.advance,
                        session_id,
                        closers.end_seq,
                        closers.first_seq,
                        *columns,
                        *summary,
                        *rows.text_columns(closers.texts),
                    )
                    if _count(status) == 0:
                        raise _Refused  # rolls the cut back too
                await conn.execute(self._sql.set_summary, session_id, *summary)
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

    # -- listing, search, retention (docs/listing.md) -------------------------------------

    async def list_summaries(self) -> list[StoredSummary]:
        async with self.connection() as conn:
            found = await conn.fetch(self._sql.select_summaries)
        return [queries.stored_summary(row) for row in found]

    async def query_sessions(self, query: SessionQuery) -> list[StoredSummary] | None:
        """Answer *query* in SQL, each row checked with the core's rule (``queries``);
        None (the policy answers) while a summary is untrusted or for a filter no SQL
        parameter can carry."""
        built = queries.listing(self._sql.listing, query)
        if built is None:
            return None
        sql, args = built
        wanted = None if query.limit is None else query.limit + 1
        chosen: list[StoredSummary] = []
        async with (
            self.connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            if await conn.fetchval(self._sql.unsummarized):
                return None  # the policy computes them for this listing (reindex stores them)
            prefetch = 100 if wanted is None else min(max(wanted, 16), 1000)
            async for row in conn.cursor(sql, *args, prefetch=prefetch):
                stored = queries.stored_summary(row)
                if not queries.listable(stored, query):
                    continue
                chosen.append(stored)
                if wanted is not None and len(chosen) >= wanted:
                    break
        return chosen

    async def search_text(self, query: TextQuery) -> list[SearchRow] | None:
        """Answer *query* from the GIN index (``queries.search``)."""
        if query.session is not None and rows.text_flaw(query.session) is not None:
            return []  # no stored session has such an id
        sql, args = queries.search(self._sql.search, query)
        async with self.connection(query.session) as conn:
            found = await conn.fetch(sql, *args)
        return [SearchRow(row[0], IndexedText(row[1], row[2], row[3], row[4])) for row in found]

    async def rewrite_index(
        self,
        header: SessionHeader,
        revision: str,
        summary: SessionSummary,
        texts: Sequence[IndexedText],
    ) -> bool:
        session_id = header.id
        if rows.text_flaw(session_id) is not None:
            return False
        columns = rows.text_columns(texts)
        async with self.connection(session_id) as conn, conn.transaction():
            current = await conn.fetchrow(self._sql.lock_summary, session_id)
            if current is None or rows.revision_string(current[0], current[1]) != revision:
                return False
            await conn.execute(
                self._sql.set_summary, session_id, *rows.summary_columns(summary, current[2])
            )
            await conn.execute(self._sql.delete_texts, session_id)
            if texts:
                await conn.execute(self._sql.insert_texts, session_id, *columns)
        return True

    async def stored_bytes(self, session_id: str) -> int | None:
        """Return the stored size of the session's rows (``pg_column_size`` of its
        ``sessions``, ``events`` and ``search_text`` rows, compressed as stored), without
        per-row headers and index entries: what deleting it frees, roughly."""
        if rows.text_flaw(session_id) is not None:
            return None
        async with self.connection(session_id) as conn:
            size = await conn.fetchval(self._sql.stored_bytes, session_id)
        return None if size is None else int(size)

    async def append_audit(self, record: Mapping[str, Any]) -> None:
        text = rows.json_text(record)  # JSON escapes U+0000: the text column can hold it
        async with self.connection() as conn:
            await conn.execute(self._sql.append_audit, text)  # autocommit: durable on return

    async def read_audit(self) -> list[Mapping[str, Any]]:
        async with self.connection() as conn:
            found = await conn.fetch(self._sql.read_audit)
        records: list[Mapping[str, Any]] = []
        for row in found:
            try:
                records.append(rows.parse_json(row[0]))
            except ValueError as error:
                raise CorruptLogError(
                    f"an audit record is not JSON: {error}", path=self._location
                ) from error
        return records

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
    *exclusive* remains for compatibility and must be true. *upgrade* lets the first use
    upgrade a schema of the previous release (v1) in place (docs/formats.md, PostgreSQL).
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
        upgrade: bool = False,
    ) -> None:
        self._postgres = PostgresLogStore(
            dsn,
            schema=schema,
            pool_min_size=pool_min_size,
            pool_max_size=pool_max_size,
            exclusive=exclusive,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            upgrade=upgrade,
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
