"""The contract's writing clauses: create, append, sequencing, stale writers."""

from __future__ import annotations

import asyncio

import pytest

from sessionledger._errors import (
    JsonValueError,
    SeqMismatchError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
)
from sessionledger.storage._chunks import pack_chunk_runs
from sessionledger.storage._logstore import Batch
from sessionledger.testing.contract.base import (
    BackendFactory,
    ContractBase,
    first_turn_length,
    header_for,
    make_log,
    revision_of,
    same_events,
    second_writer,
    store_log,
)

__all__ = ["WritingClauses"]


class WritingClauses(ContractBase):
    """Creating and appending: what is stored, and what is refused with nothing written."""

    # -- create / append / load ---------------------------------------------------------

    @pytest.mark.asyncio
    async def test_round_trip_keeps_every_event_and_the_header(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        events = make_log(turns=2)
        await store_log(backend, "round", events)
        stored = await backend.load("round")
        assert stored.header == header_for("round")
        assert same_events(events, stored.events)
        await backend.close()
        reopened = backend_factory()
        assert same_events(events, (await reopened.load("round")).events)
        await reopened.close()

    @pytest.mark.asyncio
    async def test_create_writes_nothing_until_the_first_append(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await backend.create(header_for("lazy"))
        assert [header.id for header in await backend.list()] == []
        with pytest.raises(SessionNotFoundError):
            await backend.load("lazy")
        await backend.append("lazy", [])
        assert await backend.list() == []
        await backend.append("lazy", make_log()[:1])
        assert [header.id for header in await backend.list()] == ["lazy"]
        await backend.close()

    @pytest.mark.asyncio
    async def test_create_refuses_a_registered_or_stored_id(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await backend.create(header_for("twice"))
        with pytest.raises(SessionExistsError):
            await backend.create(header_for("twice"))
        await backend.append("twice", make_log()[:2])
        other = backend_factory()
        with pytest.raises(SessionExistsError):
            await other.create(header_for("twice"))
        await backend.close()
        await other.close()

    @pytest.mark.asyncio
    async def test_append_accepts_envelope_dicts(self, backend_factory: BackendFactory) -> None:
        backend = backend_factory()
        events = make_log()
        await backend.create(header_for("dicts"))
        await backend.append("dicts", [event.to_json() for event in events])
        assert same_events(events, (await backend.load("dicts")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_append_rejects_a_seq_that_does_not_continue_and_writes_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        events = make_log()
        await store_log(backend, "gap", events[:3])
        revision = await revision_of(backend, "gap")
        with pytest.raises(SeqMismatchError):
            await backend.append("gap", events[4:6])
        with pytest.raises(SeqMismatchError):
            await backend.append("gap", [events[3], events[5]])
        with pytest.raises(SeqMismatchError):
            await backend.append("gap", events[:2])
        assert await revision_of(backend, "gap") == revision
        await backend.append("gap", events[3:])
        assert same_events(events, (await backend.load("gap")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_append_rejects_non_json_data_and_writes_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        events = make_log()
        await store_log(backend, "nan", events)
        revision = await revision_of(backend, "nan")
        bad = {"type": "x/note", "seq": len(events), "time": 5, "data": {"value": float("nan")}}
        with pytest.raises(JsonValueError):
            await backend.append("nan", [bad])
        assert await revision_of(backend, "nan") == revision
        assert same_events(events, (await backend.load("nan")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_reopen_and_continue(self, backend_factory: BackendFactory) -> None:
        events = make_log(turns=2)
        split = first_turn_length(events)
        first = backend_factory()
        await store_log(first, "continue", events[:split])
        await first.close()
        second = backend_factory()
        await second.append("continue", events[split:])
        assert same_events(events, (await second.load("continue")).events)
        await second.close()

    @pytest.mark.asyncio
    async def test_stale_writer_gets_a_typed_error_and_the_winner_is_untouched(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=2)
        split = first_turn_length(events)
        winner = backend_factory()
        await store_log(winner, "race", events[:split])
        stale = second_writer(backend_factory, winner)
        await stale.inspect("race")
        await winner.append("race", events[split : split + 3])
        # Ownership refuses the second writer first (docs/durability.md) ...
        with pytest.raises(SessionLockedError):
            await stale.append("race", events[split : split + 2])
        # ... and a write that gets past it anyway (a claim lost with its connection, a
        # bug) is refused inside the store itself, writing nothing: the last line of defence.
        header = (await stale.inspect("race")).header
        records = pack_chunk_runs(
            events[split : split + 2],
            stale.log_store.max_row_members,
            stale.log_store.max_row_bytes,
        )
        late = Batch(header, records, first_seq=split, end_seq=split + 2)
        try:
            landed = await stale.log_store.write_batch(late)
        except SessionLockedError:  # a store whose writes check the claim themselves
            landed = False
        assert landed is False
        await winner.append("race", events[split + 3 :])
        assert same_events(events, (await winner.load("race")).events)
        await winner.close()
        await stale.close()

    @pytest.mark.asyncio
    async def test_concurrent_sessions_in_one_process(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        logs = {f"c{index}": make_log(turns=2, seed=f"c{index}") for index in range(6)}

        async def write(session_id: str) -> None:
            events = logs[session_id]
            await backend.create(header_for(session_id))
            for start in range(0, len(events), 5):
                await backend.append(session_id, events[start : start + 5])

        await asyncio.gather(*(write(session_id) for session_id in logs))
        for session_id, events in logs.items():
            assert same_events(events, (await backend.load(session_id)).events)
        await backend.close()
