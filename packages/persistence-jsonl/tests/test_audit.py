"""The JSONL audit log (docs/formats.md, "the audit log"): ``ROOT/audit.jsonl``, one
durable JSON line per record, read oldest first, a torn last line skipped."""

from __future__ import annotations

import asyncio
import logging
import os
import select
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sessionledger import EventTypeRegistry, Session, SessionHeader
from sessionledger.testing.builders import closed_turn
from sessionledger_jsonl import JsonlPersistence
from sessionledger_jsonl._files import FileSystem

CORE = EventTypeRegistry.with_core()
SOURCE = Path(__file__).resolve().parents[1] / "src"


class Syncs(FileSystem):
    """A real ``FileSystem`` that records what each fsync made durable."""

    def __init__(self) -> None:
        self.synced: list[str] = []

    def fsync(self, fd: int) -> None:
        self.synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        super().fsync(fd)


def make_store(root: Path, **options: Any) -> JsonlPersistence:
    return JsonlPersistence(root, event_types=CORE, **options)


async def test_records_are_appended_durably_and_read_oldest_first(tmp_path: Path) -> None:
    root = tmp_path / "store"
    system = Syncs()
    store = make_store(root, filesystem=system)
    assert store.log_store.keeps_audit
    assert await store.audit() == []
    await store.log_store.append_audit({"n": 1, "text": "first"})
    # The file's data, then its new directory entry, before append_audit returned.
    assert system.synced[-2:] == ["file", "dir"]
    system.synced.clear()
    await store.log_store.append_audit({"n": 2, "nested": {"a": [1, None, True]}})
    assert system.synced == ["file"]  # the entry is durable already
    assert await store.audit() == [
        {"n": 1, "text": "first"},
        {"n": 2, "nested": {"a": [1, None, True]}},
    ]
    await store.close()
    path = root / "audit.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().count(b"\n") == 2


async def test_a_torn_last_line_is_skipped_and_the_next_record_starts_a_new_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    await store.log_store.append_audit({"n": 1})
    with (root / "audit.jsonl").open("ab") as file:
        file.write(b'{"n": 2, "act')  # what a crash in the middle of the write leaves
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        assert await store.audit() == [{"n": 1}]
    assert any("torn last line" in r.getMessage() for r in caplog.records)
    await store.log_store.append_audit({"n": 3})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        assert await store.audit() == [{"n": 1}, {"n": 3}]
    assert any("line 2" in r.getMessage() for r in caplog.records)  # the torn one, logged
    await store.close()


def test_a_writer_killed_in_the_middle_of_a_record_leaves_a_readable_log(tmp_path: Path) -> None:
    root = tmp_path / "store"
    code = (
        "import asyncio, sys\n"
        "from sessionledger_jsonl import JsonlPersistence\n"
        "async def main():\n"
        "    store = JsonlPersistence(sys.argv[1])\n"
        "    for n in range(3):\n"
        "        await store.log_store.append_audit({'n': n, 'pad': 'x' * 100})\n"
        "asyncio.run(main())\n"
    )
    env = dict(os.environ, SESSIONLEDGER_FAILPOINT="jsonl.audit.mid-write:3")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(root)], stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stderr is not None
    ready, _, _ = select.select([process.stderr], [], [], 60)
    line = process.stderr.readline() if ready else ""
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert line.startswith("FAILPOINT jsonl.audit.mid-write"), line
    data = (root / "audit.jsonl").read_bytes()
    assert not data.endswith(b"\n")  # half of the third record is on disk

    async def check() -> None:
        store = make_store(root)
        assert [record["n"] for record in await store.audit()] == [0, 1]
        await store.log_store.append_audit({"n": 3})
        assert [record["n"] for record in await store.audit()] == [0, 1, 3]
        await store.close()

    asyncio.run(check())


async def test_an_executed_prune_is_on_record_and_leaves_the_store_s_files(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    for number in range(3):
        session = Session.create(f"s{number}", clock=lambda n=number: 1_000 + n)
        await store.create(SessionHeader(id=f"s{number}", created_at=10, cwd="/srv"))
        await store.append(f"s{number}", closed_turn(session, 1))
        await store.release(f"s{number}")
    sizes = {f"s{n}": await store.log_store.stored_bytes(f"s{n}") for n in range(3)}
    plan = await store.prune(keep_last=1, dry_run=False, now=time.time_ns() // 1_000_000)
    assert sorted(plan.deleted) == ["s0", "s1"]
    assert plan.bytes_freed == sizes["s0"] + sizes["s1"]
    begin, end = await store.audit()
    assert (begin["phase"], end["phase"]) == ("begin", "end")
    assert sorted(begin["sessions"]) == ["s0", "s1"]
    assert sorted(end["deleted"]) == ["s0", "s1"]
    assert [info.id for info in (await store.list_sessions()).sessions] == ["s2"]
    await store.close()
    assert (root / "audit.jsonl").is_file()
    assert (root / "index.jsonl").is_file()
