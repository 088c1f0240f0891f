"""Child process of ``test_feed_processes.py``: a writer, a follower or a repairer of one
session, so the live feed (docs/feed.md) is exercised across real processes.

Usage:

- ``write URL ID BATCHES SEED [park] [retry] [stepped]``: create the session and flush
  BATCHES batches of 1-5 events of an agent's turns (turn, user message, streamed
  chunks, a tool call and its result, the answer). After each flush returns it prints
  every event of the batch as ``EVENT <json>`` and then ``ACKED <seq>``; then ``DONE``.
  With ``park`` it goes on flushing until the session is inside a turn, appends 1-3
  more events without flushing them (``PENDING <json>`` each), prints ``PARKED`` and
  waits to be killed. With ``retry`` a flush that raises a ``LedgerError`` is tried
  again until it succeeds (``RETRY <error>`` on stderr each time). With ``stepped`` the
  parent says when to write: each line on stdin is a number of batches to write now,
  and the end of stdin ends the writing (BATCHES is not used). It sleeps a little
  between batches (``FEED_CHILD_PAUSE_MS``, default 15) so followers run meanwhile.
- ``resume URL ID``: resume the session cold (the repair appends the closers of an open
  turn), flush, close and print ``RESUMED <seq>``.
- ``follow URL ID AFTER``: print each event of ``store.follow(ID, after=AFTER)`` as one
  JSON line (``event.to_json()``), flushed. Until the session exists (nothing printed
  yet) it waits for it. When the session is deleted it prints ``DELETED <seq>: <error>``
  on stderr and exits with status 3.
- ``follow-all URL [CURSOR]``: print each item of ``store.follow_all(after=CURSOR)`` as
  ``{"session": ID, "event": {...}}`` (``{"session": ID, "deleted": true}``), and after
  every third item the feed's cursor as ``{"cursor": "..."}``.

Every line is written with one ``write`` and flushed, so a SIGKILL leaves whole lines
(at most a torn last one, which the parent ignores).

``FEED_CHILD_BREAK`` breaks a follower on purpose, for the test's self-check: ``drop``
leaves out the event of seq 5; ``again`` resumes one event early (``after - 1``), so
the event at the resume point comes twice. For a writer, ``unacked`` flushes the
``PENDING`` events (the store gets events the writer never acknowledged).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import sys
from collections.abc import AsyncIterator, Iterator

import orjson

from sessionledger import (
    Ledger,
    LedgerError,
    Session,
    SessionDeletedError,
    SessionNotFoundError,
    assistant_message,
    open_store,
    tool_call_block,
    tool_result,
    user_message,
)

PROVIDER = "feed"
MODEL = "feed-model"
BREAK = os.environ.get("FEED_CHILD_BREAK", "")
PAUSE_S = int(os.environ.get("FEED_CHILD_PAUSE_MS", "15")) / 1000
CURSOR_EVERY = 3
WAIT_FOR_SESSION_S = 60.0


def emit(line: bytes) -> None:
    out = sys.stdout.buffer
    out.write(line + b"\n")
    out.flush()


def say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# -- the writer --------------------------------------------------------------------------


def _chunks(session: Session, turn: int, step: int, words: list[str]) -> Iterator[int]:
    for word in words:
        chunk = {"type": "text-delta", "index": 0, "text": word}
        yield session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}).seq


def turn_steps(session: Session, turn: int, rng: random.Random) -> Iterator[None]:
    """Append one turn, one event per step: prompt, a step streaming a sentence and
    asking for a tool, the call and its result, a step streaming the answer."""
    call_id = f"call-{turn}"
    session.append("turn/start", {"turn": turn})
    yield
    prompt = user_message(f"question {turn}", id=f"u{turn}")
    session.append("user/message", prompt, surface_op="append")
    yield
    for step in (1, 2):
        session.append("step/start", {"turn": turn, "step": step})
        yield
        words = [f"w{turn}.{step}.{index} " for index in range(rng.randint(1, 4))]
        chunks = []
        for seq in _chunks(session, turn, step, words):
            chunks.append(seq)
            yield
        text = "".join(words)
        blocks: object = text
        if step == 1:
            blocks = [{"type": "text", "text": text}, tool_call_block(call_id, "read", '{"p":1}')]
        message = assistant_message(
            blocks,  # type: ignore[arg-type]
            provider=PROVIDER,
            model=MODEL,
            id=f"a{turn}.{step}",
        )
        session.append(
            "assistant/message",
            {"turn": turn, "step": step, "message": message},
            surface_op="append",
            source_event_seqs=chunks,
        )
        yield
        if step == 1:
            data = {"turn": turn, "step": 1, "callId": call_id, "name": "read", "arguments": "{}"}
            call = session.append("tool/call", data)
            yield
            result = tool_result(call_id, f"contents {turn} " * rng.randint(1, 30), id=f"r{turn}")
            session.append(
                "tool/result",
                {"turn": turn, "step": 1, "message": result},
                surface_op="append",
                source_event_seqs=[call.seq],
            )
            yield
        session.append("step/end", {"turn": turn, "step": step})
        yield
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    yield


def script(session: Session, rng: random.Random) -> Iterator[None]:
    """Every event the writer appends, one ``next()`` each, turn after turn."""
    return itertools.chain.from_iterable(
        turn_steps(session, turn, rng) for turn in itertools.count(1)
    )


def event_line(session: Session, seq: int) -> bytes:
    return orjson.dumps(session.events[seq].to_json())


async def flush(ledger: Ledger, session: Session, retry: bool) -> None:
    while True:
        try:
            await ledger.flush(session)
            return
        except LedgerError as error:
            if not retry:
                raise
            say(f"RETRY {error!r}")
            await asyncio.sleep(0.1)


async def rounds(batches: int, stepped: bool) -> AsyncIterator[int]:
    """The number of batches to write now: *batches* at once, or with *stepped* one
    number for each line on stdin, until it ends."""
    if not stepped:
        yield batches
        return
    while line := await asyncio.to_thread(sys.stdin.readline):
        yield int(line)


async def write(url: str, session_id: str, batches: int, seed: int, options: list[str]) -> None:
    rng = random.Random(seed)
    park, retry = "park" in options, "retry" in options
    # No background writes: an event is stored only by a flush this process awaits, so
    # the ACKED lines say exactly what is acknowledged.
    ledger = Ledger.open(url, write_delay_ms=3_600_000)
    session = ledger.create(session_id, cwd="/srv/feed")
    steps = script(session, rng)
    acked = 0

    async def batch() -> None:
        nonlocal acked
        for _ in range(rng.randint(1, 5)):
            next(steps)
        await flush(ledger, session, retry)
        for seq in range(acked, session.seq):
            emit(b"EVENT " + event_line(session, seq))
        acked = session.seq
        emit(f"ACKED {acked - 1}".encode())
        await asyncio.sleep(rng.uniform(0, 2 * PAUSE_S))

    async for count in rounds(batches, "stepped" in options):
        for _ in range(count):
            await batch()
    if not park:
        await ledger.close()
        emit(b"DONE")
        return
    while session.events[-1].type == "turn/end":  # park inside a turn
        await batch()
    for _ in range(rng.randint(1, 3)):
        next(steps)
    if BREAK == "unacked":
        await ledger.flush(session)
    for seq in range(acked, session.seq):
        emit(b"PENDING " + event_line(session, seq))
    emit(b"PARKED")
    await asyncio.sleep(3600)  # the parent SIGKILLs it here, between flushes


async def resume(url: str, session_id: str) -> None:
    async with Ledger.open(url) as ledger:
        session = await ledger.resume(session_id)
        await ledger.flush(session)
        emit(f"RESUMED {session.seq - 1}".encode())


# -- the followers -----------------------------------------------------------------------


async def follow(url: str, session_id: str, after: int) -> int:
    if BREAK == "again" and after >= 0:
        after -= 1
    store = open_store(url)
    printed = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_FOR_SESSION_S
    try:
        while True:
            try:
                async for event in store.follow(session_id, after=after):
                    if BREAK == "drop" and event.seq == 5:
                        continue
                    emit(orjson.dumps(event.to_json()))
                    printed = True
            except SessionDeletedError as error:
                say(f"DELETED {error.seq}: {error}")
                return 3
            except SessionNotFoundError:
                if printed or loop.time() > deadline:
                    raise
                await asyncio.sleep(0.02)  # not created yet: started before the writer
    finally:
        await store.close()


async def follow_all(url: str, cursor: str | None) -> int:
    store = open_store(url)
    try:
        feed = store.follow_all(after=cursor)
        taken = 0
        async for session_id, event in feed:
            if event is None:
                emit(orjson.dumps({"session": session_id, "deleted": True}))
            else:
                emit(orjson.dumps({"session": session_id, "event": event.to_json()}))
            taken += 1
            if taken % CURSOR_EVERY == 0:
                emit(orjson.dumps({"cursor": feed.cursor}))
    finally:
        await store.close()
    return 0


def main(argv: list[str]) -> int:
    mode, url, *rest = argv[1:]
    if mode == "write":
        session_id, batches, seed, *options = rest
        asyncio.run(write(url, session_id, int(batches), int(seed), options))
        return 0
    if mode == "resume":
        asyncio.run(resume(url, rest[0]))
        return 0
    if mode == "follow":
        return asyncio.run(follow(url, rest[0], int(rest[1])))
    if mode == "follow-all":
        return asyncio.run(follow_all(url, rest[0] if rest else None))
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
