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
  advisory lock on a dedicated connection of its store (``claims``), from the claim
  (resume, load, first write) until ``release``/``delete``/``close``. Any other store
  object, here or on another machine, gets ``SessionLockedError`` naming the holder. The
  server drops the lock with the connection, so a dead holder's claim ends by itself; a
  connection lost while the process lives is replaced and its claims taken again.

Connections come from an asyncpg pool, created (and the schema checked or created) on
first use; ``close()`` releases it. Every driver or socket error is translated at this
module's boundary (``failures``). A child forked from this process drops the
connections it inherited (``connections``) and starts afresh when it uses the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final, final
from urllib.parse import urlsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from sessionledger import (
    ConfigError,
    CorruptLogError,
    EventTypeRegistry,
    LedgerError,
    SessionHeader,
)
from sessionledger.storage import (
    Batch,
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
)
from sessionledger_postgres import options, queries, rows, schema as schema_module
from sessionledger_postgres.batches import batch_statement, raw_log, row_count, write_whole
from sessionledger_postgres.claims import Claims
from sessionledger_postgres.connections import TrackedConnection
from sessionledger_postgres.failures import translate
from sessionledger_postgres.notices import Notices
from sessionledger_postgres.schema import DEFAULT_SCHEMA, check_schema_name
from sessionledger_postgres.statements import LARGEST_BATCH, Statements
from sessionledger_postgres.upgrade import upgrade_v1

__all__ = ["PostgresLogStore", "PostgresPersistence"]

_GRACEFUL_CLOSE_S: Final = 10.0
_SYNCHRONOUS_COMMIT: Final = "SELECT current_setting('synchronous_commit')"


