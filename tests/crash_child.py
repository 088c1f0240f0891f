"""Child process of the crash matrix (``test_crash_matrix.py``): write through a ``Ledger``
until a failpoint freezes it, so the parent can SIGKILL it at a known instruction.

Usage: ``python crash_child.py MODE URL SESSION_ID`` with ``SESSIONLEDGER_FAILPOINT`` set.

- ``write``: create the session and run ``BATCHES``; before each flush print
  ``FLUSHING <n>`` (events committed so far) and after it ``DURABLE <n>`` (every seq below
  ``n`` is durable), then ``DONE``.
- ``resume``: resume the session cold (load, repair durably), close, print ``RESUMED <n>``.
- ``delete``: run the first two batches (flushed), then delete the session; ``DELETED``.
- ``open``: open the store and list it (creates a SQLite schema); print ``OPENED``.

Everything goes to stderr, unbuffered, so the parent reads one stream (the failpoint
marker ``FAILPOINT <name> <pid>`` is written there too). The parent imports this module
to rebuild the exact events: ids are fixed and the clock is a counter.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from sessionledger import (
    Ledger,
    Session,
    assistant_message,
    tool_call_block,
    tool_result,
    user_message,
)
from sessionledger.runtime._opening import open_store

PROVIDER = "crash"
MODEL = "crash-model"
CWD = "/srv/crash"
START = 1_700_000_000_000


class Clock:
    """A deterministic clock: every call is 3 ms after the previous one."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        self.now += 3
        return self.now


def _chunks(session: Session, turn: int, step: int, kind: str, parts: list[str]) -> list[int]:
    seqs = []
    for text in parts:
        chunk = {"type": kind, "index": 0 if kind == "text-delta" else 1, "text": text}
        seqs.append(
            session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}).seq
        )
    return seqs


def _tool_chunks(
    session: Session, turn: int, step: int, call_id: str, parts: list[str]
) -> list[int]:
    seqs = []
    for position, part in enumerate(parts):
        chunk = {"type": "tool-call-delta", "index": 0, "id": call_id, "argumentsDelta": part}
        if position == 0:
            chunk["name"] = "read"
        data = {"turn": turn, "step": step, "chunk": chunk}
        seqs.append(session.append("assistant/chunk", data).seq)
    return seqs


def _answer(
    session: Session, turn: int, step: int, blocks: object, sources: list[int], mid: str
) -> None:
    message = assistant_message(blocks, provider=PROVIDER, model=MODEL, id=mid)  # type: ignore[arg-type]
    session.append(
        "assistant/message",
        {"turn": turn, "step": step, "message": message},
        surface_op="append",
        source_event_seqs=sources,
    )


def _call(session: Session, turn: int, step: int, call_id: str) -> int:
    data = {"turn": turn, "step": step, "callId": call_id, "name": "read", "arguments": '{"p":1}'}
    return session.append("tool/call", data).seq


def _result(session: Session, turn: int, step: int, call_id: str, call_seq: int) -> None:
    message = tool_result(call_id, f"contents for {call_id} " * 20, id=f"result-{call_id}")
    session.append(
        "tool/result",
        {"turn": turn, "step": step, "message": message},
        surface_op="append",
        source_event_seqs=[call_seq],
    )


def _batch1(s: Session) -> None:  # open step, no call: closers are step/end + turn/end
    s.append("turn/start", {"turn": 1})
    s.append("user/message", user_message("read the config", id="u1"), surface_op="append")
    s.append("request/context", {"provider": PROVIDER, "model": MODEL})
    s.append("step/start", {"turn": 1, "step": 1})
    chunks = _chunks(s, 1, 1, "text-delta", ["Let", " me", " look", " at", " it", "."])
    _answer(s, 1, 1, "Let me look at it.", chunks, "a1")


def _batch2(s: Session) -> None:  # a requested call that never started: TOOL_NOT_STARTED
    s.append("step/end", {"turn": 1, "step": 1})
    s.append("step/start", {"turn": 1, "step": 2})
    chunks = _tool_chunks(s, 1, 2, "call-A", ['{"p"', ":", "1}"])
    _answer(s, 1, 2, [tool_call_block("call-A", "read", '{"p":1}')], chunks, "a2")


