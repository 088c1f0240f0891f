"""The persistence contract (SPEC §11, §14) as tests any backend can run unchanged.

Use it from a test module::

    from sessionledger.testing.contract import PersistenceContract

    class TestMyBackendContract(PersistenceContract):
        @pytest.fixture
        def backend_factory(self, tmp_path):
            return lambda **options: MyPersistence(tmp_path / "store", **options)

The factory returns a *new* backend object over the *same* storage on every call (that
is how reopening is tested) and accepts ``event_types=`` (an ``EventTypeRegistry``).
Optionally override ``ledger_backend_tamper`` to return a ``Tamper`` for your medium;
tests of torn tails, corruption and format versions are skipped without one.
The class name does not start with ``Test``, so pytest collects nothing until you
subclass it.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import pytest
import pytest_asyncio

from sessionledger import jsoncodec
from sessionledger.errors import (
    CorruptLogError,
    FormatUnsupportedError,
    JsonValueError,
    LedgerError,
    SeqMismatchError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
)
from sessionledger.events import SessionEvent, SessionHeader
from sessionledger.ledger import Ledger
from sessionledger.persistence import SessionPersistence
from sessionledger.registry import EventType, EventTypeRegistry
from sessionledger.session import Session
from sessionledger.testing.builders import closed_turn, compact, open_turn_with_pending_call

__all__ = ["BackendFactory", "PersistenceContract", "Tamper"]

BackendFactory = Callable[..., SessionPersistence]


class Tamper(Protocol):
    """Damage a stored session the way crashes and bad media do (backend-specific)."""

    async def tear_tail(self, backend: SessionPersistence, session_id: str) -> None:
        """Leave a partial final record, as a crash in the middle of a write would."""

    async def break_record(self, backend: SessionPersistence, session_id: str, index: int) -> None:
        """Make the *index*-th stored record (0-based, header excluded) unreadable."""

    async def set_version(self, backend: SessionPersistence, session_id: str, version: int) -> None:
        """Rewrite the stored header's format version."""


def _header(session_id: str, created_at: int = 1_000) -> SessionHeader:
    return SessionHeader(id=session_id, created_at=created_at, cwd="/srv/project")


def _log(*, turns: int = 1, open_call: bool = False, seed: str = "s") -> list[SessionEvent]:
    session = Session.create(seed, clock=_counter())
    for turn in range(1, turns + 1):
        closed_turn(session, turn)
    if open_call:
        open_turn_with_pending_call(session, turns + 1)
    return list(session.events)


def _counter(start: int = 1_700_000_000_000) -> Callable[[], int]:
    state = [start]

    def clock() -> int:
        state[0] += 7
        return state[0]

    return clock


def _first_turn_end(events: list[SessionEvent]) -> int:
    """Return the length of the prefix that ends with the first closed turn."""
    return next(index for index, event in enumerate(events) if event.type == "turn/end") + 1


def _same(left: list[SessionEvent] | tuple[SessionEvent, ...], right: Any) -> bool:
    return [event.to_json() for event in left] == [event.to_json() for event in right]


async def _store(backend: SessionPersistence, session_id: str, events: list[SessionEvent]) -> None:
    await backend.create(_header(session_id))
    await backend.append(session_id, events)


