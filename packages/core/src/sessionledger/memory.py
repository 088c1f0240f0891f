"""``MemoryPersistence`` (``memory:``): a real backend that keeps serialized records in RAM.

It stores what a file would hold — the header and each record as JSON bytes — so it
exercises the same read path as the durable backends (parsing, packed rows, torn
records) and the contract kit can tamper with it. Nothing survives the process.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Mapping
from typing import Any, final

from sessionledger import jsoncodec
from sessionledger.errors import CorruptLogError, SeqMismatchError, SessionExistsError
from sessionledger.events import SessionHeader
from sessionledger.persistence import UNPARSABLE, RawLog, RawRecord, SessionPersistence
from sessionledger.registry import EventTypeRegistry

__all__ = ["MemoryPersistence", "MemoryStore", "open_memory_store"]

logger = logging.getLogger("sessionledger")

_incarnations = itertools.count(1)


@dataclasses.dataclass(slots=True)
class _Stored:
    header: bytes
    records: list[bytes]
    next_seq: int
    incarnation: int
    changes: int = 0


#: Storage that several ``MemoryPersistence`` instances can share (id → stored log).
MemoryStore = dict[str, _Stored]


@final
class MemoryPersistence(SessionPersistence):
    """Keep sessions in this process's memory, serialized as JSON records.

    Instances built on the same *store* see the same sessions, the way two processes
    see one database file: that is how tests reopen a memory backend.
    """

    scheme = "memory"
    can_tear = True

    def __init__(
        self, *, event_types: EventTypeRegistry | None = None, store: MemoryStore | None = None
    ) -> None:
        super().__init__(event_types=event_types)
        self._store: MemoryStore = store if store is not None else {}

    @property
    def store(self) -> MemoryStore:
        """The storage this instance reads and writes (pass it to another instance)."""
        return self._store

    async def _read(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        stored = self._store.get(session_id)
        if stored is None:
            return None
        records = []
        for index, line in enumerate(stored.records):
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

    async def _write(
        self,
        header: SessionHeader,
        records: list[dict[str, Any]],
        *,
        next_seq: int,
        materialize: bool,
    ) -> None:
        encoded = [jsoncodec.dumps(record) for record in records]
        added = sum(_member_count(record) for record in records)
        stored = self._store.get(header.id)
        if materialize:
            if stored is not None:
                raise SessionExistsError("session already has a stored log", session_id=header.id)
            self._store[header.id] = _Stored(
                jsoncodec.dumps(header.to_json()), encoded, next_seq + added, next(_incarnations)
            )
            return
        if stored is None or stored.next_seq != next_seq:
            raise SeqMismatchError(
                f"stored log ends before seq {stored.next_seq if stored else 0}, "
                f"batch starts at {next_seq}",
                session_id=header.id,
                seq=next_seq,
            )
        stored.records.extend(encoded)
        stored.next_seq += added
        stored.changes += 1

    async def _truncate(self, session_id: str, position: Any) -> None:
        stored = self._store[session_id]
        del stored.records[position:]
        stored.next_seq = sum(_member_count(jsoncodec.loads(line)) for line in stored.records)
        stored.changes += 1

    async def _stored_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        found = []
        for session_id, stored in self._store.items():
            try:
                found.append((jsoncodec.loads(stored.header), _revision(stored)))
            except ValueError:  # one damaged header must not make the store unlistable
                logger.warning("skipping session %r: its stored header is not JSON", session_id)
        return found

    async def _revision(self, session_id: str) -> str | None:
        stored = self._store.get(session_id)
        return None if stored is None else _revision(stored)

    async def _delete(self, session_id: str) -> bool:
        return self._store.pop(session_id, None) is not None

    # -- tampering, for tests of the read path (the contract kit uses these) ------------

    def raw_records(self, session_id: str) -> list[bytes]:
        """Return the stored records of *session_id* as bytes (a copy)."""
        return list(self._store[session_id].records)

    def replace_raw_records(self, session_id: str, records: list[bytes]) -> None:
        """Overwrite the stored records of *session_id* with *records*, as a crash or a
        damaged medium would. The next seq is recomputed from what still parses."""
        stored = self._store[session_id]
        stored.records = list(records)
        count = 0
        for line in records:
            try:
                count += _member_count(jsoncodec.loads(line))
            except ValueError:
                break
        stored.next_seq = count
        stored.changes += 1

    def replace_raw_header(self, session_id: str, header: bytes) -> None:
        """Overwrite the stored header bytes of *session_id*."""
        stored = self._store[session_id]
        stored.header = header
        stored.changes += 1


def _revision(stored: _Stored) -> str:
    return f"{stored.incarnation}.{stored.changes}"


def _member_count(record: Any) -> int:
    if isinstance(record, Mapping) and "seq0" in record:
        data = record.get("data")
        if isinstance(data, Mapping):
            members = data.get("texts", data.get("args"))
            if isinstance(members, list | tuple):
                return len(members)
    return 1


#: Named stores of this process: ``memory:NAME`` URLs share one (like SQLite's shared
#: in-memory databases), while a bare ``memory:`` is private to its backend.
_named_stores: dict[str, MemoryStore] = {}


def open_memory_store(url: str, *, event_types: EventTypeRegistry) -> MemoryPersistence:
    """Open ``memory:`` (a private store) or ``memory:NAME`` (shared within the process)."""
    name = url.partition(":")[2]
    if not name:
        return MemoryPersistence(event_types=event_types)
    return MemoryPersistence(event_types=event_types, store=_named_stores.setdefault(name, {}))