def _batch3(s: Session) -> None:  # the call started: TOOL_OUTCOME_UNKNOWN
    _call(s, 1, 2, "call-A")


def _batch4(s: Session) -> None:  # the turn completes: no closers
    call_seq = s.seq - 1
    _result(s, 1, 2, "call-A", call_seq)
    s.append("step/end", {"turn": 1, "step": 2})
    s.append("step/start", {"turn": 1, "step": 3})
    reasoning = _chunks(s, 1, 3, "reasoning-delta", ["hm", "m", "m"])
    text = _chunks(s, 1, 3, "text-delta", ["The", " file", " says", " hi"])
    _answer(s, 1, 3, "The file says hi", reasoning + text, "a3")
    s.append("step/end", {"turn": 1, "step": 3})
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})


def _batch5(s: Session) -> None:  # two calls in one step: one started, one not
    s.append("turn/start", {"turn": 2})
    s.append("user/message", user_message("and the other two?", id="u2"), surface_op="append")
    s.append("step/start", {"turn": 2, "step": 1})
    blocks = [tool_call_block("call-B", "read", '{"p":2}'), tool_call_block("call-C", "read", "{}")]
    _answer(s, 2, 1, blocks, [], "a4")
    _call(s, 2, 1, "call-B")


def _batch6(s: Session) -> None:  # a long batch of small chunks (many records per write)
    _result(s, 2, 1, "call-B", s.seq - 1)
    _chunks(s, 2, 1, "reasoning-delta", [f"r{index}" for index in range(40)])


def _batch7(s: Session) -> None:  # the second call runs and the turn ends
    call_seq = _call(s, 2, 1, "call-C")
    _result(s, 2, 1, "call-C", call_seq)
    s.append("step/end", {"turn": 2, "step": 1})
    s.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})


#: The deterministic event script: one flush after each batch.
BATCHES: list[Callable[[Session], None]] = [
    _batch1,
    _batch2,
    _batch3,
    _batch4,
    _batch5,
    _batch6,
    _batch7,
]


def plugins_for(url: str) -> list[object]:
    """Return the plugins a child passes explicitly (entry points stay off)."""
    from sessionledger_invariants import InvariantsPlugin

    if url.startswith("jsonl:"):
        from sessionledger_jsonl import plugin

        return [InvariantsPlugin(), plugin]
    import sessionledger_sqlite.plugin

    return [InvariantsPlugin(), sessionledger_sqlite.plugin]


def say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def open_ledger(url: str) -> Ledger:
    # No automatic writes: every write happens inside an explicit flush, so the parent
    # knows which batch was in flight when the child froze.
    return Ledger.open(
        url,
        plugins=plugins_for(url),
        load_entrypoints=False,
        write_delay_ms=3_600_000,
        clock=Clock(),
    )


async def write(url: str, session_id: str, batches: int) -> None:
    async with open_ledger(url) as ledger:
        session = ledger.create(session_id, cwd=CWD)
        for build in BATCHES[:batches]:
            build(session)
            say(f"FLUSHING {session.seq}")
            await ledger.flush(session)
            say(f"DURABLE {session.seq}")
    say("DONE")


async def resume(url: str, session_id: str) -> None:
    async with open_ledger(url) as ledger:
        session = await ledger.resume(session_id)
        say(f"RESUMED {session.seq}")


async def delete(url: str, session_id: str) -> None:
    await write(url, session_id, 2)
    async with open_ledger(url) as ledger:
        await ledger.delete(session_id)
    say("DELETED")


async def open_only(url: str) -> None:
    store = open_store(url, plugins=plugins_for(url), load_entrypoints=False)
    try:
        await store.list()
    finally:
        await store.close()
    say("OPENED")


def main(argv: list[str]) -> None:
    mode, url, session_id = argv[1:4]
    if mode == "write":
        asyncio.run(write(url, session_id, len(BATCHES)))
    elif mode == "resume":
        asyncio.run(resume(url, session_id))
    elif mode == "delete":
        asyncio.run(delete(url, session_id))
    elif mode == "open":
        asyncio.run(open_only(url))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
