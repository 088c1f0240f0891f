"""``Ledger``: the live registry of sessions, with their plugins and their store.

What each method does: docs/reading.md, "live sessions".
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
import warnings
from collections.abc import Generator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, final

from sessionledger._errors import (
    ConfigError,
    ForkError,
    NotLiveError,
    SessionExistsError,
    SessionNotFoundError,
)
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._forking import fork_seed
from sessionledger.model._session import Clock, Session, SessionHooks, system_clock
from sessionledger.model._snapshot import is_safe_int
from sessionledger.plugins._manager import PluginSet
from sessionledger.runtime._durability import Durability
from sessionledger.runtime._opening import open_with, plugin_set
from sessionledger.storage._cancellation import uninterrupted
from sessionledger.storage._catalog import ReindexReport
from sessionledger.storage._feed import SessionFeed, StoreFeed
from sessionledger.storage._lifecycle import Closing, LoopBinding, note_unwritten
from sessionledger.storage._limits import DEFAULT_MAX_PENDING_BYTES, Backlog
from sessionledger.storage._listing import SessionListing, SessionPage, SessionQuery, make_query
from sessionledger.storage._owners import Owner
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.storage._retention import PrunePlan
from sessionledger.views._searching import SearchHit


@final
class Ledger:
    """Live sessions with the plugins' hooks attached, made durable through a store.

    One live ``Session`` object per id. Committed events reach the store through a
    write-behind window (default 200 ms); ``await ledger.flush(session)`` is the
    durability checkpoint. ``Ledger()`` without persistence keeps sessions in memory.
    Use it as an async context manager (or call ``close()``). A ledger serves one event
    loop, the one it is first used on (docs/durability.md, "one event loop per ledger").
    """

    def __init__(
        self,
        persistence: SessionPersistence | None = None,
        *,
        plugins: Iterable[object] = (),
        load_entrypoints: bool = True,
        write_delay_ms: int = 200,
        clock: Clock | None = None,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        _url: str | None = None,
    ) -> None:
        if not is_safe_int(write_delay_ms) or write_delay_ms < 0:
            raise ConfigError(
                f"write_delay_ms must be a non-negative integer, got {write_delay_ms!r}"
            )
        if not is_safe_int(max_pending_bytes) or max_pending_bytes < 1:
            raise ConfigError(
                f"max_pending_bytes must be a positive integer, got {max_pending_bytes!r}"
            )
        self._live: dict[str, Session] = {}
        self._plugins = plugin_set(plugins, load_entrypoints=load_entrypoints)
        if _url is not None:
            persistence = open_with(self._plugins, _url)
        elif persistence is not None:
            if not isinstance(persistence, SessionPersistence):
                raise ConfigError(
                    "persistence must be a SessionPersistence (a backend such as "
                    f"SqlitePersistence), got {type(persistence).__qualname__}"
                )
            # Whatever the backend was built with, it now reads with this ledger's types:
            # a ledger can always resume what it accepted (docs/backends.md, "the policy
            # object").
            persistence.read_with(self._plugins.event_types)
        self._persistence = persistence
        self._hooks = self._plugins.session_hooks
        self._durability: Durability | None = None
        # This ledger is the one writer of its sessions, also beside other ledgers on the
        # same backend object (docs/durability.md, "one writer per session").
        self._owner = Owner()
        self._loop = LoopBinding()  # the event loop this ledger serves
        if persistence is not None:
            persistence.attach(self._owner)
            self._durability = Durability(
                persistence,
                delay=write_delay_ms / 1000,
                max_pending_bytes=max_pending_bytes,
                owner=self._owner,
                loop=self._loop,
            )
            self._hooks = dataclasses.replace(
                self._hooks,
                recorder=self._durability.record,
                admission=self._durability.admit,
            )
        self._clock = clock or system_clock
        self._closed = False  # closing started: no new sessions
        self._closing = Closing()

    @classmethod
    def open(
        cls,
        url: str,
        *,
        plugins: Iterable[object] = (),
        load_entrypoints: bool = True,
        write_delay_ms: int = 200,
        clock: Clock | None = None,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    ) -> Ledger:
        """Return a ledger on the store at *url*; use ``async with`` or ``await`` it."""
        return cls(
            plugins=plugins,
            load_entrypoints=load_entrypoints,
            write_delay_ms=write_delay_ms,
            clock=clock,
            max_pending_bytes=max_pending_bytes,
            _url=url,
        )

    def __await__(self) -> Generator[Any, None, Ledger]:
        return self._opened().__await__()

    async def _opened(self) -> Ledger:
        self._loop.serve()
        return self

    async def __aenter__(self) -> Ledger:
        self._loop.serve()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def __del__(self) -> None:
        durability = getattr(self, "_durability", None)
        if durability is not None and durability.has_pending():
            warnings.warn(
                "Ledger was garbage-collected with unflushed events; call close()",
                ResourceWarning,
                stacklevel=1,
            )

    # -- properties ---------------------------------------------------------------------

    @property
    def plugins(self) -> PluginSet:
        """This ledger's plugins, with typed hook calls and the event-type registry."""
        return self._plugins

    @property
    def persistence(self) -> SessionPersistence | None:
        """The store this ledger writes to (None for a purely in-memory ledger)."""
        return self._persistence

    def serving_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this ledger serves; binds the running one if it serves none yet."""
        return self._loop.bind()

    # -- live sessions ------------------------------------------------------------------

    def create(
        self,
        id: str | None = None,
        *,
        cwd: str | None = None,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Session:
        """Create a live session. A live id raises ``SessionExistsError`` now; a stored id
        raises it at the latest from the first flush (``resume_or_create`` takes either)."""
        self._check_open()
        self._loop.serve_if_running()
        if id is not None and id in self._live:
            raise SessionExistsError("session already exists", session_id=id)
        header = SessionHeader(
            id=id if id is not None else str(uuid.uuid4()),
            created_at=self._clock(),
            cwd=cwd,
            title=title,
            meta=meta,  # type: ignore[arg-type]
        )
        session = Session.create(header=header, clock=self._clock, hooks=self._hooks)
        self._publish(session, stored_length=None)
        return session

    def get(self, id: str) -> Session | None:
        """Return the live session *id*, or None when it is not live."""
        return self._live.get(id)

    def live_sessions(self) -> list[Session]:
        """Return the live sessions, oldest first."""
        return list(self._live.values())

    async def flush(self, session: Session) -> None:
        """Make everything *session* committed so far durable; a failed write raises and
        its events stay queued, in order, for the next flush."""
        self._loop.serve()
        if self._live.get(session.id) is not session:
            raise NotLiveError("session is not live in this ledger", session_id=session.id)
        await self._flush(session)

    def backlog(self, session: Session | None = None) -> Backlog:
        """Return what waits to be written: the committed events not yet durable and
        their bytes, of *session* (live in this ledger) or of all live sessions. When it
        would grow past ``max_pending_bytes``, ``append`` refuses with
        ``BacklogFullError`` (docs/durability.md, "limits and the backlog")."""
        if session is not None and self._live.get(session.id) is not session:
            raise NotLiveError("session is not live in this ledger", session_id=session.id)
        if self._durability is None:
            return Backlog()
        return self._durability.backlog(session)

    async def resume(self, id: str) -> Session:
        """Return the live session *id*, or load it cold (validate, repair durably) and
        make it live."""
        self._check_open()
        self._loop.serve()
        live = self._live.get(id)
        if live is not None:
            return live
        persistence = self._require_store(id)
        # Begun, a resume ends whole: the session is live here, or nothing happened
        # (docs/durability.md, "cancellation").
        return await uninterrupted(self._resume_stored(persistence, id))

    async def _resume_stored(self, persistence: SessionPersistence, id: str) -> Session:
        stored, session = await persistence.load_session(
            id, hooks=self._hooks, clock=self._clock, owner=self._owner
        )
        live = self._live.get(id)
        if live is not None:  # resumed concurrently while we were loading
            return live
        self._publish(session, stored_length=len(stored.events))
        return session

    async def resume_or_create(
        self,
        id: str,
        *,
        cwd: str | None = None,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Session:
        """Return session *id* ready for appends, whatever its state: the live one, the
        stored one resumed (validated, repaired durably), or a new one.

        The one call a harness makes on every start, so that running it twice continues
        the same session instead of failing. *cwd*, *title* and *meta* describe a new
        session only; a stored session keeps the header it was created with.
        """
        self._check_open()
        self._loop.serve()
        live = self._live.get(id)
        if live is not None:
            return live
        if self._persistence is not None:
            try:
                return await self.resume(id)
            except SessionNotFoundError:
                pass  # nothing stored under this id: create it below
            live = self._live.get(id)
            if live is not None:  # created by another task while we looked
                return live
        return self.create(id, cwd=cwd, title=title, meta=meta)

    async def inspect(self, id: str) -> Session:
        """Return a detached session for *id*: a copy of the live one, or the stored log
        with crash repair applied in memory only. Nothing done to it is durable."""
        self._loop.serve()
        live = self._live.get(id)
        if live is not None:
            return Session.restore(live.header, live.event_log(), clock=self._clock)
        persistence = self._require_store(id)
        _, session = await persistence.inspect_session(
            id, hooks=SessionHooks(event_types=self._plugins.event_types), clock=self._clock
        )
        return session

    async def fork(
        self,
        source: str | Session,
        boundary: int | None = None,
        child_id: str | None = None,
    ) -> Session:
        """Start a live session from the events ``0..boundary`` (inclusive; default: all)
        of a live or stored session. The child's header names its parent."""
        self._check_open()
        self._loop.serve()
        if child_id is not None:
            if child_id in self._live:
                raise ForkError(
                    "fork child already exists", code="SESSION_ALREADY_EXISTS", session_id=child_id
                )
            if (
                self._persistence is not None
                and await self._persistence.revision(child_id) is not None
            ):
                raise ForkError(
                    "fork child already exists", code="SESSION_ALREADY_EXISTS", session_id=child_id
                )
        header, events = await self._fork_source(source)
        seed = fork_seed(header, events, boundary)
        child_header = SessionHeader(
            id=child_id if child_id is not None else str(uuid.uuid4()),
            created_at=self._clock(),
            cwd=header.cwd,
            parent_session=header.id,
            seed_length=len(seed),
        )
        child = Session.create(header=child_header, seed=seed, clock=self._clock, hooks=self._hooks)
        self._publish(child, stored_length=None)
        return child

    async def _fork_source(
        self, source: str | Session
    ) -> tuple[SessionHeader, Sequence[SessionEvent]]:
        if isinstance(source, Session):
            if self._live.get(source.id) is source:
                return source.header, source.event_log()
            if source.id in self._live:
                raise ForkError(
                    "this Session object is not the live one for its id",
                    code="NOT_LIVE",
                    session_id=source.id,
                )
            source = source.id
        live = self._live.get(source)
        if live is not None:
            return live.header, live.event_log()
        if self._persistence is None:
            raise ForkError("fork source not found", code="SESSION_NOT_FOUND", session_id=source)
        try:
            stored = await self._persistence.inspect(source)
        except SessionNotFoundError as error:
            raise ForkError(
                "fork source not found", code="SESSION_NOT_FOUND", session_id=source
            ) from error
        return stored.header, stored.events

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        after: str | None = None,
        order: str = "last_activity",
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
        since: Any = None,
        until: Any = None,
    ) -> SessionListing:
        """List the stored sessions from their summaries, reading no events
        (docs/listing.md): most recent activity first (``order="created"``: newest
        session first), filtered by *title* (a substring, ASCII case-insensitive), *meta*
        (each key equal to its value) and last activity (*since* inclusive, *until*
        exclusive: epoch ms or ``datetime``). Await the result for one page of at most
        *limit* sessions, whose ``next`` cursor is the *after* of the next page; or
        iterate it with ``async for``. Bad arguments raise ``QueryError`` here. Events
        not yet flushed are not stored, so not listed."""
        query = make_query(
            order=order, limit=limit, after=after, title=title, meta=meta, since=since, until=until
        )
        return SessionListing(self._page, query)

    async def _page(self, query: SessionQuery) -> SessionPage:
        self._loop.serve()
        if self._persistence is None:
            return SessionPage((), None)
        return await self._persistence.list_sessions(query)

    def follow(self, session_id: str, *, after: int = -1, wait: bool = True) -> SessionFeed:
        """The acknowledged (flushed) events of *session_id* after seq *after*, as they
        come from any process; without *wait*, those acknowledged now (docs/feed.md)."""
        self._loop.serve()
        return self._stored("follow").follow(session_id, after=after, wait=wait)

    def follow_all(self, *, after: str | None = None, wait: bool = True) -> StoreFeed:
        """The acknowledged events of every session of the store, as they come, with a
        cursor to resume from (docs/feed.md)."""
        self._loop.serve()
        return self._stored("follow_all").follow_all(after=after, wait=wait)

    def _stored(self, what: str) -> SessionPersistence:
        if self._persistence is None:
            raise ConfigError(f"{what}: this ledger has no store, so nothing is acknowledged")
        return self._persistence

    async def search(
        self,
        text: str,
        *,
        limit: int = 20,
        session: str | None = None,
        types: Iterable[str] | None = None,
    ) -> list[SearchHit]:
        """Return the stored message events whose text holds every word of *text*, newest
        first (docs/listing.md, "search"); at most *limit*, of one *session* or of
        *types* when given. Flushed events only."""
        self._loop.serve()
        if self._persistence is None:
            return []
        return await self._persistence.search(text, limit=limit, session=session, types=types)

    async def prune(
        self,
        *,
        older_than: Any = None,
        keep_last: int | None = None,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = True,
    ) -> PrunePlan:
        """Plan deleting the stored sessions inactive for longer than *older_than*
        (``"30d"`` or a ``timedelta``) or beyond the *keep_last* most recent, among those
        *title* and *meta* select; delete them only with ``dry_run=False``, recording the
        prune in the store's audit log (docs/listing.md, "retention"). Sessions live in
        this ledger are never deleted."""
        self._check_open()
        self._loop.serve()
        if self._persistence is None:
            raise ConfigError("this ledger has no store to prune")
        return await self._persistence.prune(
            older_than=older_than, keep_last=keep_last, title=title, meta=meta, dry_run=dry_run
        )

    async def audit(self) -> list[Mapping[str, Any]]:
        """Return the store's audit log (every executed prune), oldest record first."""
        self._loop.serve()
        if self._persistence is None:
            return []
        return await self._persistence.audit()

    async def reindex(self, id: str | None = None) -> ReindexReport:
        """Rebuild the stored summaries and search index of one session, or of all, from
        their events."""
        self._check_open()
        self._loop.serve()
        if self._persistence is None:
            return ReindexReport(0)
        return await self._persistence.reindex(id)

    async def delete(self, id: str) -> None:
        """Delete a session: drop it from the live set (unflushed events are discarded)
        and remove it from the store."""
        self._check_open()
        self._loop.serve()
        session = self._live.get(id)
        if session is not None:
            self._retire(session)
        if self._persistence is None:
            if session is None:
                raise SessionNotFoundError("session not found", session_id=id)
            return
        try:
            # The session has left the live set: the deletion ends whole even if the
            # caller is cancelled (docs/durability.md, "cancellation").
            await uninterrupted(self._persistence.delete(id, owner=self._owner))
        except SessionNotFoundError:
            if session is None:
                raise

    async def release(self, session: Session, *, discard: bool = False) -> list[SessionEvent]:
        """Flush *session*, then stop keeping it live here: the ledger, its plugins and
        the store drop what they hold for it (its claim as the one writer, for one), and the
        object is detached — later appends to it are neither checked nor stored. A
        long-running process calls this when a conversation goes idle; ``resume(id)``
        brings it back. A failed flush raises and leaves the session live.

        With *discard*, a session whose events cannot be written (another writer took it
        over, the store refuses them) is let go all the same, and the events that were
        not written are returned, oldest first, instead of dropped: resume the session to
        continue from what is stored (docs/durability.md, "closing"). Returns ``[]``
        when everything was written."""
        self._loop.serve()
        if self._live.get(session.id) is not session:
            raise NotLiveError("session is not live in this ledger", session_id=session.id)
        unwritten: list[SessionEvent] = []
        try:
            await self._flush(session)
        except Exception:
            if not discard:
                raise
            if self._durability is not None:
                unwritten = self._durability.unwritten(session)
        self._retire(session)
        if self._persistence is not None:
            await uninterrupted(self._persistence.release(session.id, owner=self._owner))
        return unwritten

    async def close(self) -> None:
        """Flush every live session, then close the store; idempotent, and a cancelled
        or failed close is finished by the next call (docs/durability.md, "closing").

        A session whose events cannot be written stays live with its events queued, its
        claim and the store held: the first failure is raised with a note naming each
        such session. From a loop this ledger does not serve, nothing is written: all is
        let go at once, and ``ConfigError`` names each session with unwritten events.
        """
        if self._closing.done:
            return
        if self._loop.elsewhere():
            self._close_elsewhere()
            return
        self._loop.serve()
        self._closed = True
        await self._closing(self._close_all)

    async def _close_all(self) -> None:
        failures: list[tuple[str, int, BaseException]] = []
        written: list[str] = []
        for session in list(self._live.values()):
            try:
                await self._flush(session)
            except Exception as error:
                failures.append((session.id, self._pending(session), error))
                continue
            if self._live.get(session.id) is session:  # not released meanwhile
                self._retire(session)  # at once: no await lets an event in unwritten
                written.append(session.id)
        if self._persistence is not None:
            if not failures:
                await self._persistence.close(owner=self._owner)
            for session_id in written if failures else ():
                await self._persistence.release(session_id, owner=self._owner)
        if failures:
            first = failures[0][2]
            note_unwritten(
                first,
                failures,
                "could not be written; they stay queued, and close() again retries them",
            )
            raise first

    def _close_elsewhere(self) -> None:
        """``close()`` from a loop this ledger does not serve: let go of everything at
        once (claims, descriptors, connections, threads) and name what was not written."""
        assert self._loop.loop is not None
        if self._loop.loop.is_running():
            raise ConfigError(
                "close() was called from an event loop this ledger does not serve, while "
                "its own loop is running: close it there (asyncio.run_coroutine_threadsafe)"
            )
        self._closed = True
        lost = [(s.id, self._pending(s)) for s in self._live.values() if self._pending(s)]
        for session in list(self._live.values()):
            self._retire(session)
        if self._persistence is not None:
            self._persistence.abandon(owner=self._owner)
        self._closing.done = True
        if lost:
            error = ConfigError(
                "close() ran on an event loop this ledger does not serve, where nothing "
                "can be written; its claims were let go and its store closed "
                '(docs/durability.md, "one event loop per ledger")'
            )
            note_unwritten(error, [(id, count, error) for id, count in lost], "were not written")
            raise error

    # -- plumbing -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError("this ledger is closed")

    def _pending(self, session: Session) -> int:
        return 0 if self._durability is None else self._durability.pending(session)

    def _require_store(self, id: str) -> SessionPersistence:
        if self._persistence is None:
            raise SessionNotFoundError(
                "session is not live and this ledger has no store", session_id=id
            )
        return self._persistence

    async def _flush(self, session: Session) -> None:
        """Run the plugins' ``ledger_flush`` together with the session's write-behind."""
        durable = None if self._durability is None else self._durability.flush(session)
        await self._plugins.flush(session, also=durable)

    def _retire(self, session: Session) -> None:
        """Take *session* out of the ledger: no writer, no plugins, not live."""
        del self._live[session.id]
        if self._durability is not None:
            self._durability.detach(session)
        self._plugins.session_closed(session)
        session.detach()

    def _publish(self, session: Session, *, stored_length: int | None) -> None:
        """Make *session* live: announce it (a plugin may refuse it) and queue whatever of
        its log is not stored yet (all of it, or what follows *stored_length*). A log
        the store cannot hold is refused (``TOO_LARGE``) before it is announced."""
        durability = self._durability
        if durability is not None:
            durability.attach(session, stored_length=stored_length)
        try:
            self._plugins.session_created(session)
        except BaseException:
            if durability is not None:
                durability.detach(session)
            raise
        self._live[session.id] = session
