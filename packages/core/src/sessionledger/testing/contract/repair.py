"""The contract's repair clauses: closers, torn tails, corruption, versions."""

from __future__ import annotations

from typing import Any

import pytest

from sessionledger._errors import (
    ConfigError,
    CorruptLogError,
    FormatUnsupportedError,
    SeqMismatchError,
)
from sessionledger.model._events import SessionEvent
from sessionledger.model._session import Session
from sessionledger.storage._chunks import pack_chunk_runs
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.testing.contract.base import (
    BackendFactory,
    ContractBase,
    Tamper,
    counting_clock,
    first_turn_length,
    make_log,
    revision_of,
    same_events,
    store_log,
)

__all__ = ["RepairClauses"]


class RepairClauses(ContractBase):
    """Cold loads: what repair commits, what inspect shows, and what damage refuses."""

    # -- repair -------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_load_closes_an_interrupted_turn_durably_and_only_once(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(open_call=True)
        backend = backend_factory()
        await store_log(backend, "open", events)
        before = await revision_of(backend, "open")
        loaded = await backend.load("open")
        closers = loaded.events[len(events) :]
        assert [event.type for event in closers] == ["tool/result", "step/end", "turn/end"]
        result = closers[0]
        assert result.data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        assert result.source_event_seqs == (events[-1].seq,)
        assert closers[-1].data["reason"] == {"kind": "interrupted"}
        assert same_events(events, loaded.events[: len(events)])
        after = await revision_of(backend, "open")
        assert after != before
        await backend.release("open")  # another writer loads it next: nothing more to close
        reopened = backend_factory()
        again = await reopened.load("open")
        assert same_events(loaded.events, again.events)
        assert await revision_of(reopened, "open") == after
        await backend.close()
        await reopened.close()

    @pytest.mark.asyncio
    async def test_a_call_never_recorded_is_closed_as_not_started(
        self, backend_factory: BackendFactory
    ) -> None:
        session = Session.create("ns", clock=counting_clock())
        closed_turn(session, 1)
        open_turn_with_pending_call(session, 2, call_recorded=False)
        backend = backend_factory()
        await store_log(backend, "ns", list(session.events))
        loaded = await backend.load("ns")
        result = loaded.events[session.seq]
        assert result.type == "tool/result"
        assert result.data["error"]["code"] == "TOOL_NOT_STARTED"
        assert result.source_event_seqs is None
        await backend.close()

    @pytest.mark.asyncio
    async def test_a_paused_call_is_left_open_without_a_write(
        self, backend_factory: BackendFactory
    ) -> None:
        # docs/reading.md, "Pausing is not crashing": the load invents no outcome and
        # writes nothing; the turn stays open until the real result answers the call.
        session = Session.create("paused", clock=counting_clock())
        closed_turn(session, 1)
        open_turn_with_pending_call(session, 2, call_id="ask")
        pause = {"turn": 2, "step": 1, "callId": "ask", "reason": {"kind": "approval"}}
        session.append("tool/paused", pause)
        backend = backend_factory()
        await store_log(backend, "paused", list(session.events))
        before = await revision_of(backend, "paused")
        assert same_events(session.events, (await backend.inspect("paused")).events)
        loaded = await backend.load("paused")
        assert same_events(session.events, loaded.events)
        assert await revision_of(backend, "paused") == before
        await backend.close()

    @pytest.mark.asyncio
    async def test_inspect_repairs_in_memory_and_never_writes(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(open_call=True)
        backend = backend_factory()
        await store_log(backend, "look", events)
        before = await revision_of(backend, "look")
        view = await backend.inspect("look")
        assert len(view.events) == len(events) + 3
        assert await revision_of(backend, "look") == before
        assert view.revision == before
        assert same_events(events, await backend.read_from("look", 0))
        loaded = await backend.load("look")
        assert same_events(view.events, loaded.events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_a_balanced_log_loads_without_any_write(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await store_log(backend, "calm", make_log())
        before = await revision_of(backend, "calm")
        await backend.load("calm")
        assert await revision_of(backend, "calm") == before
        await backend.close()

    @pytest.mark.asyncio
    async def test_append_to_an_interrupted_log_commits_the_repair_first(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(open_call=True)
        first = backend_factory()
        await store_log(first, "adopt", events)
        await first.close()
        second = backend_factory()
        late = SessionEvent("x/note", len(events), 1, None)
        with pytest.raises(SeqMismatchError):
            await second.append("adopt", [late])
        repaired = len(events) + 3
        await second.append("adopt", [SessionEvent("session/end-seed", repaired, 1, {})])
        stored = await second.load("adopt")
        assert len(stored.events) == repaired + 1
        await second.close()

    # -- damage (needs a Tamper) ----------------------------------------------------------

    @pytest.mark.asyncio
    async def test_a_torn_tail_is_dropped_by_inspect_and_moved_aside_by_load(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = make_log(open_call=True)
        backend = backend_factory()
        await store_log(backend, "torn", events)
        await ledger_backend_tamper.tear_tail(backend, "torn")
        before = await revision_of(backend, "torn")
        if not backend.log_store.can_tear:
            # A medium that cannot tear has no torn tail: whatever does not read is damage.
            await _refused_untouched(backend, "torn", before)
            await backend.close()
            return
        view = await backend.inspect("torn")
        assert same_events(events, view.events[: len(events)])
        assert await revision_of(backend, "torn") == before
        loaded = await backend.load("torn")
        assert same_events(view.events, loaded.events)
        await backend.release("torn")
        assert same_events(loaded.events, (await backend_factory().load("torn")).events)
        await _check_moved_aside(ledger_backend_tamper, backend, "torn")
        await backend.close()

    @pytest.mark.asyncio
    async def test_damage_in_the_last_batch_is_a_torn_tail_where_the_medium_can_tear(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = make_log(turns=1, open_call=True)
        backend = backend_factory()
        await store_log(backend, "tail", events[:1])
        for event in events[1:]:
            await backend.append("tail", [event])
        await ledger_backend_tamper.break_record(backend, "tail", len(events) - 1)
        if not backend.log_store.can_tear:
            await _refused_untouched(backend, "tail", await revision_of(backend, "tail"))
            await backend.close()
            return
        loaded = await backend.load("tail")
        assert same_events(events[:-1], loaded.events[: len(events) - 1])
        assert loaded.events[-1].data["reason"] == {"kind": "interrupted"}
        await _check_moved_aside(ledger_backend_tamper, backend, "tail")
        await backend.close()

    @pytest.mark.asyncio
    async def test_damage_inside_the_committed_region_is_corruption(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = make_log(turns=2)
        backend = backend_factory()
        await store_log(backend, "bad", events[:1])
        for event in events[1:]:
            await backend.append("bad", [event])
        await ledger_backend_tamper.break_record(backend, "bad", 3)
        await _refused_untouched(backend, "bad", await revision_of(backend, "bad"))
        await backend.close()

    @pytest.mark.asyncio
    async def test_damage_to_an_acknowledged_batch_of_an_open_turn_is_corruption(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        # Write-behind acknowledges batches inside a turn: twenty flushes of one event
        # each, then one early batch damaged. Cutting there would silently drop nineteen
        # acknowledged batches; the read must fail instead, and change nothing.
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = make_log(turns=1, open_call=True)
        backend = backend_factory()
        await store_log(backend, "open", events)
        notes = [
            SessionEvent("x/note", len(events) + index, 1, {"n": index}, ignorable=True)
            for index in range(20)
        ]
        for note in notes:
            await backend.append("open", [note])
        await ledger_backend_tamper.break_record(backend, "open", _record_count(events) + 2)
        await _refused_untouched(backend, "open", await revision_of(backend, "open"))
        await backend.close()

    @pytest.mark.asyncio
    async def test_salvage_keeps_the_intact_prefix_and_moves_the_rest_aside(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = make_log(turns=2)
        split = first_turn_length(events)
        backend = backend_factory()
        await store_log(backend, "salvage", events[:split])
        for event in events[split:]:
            await backend.append("salvage", [event])
        broken = _record_count(events[:split]) + 2  # the 3rd batch of one event after turn 1
        await ledger_backend_tamper.break_record(backend, "salvage", broken)
        before = await revision_of(backend, "salvage")
        if not backend.log_store.quarantines:
            with pytest.raises(ConfigError):
                await backend.salvage("salvage")
            assert await revision_of(backend, "salvage") == before
            await backend.close()
            return
        report = await backend.salvage("salvage")
        kept = split + 2
        assert report.kept_events == kept
        assert report.moved
        assert report.moved_records == len(events) - kept
        assert report.moved_bytes > 0
        assert report.quarantine
        assert report.moved_seqs == (kept + 1, len(events) - 1)  # the broken one reads no seq
        loaded = await backend.load("salvage")
        assert same_events(events[:kept], loaded.events[:kept])
        assert len(loaded.events) == kept + report.closers
        assert loaded.events[-1].data["reason"] == {"kind": "interrupted"}
        again = await backend.salvage("salvage")
        assert not again.moved
        assert again.closers == 0
        moved = await _moved_aside(ledger_backend_tamper, backend, "salvage")
        assert moved is None or len(moved) >= report.moved_bytes
        await backend.close()

    @pytest.mark.asyncio
    @pytest.mark.parametrize(("version", "code"), [(2, "FORMAT_NEWER"), (0, "FORMAT_OLDER")])
    async def test_other_format_versions_are_refused_untouched(
        self,
        backend_factory: BackendFactory,
        ledger_backend_tamper: Tamper | None,
        version: int,
        code: str,
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        backend = backend_factory()
        await store_log(backend, "future", make_log(open_call=True))
        await ledger_backend_tamper.set_version(backend, "future", version)
        before = await revision_of(backend, "future")
        for read in (backend.load, backend.inspect):
            with pytest.raises(FormatUnsupportedError) as refused:
                await read("future")
            assert refused.value.code == code
        assert await revision_of(backend, "future") == before
        await backend.close()


def _record_count(events: list[SessionEvent]) -> int:
    """How many stored records a batch of *events* takes (chunk runs pack into rows)."""
    return len(pack_chunk_runs(events))


async def _refused_untouched(backend: SessionPersistence, session_id: str, before: Any) -> None:
    """A damaged log is refused by every read that interprets it, and nothing changes."""
    with pytest.raises(CorruptLogError):
        await backend.inspect(session_id)
    with pytest.raises(CorruptLogError):
        await backend.load(session_id)
    assert await revision_of(backend, session_id) == before


async def _moved_aside(tamper: Tamper, backend: SessionPersistence, session_id: str) -> Any:
    quarantined = getattr(tamper, "quarantined", None)
    return None if quarantined is None else await quarantined(backend, session_id)


async def _check_moved_aside(tamper: Tamper, backend: SessionPersistence, session_id: str) -> None:
    """What a repair cut is in the store's quarantine (when the Tamper can look there)."""
    moved = await _moved_aside(tamper, backend, session_id)
    assert moved is None or len(moved) > 0
