"""Oversize events and backlogs on every backend (docs/durability.md, "limits and the
backlog").

An event no batch of the store could hold used to be accepted at append and then failed
every flush, with every later event stuck behind it; a backlog gathered while nothing was
written went to the store as one batch, which PostgreSQL cannot take over 1 GiB; and the
backlog grew without bound. The attacks, on memory, JSONL, SQLite and PostgreSQL, with
the store's limits configured small (and SQLite's real row limit scaled down):

- an event over the store's limit, of every kind (a streamed delta, a message, a plugin
  event, a fork's seed), is refused at ``append`` with ``TOO_LARGE``, the session and its
  backlog unchanged, and the session goes on and flushes;
- a backlog many batches long is written in batches that each fit;
- appends past the ledger's backlog bound are refused with ``BACKLOG_FULL``, and a flush
  lets them in again.

The oracle is the store read back by a new backend object: every event that was
accepted is there exactly once, in order, and nothing that was refused. The backlog's
counts are exact: the events not yet written and the sum of what ``event_bytes`` counts
for them, which is never less than their JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from sessionledger import (
    Backlog,
    BacklogFullError,
    EventDataError,
    Ledger,
    LedgerError,
    Session,
    SessionEvent,
    SessionHeader,
    SessionLockedError,
    assistant_message,
    user_message,
)
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.storage._limits import event_bytes, event_limit
from sessionledger.storage._logstore import Batch
from sessionledger.storage._memory import MemoryLogStore, MemoryPersistence
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, stream_text
from sessionledger_jsonl import JsonlPersistence
from sessionledger_jsonl.store import JsonlLogStore
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.plugin import parse_postgres_url
from sessionledger_postgres.store import PostgresLogStore
from sessionledger_postgres.testing import drop_schema, with_options
from sessionledger_sqlite import SqlitePersistence
from sessionledger_sqlite.store import SqliteLogStore
from sessionledger_sqlite.writing import ROW_RESERVE

#: A window no test waits out: nothing is written until a flush, as with a stalled store.
STALLED = 3_600_000
#: Text that escapes every way JSON can: controls, NUL, quotes, astral characters.
AWKWARD = 'a\x00\x01"\\\n é 😀 \u2028 '

Make = Callable[[], SessionPersistence]


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgresql"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Make]:
    """A factory of backend objects on one store."""
    kind = request.param
    if kind == "memory":
        shared: dict[str, Any] = {}
        yield lambda: MemoryPersistence(store=shared)
    elif kind == "jsonl":
        yield lambda: JsonlPersistence(tmp_path / "sessions")
    elif kind == "sqlite":
        yield lambda: SqlitePersistence(tmp_path / "ledger.db")
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"oversize_{uuid.uuid4().hex[:12]}"
        dsn, options = parse_postgres_url(with_options(base, schema=schema, pool_max_size=2))
        yield lambda: PostgresPersistence(dsn, **options)
        await drop_schema(base, schema)


def limited(make: Make, *, event: int, batch: int) -> SessionPersistence:
    """A backend object whose store states the given limits (as a store of a smaller
    medium would)."""
    persistence = make()
    persistence.log_store.max_event_bytes = event
    persistence.log_store.max_batch_bytes = batch
    return persistence


def written_batches(persistence: SessionPersistence) -> list[Batch]:
    """Record every batch the store writes (the real write, observed)."""
    store = persistence.log_store
    written: list[Batch] = []
    write = store.write_batch

    async def write_batch(batch: Batch) -> bool:
        done = await write(batch)
        if done:
            written.append(batch)
        return done

    store.write_batch = write_batch  # type: ignore[method-assign]
    return written


def blob(size: int, text: str = "a") -> dict[str, Any]:
    """Data of a plugin event whose envelope ``event_bytes`` counts as *size*."""
    probe = SessionEvent.from_json(
        {"type": "x/blob", "seq": 0, "time": 0, "data": {"blob": ""}, "ignorable": True}
    )
    room = size - event_bytes(probe)
    quoted = len(jsoncodec.dumps(text)) - 2
    return {"blob": text * (room // quoted) + "a" * (room % quoted)}


async def stored(make: Make, session_id: str) -> list[Any]:
    """A session's log as a new backend object reads it, as envelopes."""
    reader = make()
    try:
        return [event.to_json() for event in await reader.read_from(session_id, 0)]
    finally:
        await reader.close()


def envelopes(session: Session) -> list[Any]:
    return [event.to_json() for event in session.events]


