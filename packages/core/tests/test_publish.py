"""``LogStore.write_log``'s default, as a store that implements only the other primitives
gets it: the whole log as one creating batch, read back afterwards (docs/backends.md,
"whole logs"). The contract's publishing clauses run on such a store, and a store that
changes what it writes is caught, the log left as it is."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from sessionledger._errors import ReadBackMismatchError
from sessionledger.storage._limits import event_bytes
from sessionledger.storage._logstore import Batch, LogStore, RawLog, Repair, RepairReceipt
from sessionledger.storage._memory import MemoryLogStore, MemoryStore
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.contract.base import header_for, make_log, same_events
from sessionledger.testing.contract.publishing import PublishingClauses


class PlainLogStore(LogStore):
    """A third-party store: the abstract primitives only (over a memory store)."""

    scheme = "plain"

    def __init__(self, storage: MemoryStore) -> None:
        self.inner = MemoryLogStore(storage)

    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        return await self.inner.read_log(session_id, from_seq)

    async def read_revision(self, session_id: str) -> str | None:
        return await self.inner.read_revision(session_id)

    async def write_batch(self, batch: Batch) -> bool:
        return await self.inner.write_batch(batch)

    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        return await self.inner.commit_repair(repair)

    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        return await self.inner.list_headers()

    async def delete_log(self, session_id: str) -> bool:
        return await self.inner.delete_log(session_id)

    async def claim(self, session_id: str) -> None:
        await self.inner.claim(session_id)

    async def release(self, session_id: str) -> None:
        await self.inner.release(session_id)

    async def close(self) -> None:
        await self.inner.close()


class DamagingLogStore(PlainLogStore):
    """Stores every batch's last record with other data, as a broken medium might."""

    async def write_batch(self, batch: Batch) -> bool:
        changed = [*batch.records[:-1], {**batch.records[-1], "data": {"changed": True}}]
        return await super().write_batch(
            Batch(batch.header, changed, batch.first_seq, batch.end_seq, batch.creates)
        )


class TestTheDefaultWriteLog(PublishingClauses):
    @pytest.fixture
    def ledger_backend_factory(self) -> Callable[..., SessionPersistence]:
        storage: MemoryStore = {}
        return lambda **options: SessionPersistence(PlainLogStore(storage), **options)


async def test_a_store_that_changes_what_it_writes_is_caught_and_its_log_left_whole() -> None:
    storage: MemoryStore = {}
    backend = SessionPersistence(DamagingLogStore(storage))
    events = make_log(turns=1)
    with pytest.raises(ReadBackMismatchError) as raised:
        await backend.publish(header_for("damaged"), events)
    last = events[-1].seq
    assert raised.value.difference == f"event seq {last} differs"
    assert raised.value.seq == last
    assert raised.value.published  # checked after it was written: left for the user to see
    stored = await SessionPersistence(PlainLogStore(storage)).read_from("damaged", 0)
    assert same_events(events[:-1], stored[:-1])
    await backend.close()


class CountingLogStore(MemoryLogStore):
    """A memory store with a small batch limit that keeps every batch it is handed."""

    def __init__(self, storage: MemoryStore, budget: int) -> None:
        super().__init__(storage)
        self.max_batch_bytes = budget
        self.written: list[list[Batch]] = []

    async def write_log(self, batches: Sequence[Batch], check: Callable[[RawLog], None]) -> bool:
        self.written.append(list(batches))
        return await super().write_log(batches, check)


async def test_a_published_log_is_cut_into_batches_that_fit_the_store() -> None:
    events = make_log(turns=6)
    sizes = [event_bytes(event) for event in events]
    budget = 3 * max(sizes)
    store = CountingLogStore({}, budget)
    backend = SessionPersistence(store)
    await backend.publish(header_for("cut"), events)
    [batches] = store.written
    assert len(batches) > 1
    assert [batch.first_seq for batch in batches[1:]] == [batch.end_seq for batch in batches[:-1]]
    assert batches[-1].end_seq == len(events)
    for batch in batches:
        assert sum(sizes[batch.first_seq : batch.end_seq]) <= budget
    assert same_events(events, await backend.read_from("cut", 0))
    await backend.close()
