"""Crash matrix: a real child writes through a ``Ledger`` and is SIGKILLed at a failpoint.

For every (backend, failpoint) row: start ``crash_child.py`` with
``SESSIONLEDGER_FAILPOINT`` set, wait for its ``FAILPOINT`` line, SIGKILL it, then check:

1. ``inspect`` (and ``read_from``, ``list_snapshots``) writes nothing: JSONL's whole tree
   is byte-identical; SQLite's database and WAL are byte-identical while the reader is
   open and its rows are identical after it closed (closing checkpoints the WAL);
2. the stored prefix is a prefix of the child's script, byte-identical event by event,
   holding at least every event the child saw flushed and nothing it never committed;
   the failpoint decides exactly how much of the batch in flight is there;
3. ``resume`` closes the open turn with exactly ``interrupted_turn_closers(prefix)`` (plus
   the ``session/end-seed`` marker), and the result passes the offline invariants check;
4. a second ``resume`` adds nothing and changes nothing on disk;
5. the session (or, if it never materialized, its id) is usable: new turns append and
   read back.

Repair rows kill the child during a cold ``resume`` of a crashed store instead.
The whole matrix is ``slow``; a few rows per backend run by default.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sessionledger import Ledger, SessionEvent
from sessionledger._errors import SessionNotFoundError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._repair import interrupted_turn_closers
from sessionledger.runtime._opening import open_store
from sessionledger_invariants import check_log

HERE = Path(__file__).resolve().parent
CHILD_PATH = HERE / "crash_child.py"
SESSION = "crashy"
CHILD_TIMEOUT = 60.0  # seconds to reach the failpoint; a test never hangs past it


def _load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_child", CHILD_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHILD = _load_child()


def script_events() -> tuple[list[SessionEvent], list[int]]:
    """Run the child's script in memory: its events, and the seq count after each batch."""

    async def run() -> tuple[list[SessionEvent], list[int]]:
        async with Ledger(load_entrypoints=False, clock=CHILD.Clock()) as ledger:
            session = ledger.create(SESSION, cwd=CHILD.CWD)
            ends = []
            for build in CHILD.BATCHES:
                build(session)
                ends.append(session.seq)
            return list(session.events), ends

    import asyncio

    return asyncio.run(run())


EXPECTED, BATCH_ENDS = script_events()


def wire(event: SessionEvent | dict[str, Any]) -> bytes:
    """The stored bytes of one event (envelope JSON)."""
    return jsoncodec.dumps(event.to_json() if isinstance(event, SessionEvent) else event)


# -- the child -------------------------------------------------------------------------


@dataclass
class Killed:
    """What the parent learned from a child it killed at a failpoint."""

    lines: list[str]
    durable: int  # every seq below is durable (the last DURABLE line)
    flushing: int  # events committed when the last flush started


def child_env(failpoint: str | None) -> dict[str, str]:
    env = dict(os.environ, SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD="1")
    env.pop("SESSIONLEDGER_FAILPOINT", None)
    if failpoint is not None:
        env["SESSIONLEDGER_FAILPOINT"] = failpoint
    return env


