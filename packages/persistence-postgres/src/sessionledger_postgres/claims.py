"""Session claims of the PostgreSQL store: advisory locks on one connection, kept across its loss.

A session's one writer holds a session-level advisory lock whose key derives from the
schema and the session id, on a connection of the store's own (not a pooled one); the
connection's ``application_name`` names the holder, so a refused writer learns who
holds the session (docs/durability.md, "one writer per session" and "lost connections").

The server drops the locks with the connection. The lock connection asks the server
never to end it for idleness and to probe it with TCP keepalives (which also keeps a
NAT mapping open). When it is lost anyway while the process lives (a server restart,
``pg_terminate_backend``, an idle-connection reaper), the store reconnects at once, and
at the latest on the next claim or write, and takes every claimed session's lock again;
queued events are untouched. A session another writer took in between is refused for
that session alone, and the conditional write keeps a stale batch out in every case.

Taking and letting go of a lock run to their end even when the caller is cancelled, and a
claim taken for a caller that was cancelled is let go again, so the server never holds a
lock this store does not know of.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
from typing import Final, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from sessionledger._errors import ConfigError, LedgerError, SessionLockedError
from sessionledger_postgres.connections import TrackedConnection
from sessionledger_postgres.failures import LOST, translate

__all__ = [
    "HOLDER",
    "NAME_BYTES",
    "TRY_LOCK",
    "UNLOCK",
    "Claims",
    "describe",
    "holder_name",
    "key_halves",
    "lock_key",
]

TRY_LOCK: Final = "SELECT pg_try_advisory_lock($1::bigint)"
UNLOCK: Final = "SELECT pg_advisory_unlock($1::bigint)"
#: Take many locks again in one round trip, in the order of the keys given.
RETAKE: Final = (
    "SELECT pg_try_advisory_lock(t.key) "
    "FROM unnest($1::bigint[]) WITH ORDINALITY AS t(key, n) ORDER BY t.n"
)
#: Settings the lock connection overrides where the server has them: a connection that
#: holds claims must never be ended for being idle (PostgreSQL 14 has the first).
KEEP_ALIVE: Final = (
    "SELECT set_config(name, '0', false) FROM pg_catalog.pg_settings "
    "WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout')"
)
#: The server probes an idle lock connection every minute: a vanished machine's claims end
#: within about two minutes, and a NAT mapping on the way stays open.
KEEPALIVES: Final = {
    "tcp_keepalives_idle": "60",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "6",
}
# Who holds a bigint advisory lock: its key is split into classid (high half) and objid
# (low half), objsubid 1. pg_stat_activity shows another role's application_name only to
# members of pg_read_all_stats; the holder is then unknown.
HOLDER: Final = (
    "SELECT a.application_name, a.backend_start FROM pg_locks l "
    "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1 LIMIT 1"
)
#: application_name holds at most 63 bytes.
NAME_BYTES: Final = 63
_GRACEFUL_CLOSE_S: Final = 10.0

_T = TypeVar("_T")


def lock_key(schema: str, session_id: str) -> int:
    """Return the 64-bit advisory-lock key of one session of one schema."""
    text = f"{schema}\0{session_id}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def holder_name() -> str:
    """The lock connection's ``application_name``: who holds its sessions."""
    name = f"sessionledger pid {os.getpid()} on {socket.gethostname()}"
    return name.encode("utf-8")[:NAME_BYTES].decode("utf-8", "ignore")


def key_halves(key: int) -> tuple[int, int]:
    """Split a lock key as pg_locks shows it: classid (high half), objid (low half)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


def describe(holder: asyncpg.Record | None) -> str:
    """Name a lock holder from its connection's application name and start time."""
    if holder is None or not holder[0]:
        return "holder unknown"
    since = (
        "" if holder[1] is None else f", connected since {holder[1].isoformat(timespec='seconds')}"
    )
    return f"{str(holder[0])[:NAME_BYTES]}{since}"


