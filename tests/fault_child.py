"""Child process of ``test_fault_injection.py``: real short writes through ``RLIMIT_FSIZE``.

Usage: ``python fault_child.py URL SESSION_ID``. A file-size limit is process-wide, so it
runs here rather than in the test process. The child writes a first batch, then lowers
its ``RLIMIT_FSIZE`` to just past the end of the store's files (``SIGXFSZ`` ignored), so
the next flush gets a *partial* write followed by ``EFBIG`` (JSONL) or a failed commit
(SQLite). It commits more events while the fault holds, flushes again (fails again),
lifts the limit and flushes (succeeds). Every step is printed to stderr:

    DURABLE <n> | FAILED <n> <exception type> <errno or -> <store bytes>  | DONE

``SESSIONLEDGER_FAILPOINT=jsonl.append.before-rollback`` freezes it after the partial
write and before the rollback, for the parent to kill.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import sys
from pathlib import Path

from sessionledger import Ledger, Session, user_message

START = 1_700_000_000_000


class Clock:
    """Deterministic: every call is 5 ms after the previous one."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        self.now += 5
        return self.now


def batch_one(session: Session) -> None:
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_message("go", id="u1"), surface_op="append")


def batch_two(session: Session) -> None:  # about 24 KB over several records
    for index in range(12):
        session.append("step/start", {"turn": 1, "step": index + 1})
        session.append("plugin/blob", {"text": f"{index:02d}" * 1000}, ignorable=True)
        session.append("step/end", {"turn": 1, "step": index + 1})


def batch_three(session: Session) -> None:
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})


def store_files(url: str) -> list[Path]:
    kind, _, location = url.partition(":")
    if kind == "jsonl":
        return sorted(Path(location).glob("*/*/session.jsonl"))
    return sorted(Path(location).parent.glob(Path(location).name + "*"))


def say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def plugins_for(url: str) -> list[object]:
    from sessionledger_invariants import InvariantsPlugin

    if url.startswith("jsonl:"):
        from sessionledger_jsonl import plugin

        return [InvariantsPlugin(), plugin]
    import sessionledger_sqlite.plugin

    return [InvariantsPlugin(), sessionledger_sqlite.plugin]


async def main(url: str, session_id: str) -> None:
    ledger = Ledger.open(
        url,
        plugins=plugins_for(url),
        load_entrypoints=False,
        write_delay_ms=3_600_000,
        clock=Clock(),
    )
    async with ledger:
        session = ledger.create(session_id)
        batch_one(session)
        await ledger.flush(session)
        sizes = ",".join(str(path.stat().st_size) for path in store_files(url))
        say(f"DURABLE {session.seq} {sizes}")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = max(path.stat().st_size for path in store_files(url)) + 700
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        for build in (batch_two, batch_three):
            build(session)
            try:
                await ledger.flush(session)
            except Exception as error:
                errno = getattr(error, "errno", None)
                sizes = ",".join(str(path.stat().st_size) for path in store_files(url))
                say(f"FAILED {session.seq} {type(error).__name__} {errno or '-'} {sizes}")
            else:
                say(f"UNEXPECTED-SUCCESS {session.seq}")
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        await ledger.flush(session)
        say(f"DURABLE {session.seq}")
    say("DONE")


if __name__ == "__main__":
    os.environ.setdefault("SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD", "1")
    asyncio.run(main(sys.argv[1], sys.argv[2]))
