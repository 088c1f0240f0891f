"""``Ledger``: live registry, fork, resume, inspect, delete, close (docs/reading.md)."""

from __future__ import annotations

import asyncio
import copy
import errno
from typing import Any

import pytest

from sessionledger import (
    ConfigError,
    EventType,
    ForkError,
    FormatUnsupportedError,
    Ledger,
    NotLiveError,
    Session,
    SessionExistsError,
    SessionNotFoundError,
    hookimpl,
    open_store,
)
from sessionledger.storage._memory import MemoryLogStore, MemoryPersistence, MemoryStore
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.testing.faults import FaultyStore


def memory_ledger(store: MemoryStore | None = None, **options: Any) -> Ledger:
    return Ledger(persistence=MemoryPersistence(store=store), load_entrypoints=False, **options)


def types(session: Session) -> list[str]:
    return [event.type for event in session.events]


# -- create, get, live_sessions ---------------------------------------------------------


def test_create_mints_ids_fills_the_header_and_refuses_a_live_id() -> None:
    ledger = Ledger(load_entrypoints=False)
    minted = ledger.create()
    named = ledger.create("named", cwd="/srv/app", title="a title", meta={"team": ["a"]})
    assert len(minted.id) == 36
    assert named.header.cwd == "/srv/app"
    assert named.header.title == "a title"
    assert named.header.meta == {"team": ("a",)}
    assert ledger.get("named") is named
    assert ledger.get("missing") is None
    assert ledger.live_sessions() == [minted, named]
    with pytest.raises(SessionExistsError):
        ledger.create("named")
    assert ledger.get("named") is named


def test_write_delay_must_be_a_non_negative_integer() -> None:
    for bad in (-1, 0.5, True, "200"):
        with pytest.raises(ConfigError):
            Ledger(write_delay_ms=bad, load_entrypoints=False)  # type: ignore[arg-type]


async def test_open_is_both_awaitable_and_an_async_context_manager() -> None:
    ledger = await Ledger.open("memory:awaitable", load_entrypoints=False)
    assert isinstance(ledger.persistence, MemoryPersistence)
    await ledger.close()
    async with Ledger.open("memory:managed", load_entrypoints=False) as managed:
        assert isinstance(managed, Ledger)


def test_open_store_names_the_registered_schemes_for_an_unknown_one() -> None:
    with pytest.raises(ConfigError, match="memory:"):
        open_store("nosuch:place", load_entrypoints=False)
    with pytest.raises(ConfigError, match="no scheme"):
        open_store("just-a-path", load_entrypoints=False)


async def test_named_memory_stores_are_shared_within_the_process() -> None:
    async with Ledger.open("memory:shared-test", load_entrypoints=False) as ledger:
        session = ledger.create("kept")
        closed_turn(session, 1)
    async with Ledger.open("memory:shared-test", load_entrypoints=False) as ledger:
        assert (await ledger.resume("kept")).seq == session.seq + 1  # + end-seed marker
    async with Ledger.open("memory:", load_entrypoints=False) as private:
        with pytest.raises(SessionNotFoundError):
            await private.resume("kept")


# -- flush and write-behind ---------------------------------------------------------------


async def test_flush_refuses_a_session_that_is_not_live_here() -> None:
    ledger = memory_ledger()
    other = memory_ledger()
    session = other.create("elsewhere")
    with pytest.raises(NotLiveError):
        await ledger.flush(session)
    with pytest.raises(NotLiveError):
        await ledger.flush(Session.create("detached"))
    await other.delete("elsewhere")
    with pytest.raises(NotLiveError):
        await other.flush(session)


async def test_the_write_behind_window_writes_without_a_flush() -> None:
    store: MemoryStore = {}
    ledger = memory_ledger(store, write_delay_ms=1)
    session = ledger.create("window")
    closed_turn(session, 1)
    for _ in range(500):  # the 1 ms window expires on its own; never wait forever
        if "window" in store and store["window"].next_seq == session.seq:
            break
        await asyncio.sleep(0.01)
    assert store["window"].next_seq == session.seq
    await ledger.close()


