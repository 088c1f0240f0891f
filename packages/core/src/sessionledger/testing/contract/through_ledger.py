"""The contract through a ``Ledger``: write-behind, resume, faults, fork."""

from __future__ import annotations

import asyncio
import errno

import pytest

from sessionledger._errors import LedgerError, SessionExistsError
from sessionledger.runtime._ledger import Ledger
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, compact
from sessionledger.testing.contract.base import (
    BackendFactory,
    ContractBase,
    header_for,
    make_log,
    same_events,
    store_log,
)
from sessionledger.testing.faults import FaultyStore, Write

__all__ = ["LedgerClauses"]


class LedgerClauses(ContractBase):
    """A backend under a ``Ledger``: flushes, failed and retried writes, resume, fork."""

    # -- through a Ledger -----------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_ledger_write_behind_makes_events_durable_on_flush(
        self, backend_factory: BackendFactory
    ) -> None:
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            session = ledger.create("wb", cwd="/srv/project")
            closed_turn(session, 1)
            await ledger.flush(session)
            stored = await backend_factory().inspect("wb")
            assert same_events(list(session.events), stored.events)
            closed_turn(session, 2)
            expected = list(session.events)
        # leaving the context flushed the second turn
        assert same_events(expected, (await backend_factory().inspect("wb")).events)

    @pytest.mark.asyncio
    async def test_ledger_resume_repairs_once_and_continues(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(open_call=True)
        backend = backend_factory()
        await store_log(backend, "resume", events)
        await backend.close()
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            session = await ledger.resume("resume")
            assert await ledger.resume("resume") is session
            assert session.events[len(events)].data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
            closed_turn(session, 3)
            expected = list(session.events)
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            again = await ledger.resume("resume")
            assert same_events(expected, again.events[: len(expected)])
            # a resume of a log that does not end with the marker adds only the marker
            assert [event.type for event in again.events[len(expected) :]] == ["session/end-seed"]

    @pytest.mark.asyncio
    async def test_ledger_resume_or_create_continues_the_same_session_on_every_start(
        self, backend_factory: BackendFactory
    ) -> None:
        # A harness's start-up, run three times: create, then resume twice (the second
        # resume after an interrupted turn, which it repairs).
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            first = await ledger.resume_or_create("every-start", cwd="/srv/a", title="t")
            assert await ledger.resume_or_create("every-start") is first
            closed_turn(first, 1)
            first.append("turn/start", {"turn": 2})
            written = list(first.events)
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            second = await ledger.resume_or_create("every-start", title="ignored")
            assert second.header.title == "t"
            assert second.header.cwd == "/srv/a"
            assert same_events(written, second.events[: len(written)])
            closers = [event.type for event in second.events[len(written) :]]
            assert closers == ["turn/end", "session/end-seed"]
            closed_turn(second, 3)
            expected = list(second.events)
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            third = await ledger.resume_or_create("every-start")
            assert same_events(expected, third.events[: len(expected)])
            assert [event.type for event in third.events[len(expected) :]] == ["session/end-seed"]

    @pytest.mark.asyncio
    async def test_ledger_create_of_a_stored_id_fails_at_the_first_flush(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await store_log(backend, "taken", make_log())
        await backend.close()
        ledger = Ledger(persistence=backend_factory(), load_entrypoints=False)
        session = ledger.create("taken")
        session.append("turn/start", {"turn": 1})
        with pytest.raises(SessionExistsError, match="resume_or_create"):
            await ledger.flush(session)
        await ledger.delete("taken")
        await ledger.close()

    @pytest.mark.asyncio
    async def test_ledger_flush_failure_is_raised_retained_and_retried(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        faulty = FaultyStore(backend.log_store)
        faulty.fail_next_writes(OSError(errno.EIO, "injected I/O error"))
        persistence = SessionPersistence(faulty, event_types=backend.event_types)
        ledger = Ledger(persistence=persistence, load_entrypoints=False)
        session = ledger.create("retry")
        closed_turn(session, 1)
        with pytest.raises(OSError, match="injected"):
            await ledger.flush(session)
        closed_turn(session, 2)
        await ledger.flush(session)
        await ledger.close()
        stored = await backend_factory().inspect("retry")
        assert same_events(list(session.events), stored.events)

    @pytest.mark.asyncio
    async def test_a_retried_batch_that_already_landed_is_not_duplicated(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        faulty = FaultyStore(backend.log_store)

        def lose_the_reply(write: Write) -> None:
            # The 1st (creating) and 3rd writes land, then their caller is cancelled.
            if faulty.writes in (1, 3):
                raise asyncio.CancelledError

        faulty.after_write = lose_the_reply
        persistence = SessionPersistence(faulty, event_types=backend.event_types)
        events = make_log()
        await persistence.create(header_for("landed"))
        with pytest.raises(asyncio.CancelledError):
            await persistence.append("landed", events[:4])
        await persistence.append("landed", events[:4])
        with pytest.raises(asyncio.CancelledError):
            await persistence.append("landed", events[4:9])
        await persistence.append("landed", events[4:9])
        await persistence.append("landed", events[9:])
        assert same_events(events, (await backend_factory().inspect("landed")).events)
        await persistence.close()

    @pytest.mark.asyncio
    async def test_ledger_fork_of_a_stored_session(self, backend_factory: BackendFactory) -> None:
        events = make_log(turns=2)
        backend = backend_factory()
        await store_log(backend, "parent", events)
        await backend.close()
        async with Ledger(persistence=backend_factory(), load_entrypoints=False) as ledger:
            boundary = next(e.seq for e in events if e.type == "turn/end")
            child = await ledger.fork("parent", boundary=boundary, child_id="child")
            assert child.header.parent_session == "parent"
            assert child.header.seed_length == boundary + 1
            assert child.header.cwd == "/srv/project"
            assert same_events(events[: boundary + 1], child.events[: boundary + 1])
            assert child.events[-1].type == "session/end-seed"
        stored = await backend_factory().inspect("child")
        assert same_events(list(child.events), stored.events)
        assert same_events(events, (await backend_factory().inspect("parent")).events)

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
