"""``LogStore``: the storage primitives a backend implements (docs/backends.md).

A store moves records and knows nothing of what they mean. Every rule that is the same
for all media lives once in ``SessionPersistence``, which drives the store: which records
are committed and which are a torn tail, crash repair, packing chunk runs, format and
header checks, unknown event types, revision and stale-writer checks and how they are
worded. docs/backends.md, "the primitives", says what each primitive must guarantee when
the process dies in the middle of it.

The records a store reads and writes are JSON objects: event envelopes and packed chunk
rows, made by the core's codec (``sessionledger.storage._chunks``). A store keeps them exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple, final

import orjson

from sessionledger._errors import ConfigError, SessionNotFoundError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import SessionHeader
from sessionledger.storage._listing import SessionQuery, StoredSummary
from sessionledger.views._searching import IndexedText, TextQuery
from sessionledger.views._summaries import SessionSummary


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Defer the cyclic garbage collector while a stored log is parsed or decoded.

    Parsing and decoding build container objects that all survive, so the collector
    would traverse the growing heap again and again for nothing (it was most of a cold
    load before the pause; bench/ANALYSIS.md, figures 5 and 8). Reference counting frees
    garbage as usual meanwhile. For a synchronous stretch only (a store's reading thread
    or the core's decode, never across an await); left alone if the collector is already
    off, so nested or concurrent pauses only ever delay a collection.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


#: Stands in for a record a store could not parse (``RawRecord.value``).
UNPARSABLE: Final = object()


@final
class RawRecord:
    """One physical record as a store read it.

    ``value`` is the parsed JSON object (an event envelope or a packed chunk row) or
    ``UNPARSABLE``; ``position`` is opaque to the core and handed back in ``Repair.cut_at``
    to remove this record and everything after it; ``label`` names it in errors
    (``"line 12"``, ``"row seq 40"``) and ``line``, for line-oriented media, is the
    1-based line number a ``CorruptLogError`` reports.

    A store may hand a record over unparsed (``RawRecord.deferred``, or ``of_text`` for
    JSON text): ``value`` then builds it each time it is read. A cold load reads each
    record once and then drops it, so the parsed form of a whole log is never held at
    once (docs/backends.md, "the primitives").
    """

    __slots__ = ("_args", "_build", "_value", "label", "line", "position")

    def __init__(self, value: Any, position: Any, label: str, line: int | None = None) -> None:
        self._value = value
        self._build: Callable[..., Any] | None = None
        self._args: tuple[Any, ...] = ()
        self.position = position
        self.label = label
        self.line = line

    @classmethod
    def deferred(
        cls,
        build: Callable[..., Any],
        args: tuple[Any, ...],
        position: Any,
        label: str,
        line: int | None = None,
    ) -> RawRecord:
        """A record whose value is ``build(*args)`` (the parsed record or ``UNPARSABLE``),
        called when ``value`` is read. *build* must not raise, and gives the same value
        every time."""
        record = object.__new__(cls)  # one per stored record: no __init__ on top
        record._value = UNPARSABLE
        record._build = build
        record._args = args
        record.position = position
        record.label = label
        record.line = line
        return record

    @classmethod
    def of_text(
        cls, text: bytes | memoryview, position: Any, label: str, line: int | None = None
    ) -> RawRecord:
        """A record kept as its JSON *text*, parsed (``parse_json``) when read."""
        return cls.deferred(parse_json, (text,), position, label, line)

    @property
    def value(self) -> Any:
        """The parsed JSON value, or ``UNPARSABLE``."""
        if self._build is None:
            return self._value
        return self._build(*self._args)

    @property
    def text(self) -> bytes | memoryview | None:
        """The JSON text of a record handed over unparsed (``of_text``), else None."""
        return self._args[0] if self._build is parse_json else None

    def __repr__(self) -> str:
        return f"RawRecord(label={self.label!r}, position={self.position!r})"


def parse_json(text: bytes | memoryview) -> Any:
    """Parse one stored record's JSON text at any nesting depth; ``UNPARSABLE`` when it is
    not JSON (an empty line included)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return jsoncodec.loads(bytes(text))  # nesting deeper than orjson reads
    except ValueError:
        return UNPARSABLE


