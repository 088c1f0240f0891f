"""The JSONL summary index (docs/formats.md, "the summary index"): listing reads no log
whose entry is current, and a crash, a torn or garbled line, a lost line or a deleted
session can only make an entry stale, which the listing detects, computes from the log
and reports (``stale``), writing nothing (docs/listing.md); the session's next write or
``reindex`` adds a current entry, and writes compact an index grown long, losing no
line another writer appends meanwhile."""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger import EventTypeRegistry, Session, SessionHeader
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.views._summaries import SessionSummary, summarize
from sessionledger_jsonl import JsonlPersistence, _index
from sessionledger_jsonl._files import FileSystem

CORE = EventTypeRegistry.with_core()
CHILD = Path(__file__).with_name("index_child.py")
SOURCE = Path(__file__).resolve().parents[1] / "src"


class Counting(FileSystem):
    """A real ``FileSystem`` that counts whole-file reads of session logs (what listing
    must avoid) and records renames and fsyncs."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.log_reads = 0
        self.calls: list[tuple[str, str]] = []

    def open_file(self, name: str, dir_fd: int, flags: int = os.O_RDONLY) -> int:
        fd = super().open_file(name, dir_fd, flags)
        self.names[fd] = name
        return fd

    def create(self, name: str, dir_fd: int, *, exclusive: bool = True) -> int:
        fd = super().create(name, dir_fd, exclusive=exclusive)
        self.names[fd] = name
        return fd

    def read_all(self, fd: int) -> bytes:
        if self.names.get(fd) == "session.jsonl":
            self.log_reads += 1
        return super().read_all(fd)

    def write(self, fd: int, data: bytes, *, point: str | None = None) -> None:
        self.calls.append(("write", self.names.get(fd, "?")))
        super().write(fd, data, point=point)

    def fsync(self, fd: int) -> None:
        self.calls.append(("fsync", self.names.get(fd, "dir")))
        super().fsync(fd)

    def rename(self, source: str, target: str, dir_fd: int) -> None:
        self.calls.append(("rename", target))
        super().rename(source, target, dir_fd)

    def close(self, fd: int) -> None:
        self.names.pop(fd, None)
        super().close(fd)


def make_store(root: Path, **options: Any) -> JsonlPersistence:
    return JsonlPersistence(root, event_types=CORE, **options)


def ticking(start: int = 2000) -> Callable[[], int]:
    state = [start]

    def clock() -> int:
        state[0] += 5
        return state[0]

    return clock


def header(session_id: str) -> SessionHeader:
    return SessionHeader(id=session_id, created_at=1000, cwd="/srv/app")


async def write_session(
    store: JsonlPersistence, session_id: str, batches: int = 2, start: int = 2000
) -> Session:
    session = Session.create(session_id, clock=ticking(start))
    await store.create(header(session_id))
    for turn in range(1, batches + 1):
        await store.append(session_id, closed_turn(session, turn))
    return session


async def oracle(root: Path) -> dict[str, SessionSummary]:
    """Each stored session's summary computed from its log (a store of its own)."""
    store = make_store(root)
    try:
        ids = [info.header.id for info in await store.list_snapshots()]
        return {sid: summarize(await store.read_from(sid, 0)) for sid in ids}
    finally:
        await store.close()


async def listed(root: Path) -> tuple[dict[str, SessionSummary], int]:
    """The summaries a fresh store lists, and how many logs it read to list them: each
    log read is a session it reports as stale. Listing writes nothing."""
    system = Counting()
    store = make_store(root, filesystem=system)
    index = root / "index.jsonl"
    before = index.read_bytes() if index.is_file() else None
    try:
        page = await store.list_sessions()
        assert all(info.problem is None for info in page.sessions)
        assert sum(info.stale for info in page.sessions) == system.log_reads
        assert ("write", "index.jsonl") not in system.calls
        assert (index.read_bytes() if index.is_file() else None) == before
        return {info.id: info.summary for info in page.sessions}, system.log_reads
    finally:
        await store.close()