async def test_close_flushes_every_session_and_is_idempotent() -> None:
    store: MemoryStore = {}
    ledger = memory_ledger(store)
    sessions = [ledger.create(f"s{index}") for index in range(3)]
    for session in sessions:
        closed_turn(session, 1)
    await ledger.close()
    await ledger.close()
    assert ledger.live_sessions() == []
    for session in sessions:
        assert (await MemoryPersistence(store=store).load(session.id)).events == session.events
    with pytest.raises(ConfigError, match="closed"):
        ledger.create("late")


async def test_a_failed_close_keeps_the_events_queued_and_the_next_close_writes_them() -> None:
    faulty = FaultyStore(MemoryLogStore())
    full = {"kept"}  # the sessions whose writes fail

    def disk_full(write: Any) -> None:
        if write.header.id in full:
            raise OSError(errno.ENOSPC, "disk full")

    faulty.before_write = disk_full
    ledger = Ledger(persistence=SessionPersistence(faulty), load_entrypoints=False)
    written, kept = ledger.create("written"), ledger.create("kept")
    closed_turn(written, 1)
    await ledger.flush(written)
    closed_turn(kept, 1)
    closed_turn(written, 2)
    with pytest.raises(OSError, match="disk full") as caught:
        await ledger.close()
    notes = caught.value.__notes__
    assert len(notes) == 1
    assert f"session 'kept': {len(kept.events)} committed events could not be written" in notes[0]
    # The store stays open for the queued events; the written session is let go.
    assert not faulty.closed
    assert ledger.live_sessions() == [kept]
    with pytest.raises(ConfigError, match="closed"):
        ledger.create("late")
    other = SessionPersistence(faulty)  # the same store, as another writer
    assert (await other.load("written")).events == written.events
    full.clear()
    await ledger.close()  # the fault is gone: this close writes them
    assert faulty.closed
    assert ledger.live_sessions() == []
    assert (await other.load("kept")).events == kept.events
    await ledger.close()


async def test_a_session_whose_events_cannot_land_is_given_up_and_its_events_handed_back() -> None:
    faulty = FaultyStore(MemoryLogStore())
    ledger = Ledger(persistence=SessionPersistence(faulty), load_entrypoints=False)
    session = ledger.create("refused")
    closed_turn(session, 1)
    await ledger.flush(session)
    stored = len(session.events)
    closed_turn(session, 2)
    unwritten = session.events[stored:]
    faulty.before_write = lambda write: (_ for _ in ()).throw(OSError(errno.EIO, "refused"))
    with pytest.raises(OSError, match="refused"):
        await ledger.release(session)  # a plain release flushes first: it fails, still live
    assert ledger.get("refused") is session
    assert await ledger.release(session, discard=True) == list(unwritten)
    assert ledger.get("refused") is None
    faulty.before_write = None
    other = SessionPersistence(faulty)  # the claim went with the release
    assert (await other.load("refused")).events == session.events[:stored]
    await other.close()
    fine = ledger.create("fine")
    closed_turn(fine, 1)
    assert await ledger.release(fine, discard=True) == []  # written: nothing handed back
    await ledger.close()


async def test_a_cancelled_close_goes_on_and_concurrent_closes_share_it() -> None:
    store: MemoryStore = {}
    ledger = memory_ledger(store)
    sessions = [ledger.create(f"s{index}") for index in range(3)]
    for session in sessions:
        closed_turn(session, 1)
    first, second = asyncio.create_task(ledger.close()), asyncio.create_task(ledger.close())
    await asyncio.sleep(0)
    first.cancel()
    await second  # returns only once the shared closing is done
    with pytest.raises(asyncio.CancelledError):
        await first
    assert ledger.live_sessions() == []
    for session in sessions:
        assert (await MemoryPersistence(store=store).load(session.id)).events == session.events
    # A caller cancelled alone does not stop the closing either.
    alone = memory_ledger(store)
    closed_turn(alone.create("alone"), 1)
    cancelled = asyncio.create_task(alone.close())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    for _ in range(100):
        if not alone.live_sessions():
            break
        await asyncio.sleep(0)
    assert alone.live_sessions() == []
    assert "alone" in store


