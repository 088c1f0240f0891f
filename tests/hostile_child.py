"""Child process of ``test_hostile_input.py``: measure one cold load in a fresh process.

Usage: ``python hostile_child.py write|load URL KIND`` where KIND is ``deep`` (a value
nested 100,000 levels) or ``huge`` (a 50 MB string). ``write`` stores a session holding
one such value; ``load`` resumes it and prints ``LOADED <events> <peak RSS growth in
bytes>``: a fresh process, so the growth of ``ru_maxrss`` is what the load itself needed.
"""

from __future__ import annotations

import asyncio
import resource
import sys
from typing import Any

from sessionledger import Ledger

DEPTH = 100_000
HUGE = 50_000_000


def payload(kind: str) -> dict[str, Any]:
    if kind == "huge":
        return {"text": "x" * HUGE}
    value: Any = "bottom"
    for _ in range(DEPTH):
        value = [value]
    return {"nested": value}


def plugins_for(url: str) -> list[object]:
    if url.startswith("jsonl:"):
        from sessionledger_jsonl import plugin

        return [plugin]
    import sessionledger_sqlite.plugin

    return [sessionledger_sqlite.plugin]


async def write(url: str, kind: str) -> None:
    async with Ledger.open(url, plugins=plugins_for(url), load_entrypoints=False) as ledger:
        session = ledger.create("hostile")
        session.append("turn/start", {"turn": 1})
        session.append("plugin/payload", payload(kind), ignorable=True)
        await ledger.flush(session)
    print("WRITTEN", flush=True)


async def load(url: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with Ledger.open(url, plugins=plugins_for(url), load_entrypoints=False) as ledger:
        session = await ledger.resume("hostile")
        count = len(session.events)
    growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    print(f"LOADED {count} {growth}", flush=True)


if __name__ == "__main__":
    mode, url, kind = sys.argv[1:4]
    asyncio.run(write(url, kind) if mode == "write" else load(url))