def kill_at(failpoint: str, mode: str, url: str) -> Killed:
    """Run the child until it blocks at *failpoint*, SIGKILL it and return its report."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD_PATH), mode, url, SESSION],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(failpoint),
    )
    assert child.stderr is not None
    lines: list[str] = []
    buffer = b""
    deadline = time.monotonic() + CHILD_TIMEOUT
    marker = f"FAILPOINT {failpoint.rpartition(':')[0] or failpoint} {child.pid}"
    try:
        while marker not in lines:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([child.stderr], [], [], max(0.0, left))
            if not ready:
                pytest.fail(f"child did not reach {failpoint} in {CHILD_TIMEOUT}s: {lines}")
            chunk = os.read(child.stderr.fileno(), 65536)
            if not chunk:
                child.wait(timeout=CHILD_TIMEOUT)
                pytest.fail(
                    f"child exited ({child.returncode}) without reaching {failpoint}:\n"
                    + "\n".join(lines)
                )
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            lines.extend(line.decode(errors="replace") for line in complete)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=CHILD_TIMEOUT)
        assert child.returncode == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=CHILD_TIMEOUT)
        child.stderr.close()
    durable = [int(line.split()[1]) for line in lines if line.startswith("DURABLE ")]
    flushing = [int(line.split()[1]) for line in lines if line.startswith("FLUSHING ")]
    return Killed(lines, durable[-1] if durable else 0, flushing[-1] if flushing else 0)


# -- backends --------------------------------------------------------------------------


def _is_claim_bookkeeping(relative: Path) -> bool:
    top = relative.parts[0]
    return top in (".locks", ".owners") or top.endswith((".db.locks", ".db.owners"))


@dataclass
class Store:
    """One backend's storage location and how to look at it from outside."""

    kind: str
    location: Path

    @property
    def url(self) -> str:
        return f"{self.kind}:{self.location}"

    def plugin(self) -> object:
        if self.kind == "jsonl":
            from sessionledger_jsonl import plugin

            return plugin
        import sessionledger_sqlite.plugin

        return sessionledger_sqlite.plugin

    def files(self) -> dict[str, tuple[int, str]]:
        """Every file of the store: relative path -> (mode, content hash). The claims'
        lock file and holder notes are left out: they change with who holds a session,
        not with what is stored."""
        root = self.location if self.kind == "jsonl" else self.location.parent
        found: dict[str, tuple[int, str]] = {}
        if not root.exists():
            return found
        for path in sorted(root.rglob("*")):
            if self.kind == "sqlite" and not path.name.startswith(self.location.name):
                continue
            if _is_claim_bookkeeping(path.relative_to(root)):
                continue
            status = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            found[str(path.relative_to(root))] = (status.st_mode, digest)
        return found

    def data_files(self) -> dict[str, tuple[int, str]]:
        """What a reader must never change: for SQLite the database and its WAL (the
        shared-memory index is rebuilt by every reader, and opening a database in WAL
        mode creates an empty WAL file)."""
        files = self.files()
        if self.kind == "sqlite":
            empty = hashlib.sha256(b"").hexdigest()
            files = {
                name: (mode, digest)
                for name, (mode, digest) in files.items()
                if not name.endswith("-shm") and not (name.endswith("-wal") and digest == empty)
            }
        return files

    def rows(self) -> list[Any]:
        """The logical content (SQLite only): every row of both tables."""
        if self.kind != "sqlite" or not self.location.exists():
            return []
        db = sqlite3.connect(f"file:{self.location}?mode=ro", uri=True)
        try:
            return [
                *db.execute("SELECT * FROM sessions ORDER BY id"),
                *db.execute("SELECT * FROM events ORDER BY session_id, seq"),
            ]
        except sqlite3.OperationalError:  # schema never created
            return []
        finally:
            db.close()

    def initialized(self) -> bool:
        """Whether the store needs no setup write on first use: a JSONL tree always; a
        SQLite file once its schema is committed and it is in WAL mode (header byte 18)."""
        if self.kind == "jsonl":
            return True
        try:
            head = self.location.read_bytes()[:100]
        except FileNotFoundError:
            return False
        return len(head) == 100 and head[18] == 2 and bool(self.rows() or self._has_schema())

    def _has_schema(self) -> bool:
        db = sqlite3.connect(f"file:{self.location}?mode=ro", uri=True)
        try:
            return bool(list(db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'events'")))
        finally:
            db.close()

    def snapshot(self) -> Any:
        """Everything that must stay the same across a read-only operation."""
        if self.kind == "jsonl":
            return self.files()
        return self.rows()

    def copy_to(self, target: Path) -> Store:
        if self.kind == "jsonl":
            shutil.copytree(self.location, target, symlinks=True)
            return Store("jsonl", target)
        target.mkdir(parents=True)
        for path in self.location.parent.glob(self.location.name + "*"):
            if path.is_file():  # the holder notes' directory is not data
                shutil.copy2(path, target / path.name)
        return Store("sqlite", target / self.location.name)


def new_store(kind: str, tmp_path: Path) -> Store:
    if kind == "jsonl":
        return Store("jsonl", tmp_path / "jsonl")
    return Store("sqlite", tmp_path / "db" / "ledger.db")


# -- the checks after a kill ------------------------------------------------------------


async def read_only_view(store: Store) -> tuple[tuple[SessionEvent, ...] | None, list[Any]]:
    """Inspect, read_from and list the killed store; check none of them wrote anything.

    Returns the inspected events (None when the session does not exist) and the raw
    stored prefix from ``read_from``.
    """
    # The first use of a SQLite file the child left pristine or half-initialized sets it
    # up: that write is allowed, a write to an initialized store is not.
    before_files = store.data_files() if store.initialized() else None
    before = store.snapshot()
    backend = open_store(store.url, plugins=[store.plugin()], load_entrypoints=False)
    try:
        listed = [info.header.id for info in await backend.list_snapshots()]
        try:
            view = await backend.inspect(SESSION)
            raw = await backend.read_from(SESSION, 0)
        except SessionNotFoundError:
            assert SESSION not in listed
            view, raw = None, []
        else:
            assert listed == [SESSION]
            again = await backend.inspect(SESSION)
            assert again.revision == view.revision
        if before_files is not None:
            assert store.data_files() == before_files  # nothing written while reading
    finally:
        await backend.close()
    assert store.snapshot() == before
    return (None if view is None else view.events), list(raw)


def check_prefix(events: tuple[SessionEvent, ...] | list[SessionEvent], length: int) -> None:
    assert [wire(event) for event in events[:length]] == [wire(e) for e in EXPECTED[:length]]


async def resume_twice(store: Store, length: int) -> None:
    """Resume the session, check the closers, resume again (no change), then append."""
    prefix = EXPECTED[:length]
    closers = interrupted_turn_closers(prefix)
    plugins = [store.plugin()]
    async with Ledger.open(store.url, plugins=plugins, load_entrypoints=False) as ledger:
        session = await ledger.resume(SESSION)
        events = session.events
    check_prefix(events, length)
    tail = events[length:]
    assert [wire(event) for event in tail[: len(closers)]] == [wire(c) for c in closers]
    assert [event.type for event in tail[len(closers) :]] == ["session/end-seed"]
    for closer in tail[: len(closers)]:
        if closer.type == "tool/result":
            assert closer.data["error"]["code"] in ("TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED")
        if closer.type == "turn/end":
            assert closer.data["reason"] == {"kind": "interrupted"}
    assert check_log(events) == []
    assert interrupted_turn_closers(events) == []
    settled = store.snapshot() if store.kind == "sqlite" else store.files()

    async with Ledger.open(store.url, plugins=plugins, load_entrypoints=False) as ledger:
        backend = ledger.persistence
        assert backend is not None
        revision = (await backend.inspect(SESSION)).revision
        again = await ledger.resume(SESSION)
        assert [wire(e) for e in again.events] == [wire(e) for e in events]
        assert (await backend.inspect(SESSION)).revision == revision  # nothing was written
        assert (store.snapshot() if store.kind == "sqlite" else store.files()) == settled
        continue_turn = 1 + sum(event.type == "turn/start" for event in events)
        again.append("turn/start", {"turn": continue_turn})
        again.append("turn/end", {"turn": continue_turn, "reason": {"kind": "completed"}})
        await ledger.flush(again)
        final = [wire(e) for e in again.events]
    backend = open_store(store.url, plugins=plugins, load_entrypoints=False)
    try:
        assert [wire(e) for e in (await backend.load(SESSION)).events] == final
    finally:
        await backend.close()


async def recreate(store: Store) -> None:
    """The id never materialized (or was deleted): leftovers must not block a new log."""
    plugins = [store.plugin()]
    async with Ledger.open(store.url, plugins=plugins, load_entrypoints=False) as ledger:
        with pytest.raises(SessionNotFoundError):
            await ledger.resume(SESSION)
        session = ledger.create(SESSION, cwd=CHILD.CWD)
        session.append("turn/start", {"turn": 1})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        await ledger.flush(session)
    backend = open_store(store.url, plugins=plugins, load_entrypoints=False)
    try:
        assert [e.type for e in (await backend.load(SESSION)).events] == ["turn/start", "turn/end"]
        assert [info.header.id for info in await backend.list_snapshots()] == [SESSION]
    finally:
        await backend.close()
    if store.kind == "jsonl":
        leftovers = [p.name for p in store.location.rglob("*") if p.name.endswith(".tmp")]
        assert leftovers == []  # the new publication removed the crashed one's temp file
    else:
        assert (store.location.stat().st_mode & 0o777) == 0o600


# -- the matrix --------------------------------------------------------------------------

#: (failpoint, what the kill leaves of the batch in flight): "absent" (the stored log
#: ends at the last acknowledged flush), "present" (the whole batch is stored although
#: the flush never returned), "partial" (complete records of it may be, a torn one not),
#: "deleted" (a delete in flight: the session is entirely gone) or "kept" (a delete in
#: flight: the session is entirely there).
JSONL_WRITE = [
    ("jsonl.mkdir.before-fsync", "absent"),
    ("jsonl.materialize.after-mkdir", "absent"),
    ("jsonl.lock.after-acquire", "absent"),
    ("jsonl.publish.after-temp-create", "absent"),
    ("jsonl.publish.mid-write", "absent"),
    ("jsonl.publish.after-temp-write", "absent"),
    ("jsonl.publish.after-temp-fsync", "absent"),
    ("jsonl.publish.after-link", "present"),
    ("jsonl.publish.after-temp-unlink", "present"),
    ("jsonl.publish.after-dir-fsync", "present"),
    ("jsonl.append.before-write:1", "absent"),
    ("jsonl.append.before-write:4", "absent"),
    ("jsonl.append.mid-write:1", "partial"),
    ("jsonl.append.mid-write:2", "partial"),
    ("jsonl.append.mid-write:3", "partial"),
    ("jsonl.append.mid-write:4", "partial"),
    ("jsonl.append.mid-write:5", "partial"),
    ("jsonl.append.mid-write:6", "partial"),
    ("jsonl.append.after-write:2", "present"),
    ("jsonl.append.after-write:5", "present"),
    ("jsonl.append.after-fsync:3", "present"),
    ("jsonl.append.after-fsync:6", "present"),
    ("core.writebehind.before-write:3", "absent"),
    ("core.writebehind.after-write:4", "present"),
    ("jsonl.delete.after-unlink", "deleted"),
    ("jsonl.delete.after-remove", "deleted"),
]
SQLITE_WRITE = [
    ("sqlite.schema.after-create-file", "absent"),
    ("sqlite.schema.after-ddl", "absent"),
    ("sqlite.schema.before-commit", "absent"),
    ("sqlite.schema.after-commit", "absent"),
    ("sqlite.schema.after-wal", "absent"),
    ("sqlite.write.after-begin:1", "absent"),
    ("sqlite.write.after-session-row:1", "absent"),
    ("sqlite.write.before-commit:1", "absent"),
    ("sqlite.write.after-commit:1", "present"),
    ("sqlite.write.before-statement:1", "absent"),
    ("sqlite.write.before-statement:2", "absent"),
    ("sqlite.write.before-statement:3", "absent"),
    ("sqlite.write.before-statement:5", "absent"),
    ("sqlite.write.after-commit:3", "present"),
    ("sqlite.write.after-commit:5", "present"),
    ("sqlite.write.after-commit:7", "present"),
    ("core.writebehind.before-write:2", "absent"),
    ("core.writebehind.after-write:6", "present"),
    ("sqlite.delete.before-commit", "kept"),
    ("sqlite.delete.after-commit", "deleted"),
]
#: Repair rows: (failpoint, closers stored at the kill: "absent", "present", "partial").
JSONL_REPAIR = [
    ("core.repair.begin", "absent"),
    ("jsonl.lock.after-acquire", "absent"),
    ("jsonl.quarantine.after-write", "absent"),
    ("jsonl.truncate.before", "absent"),
    ("jsonl.truncate.after-truncate", "absent"),
    ("jsonl.truncate.after-fsync", "absent"),
    ("jsonl.repair.after-cut", "absent"),
    ("jsonl.append.before-write:1", "absent"),
    ("jsonl.append.mid-write:1", "partial"),
    ("jsonl.append.after-write:1", "present"),
    ("jsonl.append.after-fsync:1", "present"),
    ("core.repair.after-closers", "present"),
]
SQLITE_REPAIR = [
    ("core.repair.begin", "absent"),
    ("sqlite.repair.before-commit", "absent"),  # the cut and the closers: one transaction
    ("sqlite.repair.after-commit", "present"),
    ("core.repair.after-closers", "present"),
]
#: Rows that run without ``-m slow`` deselection too (the rest are marked slow).
QUICK = {
    ("jsonl", "jsonl.append.mid-write:3"),
    ("jsonl", "jsonl.publish.after-temp-fsync"),
    ("jsonl", "jsonl.truncate.after-truncate"),
    ("jsonl", "jsonl.repair.after-cut"),
    ("sqlite", "sqlite.write.before-statement:3"),
    ("sqlite", "sqlite.write.after-commit:3"),
    ("sqlite", "sqlite.repair.before-commit"),
}


def rows(kind: str, table: list[tuple[str, str]]) -> Iterator[Any]:
    for point, outcome in table:
        marks = () if (kind, point) in QUICK else (pytest.mark.slow,)
        yield pytest.param(kind, point, outcome, id=f"{kind}-{point}", marks=marks)


def torn_fragment(store: Store) -> bool:
    """Whether the JSONL log ends with a partial line (what a kill mid-write leaves)."""
    (log,) = store.location.glob("*/*/session.jsonl")
    return not log.read_bytes().endswith(b"\n")


def survived(events: tuple[SessionEvent, ...] | None) -> int:
    """How many of the script's events a view holds (it is a prefix: checked later)."""
    if events is None:
        return 0
    count = 0
    for event, expected in zip(events, EXPECTED, strict=False):
        if wire(event) != wire(expected):
            break
        count += 1
    return count


@pytest.mark.parametrize(
    ("kind", "point", "outcome"), [*rows("jsonl", JSONL_WRITE), *rows("sqlite", SQLITE_WRITE)]
)
async def test_a_writer_killed_at_a_failpoint_recovers_its_durable_prefix(
    kind: str, point: str, outcome: str, tmp_path: Path
) -> None:
    store = new_store(kind, tmp_path)
    deleting = outcome in ("deleted", "kept")
    killed = kill_at(point, "delete" if deleting else "write", store.url)
    if deleting:
        killed = Killed(killed.lines, BATCH_ENDS[1], BATCH_ENDS[1])
    view, raw = await read_only_view(store)
    length = survived(view)
    durable, flushing = killed.durable, killed.flushing
    if outcome == "deleted":
        assert view is None
    elif outcome in ("absent", "kept"):
        assert length == durable
    elif outcome == "present":
        assert length == flushing
    else:
        assert durable <= length <= flushing
        assert torn_fragment(store)  # the kill really cut a record in half
    if view is None:
        assert durable == 0 or outcome == "deleted"
        await recreate(store)
        return
    # The view is the stored prefix plus, in memory only, the closers of its open turn.
    check_prefix(view, length)
    closers = interrupted_turn_closers(EXPECTED[:length])
    assert [wire(e) for e in view[length:]] == [wire(c) for c in closers]
    check_prefix(raw, length)
    assert len(raw) == length
    await resume_twice(store, length)


# -- repair rows: kill a cold resume of a crashed store ---------------------------------

#: Where the base crash happens: JSONL mid-way through the 6th flush (a torn packed row
#: after complete records of an open turn), SQLite before the 6th commit.
BASE_CRASH = {"jsonl": "jsonl.append.mid-write:5", "sqlite": "sqlite.write.before-statement:5"}


@pytest.fixture(scope="module")
def crashed_bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Store, int]]:
    """One crashed store per backend (built once): JSONL with a torn tail to cut, SQLite
    (whose transactions cannot tear) with a turn left open."""
    bases: dict[str, tuple[Store, int]] = {}
    for kind, point in BASE_CRASH.items():
        store = new_store(kind, tmp_path_factory.mktemp(f"base-{kind}"))
        killed = kill_at(point, "write", store.url)
        import asyncio

        view, _ = asyncio.run(read_only_view(store))
        length = survived(view)
        assert killed.durable <= length <= killed.flushing
        bases[kind] = (store, length)
    return bases


