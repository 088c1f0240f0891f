"""Child process for the multi-process tests of the SQLite store (run by test_store.py).

Usage:
    python sqlite_child.py append PATH SESSION_ID COUNT
        wait for a line on stdin (the start signal), then append COUNT events to a new
        session, one transaction each; print "ok COUNT".
    python sqlite_child.py crash PATH SESSION_ID
        write turn/step/assistant message with a tool call/tool call through a Ledger,
        flush, print "FLUSHED", then sleep until killed.
    python sqlite_child.py abandon PATH SESSION_ID
        open a store, store one turn and exit without closing it (must still exit).

Plugins are passed explicitly and entry points are not loaded, so the child behaves the
same whatever else is installed in the environment.
"""

from __future__ import annotations

import asyncio
import sys

import sessionledger_sqlite.plugin
from sessionledger import Ledger, SessionHeader, assistant_message, tool_call_block
from sessionledger.runtime._opening import open_store

PROVIDER = "fake"
MODEL = "fake-1"
CALL_ID = "call-1"


async def append(path: str, session_id: str, count: int) -> None:
    sys.stdin.readline()  # start barrier: every child opens the (new) file at once
    store = open_store(
        f"sqlite:{path}", plugins=[sessionledger_sqlite.plugin], load_entrypoints=False
    )
    try:
        await store.create(SessionHeader(id=session_id, created_at=0))
        for seq in range(count):
            turn = seq // 2 + 1
            if seq % 2 == 0:
                event = {"type": "turn/start", "seq": seq, "time": seq, "data": {"turn": turn}}
            else:
                data = {"turn": turn, "reason": {"kind": "completed"}}
                event = {"type": "turn/end", "seq": seq, "time": seq, "data": data}
            await store.append(session_id, [event])
    finally:
        await store.close()
    print(f"ok {count}", flush=True)


async def crash(path: str, session_id: str) -> None:
    ledger = Ledger.open(
        f"sqlite:{path}", plugins=[sessionledger_sqlite.plugin], load_entrypoints=False
    )
    session = ledger.create(session_id)
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    message = assistant_message(
        [tool_call_block(CALL_ID, "read_file", '{"path": "package.json"}')],
        provider=PROVIDER,
        model=MODEL,
    )
    session.append(
        "assistant/message", {"turn": 1, "step": 1, "message": message}, surface_op="append"
    )
    session.append(
        "tool/call",
        {
            "turn": 1,
            "step": 1,
            "callId": CALL_ID,
            "name": "read_file",
            "arguments": '{"path": "package.json"}',
        },
    )
    await ledger.flush(session)
    print("FLUSHED", flush=True)
    await asyncio.sleep(600)  # the parent kills us here


#: Keeps the abandoned store reachable until the interpreter exits.
ABANDONED: list[object] = []


async def abandon(path: str, session_id: str) -> None:
    store = open_store(
        f"sqlite:{path}", plugins=[sessionledger_sqlite.plugin], load_entrypoints=False
    )
    ABANDONED.append(store)
    await store.create(SessionHeader(id=session_id, created_at=0))
    await store.append(
        session_id,
        [
            {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}},
            {
                "type": "turn/end",
                "seq": 1,
                "time": 0,
                "data": {"turn": 1, "reason": {"kind": "completed"}},
            },
        ],
    )
    print("STORED", flush=True)


def main(argv: list[str]) -> None:
    mode, path, session_id = argv[1:4]
    if mode == "append":
        asyncio.run(append(path, session_id, int(argv[4])))
    elif mode == "crash":
        asyncio.run(crash(path, session_id))
    elif mode == "abandon":
        asyncio.run(abandon(path, session_id))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