async def test_a_store_close_cancelled_part_way_is_finished_by_the_next_close() -> None:
    # The loop shutting down cancels every task, the closing's own too, while the store is
    # closing: the next close() closes it, and lets go of its claims.
    entered, gate = asyncio.Event(), asyncio.Event()
    store: MemoryStore = {}

    class GatedClose(FaultyStore):
        async def close(self) -> None:
            entered.set()
            await gate.wait()
            await super().close()

    gated = GatedClose(MemoryLogStore(store))
    ledger = Ledger(persistence=SessionPersistence(gated), load_entrypoints=False)
    session = ledger.create("gated")
    closed_turn(session, 1)
    closing = asyncio.create_task(ledger.close())
    await asyncio.wait_for(entered.wait(), 10)  # the closing waits inside the store's close
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()
    await asyncio.wait([closing])
    assert not gated.closed
    gate.set()
    await ledger.close()
    assert gated.closed
    assert (await MemoryPersistence(store=store).load("gated")).events == session.events


def raise_(error: BaseException) -> None:
    raise error


# -- resume and inspect -------------------------------------------------------------------


async def test_resume_returns_the_live_object_or_loads_and_repairs() -> None:
    store: MemoryStore = {}
    ledger = memory_ledger(store)
    session = ledger.create("resumable")
    closed_turn(session, 1)
    open_turn_with_pending_call(session, 2)
    assert await ledger.resume("resumable") is session
    await ledger.close()
    fresh = memory_ledger(store)
    resumed = await fresh.resume("resumable")
    assert types(resumed)[session.seq :] == [
        "tool/result",
        "step/end",
        "turn/end",
        "session/end-seed",
    ]
    with pytest.raises(SessionNotFoundError):
        await fresh.resume("missing")
    with pytest.raises(SessionNotFoundError):
        await Ledger(load_entrypoints=False).resume("resumable")
    await fresh.close()


async def test_resume_or_create_without_a_store_creates_once_then_returns_the_live_one() -> None:
    ledger = Ledger(load_entrypoints=False)
    session = await ledger.resume_or_create("harness", title="first start")
    assert session.header.title == "first start"
    assert session.seq == 0
    assert await ledger.resume_or_create("harness", title="second start") is session
    await ledger.close()
    with pytest.raises(ConfigError):
        await ledger.resume_or_create("harness")


async def test_resume_or_create_never_creates_over_a_log_it_cannot_load() -> None:
    # Only "nothing stored" leads to a create: a stored log that cannot go live (here:
    # a type only the writer's plugin declared) raises, and nothing is created over it.
    class PlanTypes:
        @hookimpl
        def ledger_event_types(self) -> list[EventType]:
            return [EventType("plan/update")]

    store: MemoryStore = {}
    writer = Ledger(
        persistence=MemoryPersistence(store=store), plugins=[PlanTypes()], load_entrypoints=False
    )
    (await writer.resume_or_create("kept")).append("plan/update", {"step": 1})
    await writer.close()
    before = copy.deepcopy(store)
    reader = memory_ledger(store)
    with pytest.raises(FormatUnsupportedError) as caught:
        await reader.resume_or_create("kept")
    assert caught.value.code == "UNKNOWN_EVENT_TYPE"
    assert reader.get("kept") is None
    await reader.close()
    assert store == before


async def test_inspect_gives_a_detached_copy_and_never_writes() -> None:
    store: MemoryStore = {}
    ledger = memory_ledger(store)
    session = ledger.create("looked-at")
    closed_turn(session, 1)
    open_turn_with_pending_call(session, 2)
    copy = await ledger.inspect("looked-at")
    assert copy is not session
    assert copy.events[: session.seq] == session.events
    copy.append("x/note", {"only": "in the copy"})
    assert session.events[-1].type == "tool/call"
    await ledger.flush(session)
    revision = store["looked-at"].changes
    other = memory_ledger(store)
    cold = await other.inspect("looked-at")
    assert types(cold)[session.seq : session.seq + 3] == ["tool/result", "step/end", "turn/end"]
    assert store["looked-at"].changes == revision
    assert other.get("looked-at") is None
    await ledger.close()


