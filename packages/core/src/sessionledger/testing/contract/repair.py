"""The contract's repair clauses (SPEC §8, §11.2): closers, torn tails, corruption, versions."""

from __future__ import annotations

import pytest

from sessionledger.errors import CorruptLogError, FormatUnsupportedError, SeqMismatchError
from sessionledger.events import SessionEvent
from sessionledger.session import Session
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.testing.contract.base import (
    BackendFactory,
    ContractBase,
    Tamper,
    counting_clock,
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
    async def test_torn_tail_is_dropped_by_inspect_and_truncated_by_load(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = make_log(open_call=True)
        backend = backend_factory()
        await store_log(backend, "torn", events)
        await ledger_backend_tamper.tear_tail(backend, "torn")
        before = await revision_of(backend, "torn")
        view = await backend.inspect("torn")
        assert same_events(events, view.events[: len(events)])
        assert await revision_of(backend, "torn") == before
        loaded = await backend.load("torn")
        assert same_events(view.events, loaded.events)
        assert same_events(loaded.events, (await backend_factory().load("torn")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_damage_after_the_last_turn_end_is_a_torn_tail(
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
        loaded = await backend.load("tail")
        assert same_events(events[:-1], loaded.events[: len(events) - 1])
        assert loaded.events[-1].data["reason"] == {"kind": "interrupted"}
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
        before = await revision_of(backend, "bad")
        with pytest.raises(CorruptLogError):
            await backend.inspect("bad")
        with pytest.raises(CorruptLogError):
            await backend.load("bad")
        assert await revision_of(backend, "bad") == before
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
