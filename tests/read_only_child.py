"""Child of ``test_read_only.py``, run in a private mount namespace (``unshare --mount``).

Usage: ``python read_only_child.py DIR``

Mounts a tmpfs on DIR, writes there: a SQLite store whose writer closed cleanly, a SQLite
store whose writer was SIGKILLed with transactions still in its ``-wal`` file (the WAL is
never checkpointed), and a JSONL store; then remounts DIR read-only and runs the CLI's
read-only commands on each. Prints one JSON object: per store and command, the exit code
and output. The mount disappears with the namespace.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from sessionledger import Ledger
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call

# A few small transactions stay in the -wal file: SQLite checkpoints them into the
# database only after 1,000 pages, or when the last connection closes (never, here).
KILLED_WRITER = """
import asyncio, sys
from sessionledger import Ledger
from sessionledger.testing.builders import closed_turn

async def main():
    ledger = Ledger.open(sys.argv[1])
    session = ledger.create("in-wal", cwd="/srv/ro")
    closed_turn(session, 1)
    await ledger.flush(session)
    print("FLUSHED", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""

COMMANDS = {
    "ls": ["ls", "--json"],
    "show": ["show", "{id}", "--json"],
    "messages": ["messages", "{id}", "--json"],
    "verify": ["verify", "--all"],
    "search": ["search", "hello", "--json"],
    "audit": ["audit", "--json"],
}


async def fill(url: str) -> None:
    async with Ledger.open(url) as ledger:
        closed = ledger.create("closed", cwd="/srv/ro")
        closed_turn(closed, 1)
        crashed = ledger.create("crashed", cwd="/srv/ro")
        closed_turn(crashed, 1)
        open_turn_with_pending_call(crashed, 2)


def write_with_a_killed_writer(url: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, url], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "FLUSHED"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def run(url: str, args: list[str], session_id: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "sessionledger", "--store", url]
        + [arg.format(id=session_id) for arg in args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return {"code": done.returncode, "out": done.stdout, "err": done.stderr}


def main(top: Path) -> None:
    top.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(top)], check=True)
    stores = {
        "sqlite": (f"sqlite:{top / 'clean' / 'ledger.db'}", "crashed"),
        "sqlite-wal": (f"sqlite:{top / 'killed' / 'ledger.db'}", "in-wal"),
        "jsonl": (f"jsonl:{top / 'sessions'}", "crashed"),
    }
    asyncio.run(fill(stores["sqlite"][0]))
    asyncio.run(fill(stores["jsonl"][0]))
    write_with_a_killed_writer(stores["sqlite-wal"][0])
    subprocess.run(["mount", "-o", "remount,ro", str(top)], check=True)
    before = sorted(str(path.relative_to(top)) for path in top.rglob("*"))
    results: dict[str, object] = {"files": before}
    for name, (url, session_id) in stores.items():
        results[name] = {command: run(url, args, session_id) for command, args in COMMANDS.items()}
    results["files-after"] = sorted(str(path.relative_to(top)) for path in top.rglob("*"))
    print(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