class PersistenceContract:
    """SPEC §11 as tests; subclass it and provide ``ledger_backend_factory``."""

    @pytest.fixture
    def ledger_backend_tamper(self) -> Tamper | None:
        """Override to enable the torn-tail, corruption and version tests."""
        return None

    @pytest_asyncio.fixture
    async def backend_factory(
        self, ledger_backend_factory: BackendFactory
    ) -> AsyncIterator[BackendFactory]:
        """The subclass's factory, with every backend it opened closed after the test."""
        opened: list[SessionPersistence] = []

        def open_backend(**options: Any) -> SessionPersistence:
            backend = ledger_backend_factory(**options)
            opened.append(backend)
            return backend

        yield open_backend
        for backend in opened:
            await backend.close()

    # -- create / append / load ---------------------------------------------------------

    @pytest.mark.asyncio
    async def test_round_trip_keeps_every_event_and_the_header(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        events = _log(turns=2)
        await _store(backend, "round", events)
        stored = await backend.load("round")
        assert stored.header == _header("round")
        assert _same(events, stored.events)
        await backend.close()
        reopened = backend_factory()
        assert _same(events, (await reopened.load("round")).events)
        await reopened.close()

    @pytest.mark.asyncio
    async def test_create_writes_nothing_until_the_first_append(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await backend.create(_header("lazy"))
        assert [header.id for header in await backend.list()] == []
        with pytest.raises(SessionNotFoundError):
            await backend.load("lazy")
        await backend.append("lazy", [])
        assert await backend.list() == []
        await backend.append("lazy", _log()[:1])
        assert [header.id for header in await backend.list()] == ["lazy"]
        await backend.close()

    @pytest.mark.asyncio
    async def test_create_refuses_a_registered_or_stored_id(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await backend.create(_header("twice"))
        with pytest.raises(SessionExistsError):
            await backend.create(_header("twice"))
        await backend.append("twice", _log()[:2])
        other = backend_factory()
        with pytest.raises(SessionExistsError):
            await other.create(_header("twice"))
        await backend.close()
        await other.close()

    @pytest.mark.asyncio
    async def test_append_accepts_envelope_dicts(self, backend_factory: BackendFactory) -> None:
        backend = backend_factory()
        events = _log()
        await backend.create(_header("dicts"))
        await backend.append("dicts", [event.to_json() for event in events])
        assert _same(events, (await backend.load("dicts")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_append_rejects_a_seq_that_does_not_continue_and_writes_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        events = _log()
        await _store(backend, "gap", events[:3])
        revision = await _revision(backend, "gap")
        with pytest.raises(SeqMismatchError):
            await backend.append("gap", events[4:6])
        with pytest.raises(SeqMismatchError):
            await backend.append("gap", [events[3], events[5]])
        with pytest.raises(SeqMismatchError):
            await backend.append("gap", events[:2])
        assert await _revision(backend, "gap") == revision
        await backend.append("gap", events[3:])
        assert _same(events, (await backend.load("gap")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_append_rejects_non_json_data_and_writes_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        events = _log()
        await _store(backend, "nan", events)
        revision = await _revision(backend, "nan")
        bad = {"type": "x/note", "seq": len(events), "time": 5, "data": {"value": float("nan")}}
        with pytest.raises(JsonValueError):
            await backend.append("nan", [bad])
        assert await _revision(backend, "nan") == revision
        assert _same(events, (await backend.load("nan")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_reopen_and_continue(self, backend_factory: BackendFactory) -> None:
        events = _log(turns=2)
        split = _first_turn_end(events)
        first = backend_factory()
        await _store(first, "continue", events[:split])
        await first.close()
        second = backend_factory()
        await second.append("continue", events[split:])
        assert _same(events, (await second.load("continue")).events)
        await second.close()

    @pytest.mark.asyncio
    async def test_stale_writer_gets_a_typed_error_and_the_winner_is_untouched(
        self, backend_factory: BackendFactory
    ) -> None:
        events = _log(turns=2)
        split = _first_turn_end(events)
        winner = backend_factory()
        await _store(winner, "race", events[:split])
        stale = backend_factory()
        if stale is winner:
            pytest.skip("the factory returns one shared instance; there is no second writer")
        await stale.load("race")
        await winner.append("race", events[split : split + 3])
        with pytest.raises((SeqMismatchError, SessionLockedError)):
            await stale.append("race", events[split : split + 2])
        await winner.append("race", events[split + 3 :])
        assert _same(events, (await winner.load("race")).events)
        await winner.close()
        await stale.close()

    # -- repair -------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_load_closes_an_interrupted_turn_durably_and_only_once(
        self, backend_factory: BackendFactory
    ) -> None:
        events = _log(open_call=True)
        backend = backend_factory()
        await _store(backend, "open", events)
        before = await _revision(backend, "open")
        loaded = await backend.load("open")
        closers = loaded.events[len(events) :]
        assert [event.type for event in closers] == ["tool/result", "step/end", "turn/end"]
        result = closers[0]
        assert result.data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        assert result.source_event_seqs == (events[-1].seq,)
        assert closers[-1].data["reason"] == {"kind": "interrupted"}
        assert _same(events, loaded.events[: len(events)])
        after = await _revision(backend, "open")
        assert after != before
        reopened = backend_factory()
        again = await reopened.load("open")
        assert _same(loaded.events, again.events)
        assert await _revision(reopened, "open") == after
        await backend.close()
        await reopened.close()

    @pytest.mark.asyncio
    async def test_a_call_never_recorded_is_closed_as_not_started(
        self, backend_factory: BackendFactory
    ) -> None:
        session = Session.create("ns", clock=_counter())
        closed_turn(session, 1)
        open_turn_with_pending_call(session, 2, call_recorded=False)
        backend = backend_factory()
        await _store(backend, "ns", list(session.events))
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
        events = _log(open_call=True)
        backend = backend_factory()
        await _store(backend, "look", events)
        before = await _revision(backend, "look")
        view = await backend.inspect("look")
        assert len(view.events) == len(events) + 3
        assert await _revision(backend, "look") == before
        assert view.revision == before
        assert _same(events, await backend.read_from("look", 0))
        loaded = await backend.load("look")
        assert _same(view.events, loaded.events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_a_balanced_log_loads_without_any_write(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _store(backend, "calm", _log())
        before = await _revision(backend, "calm")
        await backend.load("calm")
        assert await _revision(backend, "calm") == before
        await backend.close()

    @pytest.mark.asyncio
    async def test_append_to_an_interrupted_log_commits_the_repair_first(
        self, backend_factory: BackendFactory
    ) -> None:
        events = _log(open_call=True)
        first = backend_factory()
        await _store(first, "adopt", events)
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

    # -- read_from, list, delete, locate, close -----------------------------------------

    @pytest.mark.asyncio
    async def test_read_from_returns_the_stored_suffix(
        self, backend_factory: BackendFactory
    ) -> None:
        events = _log(turns=2)
        backend = backend_factory()
        await _store(backend, "tail", events)
        for start in (0, 1, 5, len(events) - 1):
            assert _same(events[start:], await backend.read_from("tail", start))
        assert await backend.read_from("tail", len(events)) == []
        assert await backend.read_from("tail", len(events) + 50) == []
        with pytest.raises(SessionNotFoundError):
            await backend.read_from("missing", 0)
        with pytest.raises(ValueError, match="from_seq"):
            await backend.read_from("tail", -1)
        await backend.close()

    @pytest.mark.asyncio
    async def test_read_from_inside_a_packed_run(self, backend_factory: BackendFactory) -> None:
        session = Session.create("runs", clock=_counter())
        closed_turn(session, 1, answer="x" * 400)
        events = list(session.events)
        backend = backend_factory()
        await _store(backend, "runs", events)
        chunk_seqs = [event.seq for event in events if event.type == "assistant/chunk"]
        middle = chunk_seqs[len(chunk_seqs) // 2]
        assert _same(events[middle:], await backend.read_from("runs", middle))
        await backend.close()

    @pytest.mark.asyncio
    async def test_list_orders_by_created_at_then_id_and_reads_headers_only(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        for session_id, created in (("b", 5), ("a", 5), ("c", 1)):
            await backend.create(SessionHeader(id=session_id, created_at=created))
            await backend.append(session_id, _log()[:1])
        assert [header.id for header in await backend.list()] == ["c", "a", "b"]
        infos = await backend.list_snapshots()
        assert [info.header.id for info in infos] == ["c", "a", "b"]
        assert all(isinstance(info.revision, str) and info.revision for info in infos)
        await backend.close()

    @pytest.mark.asyncio
    async def test_revision_changes_with_every_append_and_survives_reopen(
        self, backend_factory: BackendFactory
    ) -> None:
        events = _log()
        backend = backend_factory()
        await _store(backend, "rev", events[:3])
        seen = {await _revision(backend, "rev")}
        for seq in range(3, 6):
            await backend.append("rev", [events[seq]])
            seen.add(await _revision(backend, "rev"))
        assert len(seen) == 4
        last = await _revision(backend, "rev")
        await backend.close()
        reopened = backend_factory()
        assert await _revision(reopened, "rev") == last
        await reopened.close()

    @pytest.mark.asyncio
    async def test_delete_removes_a_session_and_frees_its_id(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _store(backend, "gone", _log())
        before = await _revision(backend, "gone")
        await backend.delete("gone")
        assert await backend.list() == []
        with pytest.raises(SessionNotFoundError):
            await backend.load("gone")
        with pytest.raises(SessionNotFoundError):
            await backend.delete("gone")
        again = _log(seed="again")
        await _store(backend, "gone", again)
        assert _same(again, (await backend.load("gone")).events)
        assert await _revision(backend, "gone") != before
        await backend.close()

    @pytest.mark.asyncio
    async def test_release_forgets_a_session_and_another_writer_may_continue(
        self, backend_factory: BackendFactory
    ) -> None:
        events = _log(turns=2)
        split = _first_turn_end(events)
        backend = backend_factory()
        await _store(backend, "handed-over", events[:split])
        await backend.release("handed-over")
        await backend.release("never-seen")  # nothing to forget: not an error
        other = backend_factory()
        await other.append("handed-over", events[split:])
        assert _same(events, (await backend.load("handed-over")).events)

    @pytest.mark.asyncio
    async def test_locate_and_close(self, backend_factory: BackendFactory) -> None:
        backend = backend_factory()
        location = backend.locate(_header("where"))
        assert location is None or isinstance(location, str)
        await backend.close()
        await backend.close()

    # -- values --------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_packed_chunk_runs_read_back_exactly(
        self, backend_factory: BackendFactory
    ) -> None:
        session = Session.create("packed", clock=_counter())
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
        await _store(backend, "packed", list(session.events))
        assert _same(list(session.events), (await backend.load("packed")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_deeply_nested_data_round_trips(self, backend_factory: BackendFactory) -> None:
        deep: Any = "leaf"
        for _ in range(10_000):
            deep = {"child": [deep]}
        session = Session.create("deep", clock=_counter())
        session.append("x/deep", deep, ignorable=True)
        backend = backend_factory()
        await _store(backend, "deep", list(session.events))
        # Compare as bytes: == on 10,000 nested dicts would exhaust the C stack.
        loaded = (await backend.load("deep")).events[0]
        assert jsoncodec.dumps(loaded.data) == jsoncodec.dumps(deep)
        await backend.close()

    @pytest.mark.asyncio
    async def test_unknown_event_types_are_refused_unless_ignorable(
        self, backend_factory: BackendFactory
    ) -> None:
        wide = EventTypeRegistry.with_core()
        wide.register(EventType("x/custom"), plugin="test")
        writer = backend_factory(event_types=wide)
        session = Session.create("unknown", clock=_counter())
        session.append("x/custom", {"value": 1})
        await _store(writer, "unknown", list(session.events))
        kept = Session.create("kept", clock=_counter())
        kept.append("x/other", {"value": 2}, ignorable=True)
        await _store(writer, "kept", list(kept.events))
        await writer.close()
        reader = backend_factory(event_types=EventTypeRegistry.with_core())
        with pytest.raises(FormatUnsupportedError) as refused:
            await reader.load("unknown")
        assert refused.value.code == "UNKNOWN_EVENT_TYPE"
        with pytest.raises(FormatUnsupportedError):
            await reader.inspect("unknown")
        stored = await reader.load("kept")
        assert stored.events[0].type == "x/other"
        assert stored.events[0].ignorable is True
        await reader.close()

    # -- damage (needs a Tamper) ----------------------------------------------------------

    @pytest.mark.asyncio
    async def test_torn_tail_is_dropped_by_inspect_and_truncated_by_load(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = _log(open_call=True)
        backend = backend_factory()
        await _store(backend, "torn", events)
        await ledger_backend_tamper.tear_tail(backend, "torn")
        before = await _revision(backend, "torn")
        view = await backend.inspect("torn")
        assert _same(events, view.events[: len(events)])
        assert await _revision(backend, "torn") == before
        loaded = await backend.load("torn")
        assert _same(view.events, loaded.events)
        assert _same(loaded.events, (await backend_factory().load("torn")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_damage_after_the_last_turn_end_is_a_torn_tail(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = _log(turns=1, open_call=True)
        backend = backend_factory()
        await _store(backend, "tail", events[:1])
        for event in events[1:]:
            await backend.append("tail", [event])
        await ledger_backend_tamper.break_record(backend, "tail", len(events) - 1)
        loaded = await backend.load("tail")
        assert _same(events[:-1], loaded.events[: len(events) - 1])
        assert loaded.events[-1].data["reason"] == {"kind": "interrupted"}
        await backend.close()

    @pytest.mark.asyncio
    async def test_damage_inside_the_committed_region_is_corruption(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        if ledger_backend_tamper is None:
            pytest.skip("backend offers no Tamper")
        events = _log(turns=2)
        backend = backend_factory()
        await _store(backend, "bad", events[:1])
        for event in events[1:]:
            await backend.append("bad", [event])
        await ledger_backend_tamper.break_record(backend, "bad", 3)
        before = await _revision(backend, "bad")
        with pytest.raises(CorruptLogError):
            await backend.inspect("bad")
        with pytest.raises(CorruptLogError):
            await backend.load("bad")
        assert await _revision(backend, "bad") == before
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
        await _store(backend, "future", _log(open_call=True))
        await ledger_backend_tamper.set_version(backend, "future", version)
        before = await _revision(backend, "future")
        for read in (backend.load, backend.inspect):
            with pytest.raises(FormatUnsupportedError) as refused:
                await read("future")
            assert refused.value.code == code
        assert await _revision(backend, "future") == before
        await backend.close()

    # -- through a Ledger -----------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_ledger_write_behind_makes_events_durable_on_flush(
        self, backend_factory: BackendFactory
    ) -> None:
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            session = ledger.create("wb", cwd="/srv/project")
            closed_turn(session, 1)
            await ledger.flush(session)
            stored = await backend_factory().load("wb")
            assert _same(list(session.events), stored.events)
            closed_turn(session, 2)
            expected = list(session.events)
        # leaving the context flushed the second turn
        assert _same(expected, (await backend_factory().load("wb")).events)

    @pytest.mark.asyncio
    async def test_ledger_resume_repairs_once_and_continues(
        self, backend_factory: BackendFactory
    ) -> None:
        events = _log(open_call=True)
        backend = backend_factory()
        await _store(backend, "resume", events)
        await backend.close()
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            session = await ledger.resume("resume")
            assert await ledger.resume("resume") is session
            assert session.events[len(events)].data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
            closed_turn(session, 3)
            expected = list(session.events)
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            again = await ledger.resume("resume")
            assert _same(expected, again.events[: len(expected)])
            # a resume of a log that does not end with the marker adds only the marker
            assert [event.type for event in again.events[len(expected) :]] == ["session/end-seed"]

    @pytest.mark.asyncio
    async def test_ledger_create_of_a_stored_id_fails_at_the_first_flush(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _store(backend, "taken", _log())
        await backend.close()
        ledger = Ledger(persistence=backend_factory(), load_entrypoints=False)
        session = ledger.create("taken")
        session.append("turn/start", {"turn": 1})
        with pytest.raises(SessionExistsError):
            await ledger.flush(session)
        await ledger.delete("taken")
        await ledger.close()

    @pytest.mark.asyncio
    async def test_ledger_flush_failure_is_raised_retained_and_retried(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        real_write = backend._write
        failures = [OSError(errno.EIO, "injected I/O error")]

        async def failing_write(*args: Any, **kwargs: Any) -> None:
            if failures:
                raise failures.pop()
            await real_write(*args, **kwargs)

        backend._write = failing_write  # type: ignore[method-assign]
        ledger = Ledger(persistence=backend, load_entrypoints=False)
        session = ledger.create("retry")
        closed_turn(session, 1)
        with pytest.raises(OSError, match="injected"):
            await ledger.flush(session)
        closed_turn(session, 2)
        await ledger.flush(session)
        await ledger.close()
        stored = await backend_factory().load("retry")
        assert _same(list(session.events), stored.events)

    @pytest.mark.asyncio
    async def test_a_retried_batch_that_already_landed_is_not_duplicated(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        real_write = backend._write
        calls = 0

        async def write_then_lose_the_reply(*args: Any, **kwargs: Any) -> None:
            # The 1st (materializing) and 3rd writes land, then their caller is cancelled.
            nonlocal calls
            calls += 1
            await real_write(*args, **kwargs)
            if calls in (1, 3):
                raise asyncio.CancelledError

        backend._write = write_then_lose_the_reply  # type: ignore[method-assign]
        events = _log()
        await backend.create(_header("landed"))
        with pytest.raises(asyncio.CancelledError):
            await backend.append("landed", events[:4])
        await backend.append("landed", events[:4])
        with pytest.raises(asyncio.CancelledError):
            await backend.append("landed", events[4:9])
        await backend.append("landed", events[4:9])
        await backend.append("landed", events[9:])
        assert _same(events, (await backend_factory().load("landed")).events)
        await backend.close()

    @pytest.mark.asyncio
    async def test_ledger_fork_of_a_stored_session(self, backend_factory: BackendFactory) -> None:
        events = _log(turns=2)
        backend = backend_factory()
        await _store(backend, "parent", events)
        await backend.close()
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            boundary = next(e.seq for e in events if e.type == "turn/end")
            child = await ledger.fork("parent", boundary=boundary, child_id="child")
            assert child.header.parent_session == "parent"
            assert child.header.seed_length == boundary + 1
            assert child.header.cwd == "/srv/project"
            assert _same(events[: boundary + 1], child.events[: boundary + 1])
            assert child.events[-1].type == "session/end-seed"
        stored = await backend_factory().load("child")
        assert _same(list(child.events), stored.events)
        assert _same(events, (await backend_factory().load("parent")).events)

    @pytest.mark.asyncio
    async def test_ledger_compaction_survives_a_round_trip(
        self, backend_factory: BackendFactory
    ) -> None:
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            session = ledger.create("compact")
            closed_turn(session, 1)
            compact(session)
            closed_turn(session, 2)
            messages = session.derive_messages()
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            resumed = await ledger.resume("compact")
            assert resumed.derive_messages() == messages
            assert resumed.surface.replace_generation == 1

    @pytest.mark.asyncio
    async def test_ledger_delete(self, backend_factory: BackendFactory) -> None:
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            session = ledger.create("del")
            closed_turn(session, 1)
            await ledger.flush(session)
            await ledger.delete("del")
            assert ledger.get("del") is None
            assert [info async for info in ledger.list_sessions()] == []
            with pytest.raises(LedgerError):
                await ledger.resume("del")

    @pytest.mark.asyncio
    async def test_concurrent_sessions_in_one_process(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        logs = {f"c{index}": _log(turns=2, seed=f"c{index}") for index in range(6)}

        async def write(session_id: str) -> None:
            events = logs[session_id]
            await backend.create(_header(session_id))
            for start in range(0, len(events), 5):
                await backend.append(session_id, events[start : start + 5])

        await asyncio.gather(*(write(session_id) for session_id in logs))
        for session_id, events in logs.items():
            assert _same(events, (await backend.load(session_id)).events)
        await backend.close()


async def _revision(backend: SessionPersistence, session_id: str) -> str | None:
    infos = await backend.list_snapshots()
    return next((info.revision for info in infos if info.header.id == session_id), None)
