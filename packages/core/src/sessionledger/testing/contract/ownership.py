"""The contract's ownership clauses: one writer per session, readers never blocked.

Each clause opens a second backend object over the same storage, which stands for another
``Ledger``: in this process here, in another process or on another machine in the backend
packages' own tests. A factory that hands out one shared object has no second writer, and
these clauses are skipped for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sessionledger._errors import SessionLockedError, SessionNotFoundError
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

__all__ = ["OwnershipClauses"]


def _note(seq: int) -> dict[str, Any]:
    return {"type": "kit/note", "seq": seq, "time": seq, "data": {}, "ignorable": True}


class OwnershipClauses(ContractBase):
    """Who may write a session, and that reading never needs to."""

    @pytest.mark.asyncio
    async def test_a_held_session_refuses_every_other_writer_and_stays_as_it_was(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=2, open_call=True)  # an open turn: a load would repair it
        owner = backend_factory()
        await store_log(owner, "held", events)
        other = second_writer(backend_factory, owner)
        revision = await revision_of(other, "held")
        attempts: dict[str, Callable[[], Awaitable[object]]] = {
            "load": lambda: other.load("held"),
            "append": lambda: other.append("held", [_note(len(events))]),
            "salvage": lambda: other.salvage("held"),
            "delete": lambda: other.delete("held"),
        }
        for name, attempt in attempts.items():
            with pytest.raises(SessionLockedError) as refused:
                await attempt()
            assert refused.value.code == "LOCKED", name
            assert refused.value.session_id == "held", name
        # Nothing was repaired, cut or deleted, and reading was never blocked.
        assert await revision_of(other, "held") == revision
        view = (await other.inspect("held")).events  # repaired in memory only
        assert same_events(events, view[: len(events)])
        assert [header.id for header in await other.list()] == ["held"]
        assert same_events(events[3:], await other.read_from("held", 3))
        # The owner alone may make it live: its load repairs the open turn.
        repaired = (await owner.load("held")).events
        assert same_events(events, repaired[: len(events)])
        assert len(repaired) > len(events)

    @pytest.mark.asyncio
    async def test_the_first_write_of_a_new_session_claims_it(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=2)
        split = first_turn_length(events)
        owner = backend_factory()
        await store_log(owner, "new", events[:split])
        other = second_writer(backend_factory, owner)
        with pytest.raises(SessionLockedError):
            await other.append("new", events[split:])
        await owner.append("new", events[split:])
        assert same_events(events, (await other.inspect("new")).events)

    @pytest.mark.asyncio
    async def test_creating_a_session_another_writer_holds_is_refused(
        self, backend_factory: BackendFactory
    ) -> None:
        owner = backend_factory()
        await owner.create(header_for("taken"))
        other = second_writer(backend_factory, owner)
        await other.create(header_for("taken"))
        events = make_log(turns=1)
        await owner.append("taken", events)
        with pytest.raises(SessionLockedError):
            await other.append("taken", make_log(turns=1, seed="other"))
        assert same_events(events, (await other.inspect("taken")).events)

    @pytest.mark.asyncio
    async def test_release_hands_the_session_over_and_the_old_owner_is_refused(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=2)
        split = first_turn_length(events)
        first = backend_factory()
        await store_log(first, "handed", events[:split])
        await first.release("handed")
        second = second_writer(backend_factory, first)
        await second.load("handed")
        await second.append("handed", events[split:])
        with pytest.raises(SessionLockedError):
            await first.load("handed")
        with pytest.raises(SessionLockedError):
            await first.append("handed", events[split:])
        assert same_events(events, (await first.inspect("handed")).events)

    @pytest.mark.asyncio
    async def test_close_lets_go_of_every_session_held(
        self, backend_factory: BackendFactory
    ) -> None:
        first = backend_factory()
        logs = {f"c{index}": make_log(turns=1, seed=f"c{index}") for index in range(3)}
        for session_id, events in logs.items():
            await store_log(first, session_id, events)
        await first.close()
        second = second_writer(backend_factory, first)
        for session_id, events in logs.items():
            assert same_events(events, (await second.load(session_id)).events)
            await second.append(session_id, [])

    @pytest.mark.asyncio
    async def test_delete_lets_go_and_the_id_can_be_written_again(
        self, backend_factory: BackendFactory
    ) -> None:
        first = backend_factory()
        await store_log(first, "gone", make_log(turns=1))
        await first.delete("gone")
        second = second_writer(backend_factory, first)
        events = make_log(turns=1, seed="again")
        await store_log(second, "gone", events)
        assert same_events(events, (await first.inspect("gone")).events)
        with pytest.raises(SessionLockedError):
            await first.load("gone")

    @pytest.mark.asyncio
    async def test_a_refused_or_failed_load_holds_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        owner = backend_factory()
        await store_log(owner, "busy", make_log(turns=1))
        other = second_writer(backend_factory, owner)
        with pytest.raises(SessionLockedError):
            await other.load("busy")
        with pytest.raises(SessionNotFoundError):
            await other.load("absent")  # a load of nothing keeps no claim on the id
        await owner.release("busy")
        events = make_log(turns=1, seed="absent")
        await store_log(owner, "absent", events)
        assert same_events(events, (await owner.load("absent")).events)
        assert len((await owner.load("busy")).events) > 0