async def _to_the_end(task: asyncio.Future[_T]) -> _T:
    """Await *task* to its end even when the caller is cancelled meanwhile; deliver the
    cancellation afterwards. What the task did is then known, so it can be undone."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # retrieved: the caller's cancellation is what it gets
        raise asyncio.CancelledError
    return task.result()


class Claims:
    """The advisory locks of one store object, held on its one lock connection.

    ``_held`` is what the server holds on the current connection; ``_adrift`` the claims
    whose lock went with a lost connection, taken again on the next one; ``_lapsed`` the
    claims another writer took meanwhile (with its description). A claim ends only with
    ``release`` or ``close``.
    """

    def __init__(self, dsn: str, schema: str, *, connect_timeout: float, where: str) -> None:
        self._dsn = dsn
        self._schema = schema
        self._timeout = connect_timeout
        self._where = where
        self._conn: asyncpg.Connection | None = None
        self._gate = asyncio.Lock()
        self._held: set[str] = set()
        self._adrift: set[str] = set()
        self._lapsed: dict[str, str] = {}
        self._recovery: asyncio.Task[None] | None = None
        self._shut = False

    @property
    def idle(self) -> bool:
        """No lock connection is open."""
        return self._conn is None

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._held or session_id in self._adrift or session_id in self._lapsed

    async def hold(self, session_id: str) -> None:
        """Hold *session_id*'s lock, or raise ``SessionLockedError`` naming the holder.

        No round trip when it is held on a live connection; otherwise the lock is taken
        (again), on a new connection if the last one was lost.
        """
        conn = self._conn
        if session_id in self._held and conn is not None and not conn.is_closed():
            return
        task = asyncio.ensure_future(self._take(session_id))
        try:
            await _to_the_end(task)
        except asyncio.CancelledError:
            if not task.cancelled() and task.exception() is None and task.result():
                # Claimed for a caller that is gone: the claim did not happen after all.
                await _to_the_end(asyncio.ensure_future(self._let_go(session_id)))
            raise

    async def release(self, session_id: str) -> None:
        """Let go of *session_id*'s claim. A lock the server may still hold after a failed
        unlock goes with its connection, so this never fails."""
        if session_id in self:
            await _to_the_end(asyncio.ensure_future(self._let_go(session_id)))

    async def close(self) -> None:
        """Let go of every claim by ending the lock connection (idempotent)."""
        self._shut = True
        recovery, self._recovery = self._recovery, None
        if recovery is not None:
            recovery.cancel()  # it ends any connection it made
        async with self._gate:  # after a take or let-go in flight
            conn, self._conn = self._conn, None
            self._held.clear()
            self._adrift.clear()
            self._lapsed.clear()
        if conn is None:
            return
        try:
            await conn.close(timeout=_GRACEFUL_CLOSE_S)
        except BaseException as error:
            with contextlib.suppress(Exception):  # e.g. the loop it belongs to has ended
                conn.terminate()
            if not isinstance(error, Exception):
                raise

    def abandon(self) -> None:
        """End the lock connection at once, writing nothing, when the event loop it belongs
        to is gone: the server lets go of every claim with it."""
        self._shut = True
        self._recovery = None  # a task of the loop that is gone: nothing to cancel it on
        conn, self._conn = self._conn, None
        self._held.clear()
        self._adrift.clear()
        self._lapsed.clear()
        if conn is not None:
            with contextlib.suppress(Exception):  # e.g. the loop it belongs to has ended
                conn.terminate()

    # -- under the gate ---------------------------------------------------------------------

    async def _take(self, session_id: str) -> bool:
        """Take *session_id*'s lock; True when this made a new claim (not one held before)."""
        async with self._gate:
            if self._shut:
                raise ConfigError(f"PostgreSQL store {self._where} is closed")
            claimed = session_id in self
            key = lock_key(self._schema, session_id)
            for attempt in (1, 2):
                conn = await self._connected(session_id)
                if session_id in self._held:
                    return False  # taken again with the new connection
                try:
                    taken = bool(await conn.fetchval(TRY_LOCK, key))
                    holder = None if taken else await conn.fetchrow(HOLDER, *key_halves(key))
                    break
                except BaseException as error:
                    # The connection died under us (or the loop is shutting down): whether the
                    # lock was granted is unknown, so the connection goes, and the lock with it.
                    self._drop_connection()
                    if not isinstance(error, Exception):
                        raise
                    if attempt == 2:
                        raise translate(error, self._where, session_id) from error
            if taken:
                self._held.add(session_id)
                self._lapsed.pop(session_id, None)
                return not claimed
            raise self._refusal(session_id, describe(holder))

    async def _let_go(self, session_id: str) -> None:
        async with self._gate:
            self._adrift.discard(session_id)
            self._lapsed.pop(session_id, None)
            if session_id not in self._held:
                return
            self._held.discard(session_id)
            conn = self._conn
            if conn is None or conn.is_closed():
                return  # the lock went with the connection
            try:
                await conn.fetchval(UNLOCK, lock_key(self._schema, session_id))
            except BaseException as error:
                # Whether the unlock ran is unknown: the connection ends, and the lock with
                # it; the other claims are taken again on the next connection.
                self._drop_connection()
                if not isinstance(error, Exception):
                    raise

    async def _connected(self, session_id: str | None) -> asyncpg.Connection:
        """The lock connection; a new one, holding every claim it can take again, when the
        last one was lost."""
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return conn
        self._drop_connection()
        try:
            conn = await asyncpg.connect(
                self._dsn,
                timeout=self._timeout,
                server_settings={"application_name": holder_name(), **KEEPALIVES},
                connection_class=TrackedConnection,
            )
        except Exception as error:
            raise self._unreachable(error, session_id) from error
        try:
            await conn.execute(KEEP_ALIVE)
            if self._adrift:
                await self._retake(conn)
        except BaseException as error:
            conn.terminate()  # and whatever it took with it: the claims stay adrift
            if not isinstance(error, Exception):
                raise
            raise self._unreachable(error, session_id) from error
        conn.add_termination_listener(self._lost)
        self._conn = conn
        return conn

    async def _retake(self, conn: asyncpg.Connection) -> None:
        """Take the locks of every claim adrift again; one another writer took meanwhile
        lapses. State changes only once every answer is in."""
        adrift = sorted(self._adrift)
        keys = [lock_key(self._schema, session_id) for session_id in adrift]
        taken = [bool(row[0]) for row in await conn.fetch(RETAKE, keys)]
        holders = {
            session_id: describe(await conn.fetchrow(HOLDER, *key_halves(key)))
            for session_id, key, ok in zip(adrift, keys, taken, strict=True)
            if not ok
        }
        self._adrift.clear()
        for session_id, ok in zip(adrift, taken, strict=True):
            if ok:
                self._held.add(session_id)
            else:
                self._lapsed[session_id] = holders[session_id]

    def _drop_connection(self) -> None:
        """Forget the lock connection (ending it, should it still be open): its claims are
        adrift until the next one takes them again."""
        conn, self._conn = self._conn, None
        self._adrift |= self._held
        self._held.clear()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.terminate()

    # -- the connection lost while the process lives ----------------------------------------

    def _lost(self, conn: asyncpg.Connection | PoolConnectionProxy) -> None:
        """Termination listener: the server ended the lock connection (our own ending it has
        forgotten it first). Take the claims again now rather than at the next write."""
        if conn is not self._conn or self._shut:
            return
        if self._recovery is None or self._recovery.done():
            self._recovery = asyncio.ensure_future(self._recover())

    async def _recover(self) -> None:
        with contextlib.suppress(LedgerError):  # unreachable now: the next claim or write retries
            async with self._gate:
                if not self._shut and (self._held or self._adrift):
                    await self._connected(None)

    # -- wording ----------------------------------------------------------------------------

    def _refusal(self, session_id: str, holder: str) -> SessionLockedError:
        if session_id in self._lapsed:
            self._lapsed[session_id] = holder
            return SessionLockedError(
                f"another writer took the session ({holder}) while this store's claim on it "
                "was lost with its connection to PostgreSQL; nothing is written here while "
                "that writer holds it. Once it lets go, this store continues the session "
                "only if that writer wrote nothing (SeqMismatchError otherwise); release the "
                "session (a ledger: release(session, discard=True)) and resume it to "
                "continue from what is stored",
                session_id=session_id,
            )
        return SessionLockedError(
            f"another writer holds the session ({holder}); it is released when that writer "
            "releases or closes it, or its process ends",
            session_id=session_id,
        )

    def _unreachable(self, error: Exception, session_id: str | None) -> LedgerError:
        if not isinstance(error, LOST):
            return translate(error, self._where, session_id)
        return LedgerError(
            f"cannot reach PostgreSQL at {self._where} to hold the session's claim; its "
            f"queued events stay queued, and the next flush tries again "
            f"({type(error).__name__}: {error})",
            session_id=session_id,
        )
