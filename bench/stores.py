"""Backends, stored copies of a workload, and the raw floors' storage code.

The raw floors are what a hand-written logger on the same medium does at least: encode
with orjson, write, make durable. Their tables and files get the same durability settings
as the backends (``fsync`` per batch; SQLite ``journal_mode=WAL``, ``synchronous=FULL``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal

import aiosqlite
import orjson

from bench.workloads import Op, replay_clock
from sessionledger import Ledger, Session, SessionHeader
from sessionledger.storage._chunks import pack_chunk_runs
from sessionledger.storage._memory import MemoryLogStore, MemoryPersistence, MemoryStore
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.storage._rows import event_columns
from sessionledger_jsonl import JsonlPersistence
from sessionledger_jsonl.store import JsonlLogStore
from sessionledger_sqlite import SqlitePersistence
from sessionledger_sqlite.store import SqliteLogStore

__all__ = [
    "BACKENDS",
    "Kind",
    "RAW_COLUMNS",
    "append_ops",
    "batches",
    "envelopes",
    "open_backend",
    "open_raw_sqlite",
    "raw_row",
    "ready_to_write",
    "scratch",
    "write_session",
]

Kind = Literal["memory", "jsonl", "sqlite"]
BACKENDS: Final[tuple[Kind, ...]] = ("memory", "jsonl", "sqlite")
SESSION_ID: Final = "bench-session"

#: The raw floor's table: the backend's ``events`` columns, without the sessions table.
RAW_TABLE: Final = """CREATE TABLE IF NOT EXISTS events (
  session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL,
  data TEXT NOT NULL, source_event_seqs TEXT, surface_op TEXT,
  ignorable INTEGER CHECK (ignorable IN (0, 1)), PRIMARY KEY (session_id, seq)) STRICT"""
RAW_COLUMNS: Final = "session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable"
RAW_INSERT: Final = f"INSERT INTO events ({RAW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
RAW_SELECT: Final = (
    "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events "
    "WHERE session_id = ? ORDER BY seq"
)

#: Row caps per backend (docs/formats.md, "chunk rows"): what the backend's packer is given.
CAPS: Final[dict[str, tuple[int | None, int | None]]] = {
    "memory": (MemoryLogStore.max_row_members, MemoryLogStore.max_row_bytes),
    "jsonl": (JsonlLogStore.max_row_members, JsonlLogStore.max_row_bytes),
    "sqlite": (SqliteLogStore.max_row_members, SqliteLogStore.max_row_bytes),
}


@contextmanager
def scratch() -> Iterator[Path]:
    """Yield a fresh temporary directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="sessionledger-bench-") as name:
        yield Path(name)


def open_backend(
    kind: Kind, where: Path, *, store: MemoryStore | None = None, durable: bool = True
) -> SessionPersistence:
    """Return a backend of *kind* on *where* (a directory for jsonl, a file for sqlite).

    ``durable=False`` is for building stores untimed: same bytes, fewer fsyncs.
    """
    if kind == "memory":
        return MemoryPersistence(store=store if store is not None else {})
    if kind == "jsonl":
        return JsonlPersistence(where, fsync=durable)
    return SqlitePersistence(where, synchronous="FULL" if durable else "NORMAL")


async def ready_to_write(persistence: SessionPersistence) -> None:
    """Open *persistence*'s writing side untimed, as a peer's store is opened before its
    clock starts: a read opens nothing while there is no file (reads never write), so a
    one-event session, ``warm-up``, is written (its file, schema and connection stay)."""
    await persistence.create(SessionHeader(id="warm-up", created_at=0))
    await persistence.append(
        "warm-up", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}]
    )


def append_ops(session: Session, ops: list[Op]) -> None:
    """Append every op to *session*."""
    append = session.append
    for op in ops:
        append(op.type, op.data, surface_op=op.surface_op, source_event_seqs=op.sources)


def envelopes(ops: list[Op]) -> list[dict[str, Any]]:
    """Return the plain JSON envelopes a session built from *ops* holds (replayed times)."""
    session = Session.create(SESSION_ID, clock=replay_clock(ops))
    append_ops(session, ops)
    return [orjson.loads(orjson.dumps(event.to_json())) for event in session.events]


def batches(
    items: list[dict[str, Any]], size: int, kind: Kind | None
) -> list[list[dict[str, Any]]]:
    """Split envelopes into write batches of *size*; with a backend *kind*, return each
    batch as the storage records that backend writes for it (plain JSON)."""
    out = []
    for start in range(0, len(items), size):
        batch = items[start : start + size]
        if kind is not None:
            members, data_bytes = CAPS[kind]
            batch = orjson.loads(orjson.dumps(pack_chunk_runs(batch, members, data_bytes)))
        out.append(batch)
    return out


def raw_row(session_id: str, record: dict[str, Any]) -> tuple[Any, ...]:
    """Return the ``events`` row of one storage record (a packed row or an envelope), laid
    out as the SQL backends lay it out (``sessionledger.storage._rows``)."""
    return (session_id, *event_columns(record))


async def open_raw_sqlite(path: Path) -> aiosqlite.Connection:
    """Open a raw floor database with the backend's durability settings."""
    db = await aiosqlite.connect(path)
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = FULL")
    await db.execute(RAW_TABLE)
    await db.commit()
    return db


async def write_session(
    kind: Kind, where: Path, ops: list[Op], flush_every: int, *, store: MemoryStore | None = None
) -> None:
    """Store *ops* as session ``SESSION_ID`` through a ledger, flushing every *flush_every*
    events (what the durable-throughput figure does), untimed and without fsyncs."""
    persistence = open_backend(kind, where, store=store, durable=False)
    async with Ledger(persistence, load_entrypoints=False, clock=replay_clock(ops)) as ledger:
        session = ledger.create(SESSION_ID)
        append = session.append
        for index, op in enumerate(ops, 1):
            append(op.type, op.data, surface_op=op.surface_op, source_event_seqs=op.sources)
            if index % flush_every == 0:
                await ledger.flush(session)


def plain_jsonl(items: list[dict[str, Any]]) -> bytes:
    """Return the plain JSONL of *items*: one compact envelope per line, nothing packed."""
    return b"".join([orjson.dumps(item) + b"\n" for item in items])


def disk_size(path: Path) -> int:
    """Return the bytes a store occupies: a file with its SQLite sidecars, or a tree."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    total = 0
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = Path(f"{path}{suffix}")
        if candidate.exists():
            total += candidate.stat().st_size
    return total


def fsync_write(fd: int, data: bytes) -> None:
    """Write *data* fully to *fd* and fsync it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)
