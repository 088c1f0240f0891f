"""``SessionPersistence``: the contract every backend honours (SPEC §11), and its policy.

The policy lives here, once: the committed-region / torn-tail rule, format and identity
checks, unknown event types, cold repair, sequencing and per-id serialization. A backend
implements a handful of storage primitives (``_read``, ``_write``, ``_truncate``,
``_stored_headers``, ``_revision``, ``_delete``, ``_close``) that move records, not
meaning, so nothing here is written twice across backends.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import gc
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Final, NamedTuple, final

from sessionledger import jsoncodec
from sessionledger._failpoints import failpoint
from sessionledger.chunks import pack_chunk_runs, unpack_events
from sessionledger.errors import (
    CorruptLogError,
    FormatUnsupportedError,
    HeaderError,
    LedgerError,
    SeedError,
    SeqMismatchError,
    SessionExistsError,
    SessionNotFoundError,
)
from sessionledger.events import SESSION_FORMAT_VERSION, SessionEvent, SessionHeader
from sessionledger.registry import EventTypeRegistry
from sessionledger.repair import interrupted_turn_closers
from sessionledger.session import Clock, Session, SessionHooks
from sessionledger.vocabulary import TURN_END

__all__ = [
    "UNPARSABLE",
    "RawLog",
    "RawRecord",
    "SessionInfo",
    "SessionPersistence",
    "StoredSession",
    "default_event_types",
]

logger = logging.getLogger("sessionledger")

#: Stands in for a record a backend could not parse (``RawRecord.value``).
UNPARSABLE: Final = object()


@final
@dataclasses.dataclass(frozen=True, slots=True)
class StoredSession:
    """A stored session as read: header, events and the storage revision they came from."""

    header: SessionHeader
    events: tuple[SessionEvent, ...]
    revision: str


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SessionInfo:
    """A stored session's header and revision, read without its events."""

    header: SessionHeader
    revision: str


class RawRecord(NamedTuple):
    """One physical record as a backend read it.

    ``value`` is the parsed JSON (an event envelope or a packed chunk row) or
    ``UNPARSABLE``; ``position`` is opaque to the core and handed back to ``_truncate``
    to remove this record and everything after it; ``label`` names it in errors
    (``"line 12"``, ``"row seq 40"``) and ``line``, for line-oriented media, is the
    1-based line number a ``CorruptLogError`` reports.
    """

    value: Any
    position: Any
    label: str
    line: int | None = None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class RawLog:
    """A stored log as a backend read it, before any validation.

    ``header`` is the stored header JSON object (its version is checked by the core);
    ``torn_at`` is the position of a trailing partial record the medium can have (a
    JSONL line without its newline), or None.
    """

    header: Mapping[str, Any]
    records: Sequence[RawRecord]
    revision: str
    location: str | None = None
    torn_at: Any = None


@final
@dataclasses.dataclass(slots=True)
class _Scan:
    header: SessionHeader
    events: list[SessionEvent]
    torn_at: Any
    revision: str
    location: str | None


_default_types: EventTypeRegistry | None = None


def default_event_types() -> EventTypeRegistry:
    """Return the registry a backend built on its own uses: core + entry-point plugins."""
    global _default_types  # noqa: PLW0603 - built once, on first use, not at import
    if _default_types is None:
        from sessionledger._plugins import PluginSet, make_plugin_manager

        _default_types = PluginSet(make_plugin_manager()).event_types
    return _default_types


