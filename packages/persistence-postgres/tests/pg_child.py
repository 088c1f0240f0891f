"""Worker process for the multi-process tests of the PostgreSQL store (run by test_store.py).

Every mode waits for a line on stdin before it writes (the parent's start barrier) and
reports on stdout, one line per step. A library error is reported as
``error CODE`` and exits 3; anything else crashes with a traceback (exit 1), which the
parent treats as a failure.

    migrate URL                 open the store (creating its schema), print "ok"
    append URL ID COUNT         create session ID, append COUNT one-event batches, "ok COUNT"
    race URL ID ROUNDS          load ID; per round: wait for "go", append one event at the
                                cursor, print "won SEQ" or "lost CODE"; wait for "sync",
                                reload, print "synced"
    hammer URL ID COUNT NAME    load ID, print "ready", wait for "go"; append until COUNT
                                events of ours landed, after each SeqMismatchError reload
                                and retry; print "ok WINS LOSSES"

Plugins are passed explicitly and entry points are not loaded, so the child behaves the
same whatever else is installed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import sessionledger_postgres.plugin
from sessionledger import LedgerError, SeqMismatchError, SessionHeader, SessionLockedError
from sessionledger.ledger import open_store
from sessionledger.persistence import SessionPersistence


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
        await store.list()
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


async def race(url: str, session_id: str, rounds: int) -> None:
    store = store_for(url)
    try:
        await store.load(session_id)
        say("ready")
        for number in range(rounds):
            wait()
            seq = await store.cursor(session_id)
            assert seq is not None
            try:
                await store.append(session_id, [note(seq, round=number, pid=os.getpid())])
            except (SeqMismatchError, SessionLockedError) as error:
                say(f"lost {error.code}")
            else:
                say(f"won {seq}")
            wait()
            await store.load(session_id)
            say("synced")
    finally:
        await store.close()


async def hammer(url: str, session_id: str, count: int, name: str) -> None:
    store = store_for(url)
    wins = losses = 0
    try:
        await store.load(session_id)
        say("ready")
        wait()
        while wins < count:
            seq = await store.cursor(session_id)
            assert seq is not None
            try:
                await store.append(session_id, [note(seq, worker=name, n=wins)])
            except SeqMismatchError:
                losses += 1
                await store.load(session_id)
            else:
                wins += 1
    finally:
        await store.close()
    say(f"ok {wins} {losses}")


def main(argv: list[str]) -> None:
    mode, url = argv[1:3]
    try:
        if mode == "migrate":
            asyncio.run(migrate(url))
        elif mode == "append":
            asyncio.run(append(url, argv[3], int(argv[4])))
        elif mode == "race":
            asyncio.run(race(url, argv[3], int(argv[4])))
        elif mode == "hammer":
            asyncio.run(hammer(url, argv[3], int(argv[4]), argv[5]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except LedgerError as error:
        say(f"error {error.code} {error}")
        raise SystemExit(3) from error


if __name__ == "__main__":
    main(sys.argv)
