"""Cancel every public async method of ``Ledger`` and of the backend at each of its awaits.

What a cancelled call guarantees: docs/durability.md, "cancellation".

Each case runs one call as a task and cancels it at its k-th suspension, for k = 0, 1,
2, … until the call ends before it gets there: either at once (*early*: what it awaits
was only just begun, e.g. a statement queued on a connection's worker) or when what it
awaits has completed (*late*: it finished, the call has not seen it yet). Meanwhile another
live session of the same ledger appends and flushes beside it. After every case:

- both live sessions append and flush again, and that succeeds;
- a second store object reads them back: exactly the events of every flush that
  returned, each once, in order;
- the cancelled call happened completely or not at all (what that means for each call is
  its ``check``), and it left no claim behind that it did not record.

The calls run on every backend: memory, JSONL, SQLite, PostgreSQL. Two more attacks
follow: a ``close()`` cancelled at each suspension and called again, and the event loop
shutting down (``asyncio.run`` cancelling every task, the steps a cancelled caller waits
for included) at each suspension of any task. Stores skip fsync (``fsync=False``,
``synchronous=NORMAL``): what is attacked is the state a cancellation leaves, not the
medium.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from pathlib import Path
from typing import Any

import pytest

from sessionledger import (
    Ledger,
    LedgerError,
    SessionExistsError,
    SessionHeader,
    SessionLockedError,
    SessionNotFoundError,
    user_message,
)
from sessionledger.model._session import Session
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.storage._persistence import SessionPersistence
from sessionledger_jsonl import JsonlPersistence
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.plugin import parse_postgres_url
from sessionledger_postgres.testing import drop_schema, with_options
from sessionledger_sqlite import SqlitePersistence
from sessionledger_sqlite.store import SqliteLogStore

#: No call here has more suspensions than this (a bound, so a loop cannot run away).
MAX_STEPS = 400
NEEDLE = "needle"


# -- cancelling a call at its k-th suspension ------------------------------------------------


class Stepped(Coroutine[Any, Any, Any]):
    """Drive *call* as its task would, telling *on_suspend* about each suspension (its
    number from 1 and what the call waits on) before the task sees it."""

    def __init__(
        self, call: Coroutine[Any, Any, Any], on_suspend: Callable[[int, Any], None]
    ) -> None:
        self._call = call
        self._on_suspend = on_suspend
        self._steps = 0

    def _suspended(self, awaited: Any) -> Any:
        self._steps += 1
        self._on_suspend(self._steps, awaited)
        return awaited

    def send(self, value: Any) -> Any:
        return self._suspended(self._call.send(value))

    def throw(self, *error: Any) -> Any:
        return self._suspended(self._call.throw(*error))

    def close(self) -> None:
        self._call.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        return self  # type: ignore[return-value]

    def __iter__(self) -> Stepped:
        return self

    def __next__(self) -> Any:
        return self.send(None)


@dataclasses.dataclass
class Outcome:
    fired: bool  # the call reached suspension k, where it was cancelled
    cancelled: bool  # it ended with CancelledError
    error: BaseException | None  # it raised something else
    result: Any = None


async def cancel_at(call: Coroutine[Any, Any, Any], k: int, *, late: bool) -> Outcome:
    """Run *call*, cancelled at its *k*-th suspension (k = 0: before it starts)."""
    fired = False
    task: asyncio.Task[Any]

    def on_suspend(step: int, awaited: Any) -> None:
        nonlocal fired
        if step != k:
            return
        fired = True
        if late and asyncio.isfuture(awaited):
            # Runs before the task's own wake-up: the result is in, the task has not seen it.
            awaited.add_done_callback(lambda _: task.cancel())
        else:
            task.cancel()

    task = asyncio.ensure_future(Stepped(call, on_suspend))
    if k == 0:
        fired = True
        task.cancel()
    try:
        result = await task
    except asyncio.CancelledError:
        return Outcome(fired, True, None)
    except Exception as error:
        return Outcome(fired, False, error)
    finally:
        call.close()  # a call cancelled before it started was never run
    return Outcome(fired, False, None, result)


# -- the store, the ledger and the sessions beside the call ----------------------------------


def event(seq: int) -> dict[str, Any]:
    """A backend event that opens no turn (so a cold load adds no closers)."""
    return {"type": "test/mark", "seq": seq, "time": seq, "data": {"n": seq}, "ignorable": True}


def as_json(events: Any) -> list[Any]:
    return [item.to_json() for item in events]


class Env:
    """One store, reached through several store objects.

    ``ledger`` (on ``store``) holds two live sessions that keep writing; ``author`` (a
    ledger on ``probe``) writes the sessions a call works on and then lets them go;
    ``probe`` also tries claims; ``reader`` reads everything back.
    """

    def __init__(self, make: Callable[[], SessionPersistence]) -> None:
        self.make = make
        self.store = make()
        self.probe = make()
        self.reader = make()
        self.ledger = Ledger(persistence=self.store, write_delay_ms=60_000)
        self.author = Ledger(persistence=self.probe, write_delay_ms=60_000)
        self.writers: list[Session] = []
        self.checked: dict[str, int] = {}  # seq each writer was last read back up to
        self.failures: list[str] = []
        self.cases = 0

    async def start(self) -> None:
        """Start two live sessions that write beside the calls (new ones each time, so
        that logs stay short; the old ones are read back whole, then deleted)."""
        old = self.writers
        for writer in old:
            await self.ledger.release(writer)
        await self.drop(*(writer.id for writer in old))
        self.writers = []
        for name in ("w1", "w2"):
            writer = self.ledger.create(f"{name}-{uuid.uuid4().hex[:6]}")
            writer.append("test/mark", {"n": 0}, ignorable=True)
            await self.ledger.flush(writer)
            self.writers.append(writer)
            self.checked[writer.id] = 0

    async def stop(self) -> None:
        await self.ledger.close()
        await self.author.close()
        await self.reader.close()

    async def keep_writing(self, done: asyncio.Event) -> None:
        """Append and flush the second writer until *done* (a flush that returned is an
        acknowledgement the check holds the store to)."""
        writer = self.writers[1]
        while not done.is_set():
            writer.append("test/mark", {"n": writer.seq}, ignorable=True)
            await self.ledger.flush(writer)

    async def target(self, case: str, *, open_turn: bool = False) -> tuple[str, list[Any]]:
        """Store a session for a call to work on (through the author, who lets it go)."""
        session = self.author.create(f"t-{case}-{uuid.uuid4().hex[:6]}", meta={"case": case})
        session.append("turn/start", {"turn": 1})
        session.append("user/message", user_message(f"{NEEDLE} {case}"), surface_op="append")
        if not open_turn:
            session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        await self.author.flush(session)
        events = as_json(session.events)
        await self.author.release(session)
        return session.id, events

    async def stored(self, session_id: str) -> list[Any] | None:
        """What a fresh reader finds under *session_id* (None: nothing)."""
        try:
            return as_json(await self.reader.read_from(session_id, 0))
        except SessionNotFoundError:
            return None

    async def held(self, session_id: str) -> bool:
        """Whether some store object holds *session_id*'s claim (the probe cannot take it)."""
        try:
            await self.probe.log_store.claim(session_id)
        except SessionLockedError:
            return True
        await self.probe.log_store.release(session_id)
        return False

    async def drop(self, *session_ids: str) -> None:
        """Delete what a case stored (through the probe; the store keeps small)."""
        for session_id in session_ids:
            live = self.ledger.get(session_id)
            if live is not None:
                await self.ledger.delete(session_id)
            await self.store.release(session_id)
            with contextlib.suppress(SessionNotFoundError):
                await self.probe.delete(session_id)

    async def drop_after(self, label: str, ctx: dict[str, Any]) -> None:
        try:
            await self.drop(*case_ids(ctx))
        except LedgerError as error:
            self.fail(label, f"what the case stored cannot be deleted: {error!r}")

    async def after(self, label: str, *, full: bool = False) -> None:
        """The writers go on, and what they flushed is stored exactly."""
        for writer in self.writers:
            writer.append("test/mark", {"n": writer.seq}, ignorable=True)
            writer.append("test/mark", {"n": writer.seq}, ignorable=True)
            try:
                await self.ledger.flush(writer)
            except LedgerError as error:
                self.fail(label, f"the next flush of {writer.id} failed: {error!r}")
                raise Broken from error
        for writer in self.writers:
            start = 0 if full else self.checked[writer.id]
            try:
                stored = as_json(await self.reader.read_from(writer.id, start))
            except LedgerError as error:
                self.fail(label, f"reading {writer.id} back failed: {error!r}")
                raise Broken from error
            expected = as_json(writer.events_from(start))
            if stored != expected:
                self.fail(
                    label,
                    f"{writer.id} from seq {start}: {len(stored)} events stored, "
                    f"{len(expected)} flushed",
                )
            self.checked[writer.id] = writer.seq

    def fail(self, label: str, message: str) -> None:
        self.failures.append(f"{label}: {message}")

    def expect(self, condition: bool, label: str, message: str) -> None:
        if not condition:
            self.fail(label, message)


