"""One writer per session (docs/durability.md), with real processes, on every backend that
has files or a server: SQLite, JSONL and PostgreSQL.

The oracle is exact: what the holder made durable is read back event for event, the
refused side changed nothing (same revision), and a dead holder's session is resumed at
once and repaired with exactly the closers of its open turn.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import gc
import inspect
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger import (
    ConfigError,
    ForkError,
    Ledger,
    Session,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
    open_store,
)
from sessionledger.storage._memory import MemoryPersistence, MemoryStore
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import (
    closed_turn,
    finish_pending_call,
    open_turn_with_pending_call,
)
from sessionledger_jsonl import JsonlPersistence
from sessionledger_postgres.testing import drop_schema, with_options
from sessionledger_sqlite import SqlitePersistence

CHILD = Path(__file__).with_name("ownership_child.py")
SESSION = "owned"


@pytest.fixture(params=["sqlite", "jsonl", "postgresql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A store URL of each kind, empty."""
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'ledger.db'}"
    elif request.param == "jsonl":
        yield f"jsonl:{tmp_path / 'sessions'}"
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"own_{uuid.uuid4().hex[:12]}"
        yield with_options(base, schema=schema, pool_max_size=2)
        await drop_schema(base, schema)


class Holder:
    """The child process holding the session live (with *options*: see the child)."""

    def __init__(self, url: str, expected: Path, *options: str) -> None:
        self.expected = expected
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), url, SESSION, str(expected), *options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        held, pid, *workers = self._line().split()
        assert (held, pid) == ("HELD", str(self.process.pid))
        #: The children it started that outlive it (``workers``).
        self.workers = [int(worker) for worker in workers]

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line:
            _, err = self.process.communicate(timeout=60)
            pytest.fail(f"holder exited ({self.process.returncode}): {err}")
        return line

    def events(self) -> list[dict[str, Any]]:
        """What the holder made durable, as it wrote it down."""
        return [orjson.loads(line) for line in self.expected.read_bytes().splitlines()]

    def finish(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write("finish\n")
        self.process.stdin.flush()
        line = self._line()
        assert line.startswith("CLOSED "), line
        assert self.process.wait(timeout=60) == 0
        return int(line.split()[1])

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        assert self.process.returncode == -signal.SIGKILL

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def holder(store_url: str, tmp_path: Path) -> Iterator[Holder]:
    started = Holder(store_url, tmp_path / "expected.jsonl")
    try:
        yield started
    finally:
        started.stop()


async def revision(ledger: Ledger) -> str:
    assert ledger.persistence is not None
    infos = await ledger.persistence.list_snapshots()
    return next(info.revision for info in infos if info.header.id == SESSION)


def as_json(events: Any) -> list[dict[str, Any]]:
    """Events as plain JSON values, as the holder wrote them down."""
    return [orjson.loads(orjson.dumps(event.to_json())) for event in events]


async def test_a_session_live_in_another_process_is_refused_and_its_turn_ends_normally(
    store_url: str, holder: Holder
) -> None:
    durable = holder.events()
    async with Ledger.open(store_url) as ledger:
        before = await revision(ledger)
        with pytest.raises(SessionLockedError) as refused:
            await ledger.resume(SESSION)
        assert refused.value.code == "LOCKED"
        assert f"pid {holder.process.pid} on " in str(refused.value)
        # Reading is never blocked, and the refusal wrote nothing: no closers appended
        # into the holder's open turn.
        view = await ledger.inspect(SESSION)
        assert as_json(view.events[: len(durable)]) == durable
        assert [info.header.id async for info in ledger.list_sessions()] == [SESSION]
        assert await revision(ledger) == before
    count = holder.finish()  # the holder's next flush and its close still succeed
    complete = holder.events()
    assert len(complete) == count
    async with Ledger.open(store_url) as ledger:
        resumed = await ledger.resume(SESSION)
        # Every event the holder wrote, and no repair: its turn had ended normally.
        assert as_json(resumed.events[:count]) == complete
        assert [event.type for event in resumed.events[count:]] == ["session/end-seed"]


async def test_a_killed_holder_is_replaced_at_once_and_its_open_turn_repaired(
    store_url: str, holder: Holder
) -> None:
    durable = holder.events()
    holder.kill()
    async with Ledger.open(store_url) as ledger:
        resumed = await ledger.resume(SESSION)  # no timeout to wait out
        assert as_json(resumed.events[: len(durable)]) == durable
        closers = resumed.events[len(durable) :]
        assert [event.type for event in closers] == [
            "tool/result",
            "step/end",
            "turn/end",
            "session/end-seed",
        ]
        assert closers[0].data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        assert closers[2].data["reason"] == {"kind": "interrupted"}


async def test_two_ledgers_in_one_process_hold_a_session_one_at_a_time(store_url: str) -> None:
    async with Ledger.open(store_url) as first, Ledger.open(store_url) as second:
        session = first.create(SESSION, cwd="/srv/owner")
        closed_turn(session, 1)
        await first.flush(session)
        with pytest.raises(SessionLockedError):
            await second.resume(SESSION)
        stored = as_json(session.events)
        assert as_json((await second.inspect(SESSION)).events)[: len(stored)] == stored
        await first.release(session)
        taken = await second.resume(SESSION)
        closed_turn(taken, 2)
        await second.flush(taken)
        with pytest.raises(SessionLockedError):
            await first.resume(SESSION)
        expected = as_json(taken.events)
    async with Ledger.open(store_url) as ledger:
        assert as_json((await ledger.resume(SESSION)).events)[: len(expected)] == expected


# -- forked workers (JSONL and SQLite keep claims in a lock file) --------------------------


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_workers_of_a_killed_holder_keep_none_of_its_claims(
    kind: str, tmp_path: Path
) -> None:
    # The holder forked a worker (multiprocessing "fork") and executed another
    # (close_fds=False) before it was killed; both still run, and the session is taken at
    # once all the same.
    url = f"jsonl:{tmp_path / 'sessions'}" if kind == "jsonl" else f"sqlite:{tmp_path / 'l.db'}"
    holder = Holder(url, tmp_path / "expected.jsonl", "workers")
    try:
        assert len(holder.workers) == 2
        durable = holder.events()
        holder.kill()
        assert all(alive(pid) for pid in holder.workers)
        async with Ledger.open(url) as ledger:
            resumed = await ledger.resume(SESSION)
            assert as_json(resumed.events[: len(durable)]) == durable
            assert resumed.events[len(durable)].type == "tool/result"  # repaired
    finally:
        for pid in holder.workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        holder.stop()


# -- one process, every backend: ledgers on one backend object, close, event loops --------

Backends = Callable[[], SessionPersistence]


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgresql"])
async def backends(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backends]:
    """Make backend objects over one store of each kind, empty: each call a new object,
    which is another writer as another process would be. (Without fsync: nothing here
    outlives the process.)"""
    if request.param == "memory":
        storage: MemoryStore = {}
        yield lambda: MemoryPersistence(store=storage)
    elif request.param == "jsonl":
        yield lambda: JsonlPersistence(tmp_path / "sessions", fsync=False)
    elif request.param == "sqlite":
        yield lambda: SqlitePersistence(tmp_path / "ledger.db", synchronous="NORMAL")
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"own_{uuid.uuid4().hex[:12]}"
        url = with_options(base, schema=schema, pool_min_size=1, pool_max_size=2)
        yield lambda: open_store(url)
        await drop_schema(base, schema)


def note(seq: int) -> dict[str, Any]:
    return {"type": "kit/note", "seq": seq, "time": seq, "data": {}, "ignorable": True}


async def test_two_ledgers_on_one_backend_object_are_two_writers(backends: Backends) -> None:
    backend = backends()
    first = Ledger(persistence=backend)
    second = Ledger(persistence=backend)
    session = first.create(SESSION, cwd="/srv/owner")
    closed_turn(session, 1)
    open_turn_with_pending_call(session, 2)  # an open turn: any other load would repair it
    await first.flush(session)
    before = await backend.revision(SESSION)
    end = len(session.events)
    # The second ledger, and calls made directly on the backend object (a writer of their
    # own), are refused: nothing repaired, written, cut or deleted.
    attempts: dict[str, Callable[[], Awaitable[object]]] = {
        "resume": lambda: second.resume(SESSION),
        "resume_or_create": lambda: second.resume_or_create(SESSION),
        "direct load": lambda: backend.load(SESSION),
        "direct salvage": lambda: backend.salvage(SESSION),
        "direct append": lambda: backend.append(SESSION, [note(end)]),
        "direct delete": lambda: backend.delete(SESSION),
        "delete": lambda: second.delete(SESSION),
    }
    for name, attempt in attempts.items():
        with pytest.raises(SessionLockedError) as refused:
            await attempt()
        assert refused.value.code == "LOCKED", name
        assert refused.value.session_id == SESSION, name
    twin = second.create(SESSION)  # create is lazy; its first flush meets the stored log
    closed_turn(twin, 1)
    with pytest.raises(SessionExistsError):
        await second.flush(twin)
    with pytest.raises(SessionLockedError):
        await second.delete(SESSION)  # drops the live twin, and deletes nothing
    with pytest.raises(ForkError) as forked:
        await second.fork(SESSION, boundary=0, child_id=SESSION)
    assert forked.value.code == "SESSION_ALREADY_EXISTS"
    await backend.release(SESSION)  # a direct release lets go of nothing it does not hold
    assert await backend.revision(SESSION) == before
    # The first keeps writing, also after the second closed.
    finish_pending_call(session, 2)
    await first.flush(session)
    await second.close()
    closed_turn(session, 3)
    await first.flush(session)
    await first.close()
    stored = await backends().load(SESSION)
    assert as_json(stored.events) == as_json(session.events)
    # A ledger dropped with its sessions lets another on the same backend object take them.
    backend = backends()
    dropped = Ledger(persistence=backend)
    await dropped.flush(closed_turn_of(dropped.create("dropped")))
    del dropped
    gc.collect()
    taker = Ledger(persistence=backend)
    assert (await taker.resume("dropped")).seq > 0
    await taker.close()


def closed_turn_of(session: Session) -> Session:
    closed_turn(session, 1)
    return session


class CancelAtStep:
    """Count the steps of every task created while installed (each time one resumes); at
    step *k*, cancel the chosen victims at once, where the step left them suspended."""

    def __init__(self, k: int, victims: Callable[[list[asyncio.Task[Any]]], Iterable[Any]]):
        self.k = k
        self.steps = 0
        self.fired = False
        self.tasks: list[asyncio.Task[Any]] = []
        self._victims = victims

    def stepped(self) -> None:
        self.steps += 1
        if self.steps == self.k:
            self.fired = True
            for task in self._victims(self.tasks):
                task.cancel()

    def factory(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **options: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(Counted(coro, self), loop=loop, **options)
        self.tasks.append(task)
        return task


class Counted(collections.abc.Coroutine):  # type: ignore[type-arg]
    """A coroutine that tells *counter* after each of its steps."""

    def __init__(self, inner: Any, counter: CancelAtStep) -> None:
        self._inner = inner
        self._counter = counter

    def send(self, value: Any) -> Any:
        try:
            return self._inner.send(value)
        finally:
            self._counter.stepped()

    def throw(self, *error: Any) -> Any:
        try:
            return self._inner.throw(*error)
        finally:
            self._counter.stepped()

    def close(self) -> None:
        self._inner.close()

    def __await__(self) -> Any:
        return self._inner.__await__()


@pytest.mark.parametrize("victims", ["caller", pytest.param("everything", marks=pytest.mark.slow)])
async def test_close_cancelled_at_any_step_is_finished_by_the_next_close(
    backends: Backends, victims: str, request: pytest.FixtureRequest
) -> None:
    # For k = 1, 2, …: close() is cancelled at the k-th step of the tasks it runs (only
    # its caller, or every task it started, as a loop shutting down does), then called
    # again. Every committed event of both sessions (one written before, one new) is then
    # stored exactly once, and another writer takes them at once: no claim left behind.
    # A cancelled caller leaves the closing running, so there each ledger shares one
    # backend object with a ledger that stays open (its close lets go of its own sessions
    # only), which keeps the sweep short; a loop shutting down cancels the store's own
    # close too, so there each ledger has a backend object of its own.
    loop = asyncio.get_running_loop()
    other = backends()
    shared = backends()
    keeper = Ledger(persistence=shared)
    for k in itertools.count(1):
        backend = shared if victims == "caller" else backends()
        ledger = Ledger(persistence=backend, write_delay_ms=60_000)
        old, new = ledger.create(f"old-{k}"), ledger.create(f"new-{k}")
        closed_turn(old, 1)
        await ledger.flush(old)
        open_turn_with_pending_call(old, 2)
        closed_turn(new, 1)
        counter = CancelAtStep(k, lambda tasks: tasks[:1] if victims == "caller" else tasks)
        loop.set_task_factory(counter.factory)
        try:
            closing = loop.create_task(ledger.close())
            await asyncio.wait([closing])
        finally:
            loop.set_task_factory(None)
        if counter.fired:
            assert closing.cancelled() or closing.exception() is None
            await ledger.close()
        else:
            assert closing.result() is None
        for session, repair in ((old, ["tool/result", "step/end", "turn/end"]), (new, [])):
            stored = await other.load(session.id)  # claims it: nothing was left held
            assert as_json(stored.events[: len(session.events)]) == as_json(session.events), k
            assert [event.type for event in stored.events[len(session.events) :]] == repair, k
            await other.release(session.id)
        if not counter.fired:
            break
    await other.close()
    await keeper.close()
    assert k > 5, k  # the close was cancelled at each of its steps


async def awaited(awaitable: Awaitable[object]) -> object:
    return await awaitable


PUBLIC_ASYNC = {
    name
    for name, member in vars(Ledger).items()
    if inspect.iscoroutinefunction(member) and (not name.startswith("_") or name[:2] == "__")
}


def test_a_ledger_refuses_a_second_event_loop_and_a_close_there_lets_go(
    backends: Backends,
) -> None:
    before = {thread.ident for thread in threading.enumerate()}
    ledger = Ledger(persistence=backends(), write_delay_ms=60_000)

    async def first_loop() -> tuple[Session, Session]:
        kept, pending = ledger.create("kept"), ledger.create("pending")
        closed_turn(kept, 1)
        await ledger.flush(kept)
        closed_turn(pending, 1)  # committed, never written: its loop ends first
        return kept, pending

    kept, pending = asyncio.run(first_loop())
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "flush": lambda: ledger.flush(kept),
        "resume": lambda: ledger.resume("kept"),
        "resume_or_create": lambda: ledger.resume_or_create("new"),
        "inspect": lambda: ledger.inspect("kept"),
        "fork": lambda: ledger.fork("kept"),
        "search": lambda: ledger.search("hello"),
        "prune": lambda: ledger.prune(keep_last=1),
        "audit": ledger.audit,
        "reindex": ledger.reindex,
        "delete": lambda: ledger.delete("kept"),
        "release": lambda: ledger.release(kept),
        "__aenter__": ledger.__aenter__,
        "list_sessions": lambda: awaited(ledger.list_sessions()),
        "await": lambda: awaited(ledger),
    }
    assert PUBLIC_ASYNC - set(calls) == {"close", "__aexit__"}

    async def second_loop() -> None:
        for name, call in calls.items():
            with pytest.raises(ConfigError) as refused:
                await call()
            assert "event loop" in str(refused.value), name
        with pytest.raises(ConfigError):
            ledger.create("late")
        # close() (here through leaving ``async with``) lets go of everything at once, and
        # names the session whose events could not be written.
        with pytest.raises(ConfigError) as closing:
            await ledger.__aexit__(None, None, None)
        notes = "\n".join(closing.value.__notes__)
        assert f"session 'pending': {len(pending.events)} committed events" in notes
        assert "'kept'" not in notes
        await ledger.close()  # once closed, closed for good
        other = backends()
        assert as_json((await other.load("kept")).events) == as_json(kept.events)
        with pytest.raises(SessionNotFoundError):
            await other.load("pending")
        await other.close()

    asyncio.run(second_loop())
    for _ in range(500):  # the store's driver threads (SQLite's) stop on their own
        if {thread.ident for thread in threading.enumerate()} <= before:
            break
        time.sleep(0.01)
    assert {thread.ident for thread in threading.enumerate()} <= before
