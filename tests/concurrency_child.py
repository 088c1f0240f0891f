"""Child process of ``test_concurrency.py``.

Usage:
    python concurrency_child.py append URL SESSION_ID COUNT
        wait for a line on stdin (every child starts at once), create SESSION_ID and
        append COUNT events one ``append`` call (one durable write) each; print
        ``ok COUNT`` or ``error <type> <message>``.
    python concurrency_child.py race URL SESSION_ID NAME ROUNDS
        two of these race on one session. Per round: open a fresh store, read (inspect)
        the session's next seq (round 0: the session does not exist yet), print
        ``READY <round> <next seq>``, wait for ``go`` on stdin, append one event at that
        seq (round 0: create and append seq 0), close the store and print
        ``WIN <round>`` or ``LOSE <round> <error type>``.

Events carry the writer's NAME, so the parent can tell whose event was stored.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from sessionledger import SessionHeader
from sessionledger._errors import LedgerError
from sessionledger.runtime._opening import open_store


def plugins_for(url: str) -> list[object]:
    if url.startswith("jsonl:"):
        from sessionledger_jsonl import plugin

        return [plugin]
    import sessionledger_sqlite.plugin

    return [sessionledger_sqlite.plugin]


def event(seq: int, writer: str) -> dict[str, Any]:
    """The deterministic event at *seq*: turns of two events, marked with the writer."""
    turn = seq // 2 + 1
    if seq % 2 == 0:
        return {"type": "turn/start", "seq": seq, "time": seq, "data": {"turn": turn}}
    reason = {"kind": "completed", "writer": writer}
    return {"type": "turn/end", "seq": seq, "time": seq, "data": {"turn": turn, "reason": reason}}


def mark(seq: int, writer: str) -> dict[str, Any]:
    """A race round's event: an ignorable marker, so the log never has an open turn (a
    cold load would repair it, and the racers would write closers instead of racing)."""
    return {
        "type": "race/mark",
        "seq": seq,
        "time": seq,
        "data": {"writer": writer},
        "ignorable": True,
    }


def header(session_id: str) -> SessionHeader:
    return SessionHeader(id=session_id, created_at=0, cwd="/srv/shared")


async def append(url: str, session_id: str, count: int) -> None:
    sys.stdin.readline()
    store = open_store(url, plugins=plugins_for(url), load_entrypoints=False)
    try:
        await store.create(header(session_id))
        for seq in range(count):
            await store.append(session_id, [event(seq, session_id)])
    except LedgerError as error:
        print(f"error {type(error).__name__} {error}", flush=True)
        return
    finally:
        await store.close()
    print(f"ok {count}", flush=True)


async def race(url: str, session_id: str, name: str, rounds: int) -> None:
    for number in range(rounds):
        if number:
            # Wait until the parent saw both outcomes: the winner of the last round may
            # still be writing when the loser's error arrives.
            sys.stdin.readline()
        store = open_store(url, plugins=plugins_for(url), load_entrypoints=False)
        try:
            if number == 0:
                await store.create(header(session_id))
                seq = 0
            else:
                seq = len((await store.inspect(session_id)).events)  # reading takes no claim
            print(f"READY {number} {seq}", flush=True)
            sys.stdin.readline()
            try:
                await store.append(session_id, [mark(seq, name)])
            except LedgerError as error:
                outcome = f"LOSE {number} {type(error).__name__}"
            else:
                outcome = f"WIN {number}"
        finally:
            await store.close()
        print(outcome, flush=True)


def main(argv: list[str]) -> None:
    mode, url, session_id = argv[1:4]
    if mode == "append":
        asyncio.run(append(url, session_id, int(argv[4])))
    elif mode == "race":
        asyncio.run(race(url, session_id, argv[4], int(argv[5])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