@pytest.mark.parametrize(
    ("kind", "point", "outcome"), [*rows("jsonl", JSONL_REPAIR), *rows("sqlite", SQLITE_REPAIR)]
)
async def test_a_repair_killed_at_a_failpoint_is_completed_exactly_once(
    kind: str,
    point: str,
    outcome: str,
    tmp_path: Path,
    crashed_bases: dict[str, tuple[Store, int]],
) -> None:
    base, length = crashed_bases[kind]
    store = base.copy_to(tmp_path / "store")
    closers = interrupted_turn_closers(EXPECTED[:length])
    assert closers  # the base crash left a turn open
    kill_at(point, "resume", store.url)
    view, raw = await read_only_view(store)
    assert view is not None
    check_prefix(view, length)  # repair never removes a committed event
    assert [wire(e) for e in view[length:]] == [wire(c) for c in closers]
    stored_closers = len(raw) - length
    if outcome == "absent":
        assert stored_closers == 0
    elif outcome == "present":
        assert stored_closers == len(closers)
    else:
        assert 0 <= stored_closers < len(closers)
        assert torn_fragment(store)
    check_prefix(raw, length)
    assert [wire(e) for e in raw[length:]] == [wire(c) for c in closers[:stored_closers]]
    await resume_twice(store, length)