def index_lines(root: Path) -> list[bytes]:
    return (root / "index.jsonl").read_bytes().split(b"\n")[:-1]


# -- listing from the index -----------------------------------------------------------------


async def test_summaries_after_appends_come_from_the_index(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    for number in range(3):
        await write_session(store, f"s{number}", batches=number + 1, start=10_000 * number)
    await store.close()
    expected = await oracle(root)
    assert {sid: s.events for sid, s in expected.items()} == {"s0": 21, "s1": 42, "s2": 63}
    summaries, reads = await listed(root)
    assert summaries == expected
    assert reads == 0  # every entry is current: no log is read
    assert len(index_lines(root)) == 6  # one line per batch


async def test_the_index_is_written_after_the_log_write_is_durable(tmp_path: Path) -> None:
    system = Counting()
    store = make_store(tmp_path / "store", filesystem=system)
    await write_session(store, "s", batches=2)
    await store.close()
    # Each index line follows its batch's write and fsync; the line itself is not fsynced.
    writes = [call for call in system.calls if call[0] != "fsync" or call[1] != "dir"]
    index_writes = [i for i, call in enumerate(writes) if call == ("write", "index.jsonl")]
    assert len(index_writes) == 2
    for position in index_writes:
        assert writes[position - 1][0] == "fsync"
    assert ("fsync", "index.jsonl") not in system.calls


async def test_a_torn_tail_makes_the_entry_stale_and_a_repair_writes_a_fresh_one(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    session = await write_session(store, "s", batches=1)
    await store.append("s", open_turn_with_pending_call(session, 2))
    log = Path(store.locate(header("s")))
    await store.close()
    with log.open("ab") as file:  # what a crash in the middle of a write leaves
        file.write(b'{"type":"assistant/chunk","seq":')
    summaries, reads = await listed(root)
    assert summaries == await oracle(root)
    assert summaries["s"].open_turn == 2
    assert reads == 1  # the stale entry was computed from the log...
    assert (await listed(root))[1] == 1  # ...and not saved: listing writes nothing

    repairing = make_store(root)
    loaded = await repairing.load("s")  # cuts the tail, closes the open turn
    await repairing.close()
    summaries, reads = await listed(root)
    assert reads == 0  # the repair wrote the entry of the repaired log
    assert summaries == await oracle(root)
    assert summaries["s"].events == len(loaded.events)
    assert summaries["s"].open_turn is None


async def test_deleted_sessions_are_not_listed_and_their_entries_are_dropped(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    await write_session(store, "gone")
    await write_session(store, "kept")
    await store.delete("gone")
    await store.close()
    assert (root / "index.jsonl").exists()  # delete leaves the store's files alone
    summaries, reads = await listed(root)
    assert list(summaries) == ["kept"]
    assert reads == 0
    # Recreated under the same id: the old entries do not describe the new log.
    store = make_store(root)
    await write_session(store, "gone", batches=1, start=90_000)
    await store.close()
    summaries, _ = await listed(root)
    assert summaries == await oracle(root)
    assert summaries["gone"].events == 21
    (root / "index.jsonl").write_bytes(
        (root / "index.jsonl").read_bytes() + entry_of("deleted-long-ago")
    )
    store = make_store(root)
    store.log_store._index.compact({"gone", "kept"})  # the sessions the store holds
    await store.close()
    assert sorted(orjson.loads(line)["id"] for line in index_lines(root)) == ["gone", "kept"]
    summaries, reads = await listed(root)
    assert reads == 0
    assert summaries == await oracle(root)


def entry_of(session_id: str) -> bytes:
    return _index.entry_line(session_id, "1.2", SessionSummary(1, 5, 5))


async def test_garbled_lines_and_bad_entries_are_ignored(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    await write_session(store, "a")
    session_b = await write_session(store, "b")
    revision_b = await store.revision("b")
    await store.close()
    with (root / "index.jsonl").open("ab") as file:
        file.write(b"\x00\x00\x00\x00\n")  # a hole a power loss can leave
        file.write(b"not json\n[1, 2]\n{}\n")
        file.write(b'{"id": "a", "revision": 7, "summary": {}}\n')  # wrong types
        # the current revision, but a summary that is not one: computed, never shown
        bad = {"id": "b", "revision": revision_b, "summary": {"events": -1}}
        file.write(orjson.dumps(bad) + b"\n")
        file.write(b'{"id": "a", "revision": "')  # a torn last line
    summaries, reads = await listed(root)
    assert summaries == await oracle(root)
    assert reads == 1  # b's entry was unusable; a's last good entry still counts
    # b's next write adds an entry, on a line of its own after the torn one: it counts.
    store = make_store(root)
    await store.append("b", closed_turn(session_b, 3))
    await store.close()
    summaries, reads = await listed(root)
    assert reads == 0
    assert summaries == await oracle(root)


async def test_an_index_that_cannot_be_written_only_costs_log_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    root.mkdir(mode=0o700)
    (root / "index.jsonl").mkdir()  # no file can be opened there
    store = make_store(root)
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        await write_session(store, "s")  # the appends still succeed
    await store.close()
    assert any("summary was not added" in r.getMessage() for r in caplog.records)
    summaries, reads = await listed(root)
    assert summaries == await oracle(root)
    assert reads == 1


def bloat_index(root: Path, size: int) -> None:
    """Pad the index with lines that count but hold no entry (what a long history of
    batches amounts to) up to *size* bytes, so the next entry crosses that size."""
    index = root / "index.jsonl"
    room = size - index.stat().st_size
    index.write_bytes(index.read_bytes() + b"x\n" * (room // 2) + b"\n" * (room % 2))


async def test_a_write_compacts_a_long_index_atomically(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    sessions = {f"s{n}": await write_session(store, f"s{n}", batches=1) for n in range(3)}
    await store.close()
    bloat_index(root, (1 << 15) - 1)  # 2 * 3 + 256 lines are far fewer: worth compacting
    (root / "index.jsonl.0123456789ab.tmp").write_bytes(b"left by a crashed compaction")
    await listed(root)  # a listing leaves it as it is (``listed`` checks)
    system = Counting()
    store = make_store(root, filesystem=system)
    await store.append("s1", closed_turn(sessions["s1"], 2))  # its line crosses 32 KiB
    await store.close()
    assert [line[:12] for line in index_lines(root)] == [
        b'{"id":"s0","',
        b'{"id":"s1","',
        b'{"id":"s2","',
    ]
    assert sorted(path.name for path in root.iterdir() if path.is_file()) == [
        ".locks",
        "index.jsonl",
    ]
    # the line appended; then a temp written and fsynced, renamed over, the root fsynced
    tail = [call for call in system.calls if call[0] in ("write", "fsync", "rename")]
    assert tail[-5:] == [
        ("write", "index.jsonl"),
        ("write", tail[-4][1]),
        ("fsync", tail[-4][1]),
        ("rename", "index.jsonl"),
        ("fsync", "dir"),
    ]
    assert tail[-4][1].startswith("index.jsonl.")
    assert tail[-4][1].endswith(".tmp")
    summaries, reads = await listed(root)
    assert reads == 0
    assert summaries == await oracle(root)


async def test_a_short_index_is_left_alone_by_writes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    session = await write_session(store, "s", batches=1)
    await store.close()
    bloat_index(root, (1 << 15) - 1 - 600)  # 32 KiB is not crossed by the next line
    before = index_lines(root)
    system = Counting()
    store = make_store(root, filesystem=system)
    await store.append("s", closed_turn(session, 2))
    await store.close()
    assert index_lines(root)[:-1] == before  # only appended to: no compaction was due
    assert not any(call[0] == "rename" for call in system.calls)


async def test_the_store_s_own_files_at_the_root_are_not_taken_for_projects(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    await write_session(store, "s")
    await store.log_store.append_audit({"action": "test"})
    (root / "index.jsonl.feedfacecafe.tmp").write_bytes(b"x")
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        assert [h.id for h in await store.list()] == ["s"]
        assert [info.id for info in (await store.list_sessions()).sessions] == ["s"]
        await store.delete("s")
        assert await store.list() == []
    await store.close()
    assert caplog.records == []
    assert {p.name for p in root.iterdir() if p.is_file()} >= {"index.jsonl", "audit.jsonl"}


async def test_reindex_and_rewrite_index(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    session = await write_session(store, "s")
    (root / "index.jsonl").unlink()  # an index lost
    report = await store.reindex()
    assert report.reindexed == 1
    summaries, reads = await listed(root)
    assert reads == 0
    assert summaries == await oracle(root)
    stale = await store.revision("s")
    await store.append("s", closed_turn(session, 3))
    assert stale is not None
    assert not await store.log_store.rewrite_index(header("s"), stale, SessionSummary(1), [])
    await store.close()
    summaries, reads = await listed(root)
    assert reads == 0
    assert summaries == await oracle(root)


async def test_stored_bytes_counts_the_log_and_its_quarantine(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    await write_session(store, "s", batches=1)
    log = Path(store.locate(header("s")))
    assert await store.log_store.stored_bytes("s") == log.stat().st_size
    assert await store.log_store.stored_bytes("missing") is None
    await store.close()
    with log.open("ab") as file:
        file.write(b'{"type":"assistant/chunk","seq":')
    store = make_store(root)
    await store.load("s")  # moves the torn tail into a quarantine file beside the log
    files = list(log.parent.iterdir())
    assert len(files) == 2
    assert await store.log_store.stored_bytes("s") == sum(p.stat().st_size for p in files)
    await store.close()


# -- real processes ---------------------------------------------------------------------------


def child(
    root: Path, prefix: str, sessions: int, batches: int, *extra: str, **env: str
) -> subprocess.Popen[str]:
    environment = dict(os.environ, SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD="1", **env)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(SOURCE), environment.get("PYTHONPATH")])
    )
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(root), prefix, str(sessions), str(batches), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )


def kill_at_index_append(root: Path, hit: int) -> list[str]:
    """Run the writer until its *hit*-th index append, SIGKILL it there; return what it
    reported as written (the batch it was killed in is durable, its entry not added)."""
    process = child(root, "k", 3, 2, SESSIONLEDGER_FAILPOINT=f"jsonl.index.before-append:{hit}")
    assert process.stderr is not None
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    line = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stderr], [], [], 1)
        if ready:
            line = process.stderr.readline()
            if line.startswith("FAILPOINT") or not line:
                break
    os.kill(process.pid, signal.SIGKILL)
    out, _ = process.communicate()
    assert line.startswith("FAILPOINT jsonl.index.before-append"), line
    assert process.returncode == -signal.SIGKILL
    return out.splitlines()


async def crash_problems(root: Path) -> list[str]:
    """What is wrong with the listing after the crash, judged by the oracle: the
    summary each log gives, the same again from a second listing (listing writes
    nothing), and none once the session's next write added a current entry."""
    expected = await oracle(root)
    first, reads = await listed(root)
    problems = [
        f"{sid}: listed {first.get(sid)}, the log says {summary}"
        for sid, summary in expected.items()
        if first.get(sid) != summary
    ]
    second, again = await listed(root)
    if (second, again) != (first, reads):
        problems.append("the second listing differs from the first")
    store = make_store(root)
    try:
        for session_id in expected:
            await store.append(session_id, [await session_end(store, session_id)])
    finally:
        await store.close()
    if (await listed(root))[1]:
        problems.append("a write left its session's entry stale")
    return problems


async def session_end(store: JsonlPersistence, session_id: str) -> Any:
    """An event that continues the stored log (an ignorable one: any state takes it)."""
    stored = await store.inspect(session_id)
    end = len(stored.events)
    return {"type": "x/note", "seq": end, "time": 9_000_000, "data": {}, "ignorable": True}


@pytest.mark.parametrize(
    ("hit", "stale"),
    [(2, None), (5, "k-1")],  # k-1's first batch (no entry yet), k-1's second (a stale one)
)
async def test_a_writer_killed_before_the_index_append_leaves_only_a_stale_entry(
    tmp_path: Path, hit: int, stale: str | None
) -> None:
    root = tmp_path / "store"
    written = kill_at_index_append(root, hit)
    assert len(written) == hit - 1  # the killed batch never reported back
    store = make_store(root)
    if stale is not None:
        entries, _ = store.log_store._index.read()
        assert entries[stale].revision != await store.revision(stale)  # really stale
    await store.close()
    summaries = await oracle(root)
    assert summaries["k-1"].events == (21 if hit == 2 else 42)  # the durable batch counts
    assert await crash_problems(root) == []


async def test_the_crash_check_fails_when_staleness_is_not_detected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Self-check: with the revision comparison disabled, the same crash must be caught."""
    root = tmp_path / "store"
    kill_at_index_append(root, 5)

    def trusting(entry: _index.Entry | None, revision: str) -> SessionSummary | None:
        return None if entry is None else SessionSummary.from_json(entry.summary)

    monkeypatch.setattr(_index, "current_summary", trusting)
    problems = await crash_problems(root)
    assert problems, "the broken listing went unnoticed"
    assert problems[0].startswith("k-1: listed SessionSummary(events=21"), problems


async def test_two_processes_writing_and_compacting_keep_a_correct_index(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    await write_session(store, "z", batches=1)
    await store.close()
    bloat_index(root, (1 << 15) - 2048)  # the writers' first lines cross 32 KiB: compaction
    writers = [child(root, prefix, 20, 15, "nofsync") for prefix in ("p", "q")]
    # Listings run while they write: they read, and write nothing.
    while any(process.poll() is None for process in writers):
        store = make_store(root)
        await store.list_sessions()
        await store.close()
    for process in writers:
        _, err = process.communicate()
        assert process.returncode == 0, err
    expected = await oracle(root)
    assert len(expected) == 41
    assert all(s.events == 15 * 21 for id, s in expected.items() if id != "z")
    lines = index_lines(root)
    assert all(isinstance(orjson.loads(line), dict) for line in lines)  # compacted
    summaries, reads = await listed(root)
    assert summaries == expected
    assert reads == 0  # no entry was lost to a compaction


async def test_two_processes_without_listing_leave_every_entry_current(tmp_path: Path) -> None:
    root = tmp_path / "store"
    writers = [child(root, prefix, 10, 20, "nofsync") for prefix in ("p", "q")]
    for process in writers:
        _, err = process.communicate()
        assert process.returncode == 0, err
    lines = index_lines(root)
    assert all(isinstance(orjson.loads(line), dict) for line in lines)  # none merged
    summaries, reads = await listed(root)
    assert reads == 0  # none lost
    assert summaries == await oracle(root)


async def test_an_entry_appended_during_a_compaction_is_not_lost(tmp_path: Path) -> None:
    """The appender that waited for the index's lock while a compaction replaced the file
    appends to the new file, not to the one the compaction let go."""
    root = tmp_path / "store"
    store = make_store(root)
    await write_session(store, "s", batches=1)
    await store.close()
    bloat_index(root, 4096)
    renaming, go = threading.Event(), threading.Event()

    class PausingRename(FileSystem):
        def rename(self, source: str, target: str, dir_fd: int) -> None:
            renaming.set()
            assert go.wait(30)
            super().rename(source, target, dir_fd)

    compactor = _index.SummaryIndex(PausingRename(), str(root), fsync=False)
    appender = _index.SummaryIndex(FileSystem(), str(root), fsync=False)
    compacting = threading.Thread(target=compactor.compact, args=({"s", "late"},))
    compacting.start()
    assert renaming.wait(30)  # the compaction holds the lock, its file written
    appending = threading.Thread(
        target=appender.append, args=("late", "7.1", SessionSummary(3, 1, 2))
    )
    appending.start()
    appending.join(0.3)
    assert appending.is_alive()  # waiting for the lock
    go.set()
    compacting.join(30)
    appending.join(30)
    entries, lines = appender.read()
    assert sorted(entries) == ["late", "s"]
    assert lines == 2