# -- fork (docs/reading.md, "fork"; cases I1-I11) -----------------------------------------


async def test_fork_of_an_empty_session_is_just_the_marker() -> None:
    ledger = memory_ledger()
    ledger.create("empty-parent", cwd="/workspace")
    child = await ledger.fork("empty-parent", child_id="empty-child")
    assert types(child) == ["session/end-seed"]
    assert child.header.parent_session == "empty-parent"
    assert child.header.seed_length == 0
    assert child.header.cwd == "/workspace"
    assert child.first_live_seq == 0


async def test_fork_copies_the_prefix_and_leaves_the_source_alone() -> None:
    ledger = memory_ledger()
    source = ledger.create("parent", cwd="/srv")
    closed_turn(source, 1)
    source.append("x/log-only", {"value": "after execution"}, ignorable=True)
    before = source.events
    child = await ledger.fork(source)
    assert child.events[: len(before)] == before
    assert child.events[len(before) - 1].type == "x/log-only"
    assert child.header.seed_length == len(before)
    assert child.first_live_seq == len(before)
    assert source.events is before
    child.append("x/child-only", None, ignorable=True)
    assert source.events is before


async def test_fork_at_a_boundary_and_the_open_turn_rule() -> None:
    ledger = memory_ledger()
    source = ledger.create("bounded")
    first = closed_turn(source, 1)
    closed_turn(source, 2)
    open_turn_with_pending_call(source, 3)
    child = await ledger.fork("bounded", boundary=first[-1].seq)
    assert child.events[: len(first)] == tuple(first)
    assert [m["role"] for m in child.derive_messages()] == [
        m["role"] for m in Session.create(seed=first).derive_messages()
    ]
    for boundary in (len(first), source.seq - 1):  # inside turn 2, inside the open turn 3
        with pytest.raises(ForkError) as caught:
            await ledger.fork("bounded", boundary=boundary)
        assert caught.value.code == "OPEN_TURN"
    with pytest.raises(ForkError) as caught:
        await ledger.fork("bounded")  # default boundary: the open turn 3
    assert caught.value.code == "OPEN_TURN"


@pytest.mark.parametrize("boundary", [-1, 0.5, True, 2**53, 10_000])
async def test_fork_refuses_a_boundary_that_is_not_a_seq(boundary: Any) -> None:
    ledger = memory_ledger()
    closed_turn(ledger.create("src"), 1)
    with pytest.raises(ForkError) as caught:
        await ledger.fork("src", boundary=boundary)
    assert caught.value.code == "INVALID_BOUNDARY"
    ledger.create("empty")
    with pytest.raises(ForkError) as caught:
        await ledger.fork("empty", boundary=0)
    assert caught.value.code == "INVALID_BOUNDARY"
    assert [s.id for s in ledger.live_sessions()] == ["src", "empty"]


async def test_fork_source_and_child_errors() -> None:
    ledger = memory_ledger()
    live = ledger.create("live")
    closed_turn(live, 1)
    ledger.create("child")
    for source in ("missing", Session.create("detached")):
        with pytest.raises(ForkError) as caught:
            await ledger.fork(source)
        assert caught.value.code == "SESSION_NOT_FOUND"
    stale = Session.create("live")
    with pytest.raises(ForkError) as caught:
        await ledger.fork(stale)
    assert caught.value.code == "NOT_LIVE"
    open_turn_with_pending_call(live, 2)
    with pytest.raises(ForkError) as caught:
        await ledger.fork("live", child_id="child")  # checked before the open turn
    assert caught.value.code == "SESSION_ALREADY_EXISTS"


