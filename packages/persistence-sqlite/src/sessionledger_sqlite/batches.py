"""The rows a batch writes: its ``events`` rows, the ``batch_rows`` rows that carry them
with their search texts and the session's summary, and the statements that insert them
(docs/formats.md, "SQLite")."""

from __future__ import annotations

import functools
import sqlite3
from typing import Any, Final

import aiosqlite

from sessionledger.storage import _rows as rows
from sessionledger.storage._logstore import Batch
from sessionledger_sqlite import indexes
from sessionledger_sqlite.reading import EVENT_COLUMNS, HEADER_COLUMNS

__all__ = [
    "INSERT_SESSION",
    "LARGEST_EVENT",
    "LENGTH_LIMIT",
    "ROW_RESERVE",
    "append_rows",
    "appended_rows",
    "event_rows",
    "flat",
    "insert_all",
]

#: Creates a session's row (seq 0, its first summary); returns no row when the id is taken.
INSERT_SESSION: Final = (
    f"INSERT INTO sessions ({HEADER_COLUMNS}, incarnation, revision, next_seq, "
    f"{indexes.SUMMARY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING RETURNING 1"
)


def _length_limit() -> int:
    """SQLite's limit on one string, blob or row (``SQLITE_MAX_LENGTH``, 1,000,000,000 unless
    the library was built otherwise), as the linked library states it."""
    connection = sqlite3.connect(":memory:")
    try:
        return connection.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    finally:
        connection.close()


#: The most bytes one row may take: an ``events`` row holds one record, so this bounds an
#: event (a batch has no limit of its own; statements bind their values).
LENGTH_LIMIT: Final = _length_limit()
#: Room in a row beside what ``event_bytes`` counts: the record's header, the
#: ``members`` and ``ignorable`` columns (the session id is counted by the policy).
ROW_RESERVE: Final = 1024
#: The largest event (and batch, to keep one batch's rows within one row's size in
#: memory) the store writes, as ``event_bytes`` counts it (docs/backends.md).
LARGEST_EVENT: Final = LENGTH_LIMIT - ROW_RESERVE

#: Rows per INSERT statement: well below SQLite's limit of 32,766 bound variables.
_ROWS_PER_STATEMENT: Final = 500


@functools.lru_cache(maxsize=64)
def _insert_events(count: int) -> str:
    """The INSERT of *count* event rows (the schema's triggers check and advance the log)."""
    placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    return f"INSERT INTO events (session_id, {EVENT_COLUMNS}, members) VALUES {placeholders}"


@functools.lru_cache(maxsize=64)
def append_rows(count: int) -> str:
    """The INSERT of *count* rows into the ``batch_rows`` view (schema v2): events, their
    search texts and, on the last row, the session's summary, in one statement."""
    placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    return (
        f"INSERT INTO batch_rows (session_id, {EVENT_COLUMNS}, members, text, "
        f"summary_events, first_activity, last_activity, open_turn, closes) VALUES {placeholders}"
    )


def flat(event_rows: list[tuple[Any, ...]]) -> list[Any]:
    """The bound values of a multi-row INSERT: *event_rows* one after another (the store
    binds ``append_rows`` with it too)."""
    return [value for row in event_rows for value in row]


def appended_rows(event_rows: list[tuple[Any, ...]], batch: Batch) -> list[tuple[Any, ...]] | None:
    """The ``batch_rows`` rows of a batch: each event row with its search text and, on the
    last, the summary; None when the batch is too large for one statement or has a text
    that is not one of its rows' (then it is written statement by statement)."""
    if not event_rows or len(event_rows) > _ROWS_PER_STATEMENT:
        return None
    texts = {item.seq: item for item in batch.texts}
    if len(texts) != len(batch.texts):
        return None
    appended: list[tuple[Any, ...]] = []
    for row in event_rows:
        item = texts.pop(row[1], None)
        if item is not None and (item.type, item.time) != (row[2], row[3]):
            return None
        appended.append((*row, None if item is None else item.text, None, None, None, None, 0))
    if texts:
        return None
    appended[-1] = (*appended[-1][:10], *indexes.summary_values(batch.summary), 1)
    return appended


def event_rows(session_id: str, batch: Batch) -> list[tuple[Any, ...]]:
    """The ``events`` rows of a batch: each record's columns and its member count."""
    return [
        (session_id, *rows.event_columns(record), rows.member_count(record))
        for record in batch.records
    ]


async def insert_all(db: aiosqlite.Connection, event_rows: list[tuple[Any, ...]]) -> None:
    """Insert rows in statements of at most ``_ROWS_PER_STATEMENT`` (inside a transaction)."""
    for start in range(0, len(event_rows), _ROWS_PER_STATEMENT):
        part = event_rows[start : start + _ROWS_PER_STATEMENT]
        await db.execute_fetchall(_insert_events(len(part)), flat(part))
