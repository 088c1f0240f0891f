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
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from sessionledger._failpoints import failpoint
from sessionledger._plugins import default_event_types
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
    SeedError,
    SeqMismatchError,
    SessionExistsError,
    SessionNotFoundError,
)
from sessionledger.eventlog import EventLog
from sessionledger.events import SessionEvent, SessionHeader
from sessionledger.listing import (
    SessionInfo,
)
from sessionledger.logstore import Batch, LogStore, Repair, RepairReceipt, collector_paused
from sessionledger.owners import Owners
from sessionledger.refusals import held_prefix, readable_scan, refusal
from sessionledger.registry import EventTypeRegistry
from sessionledger.repair import interrupted_turn_closers
from sessionledger.searching import (
    indexed_texts,
)
from sessionledger.session import Clock, Session, SessionHooks
from sessionledger.stored import SalvageReport, StoredSession
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

    Each session has one writer: the ``owner`` a writing call names (a ``Ledger`` names
    itself; default: this object); any other is refused (docs/durability.md).
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

    def attach(self, owner: object) -> None:
        """Count *owner* (a ledger's ``Owner``) among the users of this object:
        ``close(owner=…)`` closes the store only when the last of them closes."""
        self._owners.attach(owner)

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
        owner: object | None = None,
    ) -> None:
        """Durably append a contiguous batch as *owner* (default: this object); return
        once it is durable."""
        writer = self._owners.writer(owner)
        batch = [
            item if type(item) is SessionEvent else SessionEvent.from_json(item) for item in events
        ]
        if not batch:
            return
        async with self._lock(session_id):
            self._owners.refuse_others(session_id, writer)
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
            for offset, event in enumerate(batch):
                if event.seq != first + offset:
                    raise SeqMismatchError(
                        f"batch does not continue the stored log: expected seq "
                        f"{first + offset} at index {offset}, got {event.seq}",
                        session_id=session_id,
                        seq=event.seq,
                    )
            summary = self._summaries.get(session_id, SessionSummary()).after(batch)
            if creates:
                async with self._owners.owning(session_id, writer):
                    await self._write(header, batch, first=first, creates=True, summary=summary)
            else:
                await self._write(header, batch, first=first, creates=False, summary=summary)
            if creates:
                del self._created[session_id]
                self._headers[session_id] = header
            self._cursors[session_id] = first + len(batch)
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

    async def load(self, session_id: str, *, owner: object | None = None) -> StoredSession:
        """Read and validate a stored session, committing its cold repair durably, as
        *owner* (default: this object), who writes it from then on."""
        async with self._lock(session_id):
            stored, _ = await self._load_locked(
                session_id, commit=True, owner=self._owners.writer(owner)
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
        async with self._lock(session_id):
            return await self._load_locked(
                session_id,
                commit=True,
                hooks=hooks,
                clock=clock,
                owner=self._owners.writer(owner),
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

    async def salvage(
        self, session_id: str, *, dry_run: bool = False, owner: object | None = None
    ) -> SalvageReport:
        """Keep the longest intact prefix of a damaged log, move everything after it into
        quarantine, and close an interrupted turn (docs/durability.md). The only way past
        corruption, and never automatic: ``load`` refuses a damaged log instead. With
        *dry_run* nothing is written: the report says what would be moved (no quarantine,
        no closers counted)."""
        async with self._lock(session_id):
            if await self._store.read_revision(session_id) is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            writer = self._owners.writer(owner)
            if dry_run:
                return await self._salvage(session_id, writer, dry_run=True)
            async with self._owners.owning(session_id, writer):
                return await self._salvage(session_id, writer, dry_run=False)

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
                raise _changed_meanwhile(session_id, point.kept_events)
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

    async def delete(self, session_id: str, *, owner: object | None = None) -> None:
        """Remove a session as *owner* (default: this object); an unknown id raises
        ``SessionNotFoundError``, and a session another writer holds
        ``SessionLockedError``."""
        writer = self._owners.writer(owner)
        async with self._lock(session_id):
            self._owners.refuse_others(session_id, writer)
            if await self._store.read_revision(session_id) is not None:
                await self._owners.claim(session_id, writer)
            registered = self._created.pop(session_id, None) is not None
            self._forget(session_id)
            try:
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
            await self._owners.release(session_id)

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
        # Closed once the store is: the next call finishes a cancelled close.
        await self._store.close()
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
        async with self._owners.owning(session_id, writer):
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
    ) -> _Validated:
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
        return _Validated(scan, closers, session)

    async def _go_live(self, read: _Validated) -> tuple[StoredSession, Session]:
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
            raise _changed_meanwhile(scan.header.id, end)
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


@dataclasses.dataclass(frozen=True, slots=True)
class _Validated:
    """A stored log as read and validated: what going live needs, and what it shows."""

    scan: ScannedLog
    closers: builtins.list[SessionEvent]
    session: Session

    def stored(self, revision: str, torn: TornTail | None = None) -> StoredSession:
        """The session as read at *revision*, with its torn tail (by default, as read)."""
        events = self.scan.events
        log = events.plus(self.closers) if type(events) is EventLog else (*events, *self.closers)
        torn = self.scan.torn if torn is None else torn
        return StoredSession(self.scan.header, log, revision, self.scan.torn_batches, torn)


def _changed_meanwhile(session_id: str, seq: int) -> SeqMismatchError:
    return SeqMismatchError(
        "the stored log changed since it was read; not repairing it (load the session again)",
        session_id=session_id,
        seq=seq,
    )
