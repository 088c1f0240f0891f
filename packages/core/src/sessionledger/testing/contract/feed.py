"""The contract's live-feed clauses: ``follow`` and ``follow_all`` (docs/feed.md).

Each oracle is the stored log itself: what a feed yielded must equal, event for event,
what ``read_from`` reads back at the end, with nothing before its cursor, nothing twice,
no gap, no torn tail and nothing that was not acknowledged when it was yielded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import pytest

from sessionledger._errors import QueryError, SessionDeletedError, SessionNotFoundError
from sessionledger.model._events import SessionEvent
from sessionledger.model._session import Session
from sessionledger.storage._feed import FeedItem
from sessionledger.testing.builders import closed_turn, compact
from sessionledger.testing.contract.base import (
    BackendFactory,
    ContractBase,
    Tamper,
    counting_clock,
    header_for,
    make_log,
    same_events,
    second_writer,
    store_log,
)

__all__ = ["FeedClauses"]

_T = TypeVar("_T")
#: How long a clause waits for an item the store has acknowledged, in seconds.
_PATIENCE = 20.0


async def _take(items: AsyncIterator[_T], count: int) -> list[_T]:
    """The next *count* items of a feed, each within ``_PATIENCE``."""
    return [await asyncio.wait_for(anext(items), _PATIENCE) for _ in range(count)]


async def _nothing_more(items: AsyncIterator[Any], seconds: float = 0.2) -> None:
    """Assert the feed yields nothing within *seconds* (it waits instead)."""
    pending = asyncio.ensure_future(anext(items))
    done, _ = await asyncio.wait({pending}, timeout=seconds)
    pending.cancel()
    if done:
        raise AssertionError(f"the feed yielded {pending.result()!r}, which nobody acknowledged")
    await asyncio.gather(pending, return_exceptions=True)


class FeedClauses(ContractBase):
    """What a live feed yields: the acknowledged log, exactly once per cursor."""

    @pytest.mark.asyncio
    async def test_follow_yields_the_stored_log_then_each_acknowledged_batch(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=3)
        cut = len(events) // 3
        writer = backend_factory()
        await store_log(writer, "fed", events[:cut])
        reader = second_writer(backend_factory, writer)
        feed = reader.follow("fed")
        assert same_events(events[:cut], await _take(feed, cut))
        await _nothing_more(feed)
        middle = (2 * len(events)) // 3
        await writer.append("fed", events[cut:middle])
        assert same_events(events[cut:middle], await _take(feed, middle - cut))
        await writer.append("fed", events[middle:])
        assert same_events(events[middle:], await _take(feed, len(events) - middle))
        await _nothing_more(feed)
        assert same_events(events, await reader.read_from("fed", 0))
        await feed.aclose()

    @pytest.mark.asyncio
    async def test_a_compaction_comes_as_an_event_like_any_other(
        self, backend_factory: BackendFactory
    ) -> None:
        session = Session.create("compacted", clock=counting_clock())
        closed_turn(session, 1)
        before = len(session.events)
        closed_turn(session, 2)
        compact(session)  # a Replace of the surface so far, citing what it shadows
        closed_turn(session, 3)
        events = list(session.events)
        writer = backend_factory()
        await store_log(writer, "compacted", events[:before])
        feed = second_writer(backend_factory, writer).follow("compacted")
        seen = await _take(feed, before)
        await writer.append("compacted", events[before:])
        seen += await _take(feed, len(events) - before)
        assert same_events(events, seen)
        assert any(event.surface_op not in (None, "append") for event in seen)

    @pytest.mark.asyncio
    async def test_a_caller_cancelled_at_any_await_loses_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        """Timeouts cut the feed's reads and waits at every await point in turn: the
        events still come each once, in order, and the feed goes on."""
        events = make_log(turns=3)
        writer = backend_factory()
        await store_log(writer, "cut", events[:2])
        feed = second_writer(backend_factory, writer).follow("cut")
        seen: list[SessionEvent] = []
        written, cuts = 2, 0
        deadline = asyncio.get_running_loop().time() + _PATIENCE
        while len(seen) < len(events):
            assert asyncio.get_running_loop().time() < deadline, "the feed stopped"
            if written < len(events) and cuts % 3 == 0:
                await writer.append("cut", events[written : written + 5])
                written = min(len(events), written + 5)
            # Cut after 0.5-3 ms (a read in flight, a wait), and every seventh call not at
            # all, so that a medium slower than the cuts still gets through.
            patience = 0.0005 * (cuts % 7) if cuts % 7 else _PATIENCE
            with contextlib.suppress(TimeoutError):
                seen.append(await asyncio.wait_for(anext(feed), patience))
            cuts += 1
        assert same_events(events, seen)
        await _nothing_more(feed)

    @pytest.mark.asyncio
    async def test_follow_starts_after_any_seq_and_wait_false_stops_at_the_end(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=2)  # chunk runs: a cursor falls inside packed rows too
        backend = backend_factory()
        await store_log(backend, "after", events)
        for after in (-1, 0, 3, len(events) // 2, len(events) - 2, len(events) - 1, 10**6):
            read = [event async for event in backend.follow("after", after=after, wait=False)]
            assert same_events(events[after + 1 :], read), after
        with pytest.raises(QueryError):
            [event async for event in backend.follow("after", after=-2, wait=False)]
        with pytest.raises(SessionNotFoundError) as missing:
            [event async for event in backend.follow("missing", wait=False)]
        assert not isinstance(missing.value, SessionDeletedError)

    @pytest.mark.asyncio
    async def test_a_deleted_session_ends_its_feed_after_what_was_acknowledged(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log()
        backend = backend_factory()
        await store_log(backend, "gone", events)
        feed = second_writer(backend_factory, backend).follow("gone")
        assert same_events(events, await _take(feed, len(events)))
        await backend.delete("gone")
        with pytest.raises(SessionDeletedError) as ended:
            await asyncio.wait_for(anext(feed), _PATIENCE)
        assert ended.value.session_id == "gone"
        assert ended.value.seq == len(events) - 1

    @pytest.mark.asyncio
    async def test_a_session_created_anew_under_its_id_ends_the_old_feed(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=2)
        backend = backend_factory()
        await store_log(backend, "again", events[:3])
        feed = second_writer(backend_factory, backend).follow("again")
        assert same_events(events[:3], await _take(feed, 3))
        await backend.delete("again")
        await backend.create(header_for("again", created_at=2_000))
        await backend.append("again", events)  # longer than before: a new log all the same
        with pytest.raises(SessionDeletedError):
            await asyncio.wait_for(anext(feed), _PATIENCE)

    @pytest.mark.asyncio
    async def test_a_repair_s_closers_come_as_events_and_a_torn_tail_never(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        events = make_log(open_call=True)
        backend = backend_factory()
        await store_log(backend, "crashed", events)
        if ledger_backend_tamper is not None and backend.log_store.can_tear:
            await ledger_backend_tamper.tear_tail(backend, "crashed")
        await backend.close()  # the writer is gone
        follower = backend_factory()
        feed = follower.follow("crashed")
        seen = await _take(feed, len(events))
        assert same_events(events, seen)
        await _nothing_more(feed)  # a torn tail is not acknowledged
        loaded = await backend_factory().load("crashed")  # the repair appends closers
        closers = loaded.events[len(events) :]
        assert closers
        seen += await _take(feed, len(closers))
        await _nothing_more(feed)
        assert same_events(await follower.read_from("crashed", 0), seen)

    @pytest.mark.asyncio
    async def test_follow_all_yields_every_session_and_resumes_from_its_cursor(
        self, backend_factory: BackendFactory
    ) -> None:
        first, second = make_log(seed="a"), make_log(turns=2, seed="b")
        writer = backend_factory()
        await store_log(writer, "a", first)
        feed = second_writer(backend_factory, writer).follow_all()
        taken = await _take(feed, len(first))
        assert taken == [FeedItem("a", item.event) for item in taken]
        assert same_events(first, [item.event for item in taken])
        cursor = feed.cursor
        await feed.aclose()
        await store_log(writer, "b", second[:4])
        resumed = backend_factory().follow_all(after=cursor)
        items = await _take(resumed, 4)
        assert {item.session_id for item in items} == {"b"}
        assert same_events(second[:4], [item.event for item in items])
        await writer.append("b", second[4:])
        items = await _take(resumed, len(second) - 4)
        assert same_events(second[4:], [item.event for item in items])
        await writer.delete("a")
        assert await _take(resumed, 1) == [FeedItem("a", None)]
        await _nothing_more(resumed)
        again = [
            item async for item in backend_factory().follow_all(after=resumed.cursor, wait=False)
        ]
        assert again == []
        with pytest.raises(QueryError):
            backend_factory().follow_all(after="not a cursor")

    @pytest.mark.asyncio
    async def test_follow_all_starts_a_session_created_anew_from_seq_0(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(seed="n")
        backend = backend_factory()
        await store_log(backend, "n", events[:2])
        feed = backend.follow_all(wait=False)
        assert len([item async for item in feed]) == 2
        await backend.delete("n")
        await backend.create(header_for("n", created_at=5_000))
        await backend.append("n", events[:5])
        items = [item async for item in backend.follow_all(after=feed.cursor, wait=False)]
        assert items[0] == FeedItem("n", None)
        replayed: list[SessionEvent] = [item.event for item in items[1:] if item.event]
        assert same_events(events[:5], replayed)
