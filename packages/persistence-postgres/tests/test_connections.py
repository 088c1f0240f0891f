"""The PostgreSQL store when its connections are lost, cancelled or inherited
(docs/durability.md, "one writer per session" and "lost connections").

The oracle is what must survive: every event of every flush that returned is stored
exactly once, in order; a session stays its writer's across a lost lock connection; no
exception but a ``LedgerError`` reaches the caller; a claim is either made or leaves no
lock behind; a SIGKILLed writer's claim ends at once even while a worker it forked lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from sessionledger import (
    Ledger,
    LedgerError,
    SeqMismatchError,
    Session,
    SessionHeader,
    SessionLockedError,
)
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.claims import holder_name, lock_key
from sessionledger_postgres.plugin import parse_postgres_url
from sessionledger_postgres.testing import (
    PG_URL_ENV,
    ServerUnavailable,
    ThrowawayServer,
    with_options,
)

Make = Callable[..., PostgresPersistence]
NOTE = "x/note"
CHILD = Path(__file__).with_name("pg_child.py")


def base_dsn(url: str) -> str:
    return parse_postgres_url(url)[0]


def note(seq: int, **data: Any) -> dict[str, Any]:
    return {"type": NOTE, "seq": seq, "time": seq, "data": data, "ignorable": True}


async def fetch(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(base_dsn(url))
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def end_lock_connections(url: str) -> int:
    """End this process's lock connections, as an administrator or a reaper would."""
    ended = await fetch(
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        holder_name(),
    )
    return len(ended)


async def lock_holders(url: str, schema: str, session_ids: list[str]) -> dict[str, int]:
    """Which backend (pid) holds each session's advisory lock, for those that are held."""
    keys = {lock_key(schema, session_id): session_id for session_id in session_ids}
    found = await fetch(
        url,
        "SELECT ((l.classid::bigint << 32) | l.objid::bigint) AS key, l.pid FROM pg_locks l "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1",
    )
    held = {}
    for row in found:
        key = row["key"] - (1 << 64) if row["key"] >= 1 << 63 else row["key"]
        if key in keys:
            held[keys[key]] = row["pid"]
    return held


