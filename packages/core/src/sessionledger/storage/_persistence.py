"""``SessionPersistence``: the persistence contract (docs/backends.md), kept once over any store.

This is the policy half of a backend, the same for every medium: which records are
committed and which are a torn tail (``sessionledger.storage._committed``), format, identity and
event-type checks, crash repair, packing chunk runs into rows, sequencing, revision and
stale-writer checks and how each refusal is worded, and per-id serialization. The other
half is a ``LogStore`` (``sessionledger.storage._logstore``), which only moves records; backends
implement that and wrap it in a small ``SessionPersistence`` subclass.

The policy is built in layers, each a module: ``coldload`` (what is known of each
session, and how a stored one goes live or is salvaged), and this module (writing,
reading and letting go of sessions). Listing, search and retention across sessions are a
``catalog.SessionCatalog`` the policy holds and hands those calls to.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sessionledger._errors import (
    ConfigError,
    HeaderError,
    QueryError,
    ReadBackMismatchError,
    SeqMismatchError,
    SessionExistsError,
    SessionNotFoundError,
)
from sessionledger.model._eventlog import EventLog, LogRuns
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._registry import EventTypeRegistry
from sessionledger.model._session import Clock, Session, SessionHooks
from sessionledger.storage import _publishing as publishing
from sessionledger.storage._cancellation import uninterrupted
from sessionledger.storage._catalog import ReindexReport
from sessionledger.storage._chunks import pack_chunk_runs
from sessionledger.storage._coldload import ColdLoad
from sessionledger.storage._committed import ScannedLog, scan_log
from sessionledger.storage._feed import LogRead, SessionFeed, StoreFeed
from sessionledger.storage._limits import batch_bounds, checked_sizes
from sessionledger.storage._listing import SessionInfo, SessionPage, SessionQuery
from sessionledger.storage._logstore import Batch, LogStore, RawLog
from sessionledger.storage._refusals import held_prefix, readable_scan, refusal
from sessionledger.storage._retention import PrunePlan
from sessionledger.storage._stored import StoredSession
from sessionledger.views._searching import SearchHit, indexed_texts
from sessionledger.views._summaries import SessionSummary


class BackendFactory(Protocol):
    """Build a backend for a store URL such as ``sqlite:path/to/ledger.db`` (what a
    plugin's ``ledger_backends`` hook returns per scheme)."""

    def __call__(self, url: str, *, event_types: EventTypeRegistry) -> SessionPersistence: ...


class SessionPersistence(ColdLoad):
    """Durable storage for session logs, over the primitives of *store*.

    - ``create(header)`` registers a header; nothing of the session is stored until the
      first non-empty ``append``. An id with a stored log raises ``SessionExistsError``.
    - ``append(id, events)`` durably appends a contiguous batch; its first seq must equal
      the stored next seq (``SeqMismatchError``). Appending to a stored id this instance
      never created commits that log's cold repair first.
    - ``publish(header, events)`` stores a new session whole, at once.
    - ``load(id)`` reads, validates, cuts a torn tail and appends crash-repair closers
      durably; ``inspect(id)`` does the same in memory only and never writes.
    - ``read_from(id, from_seq)`` returns the stored suffix as stored, no repair.
    - ``list()`` / ``list_snapshots()`` read headers (and revisions) only, ordered by
      ``created_at`` then id; ``delete(id)`` removes a session; ``close()`` is idempotent.
    - ``list_sessions(query)`` pages through the stored summaries, ``search(text)`` finds
      message text, ``prune(...)`` plans (and on request carries out and records)
      deletions, ``reindex()`` rebuilds summaries and texts (docs/listing.md).

    Operations on one session id are serialized within the process. *event_types* is
    the registry the read path accepts (default: the core vocabulary plus entry-point
    plugins). Each session has one writer: the ``owner`` a writing call names (a
    ``Ledger`` names itself; default: this object); any other is refused
    (docs/durability.md, "one writer per session").
    """

    def __init__(self, store: LogStore, *, event_types: EventTypeRegistry | None = None) -> None:
        super().__init__(store, event_types=event_types)
        self._closed = False

    def read_with(self, event_types: EventTypeRegistry) -> None:
        """Make *event_types* the registry this backend reads with from now on. A
        ``Ledger`` given this backend calls it with its own, so that it can always resume
        what it accepted; it replaces the one the backend was built with."""
        if type(event_types) is not EventTypeRegistry:
            raise ConfigError(
                f"expected an EventTypeRegistry, got {type(event_types).__qualname__}"
            )
        self._event_types = event_types

    def locate(self, header: SessionHeader) -> str | None:
        """Return where this session's artifact lives (a path), if the store has one."""
        return self._store.locate(header)

    def attach(self, owner: object) -> None:
        """Count *owner* (a ledger's ``Owner``) among the users of this object:
        ``close(owner=…)`` closes the store only when the last of them closes."""
        self._owners.attach(owner)

    # -- writing ----------------------------------------------------------------------

    async def create(self, header: SessionHeader, *, owner: object | None = None) -> None:
        """Register *header* for *owner* (default: this object); nothing of the session is
        stored until the first non-empty append (a store may still prepare its medium,
        such as a database schema)."""
        if type(header) is not SessionHeader:
            raise HeaderError(f"create needs a SessionHeader, got {type(header).__qualname__}")
        session_id = header.id
        async with self._lock(session_id):
            self._owners.holder(session_id)  # a collected owner's registration is dropped
            if session_id in self._created or session_id in self._cursors:
                raise SessionExistsError("session already exists", session_id=session_id)
            if await self._store.read_revision(session_id) is not None:
                raise SessionExistsError(
                    "session already has a stored log: resume it (ledger.resume(id)), or use "
                    "ledger.resume_or_create(id) to resume or create it on every start",
                    session_id=session_id,
                )
            self._created[session_id] = header
            self._owners.hold(session_id, self._owners.writer(owner))

    async def append(
        self,
        session_id: str,
        events: Iterable[SessionEvent | Mapping[str, Any]],
        *,
        sizes: Sequence[int] | None = None,
        owner: object | None = None,
        runs: LogRuns | None = None,
    ) -> None:
        """Durably append a contiguous batch as *owner* (default: this object); return
        once it is durable.

        An event larger than the store can hold is refused (``EventDataError``,
        ``TOO_LARGE``) with nothing written; a batch larger than the store writes at
        once is written as consecutive batches that each fit (docs/backends.md, "the
        primitives"), and if one of them fails, retrying the same call writes what is
        missing. *sizes* are the events' ``sessionledger.storage._limits.event_bytes``, when the
        caller has measured them already (a ledger's write-behind has). *runs* is the
        in-memory log the events belong to, when the caller has it (``Session.runs``):
        their rows are packed from the runs it holds.
        """
        writer = self._owners.writer(owner)
        batch = [
            item if type(item) is SessionEvent else SessionEvent.from_json(item) for item in events
        ]
        if not batch:
            return
        sizes = checked_sizes(self._store, session_id, batch, sizes)
        async with self._lock(session_id):
            self._owners.refuse_others(session_id, writer)
            # Begun, an append ends whole (a cold load included) and is taken up, whatever
            # the caller cancels (docs/durability.md, "cancellation").
            await uninterrupted(self._append_locked(session_id, batch, sizes, writer, runs))

    async def _append_locked(
        self,
        session_id: str,
        batch: builtins.list[SessionEvent],
        sizes: Sequence[int] | None,
        writer: object,
        runs: LogRuns | None,
    ) -> None:
        header = self._created.get(session_id)
        creates = header is not None
        if header is not None:
            first = 0
        else:
            if session_id not in self._cursors:
                await self._load_locked(session_id, commit=True, owner=writer)
            elif self._owners.holder(session_id) is None:  # its owner was collected
                self._owners.hold(session_id, writer)
            header = self._headers[session_id]
            first = self._cursors[session_id]
            if batch[0].seq < first:  # a retry of a batch that landed and was taken up?
                raw = await self._store.read_log(session_id, batch[0].seq)
                scan = readable_scan(session_id, raw, batch[0].seq)
                landed = held_prefix(scan, header, batch, creates=False)
                batch = batch[landed:]
                sizes = None if sizes is None else sizes[landed:]
                if not batch:
                    return
        for offset, event in enumerate(batch):
            if event.seq != first + offset:
                raise SeqMismatchError(
                    f"batch does not continue the stored log: expected seq "
                    f"{first + offset} at index {offset}, got {event.seq}",
                    session_id=session_id,
                    seq=event.seq,
                )
        summary = self._summaries.get(session_id, SessionSummary())
        if creates:
            async with self._owning(session_id, writer):
                summary = await self._write_fitting(
                    header, batch, first, True, summary, sizes, runs
                )
        else:
            summary = await self._write_fitting(header, batch, first, False, summary, sizes, runs)
        if creates:
            del self._created[session_id]
            self._headers[session_id] = header
        self._cursors[session_id] = first + len(batch)
        self._summaries[session_id] = summary

    async def _write_fitting(
        self,
        header: SessionHeader,
        events: builtins.list[SessionEvent],
        first: int,
        creates: bool,
        summary: SessionSummary,
        sizes: Sequence[int] | None,
        runs: LogRuns | None,
    ) -> SessionSummary:
        """Write *events* in batches the store can hold; *summary* is the session's before
        them. Return the session's summary after them."""
        for start, end in batch_bounds(sizes, len(events), self._store.max_batch_bytes):
            part = events[start:end]
            summary = summary.after(part)
            await self._write(
                header,
                part,
                first=first + start,
                creates=creates and not start,
                summary=summary,
                runs=runs,
            )
        return summary

    async def publish(
        self,
        header: SessionHeader,
        events: Iterable[SessionEvent | Mapping[str, Any]],
        *,
        owner: object | None = None,
    ) -> None:
        """Store a new session whole, at once (docs/backends.md, "whole logs"): readers see
        all of *events* or nothing, even if the process dies part-way. The log is checked
        as a read checks one, and read back before it is published
        (``ReadBackMismatchError``). An id live here or stored raises
        ``SessionExistsError``; *owner* (default: this object) then holds the session, as
        after ``append``."""
        writer = self._owners.writer(owner)
        log = publishing.whole_log(header, events, await self._registry())
        async with self._lock(header.id):
            await uninterrupted(self._publish_locked(header, log, writer))

    async def _publish_locked(
        self, header: SessionHeader, log: Sequence[SessionEvent], writer: object
    ) -> None:
        session_id = header.id
        stored = await self._store.read_revision(session_id) is not None
        if stored or self._in_use(session_id) or self._owners.holder(session_id) is not None:
            raise SessionExistsError("session already exists", session_id=session_id)
        sizes = checked_sizes(self._store, session_id, log, None)
        # A log read from a store (an EventLog) is packed from the runs it holds.
        runs = LogRuns(log) if type(log) is EventLog else None
        batches, summary = publishing.log_batches(
            header,
            log,
            functools.partial(self._batch, runs=runs),
            sizes,
            self._store.max_batch_bytes,
        )
        try:
            async with self._owning(session_id, writer):
                check = publishing.read_back(header, log)
                if not await self._store.write_log(batches, check):
                    raise SessionExistsError("session already stored", session_id=session_id)
        except ReadBackMismatchError as error:
            error.published = await self._store.read_revision(session_id) is not None
            raise
        self._headers[session_id] = header
        self._cursors[session_id] = len(log)
        self._summaries[session_id] = summary

    async def _write(
        self,
        header: SessionHeader,
        events: list[SessionEvent],
        *,
        first: int,
        creates: bool,
        summary: SessionSummary,
        runs: LogRuns | None = None,
    ) -> None:
        """Write *events*; *summary* is the session's once they are all stored."""
        batch = self._batch(header, events, first, creates, summary, runs)
        if await self._store.write_batch(batch):
            return
        # Refused: storage does not end where this instance expects. A write whose
        # caller was cancelled (or whose reply was lost) may have landed, and
        # write-behind retries it with newer events behind it: what storage already
        # holds of this batch is written; only the rest is not.
        raw = await self._store.read_log(header.id, first)
        scan = readable_scan(header.id, raw, first)
        landed = held_prefix(scan, header, events, creates=creates)
        if landed == len(events):
            return
        if landed:
            await self._write(
                header,
                events[landed:],
                first=first + landed,
                creates=False,
                summary=summary,
                runs=runs,
            )
            return
        raise refusal(header.id, first, creates=creates, raw=raw, scan=scan)

    def _batch(
        self,
        header: SessionHeader,
        events: list[SessionEvent],
        first: int,
        creates: bool,
        summary: SessionSummary,
        runs: LogRuns | None = None,
    ) -> Batch:
        store = self._store
        records = pack_chunk_runs(events, store.max_row_members, store.max_row_bytes, runs=runs)
        texts = indexed_texts(events) if store.indexes_text else ()
        return Batch(header, records, first, first + len(events), creates, summary, texts)

    # -- reading ----------------------------------------------------------------------

    async def load(self, session_id: str, *, owner: object | None = None) -> StoredSession:
        """Read and validate a stored session, committing its cold repair durably, as
        *owner* (default: this object), who writes it from then on."""
        writer = self._owners.writer(owner)
        async with self._lock(session_id):
            stored, _ = await uninterrupted(
                self._load_locked(session_id, commit=True, owner=writer)
            )
            return stored

    async def inspect(self, session_id: str) -> StoredSession:
        """Read and validate a stored session; repair only in memory, never write."""
        async with self._lock(session_id):
            stored, _ = await self._load_locked(session_id, commit=False)
            return stored

    async def load_session(
        self,
        session_id: str,
        *,
        hooks: SessionHooks | None = None,
        clock: Clock | None = None,
        owner: object | None = None,
    ) -> tuple[StoredSession, Session]:
        """``load``, also returning the validated ``Session`` built on the way (with
        *hooks* and *clock*), so a ledger resuming it validates the log once."""
        writer = self._owners.writer(owner)
        async with self._lock(session_id):
            return await uninterrupted(
                self._load_locked(session_id, commit=True, hooks=hooks, clock=clock, owner=writer)
            )

    async def inspect_session(
        self, session_id: str, *, hooks: SessionHooks | None = None, clock: Clock | None = None
    ) -> tuple[StoredSession, Session]:
        """``inspect``, also returning the validated ``Session`` built on the way."""
        async with self._lock(session_id):
            return await self._load_locked(session_id, commit=False, hooks=hooks, clock=clock)

    async def read_from(self, session_id: str, from_seq: int) -> builtins.list[SessionEvent]:
        """Return the stored events with seq >= *from_seq*, as stored (no repair)."""
        if type(from_seq) is not int or from_seq < 0:
            raise QueryError(f"from_seq must be a non-negative integer, got {from_seq!r}")
        async with self._lock(session_id):
            raw = await self._store.read_log(session_id, from_seq)
            if raw is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            return builtins.list(_scanned_from(session_id, raw, from_seq)[1])

    async def read_acknowledged(self, session_id: str, from_seq: int) -> LogRead | None:
        """The log of *session_id* as a live feed reads it: its committed events from
        *from_seq* on, made durable first (``LogStore.read_durable``); None when the
        session is not stored."""
        async with self._lock(session_id):
            raw = await self._store.read_durable(session_id, from_seq)
        if raw is None:
            return None
        scan, events = _scanned_from(session_id, raw, from_seq)
        return LogRead(scan.header, raw.revision, scan.end_seq, events)

    def follow(self, session_id: str, *, after: int = -1, wait: bool = True) -> SessionFeed:
        """The acknowledged events of *session_id* with seq > *after*, in seq order, as
        they become durable, from any process (docs/feed.md). The feed waits for more
        until the caller stops iterating (without *wait*, it ends at what is acknowledged
        now); ``SessionDeletedError`` ends it when the session is deleted,
        ``SessionNotFoundError`` when there is none to follow."""
        return SessionFeed(self, session_id, after, wait=wait)

    def follow_all(self, *, after: str | None = None, wait: bool = True) -> StoreFeed:
        """The acknowledged events of every session, as they come, with a cursor to resume
        from (``StoreFeed.cursor``; docs/feed.md)."""
        return StoreFeed(self, after, wait=wait)

    async def revision(self, session_id: str) -> str | None:
        """Return the current revision of *session_id*, or None when nothing is stored."""
        async with self._lock(session_id):
            return await self._store.read_revision(session_id)

    async def cursor(self, session_id: str) -> int | None:
        """Return the seq this instance expects the next batch of *session_id* to start
        with, or None when it has neither created nor read the session."""
        if session_id in self._created:
            return 0
        return self._cursors.get(session_id)

    # -- across sessions: listing, search, retention (docs/listing.md) -------------------

    async def list(self) -> builtins.list[SessionHeader]:
        """Return the headers of every stored session (created_at, then id)."""
        return await self._catalog.list()

    async def list_snapshots(self) -> builtins.list[SessionInfo]:
        """Return header and revision of every stored session (created_at, then id).

        A session written in another format version is left out and logged: one newer
        session must not make a whole store unlistable.
        """
        return await self._catalog.list_snapshots()

    async def list_sessions(self, query: SessionQuery | None = None) -> SessionPage:
        """Return one page of the stored sessions' summaries (``listing.make_query`` makes
        *query*; by default every session, most recent activity first). Reads no events,
        except the log of a session whose stored summary is missing or stale; writes
        nothing, whatever it finds."""
        return await self._catalog.list_sessions(query)

    async def search(
        self,
        text: str,
        *,
        limit: int = 20,
        session: str | None = None,
        types: Iterable[str] | None = None,
    ) -> builtins.list[SearchHit]:
        """Return the stored events whose message text holds every word of *text*, newest
        first: from the store's index where it has one, else by reading every log."""
        return await self._catalog.search(text, limit=limit, session=session, types=types)

    async def prune(
        self,
        *,
        older_than: object = None,
        keep_last: int | None = None,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = True,
        now: int | None = None,
    ) -> PrunePlan:
        """Plan (and, only with ``dry_run=False``, carry out) deleting the sessions whose
        last activity is older than *older_than* (``"30d"``, a ``timedelta``), beyond
        the *keep_last* most recently active, among those *title* and *meta* select.

        Nothing is deleted without one of *older_than* and *keep_last*. An executed prune
        is recorded in the audit log before its first deletion and after its last; a
        store without an audit log refuses to execute one. A session another writer
        holds, that changed since the plan or that this instance writes is skipped."""
        return await self._catalog.prune(
            older_than=older_than,
            keep_last=keep_last,
            title=title,
            meta=meta,
            dry_run=dry_run,
            now=now,
        )

    async def audit(self) -> builtins.list[Mapping[str, Any]]:
        """Return the store's audit log, oldest record first."""
        return await self._catalog.audit()

    async def reindex(self, session_id: str | None = None) -> ReindexReport:
        """Rebuild the summary and search texts of one stored session, or of all, from
        their logs (after an index was lost, or to fill one a store gained later)."""
        return await self._catalog.reindex(session_id)

    # -- letting go ---------------------------------------------------------------------

    async def delete(self, session_id: str, *, owner: object | None = None) -> None:
        """Remove a session as *owner* (default: this object); an unknown id raises
        ``SessionNotFoundError``, and a session another writer holds
        ``SessionLockedError``."""
        writer = self._owners.writer(owner)
        async with self._lock(session_id):
            self._owners.refuse_others(session_id, writer)
            await uninterrupted(self._delete_locked(session_id, writer))  # begun, it ends whole
        await uninterrupted(self._store.scrub())

    async def _delete_locked(self, session_id: str, writer: object) -> None:
        registered = False
        try:
            if await self._store.read_revision(session_id) is not None:
                await self._owners.claim(session_id, writer)
            registered = self._created.pop(session_id, None) is not None
            self._forget(session_id)
            deleted = await self._store.delete_log(session_id)
        finally:
            await self._owners.release(session_id)
        if not deleted and not registered:
            raise SessionNotFoundError("session not found", session_id=session_id)

    async def release(self, session_id: str, *, owner: object | None = None) -> None:
        """Forget *session_id* in this instance: its cursor, its claim as the session's
        one writer, and whatever else the store holds for it. A long-running process calls
        this when it is done with a session; another instance may then take it, and the
        next use here reads storage again, as a new instance would. Nothing stored
        changes. A session another *owner* (default: this object) writes is left alone."""
        async with self._lock(session_id):
            holder = self._owners.holder(session_id)
            if holder is not None and holder is not self._owners.writer(owner):
                return
            self._forget(session_id)
            self._created.pop(session_id, None)
            await uninterrupted(self._owners.release(session_id))

    async def close(self, *, owner: object | None = None) -> None:
        """Release the store; once it is closed, later calls do nothing. Closing as an
        attached *owner* (a ledger) lets go of that owner's sessions only, while another
        attached owner still uses this object; the last one closes the store."""
        if owner is not None and self._owners.detach(owner):
            for session_id in self._owners.held_by(owner):
                await self.release(session_id, owner=owner)
            return
        if self._closed:
            return
        # Begun, the store's close ends; this object counts as closed once it has, so
        # the next call finishes a close that its loop's shutdown cut short.
        await uninterrupted(self._store.close())
        self._closed = True

    def abandon(self, *, owner: object | None = None) -> None:
        """Let go at once, writing nothing, when the event loop that served this object is
        gone: claims, descriptors, connections, driver threads. As an attached *owner*,
        like ``close``: only its sessions while another owner uses this object."""
        if owner is not None and self._owners.detach(owner):
            self._owners.forget(owner)
            return
        self._closed = True
        self._owners.forget()
        self._store.abandon()


def _scanned_from(
    session_id: str, raw: RawLog, from_seq: int
) -> tuple[ScannedLog, Sequence[SessionEvent]]:
    """A log read from *from_seq* (a store may start at the record holding it), scanned,
    and its events from that seq on. Read from its start (every store reads everything
    for seq 0), a log must start at seq 0: a lost first record is committed-region
    damage. Reading never refuses an unknown type: it is shown as stored."""
    scan = scan_log(session_id, raw, contiguous_from=0 if from_seq == 0 else None)
    events = scan.events
    if from_seq and len(events) and events[0].seq < from_seq:
        return scan, [event for event in events if event.seq >= from_seq]
    return scan, events