class RawBatch(NamedTuple):
    """One batch of a medium that frames its batches (a store that can tear must).

    It holds ``RawLog.records[start:end]``. ``problem`` says why the batch is not intact
    (its check failed, or it has no commit record: it is incomplete), None when it is.
    ``position`` is where the batch begins in the medium (``Repair.cut_at`` to cut it and
    everything after it); ``first_seq`` and ``end_seq`` are what its commit record
    states (None when it has none); ``label`` and ``line`` name it in errors.
    """

    start: int
    end: int
    position: Any
    label: str
    problem: str | None = None
    first_seq: int | None = None
    end_seq: int | None = None
    line: int | None = None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class RawLog:
    """A stored log as a store read it, before any validation.

    ``header`` is the stored header JSON object (the core checks its version and fields);
    ``revision`` describes exactly the state these records were read from; ``location``
    names the artifact in errors. A medium that can tear frames its batches and lists
    them in ``batches`` (every record belongs to one; a trailing partial record is part of
    the last, incomplete one); a medium that cannot leaves it None. ``torn_at`` is a cut
    point the store itself found (SQLite: a stored next seq that disagrees with the rows),
    or None.
    """

    header: Mapping[str, Any]
    records: Sequence[RawRecord]
    revision: str
    location: str | None = None
    torn_at: Any = None
    batches: Sequence[RawBatch] | None = None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """Records to append to one session's log, as one durable unit.

    ``first_seq`` is the seq of the batch's first event and ``end_seq`` the seq after its
    last one (a packed row stands for several events). ``creates`` marks the first batch
    of a session: the store keeps ``header`` and the records together, atomically.
    ``summary`` is the session's summary once the batch is stored and ``texts`` the
    searchable text of its events (given only to a store that ``indexes_text``); a store
    that keeps them writes them in the same write as the records (docs/listing.md).
    """

    header: SessionHeader
    records: Sequence[Mapping[str, Any]]
    first_seq: int
    end_seq: int
    creates: bool = False
    summary: SessionSummary | None = None
    texts: Sequence[IndexedText] = ()


def join_batches(batches: Sequence[Batch]) -> Batch:
    """Return consecutive *batches* of one log as one batch (records, texts and the last
    summary), creating when the first does: what one write of them all must store."""
    first, last = batches[0], batches[-1]
    return Batch(
        first.header,
        [record for batch in batches for record in batch.records],
        first.first_seq,
        last.end_seq,
        first.creates,
        last.summary,
        [text for batch in batches for text in batch.texts],
    )


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Repair:
    """What a cold load commits to a log it read at ``revision``: cut the log at
    ``cut_at`` (a ``RawRecord.position`` or ``RawLog.torn_at``; None cuts nothing), then
    append ``closers`` (None appends nothing). ``kept_events`` is the seq the cut log ends
    at (an index drops what it holds from there on) and ``summary`` the session's summary
    once the repair is done."""

    header: SessionHeader
    revision: str
    cut_at: Any = None
    closers: Batch | None = None
    kept_events: int | None = None
    summary: SessionSummary | None = None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class RepairReceipt:
    """What a committed repair moved aside: the records it cut (``moved_bytes`` of the
    medium's bytes) went to ``quarantine`` (a path, or another name the store gives),
    or nowhere when it cut nothing."""

    quarantine: str | None = None
    moved_bytes: int = 0


class SearchRow(NamedTuple):
    """An event a store's text index matched: its session and its indexed text."""

    session_id: str
    text: IndexedText