async def wait_for(check: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def stored_notes(url: str, session_id: str) -> list[int]:
    """The ``n`` of every note stored for *session_id*, read by a fresh store."""
    async with Ledger.open(url) as reader:
        session = await reader.inspect(session_id)
    return [event.data["n"] for event in session.events if event.type == NOTE]


@dataclass
class Writer:
    """One live session written by a task: notes appended, and what each flush acknowledged."""

    ledger: Ledger
    session: Session
    seed: int
    appended: list[int] = field(default_factory=list)
    acknowledged: int = 0
    flushes: int = 0
    failures: list[BaseException] = field(default_factory=list)
    paused: bool = False

    async def run(self, stop: asyncio.Event) -> None:
        chooser = random.Random(self.seed)
        while not stop.is_set():
            if self.paused:
                await asyncio.sleep(0.01)
                continue
            for _ in range(chooser.randint(1, 3)):
                number = len(self.appended)
                self.session.append(NOTE, {"n": number}, ignorable=True)
                self.appended.append(number)
            wanted = len(self.appended)
            try:
                await self.ledger.flush(self.session)
            except Exception as error:  # every one is checked to be a LedgerError
                self.failures.append(error)
            else:
                self.acknowledged = wanted
                self.flushes += 1
            await asyncio.sleep(chooser.random() * 0.01)

    def untyped(self) -> list[str]:
        return [repr(error) for error in self.failures if not isinstance(error, LedgerError)]


# -- a lost claim connection, a reaper and a server restart, with 8 writers ------------------


@pytest.fixture(scope="module")
def restartable() -> Iterator[ThrowawayServer]:
    """A private server this module may restart (the shared one serves other tests)."""
    server = ThrowawayServer(max_connections=60)
    try:
        server.start()
    except ServerUnavailable as error:
        if os.environ.get("CI") and not os.environ.get(PG_URL_ENV):
            pytest.fail(f"CI must run the PostgreSQL tests: {error}")
        pytest.skip(f"no private PostgreSQL server could be started: {error}")
    try:
        yield server
    finally:
        server.stop()


async def test_eight_writers_keep_their_sessions_across_lost_connections_and_a_restart(
    restartable: ThrowawayServer,
) -> None:
    assert restartable.url is not None
    url = with_options(restartable.url, schema=f"r_{uuid.uuid4().hex[:8]}")
    ids = [f"w{number}" for number in range(8)]
    ledgers = [Ledger.open(url, write_delay_ms=50) for _ in range(4)]
    writers = [
        Writer(ledgers[number // 2], ledgers[number // 2].create(ids[number], cwd="/w"), number)
        for number in range(8)
    ]
    for writer in writers:
        await writer.ledger.flush(writer.session)  # made durable, hence claimed
    schema = url.rsplit("schema=", 1)[1]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(writer.run(stop)) for writer in writers]

    async def all_held() -> bool:
        return len(await lock_holders(url, schema, ids)) == 8

    async def progress() -> None:
        """Every writer acknowledges at least two more flushes."""
        marks = [writer.flushes for writer in writers]

        async def moved() -> bool:
            return all(w.flushes >= mark + 2 for w, mark in zip(writers, marks, strict=True))

        await wait_for(moved, "every writer to flush again")

    try:
        await progress()
        # 1. The server ends the four lock connections: each store takes its claims again.
        assert await end_lock_connections(url) == 4
        await wait_for(all_held, "the claims taken again")
        await progress()
        # 2. A server restart: every connection ends, flushes fail typed meanwhile.
        await fetch(url, "ALTER ROLE CURRENT_USER SET idle_session_timeout = '400ms'")
        await asyncio.to_thread(restartable.restart)
        await wait_for(all_held, "the claims taken again after the restart")
        await progress()
        # 3. An idle reaper (idle_session_timeout, set for the role above): the writers
        # pause past it. The lock connections are exempt: the same backends hold the
        # claims afterwards, and the pooled connections it ended are replaced.
        before = await lock_holders(url, schema, ids)
        for writer in writers:
            writer.paused = True
        await asyncio.sleep(1.0)
        assert await lock_holders(url, schema, ids) == before
        for writer in writers:
            writer.paused = False
        await progress()
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        durable = [await stored_notes(url, writer.session.id) for writer in writers]
        closing = [ledger.close() for ledger in ledgers]
        closed = await asyncio.gather(*closing, return_exceptions=True)
        await fetch(url, "ALTER ROLE CURRENT_USER RESET idle_session_timeout")
    assert [writer.untyped() for writer in writers] == [[]] * 8
    assert any(writer.failures for writer in writers)  # the restart did interrupt them
    for writer, stored in zip(writers, durable, strict=True):
        # Before close: every note of every flush that returned, once each, in order.
        assert stored == writer.appended[: len(stored)]
        assert len(stored) >= writer.acknowledged
    assert [repr(outcome) for outcome in closed if outcome is not None] == []
    for writer in writers:
        # close() returned: every note appended is stored, exactly once, in order.
        assert await stored_notes(url, writer.session.id) == writer.appended


# -- a session another writer took while the claim was lost ---------------------------------


async def test_a_session_taken_while_the_claim_was_lost_fails_alone_and_typed(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    first = make_store()
    for session_id in ("s1", "s2"):
        await first.create(SessionHeader(id=session_id, created_at=0))
        await first.append(session_id, [note(seq, n=seq) for seq in range(3)])
    rival = await asyncpg.connect(
        base_dsn(pg_url), server_settings={"application_name": "rival writer"}
    )
    try:
        # In one message, so the rival queues for s1's lock before the first store can
        # reconnect: it gets the lock the moment the ended backend lets go of it.
        name = holder_name().replace("'", "''")
        await rival.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE application_name = '{name}'; "
            f"SELECT pg_advisory_lock({lock_key(pg_schema, 's1')})"
        )
        # s2 was taken again with the new connection: its writer goes on.
        await first.append("s2", [note(3, n=3)])
        # s1 fails, typed, naming the writer that has it; nothing is written.
        rows = f'SELECT session_id, seq, data FROM "{pg_schema}".events ORDER BY 1, 2'
        before = await fetch(pg_url, rows)
        with pytest.raises(SessionLockedError, match="rival writer") as lapsed:
            await first.append("s1", [note(3, n=3)])
        assert "lost with its connection" in str(lapsed.value)
        assert lapsed.value.session_id == "s1"
        assert await fetch(pg_url, rows) == before
        # The rival hands the session to another store, which writes to it.
        await rival.execute(f"SELECT pg_advisory_unlock({lock_key(pg_schema, 's1')})")
    finally:
        await rival.close()
    second = make_store()
    await second.load("s1")
    await second.append("s1", [note(3, n=30)])
    with pytest.raises(SessionLockedError):
        await first.append("s1", [note(3, n=3)])
    await second.close()
    # Free again, but the session moved on: the stale batch is refused inside the write.
    with pytest.raises(SeqMismatchError):
        await first.append("s1", [note(3, n=3)])
    # The remedy the message names: release, resume, write.
    await first.release("s1")
    assert len((await first.load("s1")).events) == 4
    await first.append("s1", [note(4, n=4)])
    await first.append("s2", [note(4, n=4)])
    url = with_options(pg_url, schema=pg_schema)
    assert await stored_notes(url, "s1") == [0, 1, 2, 30, 4]
    assert await stored_notes(url, "s2") == [0, 1, 2, 3, 4]


async def test_a_lost_claim_connection_is_replaced_at_once_without_a_write(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    # An idle live session is not left for another writer to take until its next write.
    first, second = make_store(), make_store()
    await first.create(SessionHeader(id="idle", created_at=0))
    await first.append("idle", [note(0, n=0)])
    held = await lock_holders(pg_url, pg_schema, ["idle"])
    assert await end_lock_connections(pg_url) == 1

    async def held_again() -> bool:
        now = await lock_holders(pg_url, pg_schema, ["idle"])
        return bool(now) and now != held

    await wait_for(held_again, "the claim taken again", timeout=5)
    with pytest.raises(SessionLockedError):
        await second.load("idle")


# -- a storm of ended connections -------------------------------------------------------------


async def test_a_storm_of_ended_connections_raises_only_ledger_errors_and_loses_nothing(
    pg_url: str, pg_schema: str
) -> None:
    tag = f"storm-{uuid.uuid4().hex[:8]}"
    url = with_options(pg_url, schema=pg_schema, application_name=tag)
    ledgers = [Ledger.open(url, write_delay_ms=20) for _ in range(2)]
    ids = [f"storm-{number}" for number in range(8)]
    appended: dict[str, list[int]] = {session_id: [] for session_id in ids}
    failures: list[BaseException] = []
    stop = asyncio.Event()

    async def writer(ledger: Ledger, session_id: str, seed: int) -> None:
        chooser = random.Random(seed)
        while not stop.is_set():
            try:
                session = ledger.get(session_id) or await ledger.resume_or_create(
                    session_id, cwd="/storm"
                )
                for _ in range(chooser.randint(1, 3)):
                    session.append(NOTE, {"n": len(appended[session_id])}, ignorable=True)
                    appended[session_id].append(len(appended[session_id]))
                await ledger.flush(session)
                if chooser.random() < 0.2:
                    await ledger.release(session)
                if chooser.random() < 0.2:
                    await ledger.inspect(chooser.choice(ids))
            except Exception as error:  # checked below: LedgerErrors only
                failures.append(error)
            await asyncio.sleep(chooser.random() * 0.005)

    async def killer() -> int:
        chooser = random.Random(99)
        conn = await asyncpg.connect(base_dsn(pg_url))
        ended = 0
        try:
            while not stop.is_set():
                ended += len(
                    await conn.fetch(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = $1 OR application_name = $2",
                        tag,
                        holder_name(),
                    )
                )
                await asyncio.sleep(chooser.uniform(0.01, 0.07))
        finally:
            await conn.close()
        return ended

    for number, session_id in enumerate(ids):  # the schema is made before the storm
        await ledgers[number % 2].flush(ledgers[number % 2].create(session_id, cwd="/storm"))
    tasks = [
        asyncio.create_task(writer(ledgers[number % 2], session_id, number))
        for number, session_id in enumerate(ids)
    ]
    storm = asyncio.create_task(killer())
    await asyncio.sleep(2.5)
    stop.set()
    await asyncio.gather(*tasks)
    assert await storm > 40
    await asyncio.sleep(0.1)
    outcomes = await asyncio.gather(*(ledger.close() for ledger in ledgers), return_exceptions=True)
    assert [repr(error) for error in failures if not isinstance(error, LedgerError)] == []
    assert failures, "the storm must have interrupted something"
    assert [repr(outcome) for outcome in outcomes if outcome is not None] == []
    for session_id in ids:
        assert await stored_notes(url, session_id) == appended[session_id], session_id


# -- a claim or a release cancelled at any point -------------------------------------------


async def test_a_cancelled_claim_or_release_happens_whole_or_not_at_all(make_store: Make) -> None:
    store, other = make_store(), make_store()
    claims, others = store.log_store, other.log_store
    for each in (claims, others):  # both lock connections open: a claim is one round trip
        await each.claim("warm-up")
        await each.release("warm-up")
    outcomes = set()
    for turns in range(120):
        session_id = f"c{turns}"
        claim = asyncio.ensure_future(claims.claim(session_id))
        for _ in range(turns):
            await asyncio.sleep(0)
        claim.cancel()
        try:
            await claim
            claimed = True
        except asyncio.CancelledError:
            claimed = False
        # A claim that was made holds; one that was not left no lock behind.
        if claimed:
            with pytest.raises(SessionLockedError):
                await others.claim(session_id)
            letting_go = asyncio.ensure_future(claims.release(session_id))
            for _ in range(turns % 7):
                await asyncio.sleep(0)
            letting_go.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await letting_go
            # Whether or not the cancelled release happened, a release lets go.
            await claims.release(session_id)
        await others.claim(session_id)  # nothing of ours is left on the server
        await others.release(session_id)
        outcomes.add(claimed)
    assert outcomes == {True, False}  # the sweep cancelled some claims, and let others finish


# -- a worker forked by a writer that is then killed ------------------------------------------


async def test_a_forked_worker_does_not_keep_a_killed_writers_claim(
    pg_url: str, pg_schema: str
) -> None:
    url = with_options(pg_url, schema=pg_schema)
    writer = subprocess.Popen(
        [sys.executable, str(CHILD), "fork-holder", url, "forked"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = None
    try:
        assert writer.stdin is not None
        assert writer.stdout is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
        line = writer.stdout.readline().strip()
        assert line.startswith("HELD "), (line, writer.poll())
        worker = int(line.split()[1])
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        async with Ledger.open(url) as ledger:
            deadline = time.monotonic() + 3.0  # the server sees the socket close at once
            while True:
                try:
                    resumed = await ledger.resume("forked")
                    break
                except SessionLockedError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.02)
            os.kill(worker, 0)  # the worker still lives: it just does not hold the claim
            assert [e.data["n"] for e in resumed.events if e.type == NOTE] == [0, 1]
    finally:
        if worker is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
        if writer.poll() is None:
            writer.kill()
        writer.communicate(timeout=30)
