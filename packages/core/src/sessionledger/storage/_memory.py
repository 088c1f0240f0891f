"""The ``memory:`` backend: a real store that keeps serialized records in RAM.

It stores what a file would hold — the header and each record as JSON bytes — so it
exercises the same read path as the durable backends (parsing, packed rows, torn
records) and the contract kit can tamper with it. Nothing survives the process. Like
every backend it registers its URL scheme through the ``ledger_backends`` hook.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import itertools
import logging
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, final

from sessionledger._errors import CorruptLogError, SessionLockedError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import SessionHeader
from sessionledger.model._registry import EventTypeRegistry
from sessionledger.plugins._hookspecs import hookimpl
from sessionledger.storage._limits import PORTABLE_MAX_EVENT_BYTES
from sessionledger.storage._listing import StoredSummary
from sessionledger.storage._logstore import (
    UNPARSABLE,
    Batch,
    LogStore,
    RawLog,
    RawRecord,
    Repair,
    RepairReceipt,
    join_batches,
)
from sessionledger.storage._persistence import BackendFactory, SessionPersistence
from sessionledger.storage._rows import member_count
from sessionledger.views._searching import IndexedText
from sessionledger.views._summaries import SessionSummary

logger = logging.getLogger("sessionledger")

_incarnations = itertools.count(1)


@dataclasses.dataclass(slots=True)
class _Stored:
    header: bytes
    records: list[bytes]
    ends: list[int]  # the seq after each record's last event
    incarnation: int
    changes: int = 0
    quarantined: list[bytes] = dataclasses.field(default_factory=list)  # records cut away
    summary: SessionSummary | None = None  # None after tampering: computed when listed
    seekable: bool = True  # False after tampering: the ends may be in any order

    @property
    def next_seq(self) -> int:
        return self.ends[-1] if self.ends else 0


#: Storage that several memory backends can share (id → stored log).
MemoryStore = dict[str, _Stored]


@final
class MemoryLogStore(LogStore):
    """The storage primitives of the ``memory:`` backend, over a ``MemoryStore`` dict."""

    scheme = "memory"
    can_tear = False  # a batch is added to the list at once
    # No medium limit: the one every bundled backend can hold, so a session kept here can
    # be copied to any of them (docs/backends.md, "the primitives").
    max_event_bytes = PORTABLE_MAX_EVENT_BYTES
    max_batch_bytes = PORTABLE_MAX_EVENT_BYTES
    keeps_audit = True
    poll_seconds = 0.005  # a feed's poll is a dict lookup in this process

    def __init__(self, storage: MemoryStore | None = None) -> None:
        self.storage: MemoryStore = storage if storage is not None else {}
        self._claimed: set[str] = set()

    async def claim(self, session_id: str) -> None:
        holders = _holders(self.storage)
        held = holders.get(session_id)
        holder = None if held is None else held()
        if holder is not None and holder is not self:
            raise SessionLockedError(
                f"another memory store object of this process (pid {os.getpid()}) holds the "
                "session; release it there first",
                session_id=session_id,
            )
        holders[session_id] = weakref.ref(self)
        self._claimed.add(session_id)

    async def release(self, session_id: str) -> None:
        self._let_go(session_id)

    def _let_go(self, session_id: str) -> None:
        self._claimed.discard(session_id)
        holders = _holders(self.storage)
        held = holders.get(session_id)
        if held is not None and held() in (self, None):
            del holders[session_id]
        if not holders:
            _claims.pop(id(self.storage), None)

    async def close(self) -> None:
        self.abandon()

    def abandon(self) -> None:
        for session_id in list(self._claimed):
            self._let_go(session_id)

    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        stored = self.storage.get(session_id)
        if stored is None:
            return None
        # Seek as a database does: from the record holding from_seq, or the last record.
        start = bisect.bisect_right(stored.ends, from_seq) if from_seq and stored.seekable else 0
        return _raw_log(session_id, stored, min(start, len(stored.records) - 1))

    async def read_revision(self, session_id: str) -> str | None:
        stored = self.storage.get(session_id)
        return None if stored is None else _revision(stored)

    async def write_batch(self, batch: Batch) -> bool:
        stored = self.storage.get(batch.header.id)
        if batch.creates:
            if stored is not None:
                return False
            self.storage[batch.header.id] = _new_log(batch)
            return True
        if stored is None or stored.next_seq != batch.first_seq:
            return False
        stored.records.extend(jsoncodec.dumps(record) for record in batch.records)
        stored.ends.extend(_ends(batch))
        stored.changes += 1
        stored.summary = batch.summary
        return True

    async def write_log(self, batches: Sequence[Batch], check: Callable[[RawLog], None]) -> bool:
        """Build the log aside, check it, then add it to the store in one step."""
        batch = join_batches(batches)
        if batch.header.id in self.storage:
            return False
        staged = _new_log(batch)
        check(_raw_log(batch.header.id, staged))  # synchronous: nothing can come between
        self.storage[batch.header.id] = staged
        return True

    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        stored = self.storage.get(repair.header.id)
        if stored is None or _revision(stored) != repair.revision:
            return None
        closers = repair.closers
        ends = stored.ends if repair.cut_at is None else stored.ends[: repair.cut_at]
        if closers is not None and (ends[-1] if ends else 0) != closers.first_seq:
            return None
        receipt = RepairReceipt()
        if repair.cut_at is not None:
            cut = stored.records[repair.cut_at :]
            stored.quarantined.extend(cut)
            receipt = RepairReceipt(
                f"memory:{repair.header.id}#quarantine", sum(len(line) for line in cut)
            )
            del stored.records[repair.cut_at :]
            del stored.ends[repair.cut_at :]
            stored.changes += 1
        if closers is not None:
            stored.records.extend(jsoncodec.dumps(record) for record in closers.records)
            stored.ends.extend(_ends(closers))
            stored.changes += 1
        stored.summary = repair.summary
        return receipt

    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        found = []
        for session_id, stored in self.storage.items():
            try:
                found.append((jsoncodec.loads(stored.header), _revision(stored)))
            except ValueError:  # one damaged header must not make the store unlistable
                logger.warning("skipping session %r: its stored header is not JSON", session_id)
        return found

    async def delete_log(self, session_id: str) -> bool:
        return self.storage.pop(session_id, None) is not None

    async def list_summaries(self) -> list[StoredSummary]:
        found = []
        for header, revision in await self.list_headers():
            stored = self.storage.get(header["id"]) if type(header) is dict else None
            summary = None if stored is None else stored.summary
            found.append(StoredSummary(header, revision, summary))
        return found

    async def rewrite_index(
        self,
        header: SessionHeader,
        revision: str,
        summary: SessionSummary,
        texts: Sequence[IndexedText],
    ) -> bool:
        stored = self.storage.get(header.id)
        if stored is None or _revision(stored) != revision:
            return False
        stored.summary = summary
        return True

    async def stored_bytes(self, session_id: str) -> int | None:
        stored = self.storage.get(session_id)
        if stored is None:
            return None
        return len(stored.header) + sum(len(line) for line in stored.records)

    async def append_audit(self, record: Mapping[str, Any]) -> None:
        _audit_log(self.storage).append(jsoncodec.dumps(record))

    async def read_audit(self) -> list[Mapping[str, Any]]:
        return [jsoncodec.loads(line) for line in _audit_log(self.storage)]

    # -- tampering, for tests of the read path (the contract kit uses these) ------------

    def raw_records(self, session_id: str) -> list[bytes]:
        """Return the stored records of *session_id* as bytes (a copy)."""
        return list(self.storage[session_id].records)

    def replace_raw_records(self, session_id: str, records: list[bytes]) -> None:
        """Overwrite the stored records of *session_id* with *records*, as a crash or a
        damaged medium would. Record ends are recomputed from what still parses."""
        stored = self.storage[session_id]
        stored.records = list(records)
        stored.summary = None
        stored.seekable = False
        stored.ends = []
        end = 0
        for line in records:
            # An unreadable record ends nothing; the read path reports it.
            with contextlib.suppress(ValueError, KeyError, TypeError):
                end = _record_end(jsoncodec.loads(line))
            stored.ends.append(end)
        stored.changes += 1

    def replace_raw_header(self, session_id: str, header: bytes) -> None:
        """Overwrite the stored header bytes of *session_id*."""
        stored = self.storage[session_id]
        stored.header = header
        stored.changes += 1

    def quarantined(self, session_id: str) -> list[bytes]:
        """Return the records repairs of *session_id* moved aside (a copy)."""
        return list(self.storage[session_id].quarantined)


#: Who holds each claimed session of a storage dict: storage id -> (the storage, so its id
#: stays its own; session id -> the claiming store, weakly: a store that is gone, like a
#: dead process, holds nothing).
_claims: dict[int, tuple[MemoryStore, dict[str, weakref.ref[MemoryLogStore]]]] = {}


#: The audit log of each storage dict (storage id -> (the storage, its records)).
_audits: dict[int, tuple[MemoryStore, list[bytes]]] = {}


def _audit_log(storage: MemoryStore) -> list[bytes]:
    entry = _audits.get(id(storage))
    if entry is None or entry[0] is not storage:
        entry = _audits[id(storage)] = (storage, [])
    return entry[1]


def _holders(storage: MemoryStore) -> dict[str, weakref.ref[MemoryLogStore]]:
    entry = _claims.get(id(storage))
    if entry is None or entry[0] is not storage:
        entry = _claims[id(storage)] = (storage, {})
    return entry[1]


def _new_log(batch: Batch) -> _Stored:
    """The stored form of a new log holding the header and the records of *batch*."""
    return _Stored(
        jsoncodec.dumps(batch.header.to_json()),
        [jsoncodec.dumps(record) for record in batch.records],
        _ends(batch),
        next(_incarnations),
        summary=batch.summary,
    )


def _raw_log(session_id: str, stored: _Stored, start: int = 0) -> RawLog:
    """Parse a stored log's bytes back (from record *start* on), as a file's reader would."""
    records = []
    for index, line in enumerate(stored.records[max(start, 0) :], max(start, 0)):
        try:
            value: Any = jsoncodec.loads(line)
        except ValueError:
            value = UNPARSABLE
        records.append(RawRecord(value, index, f"record {index}"))
    try:
        header = jsoncodec.loads(stored.header)
    except ValueError as error:
        raise CorruptLogError(
            f"the stored header is not valid JSON: {error}", session_id=session_id
        ) from error
    return RawLog(header, records, _revision(stored))


def _revision(stored: _Stored) -> str:
    return f"{stored.incarnation}.{stored.changes}"


def _record_end(record: Mapping[str, Any]) -> int:
    """The seq after a record's last event (an envelope or a packed row)."""
    first = record["seq0"] if "seq0" in record else record["seq"]
    return int(first) + member_count(record)