async def test_fork_of_a_stored_session_and_a_stored_child_id() -> None:
    store: MemoryStore = {}
    async with memory_ledger(store) as writer:
        closed_turn(writer.create("stored"), 1)
        closed_turn(writer.create("taken"), 1)
    ledger = memory_ledger(store)
    child = await ledger.fork("stored", child_id="from-storage")
    assert child.header.parent_session == "stored"
    assert ledger.get("stored") is None  # the source is read, not resumed
    with pytest.raises(ForkError) as caught:
        await ledger.fork("stored", child_id="taken")
    assert caught.value.code == "SESSION_ALREADY_EXISTS"
    await ledger.close()
    assert (await MemoryPersistence(store=store).load("from-storage")).events == child.events


# -- delete and listing --------------------------------------------------------------------


async def test_delete_live_stored_and_unknown_sessions() -> None:
    store: MemoryStore = {}
    ledger = memory_ledger(store)
    unflushed = ledger.create("unflushed")
    closed_turn(unflushed, 1)
    await ledger.delete("unflushed")
    assert "unflushed" not in store
    flushed = ledger.create("flushed")
    closed_turn(flushed, 1)
    await ledger.flush(flushed)
    await ledger.delete("flushed")
    assert "flushed" not in store
    with pytest.raises(SessionNotFoundError):
        await ledger.delete("never")
    memoryless = Ledger(load_entrypoints=False)
    memoryless.create("x")
    await memoryless.delete("x")
    with pytest.raises(SessionNotFoundError):
        await memoryless.delete("x")
    await ledger.close()


async def test_list_sessions_yields_most_recent_activity_first_or_newest_created() -> None:
    ticks = iter(range(1_000, 100_000, 10))
    ledger = memory_ledger(clock=lambda: next(ticks))
    for name in ("b", "a", "c"):
        closed_turn(ledger.create(name), 1)
        await ledger.flush(ledger.get(name))  # type: ignore[arg-type]
    closed_turn(ledger.get("b"), 2)  # type: ignore[arg-type]
    await ledger.flush(ledger.get("b"))  # type: ignore[arg-type]
    assert [info.header.id async for info in ledger.list_sessions()] == ["b", "c", "a"]
    listing = ledger.list_sessions(order="created")
    assert [info.header.id async for info in listing] == ["c", "a", "b"]
    assert [info async for info in Ledger(load_entrypoints=False).list_sessions()] == []
    await ledger.close()


# -- release ---------------------------------------------------------------------------------


async def test_release_flushes_detaches_and_resume_brings_the_session_back() -> None:
    store: MemoryStore = {}
    seen: list[int] = []

    class Watcher:
        @hookimpl
        def ledger_committed(self, event: Any) -> None:
            seen.append(event.seq)

    ledger = Ledger(
        persistence=MemoryPersistence(store=store), plugins=[Watcher()], load_entrypoints=False
    )
    session = ledger.create("idle")
    closed_turn(session, 1)
    committed = session.seq
    await ledger.release(session)
    assert ledger.get("idle") is None
    assert store["idle"].next_seq == committed
    session.append("x/after-release", None, ignorable=True)  # detached: not observed, not stored
    assert seen == list(range(committed))
    await asyncio.sleep(0.25)  # longer than the write-behind window
    assert store["idle"].next_seq == committed
    with pytest.raises(NotLiveError):
        await ledger.release(session)
    back = await ledger.resume("idle")
    assert back is not session
    assert back.events[:committed] == session.events[:committed]
    await ledger.close()


async def test_release_keeps_the_session_live_when_its_flush_fails() -> None:
    faulty = FaultyStore(MemoryLogStore())
    ledger = Ledger(persistence=SessionPersistence(faulty), load_entrypoints=False)
    session = ledger.create("stuck")
    closed_turn(session, 1)
    faulty.fail_next_writes(OSError(errno.EIO, "injected"))
    with pytest.raises(OSError, match="injected"):
        await ledger.release(session)
    assert ledger.get("stuck") is session
    await ledger.release(session)
    assert ledger.get("stuck") is None
    await ledger.close()