def delta(turn: int, step: int, text: str) -> dict[str, Any]:
    return {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": text}}


# -- an event no batch can hold -----------------------------------------------------------


async def test_an_event_no_batch_can_hold_is_refused_at_append(backend: Make) -> None:
    persistence = limited(backend, event=4096, batch=16_384)
    async with Ledger(persistence=persistence, write_delay_ms=STALLED) as ledger:
        session = ledger.create("oversize")
        session.append("turn/start", {"turn": 1})
        session.append("user/message", user_message("hi"), surface_op="append")
        session.append("step/start", {"turn": 1, "step": 1})
        limit = event_limit(persistence.log_store, session.id)
        assert limit is not None
        at_limit = blob(limit)
        oversize = [
            ("x/blob", blob(limit + 1), {"ignorable": True}),
            ("x/blob", blob(limit + 1, AWKWARD), {"ignorable": True}),
            ("assistant/chunk", delta(1, 1, "t" * limit), {}),  # the delta fast path
            ("assistant/chunk", delta(1, 1, "\x01" * (limit // 6)), {}),
            (
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": assistant_message("m" * limit, provider="p", model="m"),
                },
                {"surface_op": "append"},
            ),
        ]
        for flushed in (False, True):
            if flushed:
                await ledger.flush(session)
            events, backlog = session.events, ledger.backlog()
            for event_type, data, options in oversize:
                with pytest.raises(EventDataError) as refused:
                    session.append(event_type, data, **options)
                assert refused.value.code == "TOO_LARGE"
                assert (refused.value.session_id, refused.value.seq) == (session.id, len(events))
                assert session.events is events  # the log is as it was
                assert ledger.backlog() == backlog
        # exactly at the limit is accepted; and the session goes on and flushes
        session.append("x/blob", at_limit, ignorable=True)
        stream_text(session, 1, 1, "still streaming " + AWKWARD)
        session.append("step/end", {"turn": 1, "step": 1})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        closed_turn(session, 2)
        await ledger.flush(session)
        assert ledger.backlog() == Backlog()
        # a fork whose seed the store cannot hold (a longer id leaves less room) is refused
        with pytest.raises(EventDataError) as refused:
            await ledger.fork(session, child_id="c" * 64)
        assert refused.value.code == "TOO_LARGE"
        assert ledger.get("c" * 64) is None
        assert await ledger.persistence.revision("c" * 64) is None
    assert await stored(backend, session.id) == envelopes(session)
    assert sum(event.type == "x/blob" for event in session.events) == 1

    # the backend's own append refuses it too, writing nothing
    direct = limited(backend, event=4096, batch=16_384)
    header = SessionHeader(id="direct", created_at=0)
    first = SessionEvent.from_json({"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}})
    big = SessionEvent.from_json(
        {"type": "x/blob", "seq": 1, "time": 0, "data": blob(4096), "ignorable": True}
    )
    await direct.create(header)
    with pytest.raises(EventDataError) as refused:
        await direct.append("direct", [first, big])
    assert (refused.value.code, refused.value.seq) == ("TOO_LARGE", 1)
    assert await direct.revision("direct") is None
    await direct.append("direct", [first])
    assert [event.to_json() for event in await direct.read_from("direct", 0)] == [first.to_json()]
    await direct.close()


# -- a backlog many batches long ----------------------------------------------------------


async def test_a_backlog_many_batches_long_lands_whole_in_batches_that_fit(backend: Make) -> None:
    budget = 16_384
    persistence = limited(backend, event=4096, batch=budget)
    batches = written_batches(persistence)
    async with Ledger(persistence=persistence, write_delay_ms=STALLED) as ledger:
        session = ledger.create("backlog")
        for turn in range(1, 7):
            closed_turn(session, turn, prompt=AWKWARD * 60, answer=(AWKWARD + "word ") * 20)
        session.append("turn/start", {"turn": 7})
        session.append("step/start", {"turn": 7, "step": 1})
        for size in (4096, 4096, 1, 4000, 3, 2500):  # events near the limit, back to back
            session.append("x/blob", blob(min(size, 4096 - len(session.id))), ignorable=True)
        backlog = ledger.backlog()
        assert backlog.events == len(session.events)
        assert backlog.bytes > 10 * budget
        await ledger.flush(session)
        assert ledger.backlog() == Backlog()
    assert_fitting(batches, session.events, budget)
    assert await stored(backend, session.id) == envelopes(session)

    # the backend's own append of the whole log in one call splits it the same way
    direct = limited(backend, event=4096, batch=budget)
    batches = written_batches(direct)
    await direct.create(SessionHeader(id="direct", created_at=0))
    await direct.append("direct", session.events)
    await direct.close()
    assert_fitting(batches, session.events, budget)
    assert await stored(backend, "direct") == envelopes(session)


def assert_fitting(batches: list[Batch], events: Sequence[SessionEvent], budget: int) -> None:
    """*batches* hold *events* back to back, in order, each within *budget* (or alone)."""
    assert len(batches) > 10
    end = 0
    for batch in batches:
        assert batch.first_seq == end
        end = batch.end_seq
        counted = sum(event_bytes(event) for event in events[batch.first_seq : end])
        assert counted <= budget or end - batch.first_seq == 1
        assert sum(len(jsoncodec.dumps(record)) for record in batch.records) <= budget
    assert end == len(events)


@contextlib.asynccontextmanager
async def stalled(kind: str, where: str, session_id: str) -> AsyncIterator[None]:
    """Stall the store's writes of *session_id* for the body: SQLite's write lock held by
    another connection (writes fail ``LOCKED`` after the busy timeout), or the session's
    row locked by another PostgreSQL transaction (writes wait)."""
    if kind == "sqlite":
        blocker = sqlite3.connect(where)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            blocker.rollback()
            blocker.close()
        return
    dsn, options = parse_postgres_url(where)
    connection = await asyncpg.connect(dsn)
    try:
        async with connection.transaction():
            found = await connection.fetch(
                f'SELECT 1 FROM "{options["schema"]}".sessions WHERE id = $1 FOR UPDATE',
                session_id,
            )
            assert found
            yield
    finally:
        await connection.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_store_stalled_mid_session_catches_up_in_batches_that_fit(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    budget = 16_384
    if kind == "sqlite":
        where = str(tmp_path / "ledger.db")
        make: Make = lambda: SqlitePersistence(where, busy_timeout=0.05)  # noqa: E731
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"stalled_{uuid.uuid4().hex[:12]}"
        where = with_options(base, schema=schema, pool_max_size=2)
        dsn, options = parse_postgres_url(where)
        make = lambda: PostgresPersistence(dsn, **options)  # noqa: E731
    try:
        persistence = limited(make, event=4096, batch=budget)
        batches = written_batches(persistence)
        async with Ledger(persistence=persistence, write_delay_ms=1) as ledger:
            session = ledger.create("stalled")
            closed_turn(session, 1)
            await ledger.flush(session)
            async with stalled(kind, where, session.id):
                for turn in range(2, 8):
                    closed_turn(session, turn, prompt=AWKWARD * 50, answer=AWKWARD * 30)
                    await asyncio.sleep(0.02)  # background writes start, and wait or fail
                backlog = ledger.backlog()
                assert backlog.bytes > 4 * budget
                unwritten = session.events[-backlog.events :]
                assert backlog.bytes == sum(event_bytes(event) for event in unwritten)
                if kind == "sqlite":
                    with pytest.raises(SessionLockedError):
                        await ledger.flush(session)
                    assert ledger.backlog() == backlog
            await ledger.flush(session)
            assert ledger.backlog() == Backlog()
        assert_fitting(batches, session.events, budget)
        assert await stored(make, session.id) == envelopes(session)
    finally:
        if kind == "postgresql":
            await drop_schema(base, schema)


# -- the backlog's bound ------------------------------------------------------------------


async def test_appends_past_the_backlog_bound_are_refused_and_a_flush_lets_them_in(
    backend: Make,
) -> None:
    bound = 32_768
    persistence = backend()
    async with Ledger(
        persistence=persistence, write_delay_ms=STALLED, max_pending_bytes=bound
    ) as ledger:
        first, second = ledger.create("first"), ledger.create("second")
        for session in (first, second):
            session.append("turn/start", {"turn": 1})
            session.append("step/start", {"turn": 1, "step": 1})
        refused = None
        for count in range(10_000):
            session = (first, second)[count % 2]
            seq = session.seq
            try:
                session.append("assistant/chunk", delta(1, 1, f"token {count} {AWKWARD}"))
            except BacklogFullError as error:
                refused = error
                break
        assert refused is not None
        assert (refused.code, refused.session_id, refused.seq) == ("BACKLOG_FULL", session.id, seq)
        assert session.seq == seq  # nothing appended

        def exact(session: Session) -> Backlog:
            return Backlog(len(session.events), sum(event_bytes(event) for event in session.events))

        assert ledger.backlog(first) == exact(first)
        assert ledger.backlog(second) == exact(second)
        total = ledger.backlog()
        assert total == Backlog(first.seq + second.seq, exact(first).bytes + exact(second).bytes)
        assert (
            sum(len(jsoncodec.dumps(event.to_json())) for event in (*first.events, *second.events))
            <= total.bytes
        )
        assert (
            total.bytes
            <= bound
            < total.bytes
            + event_bytes(
                SessionEvent.from_json(
                    {"type": "assistant/chunk", "seq": seq, "time": 0, "data": delta(1, 1, "x")}
                )
            )
        )
        # the bound is the ledger's: the other session is refused as well
        other = second if session is first else first
        with pytest.raises(BacklogFullError):
            other.append("assistant/chunk", delta(1, 1, "x"))
        # a flush that drains one session makes room
        await ledger.flush(first)
        assert ledger.backlog(first) == Backlog()
        assert ledger.backlog() == ledger.backlog(second)
        first.append("assistant/chunk", delta(1, 1, "after the flush"))
        assert ledger.backlog(first) == exact_tail(first, 1)
        await ledger.flush(second)
        await ledger.flush(first)
        assert ledger.backlog() == Backlog()
        # one event larger than the bound still goes into an empty backlog
        first.append("x/blob", blob(bound + 100), ignorable=True)
        assert ledger.backlog() == Backlog(1, bound + 100)
        with pytest.raises(BacklogFullError):
            second.append("assistant/chunk", delta(1, 1, "x"))
        await ledger.flush(first)
        for session in (first, second):
            session.append("step/end", {"turn": 1, "step": 1})
            session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    for session in (first, second):
        assert await stored(backend, session.id) == envelopes(session)


def exact_tail(session: Session, count: int) -> Backlog:
    events = session.events[-count:]
    return Backlog(count, sum(event_bytes(event) for event in events))


# -- the real limits ----------------------------------------------------------------------


async def test_sqlite_states_the_row_limit_of_its_library_and_a_row_over_it_fails(
    tmp_path: Path,
) -> None:
    probe = sqlite3.connect(":memory:")
    library = probe.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    probe.close()
    assert SqliteLogStore.max_event_bytes == library - ROW_RESERVE
    assert SqliteLogStore.max_batch_bytes == library - ROW_RESERVE
    # Scaled down: the store's connection limited to *length* bytes a row, the store
    # stating what it states for a library built with that limit.
    length = 200_000
    make: Make = lambda: SqlitePersistence(tmp_path / "ledger.db")  # noqa: E731
    persistence = make()
    async with Ledger(persistence=persistence, write_delay_ms=STALLED) as ledger:
        opener = ledger.create("opener")
        opener.append("turn/start", {"turn": 1})
        await ledger.flush(opener)  # the writing connection is open now
        db = persistence.log_store.connection
        assert db is not None
        await db._execute(db._conn.setlimit, sqlite3.SQLITE_LIMIT_LENGTH, length)
        persistence.log_store.max_event_bytes = length - ROW_RESERVE
        persistence.log_store.max_batch_bytes = length - ROW_RESERVE
        session = ledger.create("scaled")
        session.append("turn/start", {"turn": 1})
        limit = event_limit(persistence.log_store, session.id)
        assert limit is not None
        # the largest event the store states fits in a row
        session.append("x/blob", blob(limit), ignorable=True)
        await ledger.flush(session)
        with pytest.raises(EventDataError) as refused:
            session.append("x/blob", blob(limit + 1), ignorable=True)
        assert refused.value.code == "TOO_LARGE"
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        await ledger.flush(session)
        # and SQLite really refuses a row a reserve past it: written past the check, it
        # fails at the medium, typed, and leaves nothing behind
        persistence.log_store.max_event_bytes = None
        persistence.log_store.max_batch_bytes = None
        await persistence.create(SessionHeader(id="unchecked", created_at=0))
        over = SessionEvent.from_json(
            {
                "type": "x/blob",
                "seq": 0,
                "time": 0,
                "data": blob(limit + 2 * ROW_RESERVE),
                "ignorable": True,
            }
        )
        with pytest.raises(LedgerError, match="too big"):
            await persistence.append("unchecked", [over])
        assert await persistence.revision("unchecked") is None
    assert await stored(make, session.id) == envelopes(session)


def test_postgresql_states_what_one_message_can_carry() -> None:
    """A batch travels as one message and each column as one array value, neither over
    1 GiB: the data and the search text (never longer) of each event, twice the batch,
    leave a 32 MiB reserve for the rest. JSONL and memory state the same, so what they
    accept can be copied to every bundled backend."""
    largest = PostgresLogStore.max_batch_bytes
    assert largest is not None
    assert PostgresLogStore.max_event_bytes == largest
    assert 2 * largest + (32 << 20) == 1 << 30
    assert JsonlLogStore.max_event_bytes == MemoryLogStore.max_event_bytes == largest
    assert JsonlLogStore.max_batch_bytes == MemoryLogStore.max_batch_bytes == largest