@final
class PostgresLogStore(LogStore):
    """The storage primitives of the PostgreSQL backend (options as ``PostgresPersistence``)."""

    scheme = "postgresql"
    can_tear = False  # a transaction is all or nothing
    quarantines = False  # a repair that would delete rows is refused
    max_row_members = 1024
    max_row_bytes = 1 << 20
    max_event_bytes = LARGEST_BATCH  # a batch is one message (statements.LARGEST_BATCH)
    max_batch_bytes = LARGEST_BATCH
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
        self._prepared = False  # the schema is checked (and created, for a write)
        self._gate = asyncio.Lock()
        self._shut = False
        self._claims = self._new_claims()
        self._notices = self._new_notices()
        # The process and event loop the connections belong to (set on first use).
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    def __repr__(self) -> str:
        return f"PostgresLogStore({options.redact(self._dsn)!r}, schema={self._schema!r})"

    # -- pool, connections and errors ------------------------------------------------------

    def _new_claims(self) -> Claims:
        return Claims(
            self._dsn, self._schema, connect_timeout=self._connect_timeout, where=self._location
        )

    def _new_notices(self) -> Notices:
        return Notices(
            self._dsn,
            self._sql.channel,
            connect_timeout=self._connect_timeout,
            where=self._location,
        )

    def _here(self) -> None:
        """Check the store is used where its connections live: in this process (a forked
        child starts afresh: its inherited sockets were let go at the fork) and in the
        event loop that opened them (another loop may start afresh while none is open)."""
        loop = asyncio.get_running_loop()
        if loop is self._loop and self._pid == os.getpid():
            return
        if self._pid == os.getpid() and (self._pool is not None or not self._claims.idle):
            raise ConfigError(
                f"PostgreSQL store {self._location} has connections open in another event "
                "loop, which they belong to: use one store object per event loop, or close "
                "it in its loop first"
            )
        self._pid, self._loop = os.getpid(), loop
        self._pool = None
        self._prepared = False
        self._gate = asyncio.Lock()
        self._claims = self._new_claims()
        self._notices = self._new_notices()

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
                connection_class=TrackedConnection,
            )
        except Exception as error:  # whatever the driver raises: the URL cannot be used
            raise ConfigError(
                f"cannot connect to PostgreSQL at {self._location}: {error}"
            ) from error

    async def _get_pool(self, *, prepare: bool = True) -> asyncpg.Pool | None:
        """The pool, on a schema checked to be this build's. A write (*prepare*) creates
        the schema when it is missing (or upgrades a v1 one when asked); a read creates
        nothing and gets None while there is no schema to read (docs/listing.md,
        "reading never writes")."""
        self._here()
        async with self._gate:
            if self._shut:
                raise ConfigError(f"PostgreSQL store {self._location} is closed")
            pool = self._pool
            if pool is None:
                pool = await self._create_pool(None)
            try:
                if not self._prepared:
                    async with pool.acquire() as conn:
                        if prepare or self._upgrade:  # an upgrade writes: a read asks for it
                            await schema_module.prepare(
                                conn, self._schema, upgrade_v1 if self._upgrade else None
                            )
                        elif await schema_module.inspect_schema(conn, self._schema) is None:
                            self._pool = pool  # kept: the next call looks again
                            return None
                        durable = await conn.fetchval(_SYNCHRONOUS_COMMIT) != "off"
                    if not durable:
                        # The server (or the URL) acknowledges commits before they are
                        # flushed; appends must resolve only after durability. A startup
                        # setting, unlike SET, survives the pool's RESET ALL between uses.
                        await pool.close()
                        pool = await self._create_pool({"synchronous_commit": "on"})
                    self._prepared = True
            except BaseException as error:
                pool.terminate()
                self._pool = None
                if isinstance(error, Exception):
                    raise translate(error, self._location) from error
                raise
            self._pool = pool
            return pool

    @contextlib.asynccontextmanager
    async def connection(self, session_id: str | None = None) -> AsyncIterator[PoolConnectionProxy]:
        """Lend a pooled connection for the body; translate driver errors on the way out."""
        # Public for white-box tests of connection settings; the primitives use it too.
        pool = await self._get_pool()
        assert pool is not None  # a write's pool always has its schema
        async with self._lent(pool, session_id) as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _reading(
        self, session_id: str | None = None
    ) -> AsyncIterator[PoolConnectionProxy | None]:
        """Lend a pooled connection for a read, or None while the schema does not exist:
        reading creates nothing."""
        pool = await self._get_pool(prepare=False)
        if pool is None:
            yield None
            return
        async with self._lent(pool, session_id) as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _lent(
        self, pool: asyncpg.Pool, session_id: str | None
    ) -> AsyncIterator[PoolConnectionProxy]:
        try:
            async with pool.acquire() as conn:
                yield conn
        except (LedgerError, _Refused):
            raise
        except Exception as error:  # acquiring, the body's statements and releasing alike
            raise self._translate(error, session_id) from error

    def _translate(self, error: Exception, session_id: str | None) -> LedgerError:
        """Map a driver or OS error to the library's errors (``failures``, the one place)."""
        return translate(error, self._location, session_id)

    # -- the live feed (docs/feed.md; ``notices``) --------------------------------------------

    def change_mark(self) -> int:
        return self._notices.mark()

    async def wait_for_change(self, session_id: str | None, timeout: float, mark: int = 0) -> None:
        self._here()
        if self._shut:
            raise ConfigError(f"PostgreSQL store {self._location} is closed")
        await self._notices.wait(session_id, timeout, mark)

    # -- ownership -------------------------------------------------------------------------

    async def claim(self, session_id: str) -> None:
        """Take the session's advisory lock on this store's lock connection, at once, or
        raise ``SessionLockedError`` naming the holder."""
        await self._hold(session_id)

    async def _hold(self, session_id: str) -> None:
        """Hold the advisory lock of *session_id* (taken again on a new connection if the
        last one was lost), or raise ``SessionLockedError`` (``claims``)."""
        self._here()
        await self._claims.hold(session_id)

    async def _release(self, session_id: str) -> None:
        self._here()
        await self._claims.release(session_id)

    # -- storage primitives ----------------------------------------------------------------

    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        if rows.text_flaw(session_id) is not None:
            return None  # such an id can never have been stored
        async with self._reading(session_id) as conn:
            if conn is None:
                return None
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                head = await conn.fetchrow(self._sql.select_session, session_id)
                if head is None:
                    return None
                if from_seq > 0:
                    found = await conn.fetch(self._sql.select_events_from, session_id, from_seq)
                else:
                    found = await conn.fetch(self._sql.select_events, session_id)
        return raw_log(head, found, self._location)

    async def read_revision(self, session_id: str) -> str | None:
        if rows.text_flaw(session_id) is not None:
            return None
        async with self._reading(session_id) as conn:
            if conn is None:
                return None
            row = await conn.fetchrow(self._sql.revision, session_id)
        return None if row is None else rows.revision_string(row[0], row[1])

    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        async with self._reading() as conn:
            if conn is None:
                return []
            found = await conn.fetch(self._sql.select_headers)
        return [(rows.header_json(row), rows.revision_string(row[9], row[10])) for row in found]

    async def write_batch(self, batch: Batch) -> bool:
        # Serialize before touching the server: a value that cannot be stored writes nothing.
        statement, arguments = batch_statement(self._sql, batch)
        await self._hold(batch.header.id)  # the policy claimed it; this checks the claim holds
        async with self.connection(batch.header.id) as conn:
            status = await conn.execute(statement, *arguments)
        return row_count(status) > 0

    async def write_log(self, batches: Sequence[Batch], check: Callable[[RawLog], None]) -> bool:
        """One transaction: a statement per batch, then the log read back for *check*
        before the commit."""
        session_id = batches[0].header.id
        await self._hold(session_id)
        async with self.connection(session_id) as conn:
            return await write_whole(conn, self._sql, batches, check, self._location)

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
                    if row_count(status) == 0:
                        raise _Refused  # rolls the cut back too
                await conn.execute(self._sql.set_summary, session_id, *summary)
                await conn.execute(self._sql.notify, session_id)
        except _Refused:
            return None
        return RepairReceipt()

    async def delete_log(self, session_id: str) -> bool:
        if rows.text_flaw(session_id) is not None:
            return False
        # ON DELETE CASCADE removes the event rows in the same statement.
        async with self.connection(session_id) as conn, conn.transaction():
            deleted = await conn.fetchval(self._sql.delete, session_id)
            await conn.execute(self._sql.notify, session_id)
        await self._release(session_id)
        return deleted is not None

    async def release(self, session_id: str) -> None:
        await self._release(session_id)

    # -- listing, search, retention (docs/listing.md) -------------------------------------

    async def list_summaries(self) -> list[StoredSummary]:
        async with self._reading() as conn:
            if conn is None:
                return []
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
        async with self._reading() as conn:
            if conn is None:
                return []
            async with conn.transaction(isolation="repeatable_read", readonly=True):
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
        async with self._reading(query.session) as conn:
            if conn is None:
                return []
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
        async with self._reading(session_id) as conn:
            if conn is None:
                return None
            size = await conn.fetchval(self._sql.stored_bytes, session_id)
        return None if size is None else int(size)

    async def append_audit(self, record: Mapping[str, Any]) -> None:
        text = rows.json_text(record)  # JSON escapes U+0000: the text column can hold it
        async with self.connection() as conn:
            await conn.execute(self._sql.append_audit, text)  # autocommit: durable on return

    async def read_audit(self) -> list[Mapping[str, Any]]:
        async with self._reading() as conn:
            if conn is None:
                return []
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
        """Release every connection, claims first; never raises a driver error (nothing is
        left to write by then; a connection that will not close is ended)."""
        if self._pid != os.getpid():
            self._here()  # a forked child's inherited store: nothing of it to close here
        async with self._gate:  # after a pool being created
            self._shut = True
            pool, self._pool = self._pool, None
        await self._claims.close()
        await self._notices.close()
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), _GRACEFUL_CLOSE_S)
        except BaseException as error:
            with contextlib.suppress(Exception):  # e.g. the loop it belongs to has ended
                pool.terminate()
            if not isinstance(error, Exception):
                raise

    def abandon(self) -> None:
        """End the claim connection at once: its loop is gone, so asyncpg cannot finish
        closing it, but the server is told, and lets go of the claims (the pool's
        connections are left to the garbage collector)."""
        self._shut = True
        self._claims.abandon()
        self._notices.abandon()


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