def test_every_documented_failpoint_is_in_the_matrix() -> None:
    documented = (HERE / "RELIABILITY.md").read_text()
    used = {
        point.partition(":")[0]
        for table in (JSONL_WRITE, SQLITE_WRITE, JSONL_REPAIR, SQLITE_REPAIR)
        for point, _ in table
    }
    sources = [
        *Path(HERE.parent, "packages").glob("*/src/sessionledger*/**/*.py"),
    ]
    placed = set()
    for source in sources:
        text = source.read_text()
        for prefix in ('failpoint("', 'point="'):
            start = 0
            while (start := text.find(prefix, start)) >= 0:
                start += len(prefix)
                placed.add(text[start : text.index('"', start)])
    # Reached by fault injection instead: they need a failing write first. The JSONL
    # summary index and audit log points, and the SQLite v1 upgrade's, are killed at by
    # those packages' own tests; the whole-log points by test_copy_interrupted.py.
    assert placed - used <= {
        "jsonl.append.before-rollback",
        "jsonl.append.after-rollback-truncate",
        "jsonl.index.before-append",
        "jsonl.audit.mid-write",
        "sqlite.upgrade.after-ddl",
        "sqlite.upgrade.before-commit",
        "core.publish.verified",
        "postgresql.publish.after-batch",
    }
    for name in placed:
        assert f"`{name}`" in documented, name


def test_reliability_counts_are_the_matrix_s() -> None:
    """RELIABILITY.md states the matrix as the code has it (rows, kills)."""
    documented = (HERE / "RELIABILITY.md").read_text()

    def kills(table: list[tuple[str, str]]) -> int:
        return len({point for point, _ in table})

    jsonl = (len(JSONL_WRITE), len(JSONL_REPAIR), kills(JSONL_WRITE) + kills(JSONL_REPAIR))
    sqlite = (len(SQLITE_WRITE), len(SQLITE_REPAIR), kills(SQLITE_WRITE) + kills(SQLITE_REPAIR))
    assert f"| JSONL | {jsonl[0]} | {jsonl[1]} | {jsonl[2]} |" in documented
    assert f"| SQLite | {sqlite[0]} | {sqlite[1]} | {sqlite[2]} |" in documented
    rows = jsonl[0] + jsonl[1] + sqlite[0] + sqlite[1]
    bases = len(BASE_CRASH)
    assert f"{rows} rows, plus the {bases} base crashes: {rows + bases} SIGKILLs" in documented
    quick = sum(1 for kind, _ in QUICK)
    assert f"| {quick} rows | {rows} rows, {rows + bases} kills |" in documented
