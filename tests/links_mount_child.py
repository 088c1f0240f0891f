"""Child process of ``test_links.py``: stores reached through bind mounts.

Usage: ``python links_mount_child.py DIR``, run in a private mount namespace (the parent
uses ``unshare``), so the mounts made here vanish with the process. Prints one JSON
object: for each case, the code each attempt got (``"ok"`` when it succeeded), and
whether the mounted file's bytes stayed the same.

- a SQLite database file bound onto another store's database name: refused;
- a SQLite store's directory bound elsewhere: one store (the second writer sees LOCKED);
- a JSONL session directory bound into another store's root: refused;
- a JSONL root bound elsewhere: one store.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from sessionledger import Ledger, LedgerError
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger_jsonl import JsonlPersistence
from sessionledger_sqlite import SqlitePersistence

VICTIM = "victim"


def bind(source: Path, target: Path) -> None:
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)


async def outcome(operation: Awaitable[Any]) -> str:
    try:
        await operation
    except LedgerError as error:
        return error.code
    return "ok"


async def stored(store: SessionPersistence) -> None:
    async with Ledger(persistence=store, load_entrypoints=False) as ledger:
        session = ledger.create(VICTIM, cwd="/srv/app")
        closed_turn(session, 1)
        open_turn_with_pending_call(session, 2)
        await ledger.flush(session)


async def refused_through(store: Callable[[], SessionPersistence]) -> dict[str, str]:
    """What a reader and a writer through a store made by *store* get."""
    reader = store()
    found = {"inspect": await outcome(reader.inspect(VICTIM))}
    await reader.close()
    ledger = Ledger(persistence=store(), load_entrypoints=False)
    found["resume"] = await outcome(ledger.resume(VICTIM))
    await ledger.close()
    return found


async def two_writers(first: SessionPersistence, second: SessionPersistence) -> dict[str, str]:
    """The first store's ledger holds VICTIM live; what the second's resume gets."""
    holder = Ledger(persistence=first, load_entrypoints=False)
    other = Ledger(persistence=second, load_entrypoints=False)
    try:
        return {
            "holder resume": await outcome(holder.resume(VICTIM)),
            "other resume": await outcome(other.resume(VICTIM)),
        }
    finally:
        await other.close()
        await holder.close()


async def main(top: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    # SQLite: the database file bound onto another name.
    (top / "a").mkdir()
    (top / "b").mkdir()
    await stored(SqlitePersistence(top / "a" / "ledger.db"))
    before = (top / "a" / "ledger.db").read_bytes()
    (top / "b" / "ledger.db").touch()
    bind(top / "a" / "ledger.db", top / "b" / "ledger.db")
    results["sqlite file"] = await refused_through(
        functools.partial(SqlitePersistence, top / "b" / "ledger.db")
    )
    results["sqlite file unchanged"] = (top / "a" / "ledger.db").read_bytes() == before
    # SQLite: the store's directory bound elsewhere.
    (top / "c").mkdir()
    bind(top / "a", top / "c")
    results["sqlite directory"] = await two_writers(
        SqlitePersistence(top / "a" / "ledger.db"), SqlitePersistence(top / "c" / "ledger.db")
    )
    # JSONL: a session directory bound into another store.
    await stored(JsonlPersistence(top / "ja"))
    log = top / "ja" / "--srv-app--" / VICTIM / "session.jsonl"
    before = log.read_bytes()
    place = top / "jb" / "--srv-app--" / VICTIM
    place.mkdir(parents=True)
    bind(log.parent, place)
    results["jsonl session directory"] = await refused_through(
        functools.partial(JsonlPersistence, top / "jb")
    )
    results["jsonl log unchanged"] = log.read_bytes() == before
    # JSONL: the root bound elsewhere.
    (top / "jc").mkdir()
    bind(top / "ja", top / "jc")
    results["jsonl root"] = await two_writers(
        JsonlPersistence(top / "ja"), JsonlPersistence(top / "jc")
    )
    return results


if __name__ == "__main__":
    sys.stdout.write(orjson.dumps(asyncio.run(main(Path(sys.argv[1])))).decode())
