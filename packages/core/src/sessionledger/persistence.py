"""``SessionPersistence``: the persistence contract (docs/backends.md), kept once over any store.

This is the policy half of a backend, the same for every medium: which records are
committed and which are a torn tail (``sessionledger.committed``), format, identity and
event-type checks, crash repair, packing chunk runs into rows, sequencing, revision and
stale-writer checks and how each refusal is worded, and per-id serialization. The other
half is a ``LogStore`` (``sessionledger.logstore``), which only moves records; backends
implement that and wrap it in a small ``SessionPersistence`` subclass.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from sessionledger import publishing
from sessionledger._failpoints import failpoint
from sessionledger._plugins import default_event_types
from sessionledger.cancellation import uninterrupted
from sessionledger.catalog import ReindexReport, SessionCatalog
from sessionledger.chunks import pack_chunk_runs
from sessionledger.committed import (
    ScannedLog,
    TornTail,
    check_event_types,
    salvage_point,
    scan_log,
    stored_header,
)
from sessionledger.errors import (
    ConfigError,
    CorruptLogError,
    HeaderError,
    ReadBackMismatchError,
    SeedError,
    SeqMismatchError,
    SessionExistsError,
    SessionNotFoundError,
)
from sessionledger.eventlog import EventLog
from sessionledger.events import SessionEvent, SessionHeader
from sessionledger.limits import batch_bounds, checked_sizes
from sessionledger.listing import (
    SessionInfo,
)
from sessionledger.logstore import Batch, LogStore, Repair, RepairReceipt, collector_paused
from sessionledger.refusals import changed_meanwhile, held_prefix, readable_scan, refusal
from sessionledger.registry import EventTypeRegistry
from sessionledger.repair import interrupted_turn_closers
from sessionledger.searching import (
    indexed_texts,
)
from sessionledger.session import Clock, Session, SessionHooks
from sessionledger.stored import SalvageReport, StoredSession, ValidatedLog
from sessionledger.summaries import SessionSummary, summarize

__all__ = [
    "ReindexReport",
    "SalvageReport",
    "SessionInfo",
    "SessionPersistence",
    "StoredSession",
    "TornTail",
]

logger = logging.getLogger("sessionledger")


class SessionPersistence(SessionCatalog):
    """Durable storage for session logs, over the primitives of *store*.

    - ``create(header)`` registers a header; nothing of the session is stored until the
      first non-empty ``append``. An id with a stored log raises ``SessionExistsError``.
    - ``append(id, events)`` durably appends a contiguous batch; its first seq must equal
      the stored next seq (``SeqMismatchError``). Appending to a stored id this instance
      never created commits that log's cold repair first.
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
    plugins).
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
        self._owned: set[str] = set()  # sessions this instance holds as their one writer
        self._closed = False

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

    @contextlib.asynccontextmanager
    async def _owning(self, session_id: str) -> AsyncIterator[None]:
        """Hold *session_id* as its one writer for the body and after it (docs/durability.md,
        "one writer per session"); a claim made here is let go again when the body (or
        the claim itself) fails or is cancelled."""
        fresh = session_id not in self._owned
        try:
            if fresh:
                await self._claim(session_id)
            yield
        except BaseException:
            if fresh:
                self._owned.discard(session_id)
                self._forget(session_id)
                await self._store.release(session_id)
            raise

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def _in_use(self, session_id: str) -> bool:
        return session_id in self._owned or session_id in self._created

    def _forget(self, session_id: str) -> None:
        self._cursors.pop(session_id, None)
        self._headers.pop(session_id, None)
        self._summaries.pop(session_id, None)

    def _summary_rebuilt(self, session_id: str, summary: SessionSummary) -> None:
        if session_id in self._summaries:
            self._summaries[session_id] = summary

    # -- writing ----------------------------------------------------------------------

    async def create(self, header: SessionHeader) -> None:
        """Register *header*; nothing of the session is stored until the first non-empty
        append (a store may still prepare its medium, such as a database schema)."""
        if type(header) is not SessionHeader:
            raise HeaderError(f"create needs a SessionHeader, got {type(header).__qualname__}")
        session_id = header.id
        async with self._lock(session_id):
            if session_id in self._created or session_id in self._cursors:
                raise SessionExistsError("session already exists", session_id=session_id)
            if await self._store.read_revision(session_id) is not None:
                raise SessionExistsError(
                    "session already has a stored log: resume it (ledger.resume(id)), or use "
                    "ledger.resume_or_create(id) to resume or create it on every start",
                    session_id=session_id,
                )
            self._created[session_id] = header

    async def append(
        self,
        session_id: str,
        events: Iterable[SessionEvent | Mapping[str, Any]],
        *,
        sizes: Sequence[int] | None = None,
    ) -> None:
        """Durably append a contiguous batch; return once it is durable.

        An event larger than the store can hold is refused (``EventDataError``,
        ``TOO_LARGE``) with nothing written; a batch larger than the store writes at
        once is written as consecutive batches that each fit (docs/backends.md, "the
        primitives"), and if one of them fails, retrying the same call writes what is
        missing. *sizes* are the events' ``sessionledger.limits.event_bytes``, when the
        caller has measured them already (a ledger's write-behind has).
        """
        batch = [
            item if type(item) is SessionEvent else SessionEvent.from_json(item) for item in events
        ]
        if not batch:
            return
        sizes = checked_sizes(self._store, session_id, batch, sizes)
        async with self._lock(session_id):
            # Begun, an append ends whole (a cold load included) and is taken up, whatever
            # the caller cancels (docs/durability.md, "cancellation").
            await uninterrupted(self._append_locked(session_id, batch, sizes))

    async def _append_locked(
        self,
        session_id: str,
        batch: builtins.list[SessionEvent],
        sizes: Sequence[int] | None,
    ) -> None:
        header = self._created.get(session_id)
        creates = header is not None
        if header is not None:
            first = 0
        else:
            if session_id not in self._cursors:
                await self._load_locked(session_id, commit=True)
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
            async with self._owning(session_id):
                summary = await self._write_fitting(header, batch, first, True, summary, sizes)
        else:
            summary = await self._write_fitting(header, batch, first, False, summary, sizes)
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
    ) -> SessionSummary:
        """Write *events* in batches the store can hold; *summary* is the session's before
        them. Return the session's summary after them."""
        for start, end in batch_bounds(sizes, len(events), self._store.max_batch_bytes):
            part = events[start:end]
            summary = summary.after(part)
            await self._write(
                header, part, first=first + start, creates=creates and not start, summary=summary
            )
        return summary

    async def publish(
        self, header: SessionHeader, events: Iterable[SessionEvent | Mapping[str, Any]]
    ) -> None:
        """Store a new session whole, at once (docs/backends.md, "whole logs"): readers see
        all of *events* or nothing, even if the process dies part-way. The log is checked
        as a read checks one, and read back before it is published
        (``ReadBackMismatchError``). An id live here or stored raises
        ``SessionExistsError``; this instance then holds the session, as after ``append``."""
        log = publishing.whole_log(header, events, self.event_types)
        async with self._lock(header.id):
            await uninterrupted(self._publish_locked(header, log))

    async def _publish_locked(self, header: SessionHeader, log: Sequence[SessionEvent]) -> None:
        session_id = header.id
        stored = await self._store.read_revision(session_id) is not None
        if stored or self._in_use(session_id):
            raise SessionExistsError("session already exists", session_id=session_id)
        sizes = checked_sizes(self._store, session_id, log, None)
        batches, summary = publishing.log_batches(
            header, log, self._batch, sizes, self._store.max_batch_bytes
        )
        try:
            async with self._owning(session_id):
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
    ) -> None:
        """Write *events*; *summary* is the session's once they are all stored."""
        if await self._store.write_batch(self._batch(header, events, first, creates, summary)):
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
                header, events[landed:], first=first + landed, creates=False, summary=summary
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
    ) -> Batch:
        store = self._store
        records = pack_chunk_runs(events, store.max_row_members, store.max_row_bytes)
        texts = indexed_texts(events) if store.indexes_text else ()
        return Batch(header, records, first, first + len(events), creates, summary, texts)

    # -- reading ----------------------------------------------------------------------

    async def load(self, session_id: str) -> StoredSession:
        """Read and validate a stored session, committing its cold repair durably."""
        async with self._lock(session_id):
            stored, _ = await uninterrupted(self._load_locked(session_id, commit=True))
            return stored

    async def inspect(self, session_id: str) -> StoredSession:
        """Read and validate a stored session; repair only in memory, never write."""
        async with self._lock(session_id):
            stored, _ = await self._load_locked(session_id, commit=False)
            return stored

    async def load_session(
        self, session_id: str, *, hooks: SessionHooks | None = None, clock: Clock | None = None
    ) -> tuple[StoredSession, Session]:
        """``load``, also returning the validated ``Session`` built on the way (with
        *hooks* and *clock*), so a ledger resuming it validates the log once."""
        async with self._lock(session_id):
            return await uninterrupted(
                self._load_locked(session_id, commit=True, hooks=hooks, clock=clock)
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
            raise ValueError(f"from_seq must be a non-negative integer, got {from_seq!r}")
        async with self._lock(session_id):
            raw = await self._store.read_log(session_id, from_seq)
            if raw is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            # Read from its start (every store reads everything for seq 0), a log must
            # start at seq 0: a lost first record is committed-region damage.
            # Reading never refuses an unknown type: it is shown as stored.
            scan = scan_log(session_id, raw, contiguous_from=0 if from_seq == 0 else None)
            return [event for event in scan.events if event.seq >= from_seq]

    async def salvage(self, session_id: str, *, dry_run: bool = False) -> SalvageReport:
        """Keep the longest intact prefix of a damaged log, move everything after it into
        quarantine, and close an interrupted turn (docs/durability.md). The only way past
        corruption, and never automatic: ``load`` refuses a damaged log instead. With
        *dry_run* nothing is written: the report says what would be moved (no quarantine,
        no closers counted)."""
        async with self._lock(session_id):
            if await self._store.read_revision(session_id) is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            if dry_run:
                return await self._salvage(session_id, dry_run=True)
            # Begun, a salvage ends whole: cut, closers and indexes ("cancellation").
            return await uninterrupted(self._salvage_owned(session_id))

    async def _salvage_owned(self, session_id: str) -> SalvageReport:
        async with self._owning(session_id):
            return await self._salvage(session_id, dry_run=False)

    async def _salvage(self, session_id: str, *, dry_run: bool) -> SalvageReport:
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
            stored, _ = await self._load_locked(session_id, commit=True)
            closers = len(stored.events) - kept
            # A salvage cuts inside the committed region, where summaries and indexes
            # were written: rebuild them from what the log now holds.
            await self._reindex_locked(session_id)
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

    # -- letting go ---------------------------------------------------------------------

    async def delete(self, session_id: str) -> None:
        """Remove a session; an unknown id raises ``SessionNotFoundError``, and a session
        another writer holds ``SessionLockedError``."""
        async with self._lock(session_id):
            await uninterrupted(self._delete_locked(session_id))  # begun, it ends whole

    async def _delete_locked(self, session_id: str) -> None:
        if await self._store.read_revision(session_id) is not None:
            await self._claim(session_id)
        registered = self._created.pop(session_id, None) is not None
        self._forget(session_id)
        try:
            deleted = await self._store.delete_log(session_id)
        finally:
            self._owned.discard(session_id)
            await self._store.release(session_id)
        if not deleted and not registered:
            raise SessionNotFoundError("session not found", session_id=session_id)

    async def release(self, session_id: str) -> None:
        """Forget *session_id* in this instance: its cursor, its claim as the session's
        one writer, and whatever else the store holds for it. A long-running process calls
        this when it is done with a session; another instance may then take it, and the
        next use here reads storage again, as a new instance would. Nothing stored
        changes."""
        async with self._lock(session_id):
            self._forget(session_id)
            self._owned.discard(session_id)
            await uninterrupted(self._store.release(session_id))

    async def close(self) -> None:
        """Release the store; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        await uninterrupted(self._store.close())  # begun, it ends: a retry does nothing

    # -- the cold load ------------------------------------------------------------------

    async def _claim(self, session_id: str) -> None:
        """Become *session_id*'s one writer until release, delete or close."""
        if session_id not in self._owned:
            await self._store.claim(session_id)
            self._owned.add(session_id)

    async def _load_locked(
        self,
        session_id: str,
        *,
        commit: bool,
        hooks: SessionHooks | None = None,
        clock: Clock | None = None,
    ) -> tuple[StoredSession, Session]:
        read = await self._read_validated(session_id, hooks, clock, going_live=commit)
        if not commit:
            return read.stored(read.scan.revision), read.session
        if session_id in self._owned:
            return await self._go_live(read)
        # Going live: read and validated first, so a log that cannot go live (absent,
        # damaged, of unknown types) is refused having claimed and created nothing. Once
        # owned, read again only if another writer changed the log meanwhile.
        async with self._owning(session_id):
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
        with collector_paused():
            scan = scan_log(session_id, raw, contiguous_from=0, release=True)
            events = scan.events
            hooks = hooks or SessionHooks(event_types=self.event_types)
            closers = [SessionEvent.from_json(item) for item in interrupted_turn_closers(events)]
            try:
                log = events.plus(closers) if type(events) is EventLog else [*events, *closers]
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
