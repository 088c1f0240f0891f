"""The persistence contract kit, run unchanged against every first-party backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import orjson
import pytest

from sessionledger.storage._memory import MemoryPersistence, MemoryStore
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.contract import PersistenceContract
from sessionledger_jsonl import JsonlPersistence
from sessionledger_jsonl.paths import encode_session_id
from sessionledger_sqlite import SqlitePersistence


class MemoryTamper:
    """Damage a memory store the way a crash or a bad medium damages a file."""

    async def tear_tail(self, backend: SessionPersistence, session_id: str) -> None:
        assert isinstance(backend, MemoryPersistence)
        records = backend.raw_records(session_id)
        backend.replace_raw_records(session_id, [*records, records[-1][: len(records[-1]) // 2]])

    async def break_record(self, backend: SessionPersistence, session_id: str, index: int) -> None:
        assert isinstance(backend, MemoryPersistence)
        records = backend.raw_records(session_id)
        records[index] = records[index][:-3] + b"?!"
        backend.replace_raw_records(session_id, records)

    async def set_version(self, backend: SessionPersistence, session_id: str, version: int) -> None:
        assert isinstance(backend, MemoryPersistence)
        header = orjson.loads(backend.store[session_id].header)
        header["version"] = version
        backend.replace_raw_header(session_id, orjson.dumps(header))

    async def quarantined(self, backend: SessionPersistence, session_id: str) -> bytes:
        assert isinstance(backend, MemoryPersistence)
        return b"".join(backend.quarantined(session_id))


def is_commit(line: bytes) -> bool:
    """Whether a JSONL line is a batch's commit record."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and list(value) == ["commit"]


def jsonl_file(backend: SessionPersistence, session_id: str) -> Path:
    """Return the one log file of *session_id* under the backend's root."""
    assert isinstance(backend, JsonlPersistence)
    (found,) = Path(backend.root).glob(f"*/{encode_session_id(session_id)}/session.jsonl")
    return found


class JsonlTamper:
    """Damage a log file the way a crash or a bad disk does."""

    async def tear_tail(self, backend: SessionPersistence, session_id: str) -> None:
        with jsonl_file(backend, session_id).open("ab") as file:
            file.write(b'{"type":"assistant/chunk","seq":')

    async def break_record(self, backend: SessionPersistence, session_id: str, index: int) -> None:
        path = jsonl_file(backend, session_id)
        lines = path.read_bytes().split(b"\n")
        # line 1 is the header; commit records frame the batches and are not records
        records = [number for number, line in enumerate(lines) if number and not is_commit(line)]
        lines[records[index]] = lines[records[index]][:-3] + b"?!"
        path.write_bytes(b"\n".join(lines))

    async def quarantined(self, backend: SessionPersistence, session_id: str) -> bytes:
        log = jsonl_file(backend, session_id)
        return b"".join(p.read_bytes() for p in sorted(log.parent.glob(f"{log.name}.quarantine-*")))

    async def set_version(self, backend: SessionPersistence, session_id: str, version: int) -> None:
        path = jsonl_file(backend, session_id)
        header, rest = path.read_bytes().split(b"\n", 1)
        value = orjson.loads(header)
        value["version"] = version
        path.write_bytes(orjson.dumps(value) + b"\n" + rest)


def jsonl_factory(tmp_path: Path) -> Callable[..., SessionPersistence]:
    root = tmp_path / "store"
    return lambda **options: JsonlPersistence(root, **options)


def sqlite_path(backend: SessionPersistence) -> str:
    assert isinstance(backend, SqlitePersistence)
    return backend.path


class SqliteTamper:
    """Damage stored rows behind the backend's back, through a second connection.

    A SQLite transaction cannot be torn by a crash, so a "torn tail" here is a committed
    trailing row whose JSON does not parse: the nearest thing a bad medium or a foreign
    writer can leave, and what the read path must treat the same way.
    """

    async def tear_tail(self, backend: SessionPersistence, session_id: str) -> None:
        async with aiosqlite.connect(sqlite_path(backend), isolation_level=None) as db:
            await db.execute_fetchall("BEGIN IMMEDIATE")
            ((next_seq,),) = await db.execute_fetchall(
                "SELECT next_seq FROM sessions WHERE id = ?", (session_id,)
            )
            # (the schema's trigger moves next_seq and the revision on)
            await db.execute_fetchall(
                "INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)",
                (session_id, next_seq, "assistant/chunk", 0, '{"turn":1,"step":'),
            )
            await db.execute_fetchall("COMMIT")

    async def break_record(self, backend: SessionPersistence, session_id: str, index: int) -> None:
        async with aiosqlite.connect(sqlite_path(backend), isolation_level=None) as db:
            await db.execute_fetchall(
                "UPDATE events SET data = substr(data, 1, length(data) - 3) || '?!' "
                "WHERE session_id = ?1 AND seq = "
                "(SELECT seq FROM events WHERE session_id = ?1 ORDER BY seq LIMIT 1 OFFSET ?2)",
                (session_id, index),
            )

    async def set_version(self, backend: SessionPersistence, session_id: str, version: int) -> None:
        async with aiosqlite.connect(sqlite_path(backend), isolation_level=None) as db:
            await db.execute_fetchall(
                "UPDATE sessions SET version = ? WHERE id = ?", (version, session_id)
            )

    async def quarantined(self, backend: SessionPersistence, session_id: str) -> bytes:
        database = Path(sqlite_path(backend))
        moved = sorted(database.parent.glob(f"{database.name}.quarantine-*.jsonl"))
        return b"".join(path.read_bytes() for path in moved)


def sqlite_factory(tmp_path: Path) -> Callable[..., SessionPersistence]:
    path = tmp_path / "ledger.db"
    return lambda **options: SqlitePersistence(path, **options)


def memory_factory(tmp_path: Path) -> Callable[..., SessionPersistence]:
    store: MemoryStore = {}
    return lambda **options: MemoryPersistence(store=store, **options)


BACKENDS: dict[str, tuple[Callable[[Path], Callable[..., SessionPersistence]], Any]] = {
    "memory": (memory_factory, MemoryTamper()),
    "jsonl": (jsonl_factory, JsonlTamper()),
    "sqlite": (sqlite_factory, SqliteTamper()),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestContract(PersistenceContract):
    @pytest.fixture
    def ledger_backend_factory(
        self, backend_name: str, tmp_path: Path
    ) -> Callable[..., SessionPersistence]:
        return BACKENDS[backend_name][0](tmp_path)

    @pytest.fixture
    def ledger_backend_tamper(self, backend_name: str) -> Any:
        return BACKENDS[backend_name][1]