class LogStore(ABC):
    """Storage primitives for session logs; ``SessionPersistence`` owns every policy.

    Implement the seven abstract methods (and ``release``, ``close``, ``locate`` where
    the medium needs them). Calls for one session id never overlap: the policy serializes
    them. A store shared between processes must still check, inside each write, that
    the write applies to the state the caller expects (``write_batch``'s ``first_seq``,
    ``commit_repair``'s ``revision``) and refuse it otherwise; the policy words the error.
    """

    #: The URL scheme this store serves (``"memory"``, ``"jsonl"``, ``"sqlite"``…).
    scheme: str = ""
    #: Whether a crash can leave a partial trailing record (a torn tail) in this medium.
    can_tear: bool = False
    #: Whether a cut can move the records it removes aside (into a quarantine); a store
    #: that cannot refuses every cut that would remove a record.
    quarantines: bool = True
    #: Caps for packed chunk rows (docs/formats.md, "chunk rows"); None means unbounded.
    max_row_members: int | None = None
    max_row_bytes: int | None = None
    #: The largest event and the largest batch this store can write, in bytes as
    #: ``sessionledger.storage._limits.event_bytes`` counts them (the session id counts against
    #: the event's); None states no limit. ``max_batch_bytes`` must hold the largest
    #: event. The policy splits larger batches and refuses larger events (docs/backends.md,
    #: "the primitives").
    max_event_bytes: int | None = None
    max_batch_bytes: int | None = None
    #: Whether the store keeps a search index of ``Batch.texts`` (the policy computes the
    #: texts only for such a store) and answers ``search_text``.
    indexes_text: bool = False
    #: Whether the store keeps an audit log (``append_audit``); without one, ``prune``
    #: refuses to delete anything.
    keeps_audit: bool = False
    #: How often a live feed reads the revision of a store that has no change
    #: notification (``wait_for_change``), in seconds.
    poll_seconds: float = 0.025

    @abstractmethod
    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        """Return the stored log of *session_id* as it is, or None when it has none.

        A store that can seek may start at the record that holds *from_seq* (a packed row
        can begin before it), but must then include the last record when the log ends
        before *from_seq*; others return every record. Never repairs anything.
        """

    @abstractmethod
    async def read_revision(self, session_id: str) -> str | None:
        """Return the current revision of *session_id* without reading its records, or
        None when nothing is stored. Equal to ``RawLog.revision`` of the same state."""

    @abstractmethod
    async def write_batch(self, batch: Batch) -> bool:
        """Append *batch* durably and return True once it is durable.

        Return False, writing nothing, when the stored log does not end at
        ``batch.first_seq`` (another writer appended, or the log was cut or deleted) or,
        for a batch that ``creates`` the log, when a log already exists under the id. A
        write that fails with an exception leaves nothing a retry would duplicate.
        """

    async def write_log(self, batches: Sequence[Batch], check: Callable[[RawLog], None]) -> bool:
        """Store a new log whole: every one of *batches* (the first ``creates`` it), so
        that readers see all of it or none of it, also when the process dies in the middle.
        Return False, writing nothing, when a log exists under the id.

        Before the log becomes visible, a store reads it back as ``read_log`` would and
        calls *check* with it; when *check* raises, nothing is published and the error goes
        to the caller. The default writes the batches as one creating ``write_batch``
        (atomic by that primitive's contract) and can check only after it (the log then
        stays as written); a store that can stage a log overrides it (docs/backends.md,
        "whole logs").
        """
        batch = join_batches(batches)
        if not await self.write_batch(batch):
            return False
        stored = await self.read_log(batch.header.id)
        if stored is None:
            raise SessionNotFoundError(
                "the log just written is gone (deleted meanwhile?)", session_id=batch.header.id
            )
        check(stored)
        return True

    @abstractmethod
    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        """Apply *repair* and return what it moved aside, once it is durable.

        Records a cut removes are never destroyed: they are first copied, durably, to a
        quarantine beside the log, which the receipt names. Return None, changing
        nothing, when the log's revision is no longer ``repair.revision`` (another
        writer changed it since it was read). A crash in the middle may leave the log as
        it was, quarantined but not cut, cut, or cut with part of the closers where the
        medium can tear: each of these is repaired again by the next load.
        """

    @abstractmethod
    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        """Return ``(header JSON, revision)`` of every stored log, reading no records.

        An entry this store cannot read at all may be left out (log why); the policy
        checks and skips headers it cannot accept."""

    @abstractmethod
    async def delete_log(self, session_id: str) -> bool:
        """Remove everything stored for *session_id*; return whether anything was."""

    @abstractmethod
    async def claim(self, session_id: str) -> None:
        """Make this store *session_id*'s one writer (docs/durability.md), or raise
        ``SessionLockedError`` naming the holder where the medium knows it.

        The claim holds until ``release``, ``delete_log`` or ``close``, and ends by itself
        when the process dies (a kernel-released lock, a connection's advisory lock). It
        is needed to write, never to read; claiming a session already held is a no-op.
        """

    async def scrub(self) -> None:
        """After deletions, remove what the medium still holds of deleted logs outside
        their records: free pages, a write-ahead log, an index's old segments
        (docs/durability.md, "deleting leaves nothing"). The policy calls it after
        ``delete`` and once after a prune's deletions; a store whose deletion leaves
        nothing behind keeps the default, which does nothing."""
        return None

    async def release(self, session_id: str) -> None:
        """Let go of what the store holds for one session: its claim, caches."""
        return None

    async def close(self) -> None:
        """Release the store's resources (the policy's ``close``); a second call does
        nothing."""
        return None

    def abandon(self) -> None:
        """Let go of everything at once, without awaiting and writing nothing: the event
        loop that served the store is gone (docs/durability.md, "one event loop per
        ledger"). Claims, descriptors, connections and driver threads are released as far
        as the medium can without that loop; later use may be refused."""
        return None

    def locate(self, header: SessionHeader) -> str | None:
        """Return where this session's artifact lives (a path), if the medium has one."""
        return None

    # -- the live feed (docs/feed.md) --------------------------------------------------------

    async def read_durable(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        """``read_log`` for a live feed, which must yield nothing a power loss could still
        take: a medium whose readers can see written bytes before the writer made them
        durable makes them durable first (the JSONL store syncs the file it read). Still
        never changes what is stored."""
        return await self.read_log(session_id, from_seq)

    def change_mark(self) -> int:
        """Where this store's count of change notifications is now (0 for a store without
        any): a feed takes it before reading a revision and passes it to
        ``wait_for_change``, so a change notified while it read is not missed."""
        return 0

    async def wait_for_change(self, session_id: str | None, timeout: float, mark: int = 0) -> None:
        """Return when the revision of *session_id* (None: of any session, or the set of
        sessions) may have changed since *mark* (``change_mark``), at the latest after
        *timeout* seconds. A store without change notification sleeps ``poll_seconds``;
        one with it (PostgreSQL's LISTEN) returns on the notification. Unlike the other
        primitives, calls may overlap any other call, for the same session too."""
        await asyncio.sleep(min(timeout, self.poll_seconds))

    # -- listing, search, retention (docs/listing.md); defaults for a store without indexes

    async def list_summaries(self) -> list[StoredSummary]:
        """Return every stored log's header, revision and summary, reading no events.

        A summary the store does not hold, or cannot trust (a crash left it stale), is
        None: the policy reads that log and summarizes it for the listing alone. Reading
        never writes (docs/listing.md): only writes and ``rewrite_index`` store a summary.
        The default holds none."""
        return [
            StoredSummary(header, revision, None) for header, revision in await self.list_headers()
        ]

    async def query_sessions(self, query: SessionQuery) -> list[StoredSummary] | None:
        """Answer *query* from an index, as ``sessionledger.storage._listing.select`` would over
        every summary (its page and one more row), or return None to let the policy do
        that over ``list_summaries`` (the default)."""
        return None

    async def search_text(self, query: TextQuery) -> list[SearchRow] | None:
        """Answer *query* from the store's text index: at least the newest ``limit`` rows
        that match, in any order (the policy orders them and keeps ``limit``); or None
        (the default) to let the policy scan every log."""
        return None

    async def rewrite_index(
        self,
        header: SessionHeader,
        revision: str,
        summary: SessionSummary,
        texts: Sequence[IndexedText],
    ) -> bool:
        """Replace the summary and indexed texts of the log at *revision* (``reindex``);
        return False, changing nothing, when the log is no longer at *revision*. The
        default keeps nothing and returns True."""
        return True

    async def stored_bytes(self, session_id: str) -> int | None:
        """Return how many bytes the session's log takes in the medium (what deleting it
        frees), or None when the store cannot tell."""
        return None

    async def stored_bytes_many(self, session_ids: Sequence[str]) -> list[int | None]:
        """Return ``stored_bytes`` of each of *session_ids*, in their order (a prune's plan
        asks for thousands at once). The default asks one at a time; a store with a query
        language answers in a few round trips."""
        return [await self.stored_bytes(session_id) for session_id in session_ids]

    async def append_audit(self, record: Mapping[str, Any]) -> None:
        """Append *record* (a JSON object) to the store's audit log, durably, before
        returning. The audit log is append-only: nothing in the library removes from
        it."""
        raise ConfigError(f"the {self.scheme or type(self).__qualname__} store keeps no audit log")

    async def read_audit(self) -> list[Mapping[str, Any]]:
        """Return the audit log's records, oldest first."""
        return []
