"""Child process for the summary index tests: write sessions batch by batch, then exit.

Usage: ``python index_child.py ROOT PREFIX SESSIONS BATCHES [nofsync]``. Writes sessions
``PREFIX-0`` … round-robin, one closed turn per batch (``PREFIX-0`` batch 1, ``PREFIX-1``
batch 1, …, then every second batch), printing ``wrote <id> <batch>`` after each. A
crash test arms ``SESSIONLEDGER_FAILPOINT`` (``jsonl.index.before-append:N``) and kills
the child where it blocks. Depends on nothing but core and this package.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from sessionledger import EventTypeRegistry, Session, SessionHeader
from sessionledger.testing.builders import closed_turn
from sessionledger_jsonl import JsonlPersistence


def ticking(start: int) -> Callable[[], int]:
    state = [start]

    def clock() -> int:
        state[0] += 7
        return state[0]

    return clock


async def main(root: str, prefix: str, sessions: int, batches: int, fsync: bool) -> None:
    store = JsonlPersistence(root, event_types=EventTypeRegistry.with_core(), fsync=fsync)
    ids = [f"{prefix}-{number}" for number in range(sessions)]
    live = {
        session_id: Session.create(session_id, clock=ticking(1000 * number))
        for number, session_id in enumerate(ids)
    }
    try:
        for batch in range(1, batches + 1):
            for session_id in ids:
                if batch == 1:
                    await store.create(SessionHeader(id=session_id, created_at=10, cwd="/srv"))
                events = closed_turn(live[session_id], batch, prompt=f"prompt {batch}")
                await store.append(session_id, events)
                print(f"wrote {session_id} {batch}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], int(args[2]), int(args[3]), args[4:] != ["nofsync"]))
