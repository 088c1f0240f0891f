"""Fault injection during write-behind: a failed flush loses nothing and writes nothing twice.

For every fault: the flush raises; storage holds no partial record (JSONL: the file is
cut back to where it was; SQLite: the rows are unchanged); the failed batch stays queued
in order, in front of events committed meanwhile; once the fault clears, one flush
writes everything exactly once, byte-identical to the live session.

Faults, real where the sandbox allows it:
- a full file system (ENOSPC): a tiny tmpfs, mounted for the test (skipped where mounting
  is not allowed); a session materialized, appended to, and written in the background;
- a short write (EFBIG): ``RLIMIT_FSIZE`` in a child process (``fault_child.py``), also
  killed between the short write and its rollback (failpoint
  ``jsonl.append.before-rollback``);
- a write lock held by another connection past the busy timeout (SQLite);
- seams where no real mechanism exists: EIO from ``os.write``/``os.fsync``/``os.ftruncate``
  as the JSONL backend calls them (its modules' ``os`` is replaced by a proxy), and a
  failing ``COMMIT`` on the SQLite backend's connection (``schema.open_database`` is
  wrapped), including a commit that lands but reports an error.
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import logging
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import sessionledger_jsonl._files
import sessionledger_jsonl._writing
import sessionledger_jsonl.store
import sessionledger_sqlite.schema
from sessionledger import Ledger, Session, SessionEvent
from sessionledger._errors import LedgerError, ResourceLimitError, SessionLockedError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._repair import interrupted_turn_closers
from sessionledger.storage._persistence import SessionPersistence
from sessionledger_jsonl import JsonlPersistence
from sessionledger_sqlite import SqlitePersistence

HERE = Path(__file__).resolve().parent


def wire(event: SessionEvent | dict[str, Any]) -> bytes:
    return jsoncodec.dumps(event.to_json() if isinstance(event, SessionEvent) else event)


def record_lines(path: Path) -> list[bytes]:
    """The record lines of a JSONL log, asserting it holds no partial record."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), "the log ends with a partial record"
    lines = data.split(b"\n")[1:-1]
    for line in lines:
        orjson.loads(line)
    return lines


async def stored_exactly(backend: SessionPersistence, session: Session) -> None:
    """Storage holds the live session's events, each once, byte-identical."""
    stored = await backend.read_from(session.id, 0)
    assert [wire(e) for e in stored] == [wire(e) for e in session.events]


def add_turn(session: Session, turn: int, *, blob: int = 0) -> None:
    session.append("turn/start", {"turn": turn})
    if blob:
        session.append("plugin/blob", {"text": "z" * blob}, ignorable=True)
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


# -- a full file system (real ENOSPC) ---------------------------------------------------------

TINY_BYTES = 512 * 1024


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs mounted at a fresh directory, unmounted afterwards."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TINY_BYTES},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


