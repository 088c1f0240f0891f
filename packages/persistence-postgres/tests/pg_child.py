"""Worker process for the multi-process tests of the PostgreSQL store (run by test_store.py).

Every mode waits for a line on stdin before it writes (the parent's start barrier) and
reports on stdout, one line per step. A library error is reported as
``error CODE`` and exits 3; anything else crashes with a traceback (exit 1), which the
parent treats as a failure.

    migrate URL                 open the store for writing (creating its schema), print "ok"
    append URL ID COUNT         create session ID, append COUNT one-event batches, "ok COUNT"
    fleet URL NAME ROUNDS SESSIONS SEED
                                one worker of a fleet: per round, resume a random one of
                                SESSIONS sessions (``fleet-<n>``) through a Ledger, append
                                one to three notes, flush, release. A refused resume is
                                counted by its code. Prints one JSON line: the notes
                                acknowledged (flush returned) and the refusals.
                                With FLEET_BREAK_CLAIMS=1 the store's claims are switched
                                off, for the harness's self-check.
    fork-holder URL ID          hold session ID live through a Ledger, fork a worker with
                                multiprocessing's "fork" start method (it sleeps), write
                                and flush again, print "HELD <worker pid>" and wait to
                                be killed.

Plugins are passed explicitly and entry points are not loaded, so the child behaves the
same whatever else is installed.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import sys
import time
from typing import Any

import sessionledger_postgres.plugin
from sessionledger import Ledger, LedgerError, SessionHeader, SessionLockedError
from sessionledger.runtime._opening import open_store
from sessionledger.storage._persistence import SessionPersistence


def store_for(url: str) -> SessionPersistence:
    return open_store(url, plugins=[sessionledger_postgres.plugin], load_entrypoints=False)


def note(seq: int, **data: Any) -> dict[str, Any]:
    return {"type": "x/note", "seq": seq, "time": seq, "data": data, "ignorable": True}


def say(line: str) -> None:
    print(line, flush=True)


def wait() -> str:
    return sys.stdin.readline().strip()


async def migrate(url: str) -> None:
    wait()
    store = store_for(url)
    try:
        # A write's connection: the first one creates the schema (a read creates nothing).
        async with store.log_store.connection():
            pass
    finally:
        await store.close()
    say("ok")


async def append(url: str, session_id: str, count: int) -> None:
    wait()
    store = store_for(url)
    try:
        await store.create(SessionHeader(id=session_id, created_at=0))
        for seq in range(count):
            await store.append(session_id, [note(seq, worker=session_id)])
    finally:
        await store.close()
    say(f"ok {count}")


async def fleet(url: str, name: str, rounds: int, sessions: int, seed: int) -> None:
    if os.environ.get("FLEET_BREAK_CLAIMS") == "1":
        break_claims()
    chooser = random.Random(seed)
    acknowledged: list[list[object]] = []
    refused: dict[str, int] = {}
    wait()
    async with Ledger.open(
        url, plugins=[sessionledger_postgres.plugin], load_entrypoints=False
    ) as ledger:
        for number in range(rounds):
            session_id = f"fleet-{chooser.randrange(sessions)}"
            try:
                session = await ledger.resume(session_id)
            except SessionLockedError as error:
                refused[error.code] = refused.get(error.code, 0) + 1
                continue
            notes = [[session_id, name, number, part] for part in range(chooser.randint(1, 3))]
            for note_id in notes:
                session.append("fleet/note", {"id": note_id}, ignorable=True)
            await asyncio.sleep(chooser.random() * 0.004)  # the worker's "work"
            await ledger.flush(session)
            acknowledged.extend(notes)
            await ledger.release(session)
    say(json.dumps({"acknowledged": acknowledged, "refused": refused}))


async def fork_holder(url: str, session_id: str) -> None:
    wait()
    ledger = Ledger.open(url, plugins=[sessionledger_postgres.plugin], load_entrypoints=False)
    session = ledger.create(session_id, cwd="/srv/forker")
    session.append("x/note", {"n": 0}, ignorable=True)
    await ledger.flush(session)  # the session is claimed, on the lock connection
    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(120,))
    worker.start()
    # The fork leaves the parent's connections whole: it goes on writing.
    session.append("x/note", {"n": 1}, ignorable=True)
    await ledger.flush(session)
    say(f"HELD {worker.pid}")
    wait()  # killed here


def break_claims() -> None:
    """Make every claim succeed without a lock: the bug the fleet test must catch."""
    from sessionledger_postgres.store import PostgresLogStore

    async def claimed(self: PostgresLogStore, session_id: str) -> None:
        return None

    PostgresLogStore.claim = claimed  # type: ignore[method-assign]
    PostgresLogStore._hold = claimed  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    mode, url = argv[1:3]
    try:
        if mode == "migrate":
            asyncio.run(migrate(url))
        elif mode == "append":
            asyncio.run(append(url, argv[3], int(argv[4])))
        elif mode == "fork-holder":
            asyncio.run(fork_holder(url, argv[3]))
        elif mode == "fleet":
            asyncio.run(fleet(url, argv[3], int(argv[4]), int(argv[5]), int(argv[6])))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except LedgerError as error:
        say(f"error {error.code} {error}")
        raise SystemExit(3) from error


if __name__ == "__main__":
    main(sys.argv)
