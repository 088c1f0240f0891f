"""The per-session half of the policy's state, and the cold load that makes a stored log live.

``SessionPersistence`` (``sessionledger.storage._persistence``) builds on this: here is what it
knows of each session (who writes it, the seq its next batch starts with, its header and
summary), how a stored log is read and validated whole, and how it goes live — claimed
for its writer, its torn tail moved aside and its interrupted turn closed, durably
(docs/reading.md, "resume and crash repair") — plus ``salvage``, the one way past
corruption (docs/durability.md, "torn tails and corruption"). Listing, search and
retention are a ``sessionledger.storage._catalog.SessionCatalog`` this half holds.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import logging
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import ParamSpec, TypeVar

from sessionledger._errors import ConfigError, CorruptLogError, SeedError, SessionNotFoundError
from sessionledger._failpoints import failpoint
from sessionledger.model._eventlog import EventLog
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._registry import EventTypeRegistry
from sessionledger.model._repair import interrupted_turn_closers
from sessionledger.model._session import Clock, Session, SessionHooks
from sessionledger.plugins._manager import default_event_types
from sessionledger.storage._cancellation import in_thread, uninterrupted
from sessionledger.storage._catalog import SessionCatalog
from sessionledger.storage._committed import (
    ScannedLog,
    check_event_types,
    salvage_point,
    scan_log,
    stored_header,
)
from sessionledger.storage._logstore import Batch, LogStore, Repair, RepairReceipt, collector_paused
from sessionledger.storage._owners import Owners
from sessionledger.storage._refusals import changed_meanwhile
from sessionledger.storage._stored import SalvageReport, StoredSession, ValidatedLog
from sessionledger.views._summaries import SessionSummary, summarize

logger = logging.getLogger("sessionledger")

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _weakly(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """*method*, without a strong reference to its object. The catalog the policy holds
    calls back through these: a reference cycle would keep a dropped policy (and its
    store's claims and connections) alive until the next garbage collection, instead of
    letting go at once (docs/durability.md, "one writer per session")."""
    reference = weakref.WeakMethod(method)

    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        bound = reference()
        if bound is None:
            raise ReferenceError("the policy this catalog served was collected")
        return bound(*args, **kwargs)

    return call


class ColdLoad(ABC):
    """What the policy knows of each session over *store*, and how a stored one goes live.

    Operations on one session id are serialized within the process (``_lock``). Each
    session has one writer, the owner a writing call names (``sessionledger.storage._owners``).
    """

    def __init__(self, store: LogStore, *, event_types: EventTypeRegistry | None = None) -> None:
        if not isinstance(store, LogStore):
            raise ConfigError(f"expected a LogStore, got {type(store).__qualname__}")
        self._store = store
        self._event_types = event_types
        self._locks: dict[str, asyncio.Lock] = {}
        self._created: dict[str, SessionHeader] = {}  # registered, nothing stored yet
        self._cursors: dict[str, int] = {}  # the seq the next batch must start with
        self._headers: dict[str, SessionHeader] = {}  # stored headers, by id
        self._summaries: dict[str, SessionSummary] = {}  # of the logs this instance writes
        # Who writes each session: this instance's store claims, and their owners.
        self._owners = Owners(store, self, self._created)
        # Listing, search, prune and reindex: across sessions, under the same locks.
        self._catalog = SessionCatalog(
            store,
            lock=_weakly(self._lock),
            in_use=_weakly(self._in_use),
            forget=_weakly(self._forget),
            summary_rebuilt=_weakly(self._summary_rebuilt),
        )

    @property
    def log_store(self) -> LogStore:
        """The storage primitives this policy drives."""
        return self._store

    @property
    def scheme(self) -> str:
        """The URL scheme of the store (``"memory"``, ``"jsonl"``, ``"sqlite"``…)."""
        return self._store.scheme

    @property
    def event_types(self) -> EventTypeRegistry:
        """The event types a log must stick to for going live (docs/events.md, "the
        event-type registry and ignorable")."""
        if self._event_types is None:
            self._event_types = default_event_types()
        return self._event_types

    async def _registry(self) -> EventTypeRegistry:
        """``event_types`` for an async path: the first default registry of the process
        discovers entry points, reading package metadata from disk, so it is built in a
        worker thread (docs/backends.md, "no blocking call on the event loop")."""
        if self._event_types is None:
            self._event_types = await in_thread(default_event_types)
        return self._event_types

    @abstractmethod
    def _batch(
        self,
        header: SessionHeader,
        events: builtins.list[SessionEvent],
        first: int,
        creates: bool,
        summary: SessionSummary,
    ) -> Batch:
        """The store batch of *events*, the first of which has seq *first*."""

    # -- what is known of each session ------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def _in_use(self, session_id: str) -> bool:
        return session_id in self._owners.claimed or session_id in self._created

    def _forget(self, session_id: str) -> None:
        self._cursors.pop(session_id, None)
        self._headers.pop(session_id, None)
        self._summaries.pop(session_id, None)

    def _summary_rebuilt(self, session_id: str, summary: SessionSummary) -> None:
        if session_id in self._summaries:
            self._summaries[session_id] = summary

    @contextlib.asynccontextmanager
    async def _owning(self, session_id: str, owner: object) -> AsyncIterator[None]:
        """Hold *session_id* for *owner* for the body and after it (docs/durability.md,
        "one writer per session"); a claim made here is let go again, and what was
        learnt of the session forgotten, when the body (or the claim itself) fails or
        is cancelled."""
        async with self._owners.owning(session_id, owner, undo=self._forget):
            yield

    # -- salvage ----------------------------------------------------------------------

    async def salvage(
        self, session_id: str, *, dry_run: bool = False, owner: object | None = None
    ) -> SalvageReport:
        """Keep the longest intact prefix of a damaged log, move everything after it into
        quarantine, and close an interrupted turn (docs/durability.md), as *owner*
        (default: this object). The only way past corruption, and never automatic:
        ``load`` refuses a damaged log instead. With *dry_run* nothing is written: the
        report says what would be moved (no quarantine, no closers counted)."""
        async with self._lock(session_id):
            if await self._store.read_revision(session_id) is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            writer = self._owners.writer(owner)
            if dry_run:
                return await self._salvage(session_id, writer, dry_run=True)
            # Begun, a salvage ends whole: cut, closers and indexes ("cancellation").
            return await uninterrupted(self._salvage_owned(session_id, writer))

    async def _salvage_owned(self, session_id: str, owner: object) -> SalvageReport:
        async with self._owning(session_id, owner):
            return await self._salvage(session_id, owner, dry_run=False)

    async def _salvage(self, session_id: str, owner: object, *, dry_run: bool) -> SalvageReport:
        raw = await self._store.read_log(session_id)
        if raw is None:
            raise SessionNotFoundError("session not found", session_id=session_id)
        point = salvage_point(session_id, raw)
        receipt = RepairReceipt()
        if point is None:
            kept = len(scan_log(session_id, raw, contiguous_from=0).events)
        else:
            kept = point.kept_events
        if point is not None and not dry_run:
            header = stored_header(raw.header, session_id, raw.location)
            moved = await self._store.commit_repair(
                Repair(header, raw.revision, cut_at=point.cut_at, kept_events=point.kept_events)
            )
            if moved is None:
                raise changed_meanwhile(session_id, point.kept_events)
            receipt = moved
            logger.warning(
                "session %r: salvage moved %d records (%d bytes) after seq %d to %s",
                session_id,
                point.moved_records,
                receipt.moved_bytes,
                point.kept_events - 1,
                receipt.quarantine,
            )
        closers = 0
        if not dry_run:
            self._cursors.pop(session_id, None)
            stored, _ = await self._load_locked(session_id, commit=True, owner=owner)
            closers = len(stored.events) - kept
            # A salvage cuts inside the committed region, where summaries and indexes
            # were written: rebuild them from what the log now holds.
            await self._catalog.reindex_locked(session_id)
        return SalvageReport(
            session_id=session_id,
            kept_events=kept,
            moved_batches=0 if point is None else point.moved_batches,
            moved_records=0 if point is None else point.moved_records,
            moved_seqs=None if point is None else point.moved_seqs,
            moved_bytes=receipt.moved_bytes,
            quarantine=receipt.quarantine,
            closers=closers,
        )

    # -- the cold load ------------------------------------------------------------------

    async def _load_locked(
        self,
        session_id: str,
        *,
        commit: bool,
        hooks: SessionHooks | None = None,
        clock: Clock | None = None,
        owner: object | None = None,
    ) -> tuple[StoredSession, Session]:
        read = await self._read_validated(session_id, hooks, clock, going_live=commit)
        if not commit:
            return read.stored(read.scan.revision), read.session
        writer = self._owners.writer(owner)
        if session_id in self._owners.claimed and self._owners.holder(session_id) is writer:
            return await self._go_live(read)
        # Going live: read and validated first, so a log that cannot go live (absent,
        # damaged, of unknown types) is refused having claimed and created nothing. Once
        # owned, read again only if another writer changed the log meanwhile.
        async with self._owning(session_id, writer):
            if await self._store.read_revision(session_id) != read.scan.revision:
                read = await self._read_validated(session_id, hooks, clock, going_live=True)
            return await self._go_live(read)

    async def _read_validated(
        self,
        session_id: str,
        hooks: SessionHooks | None,
        clock: Clock | None,
        *,
        going_live: bool,
    ) -> ValidatedLog:
        """Read a stored log and validate it whole, closers of an interrupted turn
        included; write nothing. Only a log *going_live* must know every type (with the
        registry of *hooks*, the caller's ledger, else this backend's): a reader keeps
        unknown events uninterpreted."""
        raw = await self._store.read_log(session_id)
        if raw is None:
            raise SessionNotFoundError("session not found", session_id=session_id)
        hooks = hooks or SessionHooks(event_types=await self._registry())
        with collector_paused():
            scan = scan_log(session_id, raw, contiguous_from=0, release=True)
            events = scan.events
            closers = [SessionEvent.from_json(item) for item in interrupted_turn_closers(events)]
            try:
                # The session copies the stored log into its own: a copy here would be a
                # second one of a million slots (closers are rare).
                if not closers:
                    log: EventLog | builtins.list[SessionEvent] = events
                elif type(events) is EventLog:
                    log = events.plus(closers)
                else:
                    log = [*events, *closers]
                session = Session.restore(scan.header, log, hooks=hooks, clock=clock)
            except SeedError as error:
                raise CorruptLogError(
                    f"stored log failed validation: {error}",
                    session_id=session_id,
                    path=scan.location,
                    seq=error.index,
                ) from error
            # After the validation a reader gets too: a damaged log is reported as
            # damaged, whether or not its plugins are loaded.
            if going_live:
                check_event_types(hooks.event_types, session_id, events, scan.location)
        return ValidatedLog(scan, closers, session)

    async def _go_live(self, read: ValidatedLog) -> tuple[StoredSession, Session]:
        """Commit a validated log's repair (this instance owns it) and take up its cursor."""
        scan, closers = read.scan, read.closers
        session_id = scan.header.id
        revision = scan.revision
        torn = scan.torn
        summary = summarize(scan.events).after(closers)
        if scan.torn_at is not None or closers:
            receipt = await self._repair(scan, closers, summary)
            revision = await self._store.read_revision(session_id) or revision
            if torn is not None:
                torn = dataclasses.replace(
                    torn, quarantine=receipt.quarantine, moved_bytes=receipt.moved_bytes
                )
        self._headers[session_id] = scan.header
        self._cursors[session_id] = len(scan.events) + len(closers)
        self._summaries[session_id] = summary
        return read.stored(revision, torn), read.session

    async def _repair(
        self, scan: ScannedLog, closers: builtins.list[SessionEvent], summary: SessionSummary
    ) -> RepairReceipt:
        """Commit a cold load's repair: cut the torn tail, append the closers
        (docs/reading.md, "resume and crash repair"); *summary* is the log's after it."""
        failpoint("core.repair.begin")
        end = len(scan.events)
        repair = Repair(
            scan.header,
            scan.revision,
            cut_at=scan.torn_at,
            closers=self._batch(scan.header, closers, end, False, summary) if closers else None,
            kept_events=end,
            summary=summary,
        )
        receipt = await self._store.commit_repair(repair)
        if receipt is None:
            raise changed_meanwhile(scan.header.id, end)
        if receipt.moved_bytes:
            logger.warning(
                "session %r: a torn tail (%d bytes, %d incomplete batch%s) after seq %d was "
                "moved to %s",
                scan.header.id,
                receipt.moved_bytes,
                scan.torn_batches,
                "" if scan.torn_batches == 1 else "es",
                end - 1,
                receipt.quarantine,
            )
        failpoint("core.repair.after-closers")
        return receipt
