"""The contract's reading clauses: read_from, list, revisions, delete, values."""

from __future__ import annotations

from typing import Any

import pytest

from sessionledger._errors import FormatUnsupportedError, SessionNotFoundError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import SessionHeader
from sessionledger.model._registry import EventType, EventTypeRegistry
from sessionledger.model._session import Session
from sessionledger.testing.builders import closed_turn
from sessionledger.testing.contract.base import (
    BackendFactory,
    ContractBase,
    counting_clock,
    first_turn_length,
    header_for,
    make_log,
    revision_of,
    same_events,
    store_log,
)

__all__ = ["ReadingClauses"]


class ReadingClauses(ContractBase):
    """Reading what was stored, exactly; listing, deleting, releasing and closing."""

    # -- read_from, list, delete, locate, close -----------------------------------------

    @pytest.mark.asyncio
    async def test_read_from_returns_the_stored_suffix(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=2)
        backend = backend_factory()
        await store_log(backend, "tail", events)
        for start in (0, 1, 5, len(events) - 1):
            assert same_events(events[start:], await backend.read_from("tail", start))
        assert await backend.read_from("tail", len(events)) == []
        assert await backend.read_from("tail", len(events) + 50) == []
        with pytest.raises(SessionNotFoundError):
            await backend.read_from("missing", 0)
        with pytest.raises(ValueError, match="from_seq"):
            await backend.read_from("tail", -1)
        await backend.close()

    @pytest.mark.asyncio
    async def test_read_from_inside_a_packed_run(self, backend_factory: BackendFactory) -> None:
        session = Session.create("runs", clock=counting_clock())
        closed_turn(session, 1, answer="x" * 400)
        events = list(session.events)
        backend = backend_factory()
        await store_log(backend, "runs", events)
        chunk_seqs = [event.seq for event in events if event.type == "assistant/chunk"]
        middle = chunk_seqs[len(chunk_seqs) // 2]
        assert same_events(events[middle:], await backend.read_from("runs", middle))
        await backend.close()

    @pytest.mark.asyncio
    async def test_list_orders_by_created_at_then_id_and_reads_headers_only(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        for session_id, created in (("b", 5), ("a", 5), ("c", 1)):
            await backend.create(SessionHeader(id=session_id, created_at=created))
            await backend.append(session_id, make_log()[:1])
        assert [header.id for header in await backend.list()] == ["c", "a", "b"]
        infos = await backend.list_snapshots()
        assert [info.header.id for info in infos] == ["c", "a", "b"]
        assert all(isinstance(info.revision, str) and info.revision for info in infos)
        await backend.close()

    @pytest.mark.asyncio
    async def test_revision_changes_with_every_append_and_survives_reopen(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log()
        backend = backend_factory()
        await store_log(backend, "rev", events[:3])
        seen = {await revision_of(backend, "rev")}
        for seq in range(3, 6):
            await backend.append("rev", [events[seq]])
            seen.add(await revision_of(backend, "rev"))
        assert len(seen) == 4
        last = await revision_of(backend, "rev")
        await backend.close()
        reopened = backend_factory()
        assert await revision_of(reopened, "rev") == last
        await reopened.close()

    @pytest.mark.asyncio
    async def test_delete_removes_a_session_and_frees_its_id(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await store_log(backend, "gone", make_log())
        before = await revision_of(backend, "gone")
        await backend.delete("gone")
        assert await backend.list() == []
        with pytest.raises(SessionNotFoundError):
            await backend.load("gone")
        with pytest.raises(SessionNotFoundError):
            await backend.delete("gone")
        again = make_log(seed="again")
        await store_log(backend, "gone", again)
        assert same_events(again, (await backend.load("gone")).events)
        assert await revision_of(backend, "gone") != before
        await backend.close()

    @pytest.mark.asyncio
    async def test_release_forgets_a_session_and_another_writer_may_continue(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=2)
        split = first_turn_length(events)
        backend = backend_factory()
        await store_log(backend, "handed-over", events[:split])
        await backend.release("handed-over")
        await backend.release("never-seen")  # nothing to forget: not an error
        other = backend_factory()
        await other.append("handed-over", events[split:])
        assert same_events(events, (await backend.inspect("handed-over")).events)

    @pytest.mark.asyncio
    async def test_locate_and_close(self, backend_factory: BackendFactory) -> None:
        backend = backend_factory()
        location = backend.locate(header_for("where"))
        assert location is None or isinstance(location, str)
        await backend.close()
        await backend.close()

    # -- values --------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_packed_chunk_runs_read_back_exactly(
        self, backend_factory: BackendFactory
    ) -> None:
        session = Session.create("packed", clock=counting_clock())
        session.append("turn/start", {"turn": 1})
        session.append("step/start", {"turn": 1, "step": 1})
        for kind, count in (("text-delta", 5), ("reasoning-delta", 2), ("text-delta", 4)):
            for index in range(count):
                session.append(
                    "assistant/chunk",
                    {
                        "turn": 1,
                        "step": 1,
                        "chunk": {"type": kind, "index": 0, "text": f"{index} é"},
                    },
                )
        for index in range(4):
            delta = {"type": "tool-call-delta", "index": 1, "id": "c", "argumentsDelta": "{"}
            if index == 0:
                delta["name"] = "read"
            session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": delta})
        session.append("step/end", {"turn": 1, "step": 1})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        backend = backend_factory()
        await store_log(backend, "packed", list(session.events))
        assert same_events(list(session.events), (await backend.load("packed")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_deeply_nested_data_round_trips(self, backend_factory: BackendFactory) -> None:
        deep: Any = "leaf"
        for _ in range(10_000):
            deep = {"child": [deep]}
        session = Session.create("deep", clock=counting_clock())
        session.append("x/deep", deep, ignorable=True)
        backend = backend_factory()
        await store_log(backend, "deep", list(session.events))
        # Compare as bytes: == on 10,000 nested dicts would exhaust the C stack.
        loaded = (await backend.load("deep")).events[0]
        assert jsoncodec.dumps(loaded.data) == jsoncodec.dumps(deep)
        await backend.close()

    @pytest.mark.asyncio
    async def test_unknown_event_types_are_read_but_refused_going_live(
        self, backend_factory: BackendFactory
    ) -> None:
        wide = EventTypeRegistry.with_core()
        wide.register(EventType("x/custom"), plugin="test")
        writer = backend_factory(event_types=wide)
        session = Session.create("unknown", clock=counting_clock())
        session.append("x/custom", {"value": 1})
        session.append("turn/start", {"turn": 1})
        await store_log(writer, "unknown", list(session.events))
        kept = Session.create("kept", clock=counting_clock())
        kept.append("x/other", {"value": 2}, ignorable=True)
        await store_log(writer, "kept", list(kept.events))
        await writer.close()
        reader = backend_factory(event_types=EventTypeRegistry.with_core())
        revision = await reader.revision("unknown")
        # Reading shows the unknown event as stored ...
        assert same_events(list(session.events), await reader.read_from("unknown", 0))
        viewed = await reader.inspect("unknown")
        assert same_events(list(session.events), list(viewed.events[:2]))
        assert [event.type for event in viewed.events[2:]] == ["turn/end"]  # in memory
        assert "unknown" in [header.id for header in await reader.list()]
        # ... going live refuses it, naming type and seq, and writes nothing.
        with pytest.raises(FormatUnsupportedError) as refused:
            await reader.load("unknown")
        assert refused.value.code == "UNKNOWN_EVENT_TYPE"
        assert refused.value.seq == 0
        assert "'x/custom'" in str(refused.value)
        assert await reader.revision("unknown") == revision
        stored = await reader.load("kept")
        assert stored.events[0].type == "x/other"
        assert stored.events[0].ignorable is True
        await reader.close()