# -- the calls -------------------------------------------------------------------------------


@dataclasses.dataclass
class Call:
    """One public async method: what it needs, the call, and what may hold after it.
    What a read needs is prepared once for all its cases (a read changes nothing)."""

    name: str
    prepare: Callable[[Env, str], Awaitable[dict[str, Any]]]
    call: Callable[[Env, dict[str, Any]], Coroutine[Any, Any, Any]]
    check: Callable[[Env, dict[str, Any], Outcome, str], Awaitable[None]]
    reads: bool = False


def case_ids(ctx: dict[str, Any]) -> list[str]:
    """The sessions a case stored, to delete after it."""
    ids = ctx["ids"] if "ids" in ctx else [ctx["id"]]
    return [*ids, *([ctx["child"]] if "child" in ctx else [])]


async def stored_target(env: Env, case: str) -> dict[str, Any]:
    session_id, events = await env.target(case)
    return {"id": session_id, "events": events}


async def open_target(env: Env, case: str) -> dict[str, Any]:
    session_id, events = await env.target(case, open_turn=True)
    return {"id": session_id, "events": events}


async def two_targets(env: Env, case: str) -> dict[str, Any]:
    first, first_events = await env.target(case)
    second, second_events = await env.target(case)
    return {"ids": [first, second], "events": [first_events, second_events], "case": case}