def _ends(batch: Batch) -> list[int]:
    ends = []
    end = batch.first_seq
    for record in batch.records:
        end += member_count(record)
        ends.append(end)
    return ends


@final
class MemoryPersistence(SessionPersistence):
    """Keep sessions in this process's memory, serialized as JSON records.

    Backends built on the same *store* see the same sessions, the way two processes
    see one database file: that is how tests reopen a memory backend.
    """

    def __init__(
        self, *, event_types: EventTypeRegistry | None = None, store: MemoryStore | None = None
    ) -> None:
        self._memory = MemoryLogStore(store)
        super().__init__(self._memory, event_types=event_types)

    @property
    def log_store(self) -> MemoryLogStore:
        """The memory storage primitives this backend drives."""
        return self._memory

    @property
    def store(self) -> MemoryStore:
        """The sessions this backend reads and writes (pass it to another backend)."""
        return self._memory.storage

    def raw_records(self, session_id: str) -> list[bytes]:
        """Return the stored records of *session_id* as bytes (a copy)."""
        return self._memory.raw_records(session_id)

    def replace_raw_records(self, session_id: str, records: list[bytes]) -> None:
        """Overwrite the stored records of *session_id*, as a damaged medium would."""
        self._memory.replace_raw_records(session_id, records)

    def replace_raw_header(self, session_id: str, header: bytes) -> None:
        """Overwrite the stored header bytes of *session_id*."""
        self._memory.replace_raw_header(session_id, header)

    def quarantined(self, session_id: str) -> list[bytes]:
        """Return the records repairs of *session_id* moved aside (a copy)."""
        return self._memory.quarantined(session_id)


#: Named stores of this process: ``memory:NAME`` URLs share one (like SQLite's shared
#: in-memory databases), while a bare ``memory:`` is private to its backend.
_named_stores: dict[str, MemoryStore] = {}


def open_memory_store(url: str, *, event_types: EventTypeRegistry) -> MemoryPersistence:
    """Open ``memory:`` (a private store) or ``memory:NAME`` (shared within the process)."""
    name = url.partition(":")[2]
    if not name:
        return MemoryPersistence(event_types=event_types)
    return MemoryPersistence(event_types=event_types, store=_named_stores.setdefault(name, {}))


@hookimpl
def ledger_backends() -> Mapping[str, BackendFactory]:
    """Serve ``memory:`` URLs."""
    return {"memory": open_memory_store}