class Filler:
    """Fill a tiny file system to the last block, and free it again."""

    def __init__(self, mount: Path) -> None:
        status = os.statvfs(mount)
        # Never fill anything but the tiny test file system (a full root disk is no test).
        assert status.f_blocks * status.f_frsize <= 4 * TINY_BYTES
        self.path = mount / "filler"

    def fill(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with pytest.raises(OSError) as full:  # noqa: PT012 - bounded, writes to the tmpfs only
                for _ in range(4 * TINY_BYTES // 512):
                    os.write(fd, b"\0" * 512)
        finally:
            os.close(fd)
        assert full.value.errno == errno.ENOSPC

    def free(self) -> None:
        self.path.unlink()


def tiny_backend(kind: str, mount: Path) -> SessionPersistence:
    if kind == "jsonl":
        return JsonlPersistence(mount / "jsonl")
    return SqlitePersistence(mount / "ledger.db")


async def fingerprint(backend: SessionPersistence, session_id: str) -> Any:
    """What a failed flush must leave unchanged: the stored log, as stored."""
    if isinstance(backend, JsonlPersistence):
        (path,) = Path(backend.root).glob("*/*/session.jsonl")
        return path.read_bytes(), record_lines(path)
    return [wire(e) for e in await backend.read_from(session_id, 0)]


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_full_disk_fails_the_flush_and_loses_nothing(kind: str, tiny_fs: Path) -> None:
    filler = Filler(tiny_fs)
    backend = tiny_backend(kind, tiny_fs)
    async with Ledger(persistence=backend, write_delay_ms=3_600_000) as ledger:
        session = ledger.create("full")
        add_turn(session, 1)
        await ledger.flush(session)
        before = await fingerprint(backend, "full")
        filler.fill()
        try:
            add_turn(session, 2, blob=40_000)
            with pytest.raises((OSError, LedgerError)) as failure:
                await ledger.flush(session)
            if kind == "jsonl":
                assert failure.value.errno == errno.ENOSPC  # type: ignore[union-attr]
            assert await fingerprint(backend, "full") == before
            add_turn(session, 3)  # committed behind the failed batch
            with pytest.raises((OSError, LedgerError)):
                await ledger.flush(session)
            assert await fingerprint(backend, "full") == before
            # A session that cannot even be published leaves nothing behind.
            other = ledger.create("unpublished")
            add_turn(other, 1, blob=40_000)
            with pytest.raises((OSError, LedgerError)):
                await ledger.flush(other)
            assert "unpublished" not in [h.id for h in await backend.list()]
            if kind == "jsonl":
                assert not list(Path(backend.root).rglob("*.tmp"))  # type: ignore[attr-defined]
        finally:
            filler.free()
        await ledger.flush(session)
        await ledger.flush(other)
        await stored_exactly(backend, session)
        await stored_exactly(backend, other)
    if kind == "jsonl":
        for path in tiny_fs.glob("jsonl/*/*/session.jsonl"):
            record_lines(path)


def assert_disk_full(error: BaseException) -> None:
    """The specific, typed refusal of a full disk (``ResourceLimitError``, docs/errors.md)."""
    assert isinstance(error, ResourceLimitError), repr(error)
    assert error.code == "RESOURCE_LIMIT"
    assert error.errno == errno.ENOSPC


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_full_disk_is_a_typed_error_at_create_append_repair_and_resume(
    kind: str, tiny_fs: Path
) -> None:
    filler = Filler(tiny_fs)
    async with Ledger(persistence=tiny_backend(kind, tiny_fs)) as ledger:
        crashed = ledger.create("crashed")
        add_turn(crashed, 1)
        crashed.append("turn/start", {"turn": 2})  # left open: resuming it repairs it
        await ledger.flush(crashed)
    if kind == "jsonl":
        # Closers could fit in the slack of the log's last block; a torn tail cannot be
        # repaired without writing its quarantine file, which needs a new block.
        (log,) = (tiny_fs / "jsonl").glob("*/*/session.jsonl")
        with log.open("ab") as torn:
            torn.write(b'{"type":"turn/end","seq":')
    # Resume and repair in a new store, with nothing else holding the store open (SQLite:
    # no -wal or -shm file left to reuse).
    stored = await fingerprint_of(tiny_backend(kind, tiny_fs), "crashed")
    filler.fill()
    try:
        async with Ledger(persistence=tiny_backend(kind, tiny_fs)) as fresh_ledger:
            with pytest.raises(LedgerError) as at_resume:  # its repair writes closers
                await fresh_ledger.resume("crashed")
            assert_disk_full(at_resume.value)
        backend = tiny_backend(kind, tiny_fs)
        try:
            with pytest.raises(LedgerError) as at_repair:  # the CLI's repair: a load
                await backend.load("crashed")
            assert_disk_full(at_repair.value)
        finally:
            await backend.close()
        assert await fingerprint_of(tiny_backend(kind, tiny_fs), "crashed") == stored
    finally:
        filler.free()
    # Create and append with the store open.
    ledger = Ledger(persistence=tiny_backend(kind, tiny_fs), write_delay_ms=3_600_000)
    live = ledger.create("live")
    add_turn(live, 1)
    await ledger.flush(live)
    before = await fingerprint_of(ledger.persistence, "live")
    filler.fill()
    try:
        fresh = ledger.create("fresh")  # create: its first write publishes it
        add_turn(fresh, 1, blob=40_000)
        with pytest.raises(LedgerError) as at_create:
            await ledger.flush(fresh)
        assert_disk_full(at_create.value)
        add_turn(live, 2, blob=40_000)  # append
        with pytest.raises(LedgerError) as at_append:
            await ledger.flush(live)
        assert_disk_full(at_append.value)
        assert await fingerprint_of(ledger.persistence, "live") == before
        assert ledger.persistence is not None
        assert "fresh" not in [h.id for h in await ledger.persistence.list()]
    finally:
        filler.free()
    resumed = await ledger.resume("crashed")
    assert resumed.events[-1].type == "session/end-seed"
    await ledger.flush(live)
    await ledger.flush(fresh)
    assert ledger.persistence is not None
    await stored_exactly(ledger.persistence, live)
    await stored_exactly(ledger.persistence, fresh)
    await ledger.close()


async def fingerprint_of(backend: SessionPersistence | None, session_id: str) -> list[bytes]:
    assert backend is not None
    return [wire(e) for e in await backend.read_from(session_id, 0)]


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_background_write_on_a_full_disk_is_logged_once_and_retried_later(
    kind: str, tiny_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    filler = Filler(tiny_fs)
    backend = tiny_backend(kind, tiny_fs)
    async with Ledger(persistence=backend, write_delay_ms=20) as ledger:
        session = ledger.create("background")
        add_turn(session, 1)
        await ledger.flush(session)
        filler.fill()
        try:
            with caplog.at_level(logging.WARNING, logger="sessionledger"):
                add_turn(session, 2, blob=40_000)

                def failures() -> int:
                    return sum("background write" in r.getMessage() for r in caplog.records)

                for _ in range(500):  # the window expires and the write fails (<= 10 s)
                    if failures():
                        break
                    await asyncio.sleep(0.02)
                assert failures() == 1
                await asyncio.sleep(0.3)  # automatic retry pauses until the next event
                assert failures() == 1
        finally:
            filler.free()
        add_turn(session, 3)  # resumes automatic writing, with the failed batch in front
        for _ in range(500):  # the resumed background write lands (<= 10 s)
            await asyncio.sleep(0.02)
            if len(await backend.read_from("background", 0)) == len(session.events):
                break
        await stored_exactly(backend, session)


# -- a short write at the file-size limit (real EFBIG, in a child) ----------------------------


def load_fault_child() -> Any:
    spec = importlib.util.spec_from_file_location("fault_child", HERE / "fault_child.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAULT_CHILD = load_fault_child()


def fault_script() -> list[SessionEvent]:
    """The child's events, rebuilt here: same batches, same clock (the header takes the
    clock's first tick in both places)."""
    session = Session.create("limited", clock=FAULT_CHILD.Clock())
    for build in (FAULT_CHILD.batch_one, FAULT_CHILD.batch_two, FAULT_CHILD.batch_three):
        build(session)
    return list(session.events)


def run_fault_child(url: str, failpoint: str | None = None) -> tuple[list[str], int]:
    env = dict(os.environ, SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD="1")
    env.pop("SESSIONLEDGER_FAILPOINT", None)
    if failpoint:
        env["SESSIONLEDGER_FAILPOINT"] = failpoint
    child = subprocess.Popen(
        [sys.executable, str(HERE / "fault_child.py"), url, "limited"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stderr is not None
    output = b""
    deadline = time.monotonic() + 60
    try:
        while True:
            ready, _, _ = select.select(
                [child.stderr], [], [], max(0.0, deadline - time.monotonic())
            )
            if not ready:
                pytest.fail(f"fault child hung: {output.decode(errors='replace')}")
            chunk = os.read(child.stderr.fileno(), 65536)
            output += chunk
            if not chunk or (failpoint and b"FAILPOINT " in output):
                break
        if failpoint:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=60)
        child.stderr.close()
    return output.decode(errors="replace").splitlines(), child.returncode


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_short_write_at_the_size_limit_is_undone_and_retried_once(
    kind: str, tmp_path: Path
) -> None:
    url = f"jsonl:{tmp_path / 'jsonl'}" if kind == "jsonl" else f"sqlite:{tmp_path / 'l.db'}"
    lines, code = run_fault_child(url)
    assert code == 0, lines
    assert lines[-1] == "DONE"
    durable = [line for line in lines if line.startswith("DURABLE ")]
    failed = [line.split() for line in lines if line.startswith("FAILED ")]
    assert len(durable) == 2, lines
    assert len(failed) == 2, lines
    for _, _, name, code_text, _ in failed:
        if kind == "jsonl":  # typed, and an OSError still: ResourceLimitError
            assert (name, code_text) == ("ResourceLimitError", str(errno.EFBIG))
        else:
            assert name in ("LedgerError", "ResourceLimitError")
    if kind == "jsonl":
        sizes_before = durable[0].split()[2]
        assert [fields[4] for fields in failed] == [sizes_before, sizes_before]  # cut back
        (path,) = (tmp_path / "jsonl").glob("*/*/session.jsonl")
        record_lines(path)
    expected = fault_script()
    backend = (
        SqlitePersistence(tmp_path / "l.db")
        if kind == "sqlite"
        else JsonlPersistence(tmp_path / "jsonl")
    )
    try:
        stored = await backend.read_from("limited", 0)
    finally:
        await backend.close()
    assert [wire(e) for e in stored] == [wire(e) for e in expected]


async def test_a_writer_killed_between_its_rollback_and_the_rollback_fsync_keeps_its_prefix(
    tmp_path: Path,
) -> None:
    root = tmp_path / "jsonl"
    lines, code = run_fault_child(f"jsonl:{root}", "jsonl.append.after-rollback-truncate")
    assert code == -signal.SIGKILL, lines
    (path,) = root.glob("*/*/session.jsonl")
    assert path.read_bytes().endswith(b"\n")  # cut back to the last acknowledged batch
    expected = fault_script()
    backend = JsonlPersistence(root)
    try:
        stored = await backend.read_from("limited", 0)
    finally:
        await backend.close()
    assert 2 <= len(stored) < len(expected)
    assert [wire(e) for e in stored] == [wire(e) for e in expected[: len(stored)]]
    async with Ledger(persistence=JsonlPersistence(root)) as ledger:
        resumed = (await ledger.resume("limited")).events
    assert [wire(e) for e in resumed[: len(stored)]] == [wire(e) for e in stored]


async def test_a_writer_killed_between_a_short_write_and_its_rollback_keeps_a_prefix(
    tmp_path: Path,
) -> None:
    root = tmp_path / "jsonl"
    lines, code = run_fault_child(f"jsonl:{root}", "jsonl.append.before-rollback")
    assert code == -signal.SIGKILL, lines
    (path,) = root.glob("*/*/session.jsonl")
    assert not path.read_bytes().endswith(b"\n")  # the partial write is on disk
    expected = fault_script()
    before = path.read_bytes()
    backend = JsonlPersistence(root)
    try:
        view = (await backend.inspect("limited")).events
    finally:
        await backend.close()
    assert path.read_bytes() == before
    kept = next(
        (
            index
            for index, (a, b) in enumerate(zip(view, expected, strict=False))
            if wire(a) != wire(b)
        ),
        len(view),
    )
    assert 2 <= kept < len(expected)  # the durable batch, maybe complete records of the next
    closers = interrupted_turn_closers(expected[:kept])
    assert [wire(e) for e in view[kept:]] == [wire(c) for c in closers]
    async with Ledger(persistence=JsonlPersistence(root)) as ledger:
        resumed = (await ledger.resume("limited")).events
    record_lines(path)
    repaired = path.read_bytes()
    async with Ledger(persistence=JsonlPersistence(root)) as ledger:
        again = (await ledger.resume("limited")).events
    assert [wire(e) for e in again] == [wire(e) for e in resumed]
    assert path.read_bytes() == repaired


# -- seams: EIO where the JSONL backend calls os ---------------------------------------------


class FaultyOs:
    """Stand in for ``os`` in the JSONL backend's modules; fail chosen calls on the log.

    ``plan`` maps an operation (``write``, ``fsync``, ``ftruncate``) to the 1-based calls
    on ``session.jsonl`` that fail with ``error``; a failing write first writes half of
    its data, as a device that dies mid-request does.
    """

    def __init__(self, plan: dict[str, set[int]], error: int = errno.EIO) -> None:
        self.plan = plan
        self.error = error
        self.calls: dict[str, int] = {}
        self.active = True

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _fails(self, operation: str, fd: int) -> bool:
        if not self.active or not os.readlink(f"/proc/self/fd/{fd}").endswith("session.jsonl"):
            return False
        count = self.calls[operation] = self.calls.get(operation, 0) + 1
        return count in self.plan.get(operation, set())

    def write(self, fd: int, data: Any) -> int:
        if self._fails("write", fd):
            os.write(fd, bytes(data)[: len(data) // 2])
            raise OSError(self.error, os.strerror(self.error))
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        if self._fails("fsync", fd):
            raise OSError(self.error, os.strerror(self.error))
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        if self._fails("ftruncate", fd):
            raise OSError(self.error, os.strerror(self.error))
        os.ftruncate(fd, size)


@pytest.fixture
def faulty_os(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FaultyOs]:
    def install(plan: dict[str, set[int]], error: int = errno.EIO) -> FaultyOs:
        proxy = FaultyOs(plan, error)
        monkeypatch.setattr(sessionledger_jsonl._writing, "os", proxy)
        monkeypatch.setattr(sessionledger_jsonl._files, "os", proxy)
        return proxy

    return install


@pytest.mark.parametrize(
    ("plan", "error"),
    [
        pytest.param({"fsync": {2}}, errno.EIO, id="fsync-eio-2nd-batch"),
        pytest.param({"fsync": {3}}, errno.EIO, id="fsync-eio-3rd-batch"),
        pytest.param({"write": {2}}, errno.EIO, id="half-write-then-eio"),
        pytest.param({"write": {2}}, errno.ENOSPC, id="half-write-then-enospc"),
        pytest.param({"write": {2}, "ftruncate": {1}}, errno.EIO, id="rollback-fails-too"),
    ],
)
async def test_jsonl_io_errors_keep_the_batch_and_write_it_once(
    plan: dict[str, set[int]], error: int, faulty_os: Callable[..., FaultyOs], tmp_path: Path
) -> None:
    backend = JsonlPersistence(tmp_path / "store")
    proxy = faulty_os(plan, error)
    async with Ledger(persistence=backend, write_delay_ms=3_600_000) as ledger:
        session = ledger.create("eio")
        add_turn(session, 1)
        await ledger.flush(session)  # publication: no write/fsync on session.jsonl itself
        (path,) = (tmp_path / "store").glob("*/*/session.jsonl")
        good = path.read_bytes()
        failures: list[tuple[OSError, bool]] = []  # (error, file cut back to before)
        for turn in range(2, 6):
            add_turn(session, turn, blob=3_000)
            try:
                await ledger.flush(session)
            except OSError as caught:
                failures.append((caught, path.read_bytes() == good))
            else:
                good = path.read_bytes()
        ((caught, cut_back),) = failures  # exactly one flush failed
        assert caught.errno == error
        if "ftruncate" in plan:  # the rollback failed too: the error says so
            assert any("rolling" in note for note in caught.__notes__)
        else:
            assert cut_back  # no partial record left behind
        proxy.active = False
        await ledger.flush(session)
        record_lines(path)
        await stored_exactly(backend, session)


# -- seams: a failing COMMIT on the SQLite backend's connection ---------------------------------


class FaultyConnection:
    """Wrap the backend's aiosqlite connection; make chosen commits fail: an explicit
    ``COMMIT`` of a write transaction, or an append's single INSERT (autocommit), whether
    the store runs it through the connection's async methods or hands its thread a whole
    transaction (``_conn``, the sqlite3 connection that thread uses, is wrapped too).

    ``landed=False``: the commit is refused (rolled back), as on an I/O error;
    ``landed=True``: the commit happens, then the call reports an error anyway (a lost
    acknowledgement).
    """

    def __init__(self, connection: Any, fail_on: set[int], landed: bool) -> None:
        self._connection = connection
        self._fail_on = fail_on
        self._landed = landed
        self.commits = 0
        self.active = True
        self._writing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    @property
    def in_transaction(self) -> bool:
        return bool(self._connection.in_transaction)

    @property
    def _conn(self) -> Any:
        return _FaultySqlite(self._connection._conn, self)

    def fails(self, sql: str, in_transaction: bool) -> bool:
        """Count *sql* if it commits; tell whether this commit is to fail."""
        if sql.startswith("BEGIN"):
            self._writing = sql == "BEGIN IMMEDIATE"
        commits = (sql == "COMMIT" and self._writing) or (
            # schema v1 appended into events, v2 into the batch_rows view
            sql.startswith(("INSERT INTO events", "INSERT INTO batch_rows")) and not in_transaction
        )
        if not (commits and self.active):
            return False
        self.commits += 1
        return self.commits in self._fail_on

    def io_error(self) -> sqlite3.OperationalError:
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = 10  # type: ignore[attr-defined]  # SQLITE_IOERR
        return error

    async def execute_fetchall(self, sql: str, *args: Any) -> Any:
        if self.fails(sql, self._connection.in_transaction):
            if self._landed:
                await self._connection.execute_fetchall(sql, *args)
            raise self.io_error()
        return await self._connection.execute_fetchall(sql, *args)


class _FaultySqlite:
    """The sqlite3 connection under a ``FaultyConnection``, as its thread uses it."""

    def __init__(self, connection: sqlite3.Connection, faults: FaultyConnection) -> None:
        self._connection = connection
        self._faults = faults

    @property
    def in_transaction(self) -> bool:
        return self._connection.in_transaction

    def execute(self, sql: str, *args: Any) -> Any:
        if self._faults.fails(sql, self._connection.in_transaction):
            if self._faults._landed:
                self._connection.execute(sql, *args)
            raise self._faults.io_error()
        return self._connection.execute(sql, *args)


@pytest.mark.parametrize("landed", [False, True], ids=["refused", "landed-but-reported-failed"])
async def test_a_failing_sqlite_commit_keeps_the_batch_and_writes_it_once(
    landed: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wrapped: list[FaultyConnection] = []
    original = sessionledger_sqlite.schema.open_database

    async def open_database(*args: Any, **kwargs: Any) -> Any:
        connection = FaultyConnection(await original(*args, **kwargs), {3}, landed)
        wrapped.append(connection)
        return connection

    monkeypatch.setattr(sessionledger_sqlite.schema, "open_database", open_database)
    backend = SqlitePersistence(tmp_path / "l.db")
    async with Ledger(persistence=backend, write_delay_ms=3_600_000) as ledger:
        session = ledger.create("commit")
        failed = 0
        for turn in range(1, 6):
            add_turn(session, turn)
            before = [wire(e) for e in await backend.read_from("commit", 0)] if turn > 1 else []
            try:
                await ledger.flush(session)
            except LedgerError:
                failed += 1
                after = [wire(e) for e in await backend.read_from("commit", 0)]
                assert after == (before if not landed else [wire(e) for e in session.events])
        assert failed == 1
        wrapped[0].active = False
        await ledger.flush(session)
        await stored_exactly(backend, session)


async def test_a_write_lock_held_past_the_busy_timeout_fails_the_flush_and_loses_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l.db"
    backend = SqlitePersistence(path, busy_timeout=0.2)
    async with Ledger(persistence=backend, write_delay_ms=3_600_000) as ledger:
        session = ledger.create("locked")
        add_turn(session, 1)
        await ledger.flush(session)
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            add_turn(session, 2)
            with pytest.raises(SessionLockedError):
                await ledger.flush(session)
            add_turn(session, 3)
            with pytest.raises(SessionLockedError):
                await ledger.flush(session)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await ledger.flush(session)
        await stored_exactly(backend, session)
