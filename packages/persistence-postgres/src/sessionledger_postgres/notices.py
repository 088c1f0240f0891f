"""Change notifications of the PostgreSQL store, for live feeds (docs/feed.md).

Every write that changes a session's log notifies the store's channel
(``Statements.channel``) with the session id, in the writing transaction, so PostgreSQL
delivers it only once the write committed. A store that a feed reads keeps one more
connection of its own that LISTENs on the channel, opened on the first wait.

Notices are counted: a feed takes ``mark()`` before it reads a revision and waits for a
notice after that mark, so a notice that arrives while it reads is not missed. Losing
the connection counts as a notice for every session (the feed reads again, and the next
wait connects again); the feed's periodic catch-up read covers whatever a lost
connection could not deliver.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import asyncpg

from sessionledger_postgres.failures import translate

__all__ = ["Notices"]

#: Above this many sessions remembered, forget them all (and count one notice for all).
_REMEMBERED: Final = 10_000


class Notices:
    """The notices one store has received on its channel, and the connection receiving them."""

    def __init__(self, dsn: str, channel: str, *, connect_timeout: float, where: str) -> None:
        self._dsn = dsn
        self._channel = channel
        self._timeout = connect_timeout
        self._where = where
        self._conn: asyncpg.Connection | None = None
        self._gate = asyncio.Lock()
        self._count = 0  # notices received, losses and forgettings included
        self._all_at = 0  # the count at the last notice meant for every session
        self._last: dict[str, int] = {}  # session id → the count at its last notice
        self._waiters: set[asyncio.Future[None]] = set()

    def mark(self) -> int:
        """Where the count of notices is now: pass it to ``wait``."""
        return self._count

    def _changed(self, session_id: str | None, mark: int) -> bool:
        if session_id is None:
            return self._count > mark
        return max(self._all_at, self._last.get(session_id, 0)) > mark

    async def wait(self, session_id: str | None, timeout: float, mark: int) -> None:
        """Return when a notice for *session_id* (None: for any) came after *mark*, or
        after *timeout* seconds; ``StoreUnavailableError`` when the server is unreachable."""
        await self._listening()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._changed(session_id, mark):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            woken: asyncio.Future[None] = loop.create_future()
            self._waiters.add(woken)
            try:
                await asyncio.wait_for(woken, remaining)
            except TimeoutError:
                return
            finally:
                self._waiters.discard(woken)

    async def _listening(self) -> None:
        async with self._gate:
            if self._conn is not None and not self._conn.is_closed():
                return
            try:
                conn = await asyncpg.connect(self._dsn, timeout=self._timeout)
                await conn.add_listener(self._channel, self._notified)
            except Exception as error:
                raise translate(error, self._where) from error
            conn.add_termination_listener(self._lost)
            self._conn = conn
            self._notice(None)  # what changed before it listened is read again

    def _notified(self, conn: object, pid: int, channel: str, payload: object) -> None:
        self._notice(payload if type(payload) is str and payload else None)

    def _lost(self, conn: object) -> None:
        if conn is self._conn:
            self._conn = None
            self._notice(None)

    def _notice(self, session_id: str | None) -> None:
        self._count += 1
        if session_id is None or len(self._last) >= _REMEMBERED:
            self._last.clear()
            self._all_at = self._count
        else:
            self._last[session_id] = self._count
        for woken in self._waiters:
            if not woken.done():
                woken.set_result(None)

    async def close(self) -> None:
        """Close the listening connection (a later wait opens another)."""
        async with self._gate:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5.0)
            if not conn.is_closed():
                conn.terminate()

    def abandon(self) -> None:
        """End the listening connection without awaiting (its loop is gone)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.terminate()