async def unchanged(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    """A read: the session is stored as it was, and nobody holds it."""
    env.expect(await env.stored(ctx["id"]) == ctx["events"], label, "a read changed the log")
    env.expect(not await env.held(ctx["id"]), label, "a read left a claim behind")


async def all_unchanged(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    for session_id, events in zip(ctx["ids"], ctx["events"], strict=True):
        env.expect(await env.stored(session_id) == events, label, f"{session_id} changed")
        env.expect(not await env.held(session_id), label, f"{session_id} left claimed")


async def went_live_or_not(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    """``resume``: live here (repaired, claimed), or nothing happened at all."""
    session_id = ctx["id"]
    stored = await env.stored(session_id)
    live = env.ledger.get(session_id)
    if live is not None:
        repaired = stored is not None and len(stored) > len(ctx["events"])
        env.expect(repaired, label, "live, but its repair is not stored")
        env.expect(stored == as_json(live.events[: len(stored or ())]), label, "live != stored")
        env.expect(await env.held(session_id), label, "live, but not claimed")
        await env.ledger.release(live)
    else:
        env.expect(stored == ctx["events"], label, "not live, yet the log changed")
        env.expect(not await env.held(session_id), label, "not live, yet claimed")


async def loaded_or_not(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    """Backend ``load``: owned (repaired, cursor taken up) or nothing happened at all."""
    session_id = ctx["id"]
    stored = await env.stored(session_id)
    if await env.held(session_id):
        env.expect(stored is not None and len(stored) > len(ctx["events"]), label, "no repair")
        # The owner's cursor is where the log ends: its next batch lands there.
        assert stored is not None
        try:
            await env.store.append(session_id, [event(len(stored))])
        except LedgerError as error:
            env.fail(label, f"the owner cannot append after its load: {error!r}")
    else:
        env.expect(stored == ctx["events"], label, "not owned, yet the log changed")


async def deleted_or_whole(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    stored = await env.stored(ctx["id"])
    env.expect(stored in (None, ctx["events"]), label, f"neither whole nor gone: {stored!r}")
    env.expect(not await env.held(ctx["id"]), label, "a delete left a claim behind")


async def live_target(env: Env, case: str) -> dict[str, Any]:
    session = env.ledger.create(f"l-{case}-{uuid.uuid4().hex[:6]}")
    session.append("test/mark", {"n": 0}, ignorable=True)
    await env.ledger.flush(session)
    session.append("test/mark", {"n": 1}, ignorable=True)  # pending
    return {"id": session.id, "session": session, "events": as_json(session.events[:1])}


async def live_deleted(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    stored = await env.stored(ctx["id"])
    live = env.ledger.get(ctx["id"]) is not None
    if outcome.cancelled and outcome.fired and not live and stored is not None:
        env.fail(label, "retired from the ledger, but still stored")
    env.expect(stored in (None, ctx["events"]), label, f"neither whole nor gone: {stored!r}")
    if not live:
        env.expect(not await env.held(ctx["id"]), label, "deleted, yet claimed")


async def released_or_live(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    session: Session = ctx["session"]
    if env.ledger.get(session.id) is session:
        env.expect(await env.held(session.id), label, "still live, but not claimed")
        await env.ledger.flush(session)
    else:
        env.expect(not await env.held(session.id), label, "released, yet claimed")
    stored = await env.stored(session.id)
    env.expect(stored == as_json(session.events), label, "the flush before release is lost")


async def flushed(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    session: Session = ctx["session"]
    await env.ledger.flush(session)
    env.expect(await env.stored(session.id) == as_json(session.events), label, "flush lost")


async def forked_or_not(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    child = env.ledger.get(ctx["child"])
    env.expect(await env.stored(ctx["id"]) == ctx["events"], label, "the fork changed its source")
    env.expect(await env.stored(ctx["child"]) is None, label, "an unflushed child is stored")
    if child is not None:
        env.expect(len(child.events) == len(ctx["events"]) + 1, label, "a partial child")


async def pruned_or_not(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    """An executed prune: every candidate gone and both audit records, or nothing."""
    stored = [await env.stored(session_id) for session_id in ctx["ids"]]
    records = [r for r in await env.reader.audit() if r.get("criteria", {}).get("meta")]
    mine = [r for r in records if r["criteria"]["meta"] == {"case": ctx["case"]}]
    if all(item is None for item in stored):
        env.expect([r["phase"] for r in mine] == ["begin", "end"], label, f"audit: {mine!r}")
    else:
        env.expect(stored == ctx["events"], label, "a prune deleted part of its plan")
        env.expect(mine == [], label, "a prune that deleted nothing is on record")
    for session_id in ctx["ids"]:
        env.expect(not await env.held(session_id), label, f"{session_id} left claimed")


async def new_header(env: Env, case: str) -> dict[str, Any]:
    return {"id": f"c-{case}-{uuid.uuid4().hex[:6]}", "events": []}


async def created_or_not(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    header = SessionHeader(id=ctx["id"], created_at=0)
    with contextlib.suppress(SessionExistsError):  # refused only if the first registered
        await env.store.create(header)
    await env.store.append(ctx["id"], [event(0)])
    env.expect(await env.stored(ctx["id"]) == normalized([event(0)]), label, "create, append")


async def registered(env: Env, case: str) -> dict[str, Any]:
    session_id = f"a-{case}-{uuid.uuid4().hex[:6]}"
    await env.store.create(SessionHeader(id=session_id, created_at=0))
    return {"id": session_id, "before": [], "batch": [event(0), event(1)]}


async def appending(env: Env, case: str) -> dict[str, Any]:
    ctx = await registered(env, case)
    await env.store.append(ctx["id"], ctx["batch"])
    return {"id": ctx["id"], "before": ctx["batch"], "batch": [event(2), event(3)]}


async def cold(env: Env, case: str) -> dict[str, Any]:
    session_id, events = await env.target(case)
    return {"id": session_id, "before": events, "batch": [event(len(events))]}


def normalized(events: list[dict[str, Any]]) -> list[Any]:
    from sessionledger.model._events import SessionEvent

    return [SessionEvent.from_json(item).to_json() for item in events]


async def appended_or_not(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    """The whole batch or none of it; the same batch again is neither refused nor
    doubled; the next batch follows."""
    before, batch = normalized(ctx["before"]), normalized(ctx["batch"])
    stored = await env.stored(ctx["id"]) or []
    env.expect(stored in (before, before + batch), label, f"a partial batch: {len(stored)}")
    try:
        await env.store.append(ctx["id"], ctx["batch"])
        await env.store.append(ctx["id"], [event(len(before) + len(batch))])
    except LedgerError as error:
        env.fail(label, f"retrying the batch, then the next one, failed: {error!r}")
    else:
        after = normalized([event(len(before) + len(batch))])
        env.expect(await env.stored(ctx["id"]) == before + batch + after, label, "retry doubled")


async def owned_target(env: Env, case: str) -> dict[str, Any]:
    ctx = await stored_target(env, case)
    await env.store.load(ctx["id"])
    return ctx


async def released_or_held(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    env.expect(await env.stored(ctx["id"]) == ctx["events"], label, "a release changed the log")
    if await env.held(ctx["id"]):
        try:  # still the owner: it can write
            await env.store.append(ctx["id"], [event(len(ctx["events"]))])
        except LedgerError as error:
            env.fail(label, f"held, but the owner cannot write: {error!r}")


async def claimed_or_not(env: Env, ctx: dict[str, Any], outcome: Outcome, label: str) -> None:
    """A store's ``claim``: held and recorded (so its ``release`` lets go), or not held."""
    if await env.held(ctx["id"]):
        await env.store.log_store.release(ctx["id"])
        env.expect(not await env.held(ctx["id"]), label, "a claim its store does not know of")


async def page(env: Env) -> Any:
    return await env.ledger.list_sessions(limit=5)


async def iterate(env: Env) -> Any:
    return [info async for info in env.ledger.list_sessions()]


def ledger_calls() -> list[Call]:
    fork_prepare = stored_target

    async def fork_ready(env: Env, case: str) -> dict[str, Any]:
        ctx = await fork_prepare(env, case)
        ctx["child"] = f"f-{case}-{uuid.uuid4().hex[:6]}"
        return ctx

    async def flush_ready(env: Env, case: str) -> dict[str, Any]:
        return await live_target(env, case)

    prune = {"keep_last": 0}
    return [
        Call("Ledger.resume", open_target, lambda e, c: e.ledger.resume(c["id"]), went_live_or_not),
        Call(
            "Ledger.resume_or_create",
            open_target,
            lambda e, c: e.ledger.resume_or_create(c["id"]),
            went_live_or_not,
        ),
        Call(
            "Ledger.inspect",
            open_target,
            lambda e, c: e.ledger.inspect(c["id"]),
            unchanged,
            reads=True,
        ),
        Call(
            "Ledger.fork",
            fork_ready,
            lambda e, c: e.ledger.fork(c["id"], child_id=c["child"]),
            forked_or_not,
        ),
        Call("Ledger.flush", flush_ready, lambda e, c: e.ledger.flush(c["session"]), flushed),
        Call(
            "Ledger.release",
            flush_ready,
            lambda e, c: e.ledger.release(c["session"]),
            released_or_live,
        ),
        Call(
            "Ledger.delete", stored_target, lambda e, c: e.ledger.delete(c["id"]), deleted_or_whole
        ),
        Call(
            "Ledger.delete (live)", live_target, lambda e, c: e.ledger.delete(c["id"]), live_deleted
        ),
        Call(
            "Ledger.prune (dry run)",
            two_targets,
            lambda e, c: e.ledger.prune(**prune, meta={"case": c["case"]}),
            all_unchanged,
            reads=True,
        ),
        Call(
            "Ledger.prune",
            two_targets,
            lambda e, c: e.ledger.prune(**prune, meta={"case": c["case"]}, dry_run=False),
            pruned_or_not,
        ),
        Call(
            "Ledger.reindex (one)",
            stored_target,
            lambda e, c: e.ledger.reindex(c["id"]),
            unchanged,
            reads=True,
        ),
        Call(
            "Ledger.reindex (all)",
            stored_target,
            lambda e, c: e.ledger.reindex(),
            unchanged,
            reads=True,
        ),
        Call(
            "Ledger.search",
            stored_target,
            lambda e, c: e.ledger.search(NEEDLE),
            unchanged,
            reads=True,
        ),
        Call(
            "Ledger.list_sessions (page)",
            stored_target,
            lambda e, c: page(e),
            unchanged,
            reads=True,
        ),
        Call(
            "Ledger.list_sessions (iteration)",
            stored_target,
            lambda e, c: iterate(e),
            unchanged,
            reads=True,
        ),
        Call("Ledger.audit", stored_target, lambda e, c: e.ledger.audit(), unchanged, reads=True),
    ]


def backend_calls() -> list[Call]:
    def header(ctx: dict[str, Any]) -> SessionHeader:
        return SessionHeader(id=ctx["id"], created_at=0)

    prune = {"keep_last": 0}
    return [
        Call("create", new_header, lambda e, c: e.store.create(header(c)), created_or_not),
        Call(
            "append (creates)",
            registered,
            lambda e, c: e.store.append(c["id"], c["batch"]),
            appended_or_not,
        ),
        Call(
            "append", appending, lambda e, c: e.store.append(c["id"], c["batch"]), appended_or_not
        ),
        Call(
            "append (cold)", cold, lambda e, c: e.store.append(c["id"], c["batch"]), appended_or_not
        ),
        Call("load", open_target, lambda e, c: e.store.load(c["id"]), loaded_or_not),
        Call("inspect", open_target, lambda e, c: e.store.inspect(c["id"]), unchanged, reads=True),
        Call(
            "read_from",
            stored_target,
            lambda e, c: e.store.read_from(c["id"], 1),
            unchanged,
            reads=True,
        ),
        Call(
            "revision", stored_target, lambda e, c: e.store.revision(c["id"]), unchanged, reads=True
        ),
        Call("list", stored_target, lambda e, c: e.store.list(), unchanged, reads=True),
        Call(
            "list_snapshots",
            stored_target,
            lambda e, c: e.store.list_snapshots(),
            unchanged,
            reads=True,
        ),
        Call(
            "list_sessions",
            stored_target,
            lambda e, c: e.store.list_sessions(),
            unchanged,
            reads=True,
        ),
        Call("search", stored_target, lambda e, c: e.store.search(NEEDLE), unchanged, reads=True),
        Call("audit", stored_target, lambda e, c: e.store.audit(), unchanged, reads=True),
        Call("delete", stored_target, lambda e, c: e.store.delete(c["id"]), deleted_or_whole),
        Call(
            "LogStore.claim",
            stored_target,
            lambda e, c: e.store.log_store.claim(c["id"]),
            claimed_or_not,
        ),
        Call("release", owned_target, lambda e, c: e.store.release(c["id"]), released_or_held),
        Call(
            "salvage (dry run)",
            open_target,
            lambda e, c: e.store.salvage(c["id"], dry_run=True),
            unchanged,
            reads=True,
        ),
        Call("salvage", open_target, lambda e, c: e.store.salvage(c["id"]), loaded_or_not),
        Call(
            "prune (dry run)",
            two_targets,
            lambda e, c: e.store.prune(**prune, meta={"case": c["case"]}),
            all_unchanged,
            reads=True,
        ),
        Call(
            "prune",
            two_targets,
            lambda e, c: e.store.prune(**prune, meta={"case": c["case"]}, dry_run=False),
            pruned_or_not,
        ),
        Call(
            "reindex (one)",
            stored_target,
            lambda e, c: e.store.reindex(c["id"]),
            unchanged,
            reads=True,
        ),
        Call("reindex (all)", stored_target, lambda e, c: e.store.reindex(), unchanged, reads=True),
    ]


CALLS = [*ledger_calls(), *backend_calls()]


class Broken(Exception):
    """The writers beside the calls can no longer write: no later case means anything."""


async def attack(env: Env, call: Call, modes: tuple[str, ...]) -> None:
    """Cancel *call* at each of its suspensions in turn, in each of *modes* ("early",
    "late"), until it ends before the suspension it was to be cancelled at."""
    ctx: dict[str, Any] | None = None
    for k in itertools.count():
        reached = False
        for mode in modes if k else modes[:1]:
            label = f"{call.name} cancelled at suspension {k} ({mode})"
            if ctx is None:
                ctx = await call.prepare(env, str(env.cases))
            env.cases += 1
            done = asyncio.Event()
            beside = asyncio.create_task(env.keep_writing(done))
            await asyncio.sleep(0)
            outcome = await cancel_at(call.call(env, ctx), k, late=mode == "late")
            done.set()
            await beside
            reached = reached or outcome.fired
            if outcome.error is not None:
                env.fail(label, f"raised {outcome.error!r}")
            await env.after(label)
            if not call.reads:  # a read changes nothing: checked once, in the end
                await call.check(env, ctx, outcome, label)
                await env.drop_after(label, ctx)
                ctx = None
        if not reached or k >= MAX_STEPS:
            break
    if ctx is not None:
        await call.check(env, ctx, Outcome(True, True, None), f"{call.name}, in the end")
        await env.drop_after(f"{call.name}, in the end", ctx)
    await env.after(f"{call.name}, in the end", full=True)
    await env.start()


# -- the backends ----------------------------------------------------------------------------


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgresql"])
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], SessionPersistence]]:
    """Store objects of one store, of each kind."""
    if request.param == "memory":
        shared = MemoryPersistence().store
        yield lambda: MemoryPersistence(store=shared)
    elif request.param == "jsonl":
        yield lambda: JsonlPersistence(tmp_path / "sessions", fsync=False)
    elif request.param == "sqlite":
        yield lambda: SqlitePersistence(tmp_path / "ledger.db", synchronous="NORMAL")
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"cancel_{uuid.uuid4().hex[:12]}"
        dsn, options = parse_postgres_url(with_options(base, schema=schema, pool_max_size=2))
        yield lambda: PostgresPersistence(dsn, **options)
        await drop_schema(base, schema)


async def fuzz(make: Callable[[], SessionPersistence], modes: tuple[str, ...]) -> list[str]:
    """Attack every call on one store; return what failed."""
    env = Env(make)
    await env.start()
    try:
        for call in CALLS:
            await attack(env, call, modes)
    except Broken:
        pass  # the failure that broke the writers is on the list
    finally:
        with contextlib.suppress(LedgerError):
            await env.stop()
    return env.failures


async def test_a_cancelled_call_loses_no_acknowledged_event_and_happens_whole_or_not_at_all(
    make_store: Callable[[], SessionPersistence],
) -> None:
    failures = await fuzz(make_store, ("early",))
    assert failures == [], "\n".join(failures[:40])


@pytest.mark.slow
async def test_a_call_cancelled_after_what_it_awaited_completed(
    make_store: Callable[[], SessionPersistence],
) -> None:
    # The result is in, the call has not seen it yet: e.g. a COMMIT that ran, a thread
    # that finished, a reply that arrived.
    failures = await fuzz(make_store, ("late",))
    assert failures == [], "\n".join(failures[:40])


async def closed_again(
    make: Callable[[], SessionPersistence], start: Callable[[SessionPersistence], Awaitable[Any]]
) -> list[str]:
    """Cancel a close at each of its suspensions (while a read is using the store), then
    close again: every committed event is stored, no claim outlives the closed object,
    and a SQLite store has let go of its connection. *start* makes the object to close
    hold a session with a pending event and returns (close, session id, events)."""
    env = Env(make)
    try:
        for k in itertools.count():
            label = f"close cancelled at suspension {k}, then closed again"
            store = make()
            close, session_id, events = await start(store)
            reading = asyncio.ensure_future(store.list_sessions())
            await asyncio.sleep(0)  # the read holds the store's connection
            outcome = await cancel_at(close(), k, late=False)
            try:
                await close()
            except LedgerError as error:
                env.fail(label, f"the second close failed: {error!r}")
            with contextlib.suppress(LedgerError):  # it may find the store closed
                await reading
            env.expect(await env.stored(session_id) == events, label, "committed events lost")
            env.expect(not await env.held(session_id), label, "a claim outlives the close")
            if isinstance(store.log_store, SqliteLogStore):
                connection = store.log_store.connection
                env.expect(connection is None, label, "the closed store's connection is open")
            await env.drop_after(label, {"id": session_id})
            if not outcome.fired or k >= MAX_STEPS:
                break
    finally:
        await env.stop()
    return env.failures


async def test_a_cancelled_backend_close_finishes_when_called_again(
    make_store: Callable[[], SessionPersistence],
) -> None:
    async def start(store: SessionPersistence) -> Any:
        session_id = f"closing-{uuid.uuid4().hex[:6]}"
        await store.create(SessionHeader(id=session_id, created_at=0))
        await store.append(session_id, [event(0), event(1)])
        return store.close, session_id, normalized([event(0), event(1)])

    failures = await closed_again(make_store, start)
    assert failures == [], "\n".join(failures[:40])


async def test_a_cancelled_ledger_close_finishes_when_called_again(
    make_store: Callable[[], SessionPersistence],
) -> None:
    async def start(store: SessionPersistence) -> Any:
        ledger = Ledger(persistence=store, write_delay_ms=60_000)
        session = ledger.create(f"closing-{uuid.uuid4().hex[:6]}")
        session.append("test/mark", {"n": 0}, ignorable=True)
        await ledger.flush(session)
        session.append("test/mark", {"n": 1}, ignorable=True)  # pending: close writes it
        return ledger.close, session.id, as_json(session.events)

    failures = await closed_again(make_store, start)
    assert failures == [], "\n".join(failures[:40])


# -- the loop's own shutdown -----------------------------------------------------------------
#
# ``asyncio.run`` ends by cancelling every task left, the steps that a cancelled caller
# waits for included. Then each store operation still ends whole or not at all, nothing
# acknowledged is lost, and the next run finds the store as a crash there would leave it:
# every session whole, free to be resumed and written.


@dataclasses.dataclass
class Shutdown:
    """A call at whose shutdown the loop ends, and the states its sessions may be left in."""

    name: str
    call: Callable[[Ledger, str, str], Coroutine[Any, Any, Any]]
    open_turn: bool = False


SHUTDOWNS = [
    Shutdown("Ledger.flush", lambda ledger, live, _: ledger.flush(ledger.get(live))),  # type: ignore[arg-type]
    Shutdown("Ledger.resume", lambda ledger, _, target: ledger.resume(target), open_turn=True),
    Shutdown("Ledger.delete", lambda ledger, _, target: ledger.delete(target)),
    Shutdown(
        "Ledger.prune",
        lambda ledger, _, target: ledger.prune(keep_last=0, meta={"case": target}, dry_run=False),
    ),
    Shutdown(
        "salvage",
        lambda ledger, _, target: ledger.persistence.salvage(target),  # type: ignore[union-attr]
        open_turn=True,
    ),
]


def untimed(events: list[Any]) -> list[Any]:
    """*events* without their times (a repair's closers take the time they are made)."""
    return [{key: value for key, value in item.items() if key != "time"} for item in events]


def counting_tasks(on_suspend: Callable[[int, Any], None]) -> Callable[..., asyncio.Task[Any]]:
    """A task factory numbering the suspensions of every task it makes, all together."""
    count = itertools.count(1)

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
        return asyncio.Task(
            Stepped(coro, lambda _, awaited: on_suspend(next(count), awaited)), loop=loop, **options
        )

    return factory


async def shut_down_at(
    make: Callable[[], SessionPersistence], shutdown: Shutdown, k: int
) -> dict[str, Any]:
    """Set up, start the call and, at the *k*-th suspension of any task after it started,
    cancel every task as ``asyncio.run`` does; return what was acknowledged by then."""
    store = make()
    ledger = Ledger(persistence=store, write_delay_ms=60_000, load_entrypoints=False)
    author = Ledger(persistence=make(), write_delay_ms=60_000, load_entrypoints=False)
    case = uuid.uuid4().hex[:8]
    writer = ledger.create(f"w-{case}")
    writer.append("test/mark", {"n": 0}, ignorable=True)
    await ledger.flush(writer)
    writer.append("test/mark", {"n": 1}, ignorable=True)  # pending: Ledger.flush writes it
    targets = {}
    for _ in range(2):
        session = author.create(f"t-{case}-{len(targets)}", meta={"case": case})
        session.append("turn/start", {"turn": 1})
        if not shutdown.open_turn:
            session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        await author.flush(session)
        targets[session.id] = as_json(session.events)
        await author.release(session)
    await author.close()
    target = next(iter(targets))
    repaired = {key: untimed(as_json((await ledger.inspect(key)).events)) for key in targets}
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    reached = loop.create_future()

    def on_suspend(step: int, awaited: Any) -> None:
        if step == k:
            for task in asyncio.all_tasks():
                if task is not main:
                    task.cancel()
            reached.set_result(None)

    loop.set_task_factory(counting_tasks(on_suspend))
    call = loop.create_task(
        shutdown.call(ledger, writer.id, case if shutdown.name == "Ledger.prune" else target)
    )
    await asyncio.wait([call, reached], return_when=asyncio.FIRST_COMPLETED)
    loop.set_task_factory(None)
    return {
        "writer": writer.id,
        "acknowledged": as_json(writer.events[:1]),
        "all": as_json(writer.events),
        "targets": targets,
        "repaired": repaired,
        "reached": reached.done(),
        "left open": store,
    }


async def after_shutdown(
    make: Callable[[], SessionPersistence], state: dict[str, Any], label: str
) -> list[str]:
    """The next run: what was acknowledged is stored, every session is whole, and each
    can be resumed and written again (then deleted)."""
    # What the first run left open lets go of its claims, as the end of its process
    # would (this process goes on; the objects may outlive the loop they ran in).
    state["left open"].abandon()
    try:
        return await next_run(make, state, label)
    except LedgerError as error:
        return [f"{label}: the next run failed: {error!r}"]


async def next_run(
    make: Callable[[], SessionPersistence], state: dict[str, Any], label: str
) -> list[str]:
    failures: list[str] = []
    async with Ledger(persistence=make(), write_delay_ms=60_000, load_entrypoints=False) as ledger:
        reader = ledger.persistence
        assert reader is not None
        stored = as_json(await reader.read_from(state["writer"], 0))
        if stored not in (state["acknowledged"], state["all"]):
            failures.append(f"{label}: the writer's acknowledged events are not what is stored")
        for session_id, before in state["targets"].items():
            try:
                found: list[Any] | None = as_json(await reader.read_from(session_id, 0))
            except SessionNotFoundError:
                found = None
            repaired = state["repaired"][session_id]  # closers: a batch, all or nothing
            if found is not None and (
                untimed(found) != repaired[: len(found)]
                or len(found) not in (len(before), len(repaired) - 1)
            ):
                failures.append(f"{label}: {session_id} is neither whole nor gone: {found!r}")
        for session_id in [state["writer"], *state["targets"]]:
            try:
                session = await ledger.resume(session_id)
            except SessionNotFoundError:
                continue
            except LedgerError as error:
                failures.append(f"{label}: {session_id} cannot be resumed: {error!r}")
                continue
            session.append("test/mark", {"n": session.seq}, ignorable=True)
            try:
                await ledger.flush(session)
            except LedgerError as error:
                failures.append(f"{label}: {session_id}: the next flush failed: {error!r}")
            await ledger.delete(session_id)
    return failures


def shutdown_cases() -> list[Any]:
    """Every call on every local backend; on SQLite the multi-step ones run with ``slow``."""
    cases = []
    for kind in ("memory", "jsonl", "sqlite"):
        for shutdown in SHUTDOWNS:
            slow = kind == "sqlite" and shutdown.name in ("Ledger.prune", "salvage")
            marks = [pytest.mark.slow] if slow else []
            cases.append(pytest.param(kind, shutdown, id=f"{kind}-{shutdown.name}", marks=marks))
    return cases


# Objects of a loop that shut down without close() warn when collected: that is the point.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.parametrize(("kind", "shutdown"), shutdown_cases())
def test_the_loop_shutting_down_at_any_await_loses_nothing_acknowledged(
    kind: str, shutdown: Shutdown, tmp_path: Path
) -> None:
    shared = MemoryPersistence().store

    def make() -> SessionPersistence:
        if kind == "memory":
            return MemoryPersistence(store=shared)
        if kind == "jsonl":
            return JsonlPersistence(tmp_path / "sessions", fsync=False)
        # A write lock the shutdown left held would fail the next run: fail it fast.
        return SqlitePersistence(tmp_path / "ledger.db", synchronous="NORMAL", busy_timeout=1)

    failures: list[str] = []
    for k in range(1, MAX_STEPS):
        state = asyncio.run(shut_down_at(make, shutdown, k))
        label = f"{shutdown.name}, the loop shut down at suspension {k}"
        left = state["left open"].log_store
        if isinstance(left, SqliteLogStore) and left.connection and left.connection.in_transaction:
            failures.append(f"{label}: the store's connection is left inside a transaction")
        failures += asyncio.run(after_shutdown(make, state, label))
        if not state["reached"]:
            break
    assert failures == [], "\n".join(failures[:40])
