"""What every clause of the persistence contract kit shares: fixtures, ``Tamper``, helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import ExitStack
from typing import Any, Protocol

import pytest
import pytest_asyncio

from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._session import Session
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.blocking import no_blocking_calls, package_of
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call

__all__ = [
    "BackendFactory",
    "ContractBase",
    "Tamper",
    "counting_clock",
    "first_turn_length",
    "header_for",
    "make_log",
    "revision_of",
    "same_events",
    "second_writer",
    "store_log",
]

#: Returns a new backend over the same storage on every call; accepts ``event_types=``.
BackendFactory = Callable[..., SessionPersistence]


class Tamper(Protocol):
    """Damage a stored session the way crashes and bad media do (backend-specific)."""

    async def tear_tail(self, backend: SessionPersistence, session_id: str) -> None:
        """Leave a partial final record, as a crash in the middle of a write would."""

    async def break_record(self, backend: SessionPersistence, session_id: str, index: int) -> None:
        """Make the *index*-th stored record (0-based, header excluded) unreadable."""

    async def set_version(self, backend: SessionPersistence, session_id: str, version: int) -> None:
        """Rewrite the stored header's format version."""

    # Optional: ``async def quarantined(backend, session_id) -> bytes`` returns what
    # repairs of the session moved aside, so the kit can check nothing was destroyed.


class ContractBase:
    """The kit's fixtures: ``ledger_backend_factory`` (the subclass provides it) and
    ``ledger_backend_tamper`` (optional), and ``backend_factory`` built on the first."""

    @pytest.fixture
    def ledger_backend_tamper(self) -> Tamper | None:
        """Override to enable the torn-tail, corruption and version tests."""
        return None

    @pytest.fixture
    def ledger_may_block_in(self) -> list[tuple[str, str]]:
        """Override to allow blocking calls under named ``(file, function)`` pairs, each
        with its reason in a comment (docs/backends.md, "no blocking call on the event
        loop"); the kit allows only a backend's synchronous construction."""
        return []

    @pytest_asyncio.fixture
    async def backend_factory(
        self, ledger_backend_factory: BackendFactory, ledger_may_block_in: list[tuple[str, str]]
    ) -> AsyncIterator[BackendFactory]:
        """The subclass's factory, with every backend it opened closed after the test.
        From the first backend opened to the last closed, a blocking call that the
        backend or the core makes on the event loop's thread fails the test."""
        opened: list[SessionPersistence] = []
        with ExitStack() as watching:

            def open_backend(**options: Any) -> SessionPersistence:
                backend = ledger_backend_factory(**options)
                if not opened:  # from here on, a blocking call on the loop fails the test
                    packages = {package_of(backend), package_of(backend.log_store)}
                    # (not in construction: it is synchronous and may resolve a path)
                    allowed = [(__file__, "open_backend"), *ledger_may_block_in]
                    watching.enter_context(no_blocking_calls(packages, may_block_in=allowed))
                opened.append(backend)
                return backend

            yield open_backend
            for backend in opened:
                await backend.close()


def header_for(session_id: str, created_at: int = 1_000) -> SessionHeader:
    """The header the kit stores its sessions under."""
    return SessionHeader(id=session_id, created_at=created_at, cwd="/srv/project")


def make_log(*, turns: int = 1, open_call: bool = False, seed: str = "s") -> list[SessionEvent]:
    """A log of *turns* closed turns, then (with *open_call*) a turn cut off mid-tool."""
    session = Session.create(seed, clock=counting_clock())
    for turn in range(1, turns + 1):
        closed_turn(session, turn)
    if open_call:
        open_turn_with_pending_call(session, turns + 1)
    return list(session.events)


def counting_clock(start: int = 1_700_000_000_000) -> Callable[[], int]:
    """A clock that ticks 7 ms per reading."""
    state = [start]

    def clock() -> int:
        state[0] += 7
        return state[0]

    return clock


def first_turn_length(events: list[SessionEvent]) -> int:
    """Return the length of the prefix that ends with the first closed turn."""
    return next(index for index, event in enumerate(events) if event.type == "turn/end") + 1


def same_events(left: Sequence[SessionEvent], right: Any) -> bool:
    """Tell whether two logs hold the same events, compared as JSON envelopes."""
    return [event.to_json() for event in left] == [event.to_json() for event in right]


async def store_log(
    backend: SessionPersistence, session_id: str, events: list[SessionEvent]
) -> None:
    """Create *session_id* and append *events* as one batch."""
    await backend.create(header_for(session_id))
    await backend.append(session_id, events)


def second_writer(backend_factory: BackendFactory, first: SessionPersistence) -> SessionPersistence:
    """Another backend object over *first*'s storage; a clause about two writers is
    skipped for a factory that returns one shared instance."""
    other = backend_factory()
    if other is first:
        pytest.skip("the factory returns one shared instance; there is no second writer")
    return other


async def revision_of(backend: SessionPersistence, session_id: str) -> str | None:
    """The revision ``list_snapshots`` reports for *session_id* (None when unlisted)."""
    infos = await backend.list_snapshots()
    return next((info.revision for info in infos if info.header.id == session_id), None)