class SessionPersistence(ABC):
    """Durable storage for session logs (SPEC §11.1). All operations are async.

    - ``create(header)`` registers a header; nothing is written until the first non-empty
      ``append``. An id that already has a stored log raises ``SessionExistsError``.
    - ``append(id, events)`` durably appends a contiguous batch; its first seq must equal
      the stored next seq (``SeqMismatchError``). Appending to a stored id this instance
      never created commits that log's cold repair first.
    - ``load(id)`` reads, validates, truncates a torn tail and appends crash-repair
      closers durably; ``inspect(id)`` does the same in memory only and never writes.
    - ``read_from(id, from_seq)`` returns the stored suffix as stored, no repair.
    - ``list()`` / ``list_snapshots()`` read headers (and revisions) only, ordered by
      ``created_at`` then id; ``delete(id)`` removes a session; ``close()`` is idempotent.

    Operations on one session id are serialized within the process.
    """

    #: The URL scheme this backend serves (``"memory"``, ``"jsonl"``, ``"sqlite"``…).
    scheme: ClassVar[str] = ""
    #: Whether a crash can leave a partial trailing record (a torn tail) in this medium.
    can_tear: ClassVar[bool] = False
    #: Caps for packed chunk rows (SPEC §9); None means unbounded.
    max_row_members: ClassVar[int | None] = None
    max_row_bytes: ClassVar[int | None] = None

    def __init__(self, *, event_types: EventTypeRegistry | None = None) -> None:
        self._event_types = event_types
        self._locks: dict[str, asyncio.Lock] = {}
        self._created: dict[str, SessionHeader] = {}
        self._cursors: dict[str, int] = {}
        self._headers: dict[str, SessionHeader] = {}
        self._closed = False

    @property
    def event_types(self) -> EventTypeRegistry:
        """The event types the read path accepts (SPEC §2.4, §17.18)."""
        if self._event_types is None:
            self._event_types = default_event_types()
        return self._event_types

    # -- storage primitives: what a backend implements ----------------------------------

    @abstractmethod
    async def _read(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        """Read the stored log of *session_id*, or None when it has none.

        A backend that can seek may start at the record that contains *from_seq* (a packed
        row may start before it); others return every record.
        """

    @abstractmethod
    async def _write(
        self,
        header: SessionHeader,
        records: list[dict[str, Any]],
        *,
        next_seq: int,
        materialize: bool,
    ) -> None:
        """Durably append *records* (the first event has seq *next_seq*) before returning.

        With ``materialize=True`` the session has no stored log yet: store the header and
        the records atomically, and raise ``SessionExistsError`` if a log appeared
        meanwhile. A backend shared between processes re-checks that the stored next seq
        is *next_seq* and raises ``SeqMismatchError`` otherwise. On failure nothing is
        left half-written that a retry would duplicate.
        """

    @abstractmethod
    async def _truncate(self, session_id: str, position: Any) -> None:
        """Remove the record at *position* (from ``RawRecord``/``RawLog.torn_at``) and all
        after it."""

    @abstractmethod
    async def _stored_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        """Return ``(header JSON, revision)`` of every stored session, reading no events."""

    @abstractmethod
    async def _revision(self, session_id: str) -> str | None:
        """Return the current revision of *session_id*, or None when nothing is stored."""

    @abstractmethod
    async def _delete(self, session_id: str) -> bool:
        """Remove everything stored for *session_id*; return whether anything was."""

    async def _close(self) -> None:
        """Release the backend's resources (called once)."""
        return None

    async def _forget(self, session_id: str) -> None:
        """Release what the backend holds for one session (a writer's lock, caches)."""
        return None

    def locate(self, header: SessionHeader) -> str | None:
        """Return where this session's artifact lives (a path), if the backend has one."""
        return None

    # -- the public contract ------------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    async def create(self, header: SessionHeader) -> None:
        """Register *header*; nothing is written until the first non-empty append."""
        if type(header) is not SessionHeader:
            raise HeaderError(f"create needs a SessionHeader, got {type(header).__qualname__}")
        session_id = header.id
        async with self._lock(session_id):
            if session_id in self._created or session_id in self._cursors:
                raise SessionExistsError("session already exists", session_id=session_id)
            if await self._revision(session_id) is not None:
                raise SessionExistsError(
                    "session already has a stored log; resume it instead", session_id=session_id
                )
            self._created[session_id] = header

    async def append(
        self, session_id: str, events: Iterable[SessionEvent | Mapping[str, Any]]
    ) -> None:
        """Durably append a contiguous batch; return once it is durable."""
        batch = [
            item if type(item) is SessionEvent else SessionEvent.from_json(item) for item in events
        ]
        if not batch:
            return
        async with self._lock(session_id):
            header = self._created.get(session_id)
            materialize = header is not None
            if header is not None:
                next_seq = 0
            else:
                if session_id not in self._cursors:
                    await self._load_locked(session_id, commit=True)
                header = self._headers[session_id]
                next_seq = self._cursors[session_id]
            for offset, event in enumerate(batch):
                if event.seq != next_seq + offset:
                    raise SeqMismatchError(
                        f"batch does not continue the stored log: expected seq "
                        f"{next_seq + offset} at index {offset}, got {event.seq}",
                        session_id=session_id,
                        seq=event.seq,
                    )
            records = pack_chunk_runs(batch, self.max_row_members, self.max_row_bytes)
            try:
                await self._write(header, records, next_seq=next_seq, materialize=materialize)
            except (SeqMismatchError, SessionExistsError):
                # A write whose caller was cancelled (or whose reply was lost) may have
                # landed, and write-behind retries it with newer events behind it: what
                # storage already holds of this batch is written; only the rest is not.
                landed = await self._landed(header, batch, materialize=materialize)
                if not landed:
                    raise
                if landed < len(batch):
                    rest = pack_chunk_runs(batch[landed:], self.max_row_members, self.max_row_bytes)
                    await self._write(header, rest, next_seq=next_seq + landed, materialize=False)
            if materialize:
                del self._created[session_id]
                self._headers[session_id] = header
            self._cursors[session_id] = next_seq + len(batch)

    async def load(self, session_id: str) -> StoredSession:
        """Read and validate a stored session, committing its cold repair durably."""
        async with self._lock(session_id):
            stored, _ = await self._load_locked(session_id, commit=True)
            return stored

    async def inspect(self, session_id: str) -> StoredSession:
        """Read and validate a stored session; repair only in memory, never write."""
        async with self._lock(session_id):
            stored, _ = await self._load_locked(session_id, commit=False)
            return stored

    async def _load_session(
        self, session_id: str, *, commit: bool, hooks: SessionHooks, clock: Clock | None
    ) -> tuple[StoredSession, Session]:
        """Load (or inspect) and return the validated session built on the way, so a
        ledger resuming it validates the log once."""
        async with self._lock(session_id):
            return await self._load_locked(session_id, commit=commit, hooks=hooks, clock=clock)

    async def read_from(self, session_id: str, from_seq: int) -> builtins.list[SessionEvent]:
        """Return the stored events with seq >= *from_seq*, as stored (no repair)."""
        if type(from_seq) is not int or from_seq < 0:
            raise ValueError(f"from_seq must be a non-negative integer, got {from_seq!r}")
        async with self._lock(session_id):
            raw = await self._read(session_id, from_seq)
            if raw is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            # Read from its start (every backend reads everything for seq 0), a log must
            # start at seq 0: a lost first record is committed-region damage (SPEC §11.2).
            scan = self._scan(session_id, raw, contiguous_from=0 if from_seq == 0 else None)
            self._check_types(session_id, scan.events, scan.location)
            return [event for event in scan.events if event.seq >= from_seq]

    async def list(self) -> builtins.list[SessionHeader]:
        """Return the headers of every stored session (created_at, then id)."""
        return [info.header for info in await self.list_snapshots()]

    async def list_snapshots(self) -> builtins.list[SessionInfo]:
        """Return header and revision of every stored session (created_at, then id).

        A session written in another format version is left out and logged: one newer
        session must not make a whole store unlistable.
        """
        infos: builtins.list[SessionInfo] = []
        for header_json, revision in await self._stored_headers():
            try:
                self._check_version(header_json, None)
                header = _header(header_json, None, None)
            except (FormatUnsupportedError, HeaderError, CorruptLogError) as error:
                logger.warning("skipping a stored session this build cannot read: %s", error)
                continue
            infos.append(SessionInfo(header, revision))
        infos.sort(key=lambda info: (info.header.created_at, info.header.id))
        return infos

    async def delete(self, session_id: str) -> None:
        """Remove a session; an unknown id raises ``SessionNotFoundError``."""
        async with self._lock(session_id):
            registered = self._created.pop(session_id, None) is not None
            self._cursors.pop(session_id, None)
            self._headers.pop(session_id, None)
            if not await self._delete(session_id) and not registered:
                raise SessionNotFoundError("session not found", session_id=session_id)

    async def release(self, session_id: str) -> None:
        """Forget *session_id* in this instance: its cursor, and whatever the backend holds
        for it (the JSONL writer lock, for one). A long-running process calls this when it
        is done with a session; the next use reads storage again, as a new instance would.
        Nothing stored changes."""
        async with self._lock(session_id):
            self._cursors.pop(session_id, None)
            self._headers.pop(session_id, None)
            await self._forget(session_id)

    async def close(self) -> None:
        """Release the backend; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        await self._close()

    async def stored_next_seq(self, session_id: str) -> int | None:
        """Return the next seq this instance will accept for *session_id*, if it knows it."""
        if session_id in self._created:
            return 0
        return self._cursors.get(session_id)

    # -- shared policy ------------------------------------------------------------------

    async def _landed(
        self, header: SessionHeader, batch: builtins.list[SessionEvent], *, materialize: bool
    ) -> int:
        """Count the events of *batch* storage already holds at their seqs as its tail (a
        prefix of the batch, nothing after it), so a retried write can skip them; 0 when
        the stored log continues otherwise (then the seq mismatch is real)."""
        start = batch[0].seq
        raw = await self._read(header.id, start)
        if raw is None:
            return 0
        try:
            scan = self._scan(header.id, raw, contiguous_from=0 if start == 0 else None)
        except LedgerError:
            return 0
        if materialize and _bytes(scan.header.to_json()) != _bytes(header.to_json()):
            return 0  # another writer's log under this id
        stored = [event for event in scan.events if event.seq >= start]
        if len(stored) > len(batch):
            return 0
        # Compared as stored bytes: data may be nested deeper than == can recurse.
        for held, event in zip(stored, batch, strict=False):
            if _bytes(held.to_json()) != _bytes(event.to_json()):
                return 0
        return len(stored)

    async def _load_locked(
        self,
        session_id: str,
        *,
        commit: bool,
        hooks: SessionHooks | None = None,
        clock: Clock | None = None,
    ) -> tuple[StoredSession, Session]:
        raw = await self._read(session_id)
        if raw is None:
            raise SessionNotFoundError("session not found", session_id=session_id)
        with _gc_paused():
            scan = self._scan(session_id, raw, contiguous_from=0)
            events = scan.events
            self._check_types(session_id, events, scan.location)
            closers = [SessionEvent.from_json(item) for item in interrupted_turn_closers(events)]
            hooks = hooks or SessionHooks(event_types=self.event_types)
            try:
                session = Session.restore(
                    scan.header, [*events, *closers], hooks=hooks, clock=clock
                )
            except SeedError as error:
                raise CorruptLogError(
                    f"stored log failed validation: {error}",
                    session_id=session_id,
                    path=scan.location,
                    seq=error.index,
                ) from error
        revision = scan.revision
        if commit and (scan.torn_at is not None or closers):
            failpoint("core.repair.begin")
            if scan.torn_at is not None:
                await self._truncate(session_id, scan.torn_at)
                failpoint("core.repair.after-truncate")
            if closers:
                records = pack_chunk_runs(closers, self.max_row_members, self.max_row_bytes)
                await self._write(scan.header, records, next_seq=len(events), materialize=False)
                failpoint("core.repair.after-closers")
            revision = await self._revision(session_id) or revision
        if commit:
            self._headers[session_id] = scan.header
            self._cursors[session_id] = len(events) + len(closers)
        stored = StoredSession(scan.header, (*events, *closers), revision)
        return stored, session

    def _check_version(self, header_json: Mapping[str, Any], location: str | None) -> None:
        if not isinstance(header_json, Mapping):
            raise HeaderError("stored header is not a JSON object")
        version = header_json.get("version")
        session_id = header_json.get("id")
        label = session_id if type(session_id) is str else None
        if type(version) is not int:
            found = "none" if version is None else f"a {type(version).__name__}"
            raise HeaderError(f"stored header has no integer version ({found})", session_id=label)
        if version > SESSION_FORMAT_VERSION:
            raise FormatUnsupportedError(
                f"log format v{version} was written by a newer sessionledger (this build reads "
                f"v{SESSION_FORMAT_VERSION}); upgrade sessionledger to open it",
                code="FORMAT_NEWER",
                session_id=label,
                path=location,
            )
        if version < SESSION_FORMAT_VERSION:
            raise FormatUnsupportedError(
                f"log format v{version} is older than v{SESSION_FORMAT_VERSION} and this build "
                "has no upgrade path for it",
                code="FORMAT_OLDER",
                session_id=label,
                path=location,
            )

    def _scan(self, session_id: str, raw: RawLog, *, contiguous_from: int | None) -> _Scan:
        """Apply the committed-region rule (SPEC §11.2) to a raw log."""
        self._check_version(raw.header, raw.location)
        header = _header(raw.header, session_id, raw.location)
        if header.id != session_id:
            raise CorruptLogError(
                f"stored header belongs to session {header.id!r}",
                session_id=session_id,
                path=raw.location,
            )
        events: list[SessionEvent] = []
        expected = contiguous_from
        issue: tuple[RawRecord, str] | None = None
        for record in raw.records:
            decoded = _decode(record)
            if issue is not None:
                # Damage followed by a complete turn is inside the committed region.
                if not isinstance(decoded, str) and any(
                    event.type == TURN_END for event in decoded
                ):
                    bad, reason = issue
                    raise CorruptLogError(
                        f"committed region is damaged at {bad.label}: {reason}",
                        session_id=session_id,
                        path=raw.location,
                        line=bad.line,
                    )
                continue
            if isinstance(decoded, str):
                issue = (record, decoded)
                continue
            if expected is None:
                expected = decoded[0].seq
            if any(event.seq != expected + offset for offset, event in enumerate(decoded)):
                issue = (record, f"seq gap (expected {expected}, got {decoded[0].seq})")
                continue
            events.extend(decoded)
            expected += len(decoded)
        torn_at = issue[0].position if issue is not None else raw.torn_at
        return _Scan(header, events, torn_at, raw.revision, raw.location)

    def _check_types(
        self, session_id: str, events: Sequence[SessionEvent], location: str | None
    ) -> None:
        known = self.event_types.declarations
        for event in events:
            if event.type not in known and not event.ignorable:
                raise FormatUnsupportedError(
                    f"event type {event.type!r} is unknown to this build and not marked "
                    "ignorable; refusing to interpret the log (written by a newer program?)",
                    code="UNKNOWN_EVENT_TYPE",
                    session_id=session_id,
                    seq=event.seq,
                    path=location,
                )


def _bytes(value: Any) -> bytes:
    return jsoncodec.dumps(value)


def _header(
    value: Mapping[str, Any], session_id: str | None, location: str | None
) -> SessionHeader:
    """Build the stored header; an invalid one is a damaged log (``CorruptLogError``)."""
    try:
        return SessionHeader.from_json(value)
    except HeaderError as error:
        raise CorruptLogError(
            f"stored header is invalid: {error}", session_id=session_id, path=location
        ) from error
    except RecursionError:  # see _decode
        raise CorruptLogError(
            "stored header is invalid: a field is nested too deeply",
            session_id=session_id,
            path=location,
        ) from None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Defer the cyclic garbage collector while a stored log is decoded.

    Decoding builds a few container objects per event, all of which survive, so the
    collector would traverse the growing heap again and again for nothing: measured, that
    was ~70 % of a cold load of 100k events (bench/RESULTS.md, figure 5). Reference
    counting frees garbage as usual meanwhile, and no await happens inside, so only this
    synchronous stretch runs without the collector. Left alone if it is already disabled.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _decode(record: RawRecord) -> list[SessionEvent] | str:
    """Decode one record into events, or return why it is not a valid record."""
    value = record.value
    if value is UNPARSABLE:
        return "not valid JSON"
    try:
        return unpack_events(value)
    except LedgerError as error:
        return f"{error}"
    except (TypeError, ValueError) as error:
        return f"malformed record: {error}"
    except RecursionError:
        # A value nested too deeply for an error message's repr (events.py formats
        # rejected fields with repr): damaged all the same, never a crash of the read.
        return "malformed record: a field is nested too deeply"
