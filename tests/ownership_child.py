"""Child process of ``test_ownership.py``: a ledger that holds one session live.

Usage: ``python ownership_child.py URL SESSION_ID EXPECTED_PATH [workers]``

Creates the session, appends a closed turn and a second turn left open after a tool call,
flushes, writes the events it has made durable to EXPECTED_PATH (one JSON object per line)
and prints ``HELD <pid>``. With ``workers`` it first starts two children that sleep and
outlive it, as a worker pool would: one forked by ``multiprocessing`` ("fork") and one
``sleep`` executed with ``close_fds=False``; it prints ``HELD <pid> <worker> <worker>``.
Then it waits for a line on stdin. ``finish`` closes the
open turn normally (the tool's result, the step's and the turn's end), flushes, closes the
ledger, rewrites EXPECTED_PATH with every event and prints ``CLOSED <count>``. The parent
may SIGKILL it instead while it waits. Plugins come from the installed entry points, as
an application's would.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from sessionledger import Ledger, Session
from sessionledger.testing.builders import (
    closed_turn,
    finish_pending_call,
    open_turn_with_pending_call,
)


def write_expected(path: Path, session: Session) -> None:
    lines = b"".join(orjson.dumps(event.to_json()) + b"\n" for event in session.events)
    path.write_bytes(lines)


def start_workers() -> list[int]:
    """Two children that hold on to whatever they inherited, and sleep."""
    forked = multiprocessing.get_context("fork").Process(target=time.sleep, args=(300,))
    forked.start()
    executed = subprocess.Popen(["sleep", "300"], close_fds=False)
    assert forked.pid is not None
    return [forked.pid, executed.pid]


async def main(url: str, session_id: str, expected: Path, workers: bool) -> None:
    ledger = Ledger.open(url)
    session = ledger.create(session_id, cwd="/srv/owner")
    closed_turn(session, 1)
    open_turn_with_pending_call(session, 2)
    await ledger.flush(session)
    write_expected(expected, session)
    pids = start_workers() if workers else []
    print(" ".join(map(str, ["HELD", os.getpid(), *pids])), flush=True)
    command = await asyncio.to_thread(sys.stdin.readline)
    if command.strip() != "finish":
        raise SystemExit(f"unexpected command {command!r}")
    finish_pending_call(session, 2)
    await ledger.flush(session)
    await ledger.close()
    write_expected(expected, session)
    print(f"CLOSED {len(session.events)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:] == ["workers"]))
