"""Every statement a write of the SQLite store runs, with the values it binds: a batch's
``events`` rows, the session's summary and its search texts (docs/formats.md, "SQLite").

A write is built here whole, as ``(sql, values)`` pairs, before its transaction begins (a
value that cannot be stored writes nothing); ``SqliteLogStore`` runs them in order, in one
transaction, with the failpoints between them. The summary and the texts always go in the
transaction of the events they describe (docs/listing.md), so the indexes can never
disagree with the log: a crash leaves all three as they were or all three as they are.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, TypeAlias

from sessionledger import SessionHeader
from sessionledger.storage import Batch, IndexedText, SessionSummary, _rows as rows
from sessionledger_sqlite.reading import EVENT_COLUMNS, HEADER_COLUMNS, SUMMARY_COLUMNS

__all__ = [
    "INDEX_EVERY",
    "LARGEST_EVENT",
    "LENGTH_LIMIT",
    "ROW_RESERVE",
    "Append",
    "Statement",
    "append_statements",
    "create_statements",
    "delete_texts",
    "event_rows",
    "index_waiting",
    "insert_events",
    "insert_texts",
    "update_summary",
]

#: One statement and the values it binds.
Statement: TypeAlias = tuple[str, Sequence[Any]]


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
#: Texts per INSERT statement (five bound variables each).
_TEXTS_PER_STATEMENT: Final = 500

# -- the session row and its summary ------------------------------------------------------

# Returns no row when the id is taken.
_INSERT_SESSION: Final = (
    f"INSERT INTO sessions ({HEADER_COLUMNS}, incarnation, revision, next_seq, "
    f"{SUMMARY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING RETURNING 1"
)
_UPDATE_SUMMARY: Final = (
    "UPDATE sessions SET events = ?, first_activity = ?, "
    "last_activity = coalesce(?, created_at), open_turn = ? WHERE id = ?"
)


def _summary_values(summary: SessionSummary | None) -> tuple[Any, Any, Any, Any]:
    """The summary columns for *summary*; None (a summary the caller does not know) is
    stored as untrusted (``events`` NULL), which makes the policy rebuild it."""
    if summary is None:
        return (None, None, None, None)
    return (summary.events, summary.first_activity, summary.last_activity, summary.open_turn)


def _session_row(
    header: SessionHeader, incarnation: str, summary: SessionSummary | None
) -> Statement:
    """Insert the session's row at seq 0 with its first *summary* (the schema's triggers
    advance it as the events go in); it returns no row when the id is taken."""
    values = list(_summary_values(summary))
    if values[2] is None:
        values[2] = header.created_at
    return _INSERT_SESSION, (*rows.header_columns(header), incarnation, 0, *values)


def update_summary(session_id: str, summary: SessionSummary | None) -> Statement:
    """Replace the stored summary of *session_id*."""
    return _UPDATE_SUMMARY, (*_summary_values(summary), session_id)


# -- events -------------------------------------------------------------------------------


def event_rows(session_id: str, batch: Batch) -> list[tuple[Any, ...]]:
    """The ``events`` rows of a batch: each record's columns and its member count."""
    return [
        (session_id, *rows.event_columns(record), rows.member_count(record))
        for record in batch.records
    ]


def _flat(event_rows: list[tuple[Any, ...]]) -> list[Any]:
    """The bound values of a multi-row INSERT: *event_rows* one after another."""
    return [value for row in event_rows for value in row]


@functools.lru_cache(maxsize=64)
def _insert_events(count: int) -> str:
    """The INSERT of *count* event rows (the schema's triggers check and advance the log)."""
    placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    return f"INSERT INTO events (session_id, {EVENT_COLUMNS}, members) VALUES {placeholders}"


def insert_events(event_rows: list[tuple[Any, ...]]) -> list[Statement]:
    """Insert *event_rows* in statements of at most ``_ROWS_PER_STATEMENT`` rows (inside a
    transaction)."""
    statements: list[Statement] = []
    for start in range(0, len(event_rows), _ROWS_PER_STATEMENT):
        part = event_rows[start : start + _ROWS_PER_STATEMENT]
        statements.append((_insert_events(len(part)), _flat(part)))
    return statements


# -- search texts -------------------------------------------------------------------------

#: Texts wait for their FTS5 entries until this many wait: then one statement indexes them
#: all (schema v3). FTS5 writes a segment per transaction that adds to it, which made it
#: the dearest part of a one-message commit; a search reads the waiting texts directly.
INDEX_EVERY: Final = 64

# The index keeps no copy of the text (external content). The ``search_texts`` rows up to
# ``search_state.indexed_upto`` are in it and none after: each statement below keeps that
# so, in the transaction of the rows it follows (docs/formats.md, "SQLite").
_WAITING: Final = "SELECT indexed_upto FROM search_state"
_INDEX_WAITING: Final = (
    "INSERT INTO search_index (rowid, text) SELECT id, text FROM search_texts "
    f"WHERE id > ({_WAITING}) AND (SELECT max(id) FROM search_texts) >= ({_WAITING}) + ?"
)
_MARK_INDEXED: Final = (
    "UPDATE search_state SET indexed_upto = (SELECT max(id) FROM search_texts) "
    "WHERE (SELECT max(id) FROM search_texts) >= indexed_upto + ?"
)
# The index forgets rows only when told their exact text, before they are deleted; a row
# deleted from the top lowers the mark, so an id used again is not taken as indexed.
_UNINDEX_TEXTS: Final = (
    "INSERT INTO search_index (search_index, rowid, text) SELECT 'delete', id, text "
    f"FROM search_texts WHERE session_id = ? AND seq >= ? AND id <= ({_WAITING})"
)
_DELETE_TEXTS: Final = "DELETE FROM search_texts WHERE session_id = ? AND seq >= ?"
_LOWER_MARK: Final = (
    "UPDATE search_state SET indexed_upto = coalesce((SELECT max(id) FROM search_texts), 0) "
    "WHERE indexed_upto > coalesce((SELECT max(id) FROM search_texts), 0)"
)


def index_waiting() -> list[Statement]:
    """Index the texts that wait, once ``INDEX_EVERY`` of them do."""
    return [(_INDEX_WAITING, (INDEX_EVERY,)), (_MARK_INDEXED, (INDEX_EVERY,))]


@functools.lru_cache(maxsize=64)
def _insert_texts(count: int) -> str:
    placeholders = ", ".join(["(?, ?, ?, ?, ?)"] * count)
    return f"INSERT INTO search_texts (session_id, seq, type, time, text) VALUES {placeholders}"


def insert_texts(session_id: str, texts: Sequence[IndexedText]) -> list[Statement]:
    """Store *texts*, which follow every text the session already has, and index the
    texts that wait once ``INDEX_EVERY`` of them do."""
    if not texts:
        return []
    statements: list[Statement] = []
    for start in range(0, len(texts), _TEXTS_PER_STATEMENT):
        part = texts[start : start + _TEXTS_PER_STATEMENT]
        values = [
            value
            for item in part
            for value in (session_id, item.seq, item.type, item.time, item.text)
        ]
        statements.append((_insert_texts(len(part)), values))
    statements.extend(index_waiting())
    return statements


def delete_texts(session_id: str, from_seq: int = 0) -> list[Statement]:
    """Remove the session's texts of events at *from_seq* and after from the index and
    the table."""
    return [
        (_UNINDEX_TEXTS, (session_id, from_seq)),
        (_DELETE_TEXTS, (session_id, from_seq)),
        (_LOWER_MARK, ()),
    ]


# -- a batch -----------------------------------------------------------------------------


def create_statements(batch: Batch, incarnation: str) -> tuple[Statement, list[Statement]]:
    """The session's row (with *incarnation* and the batch's summary), inserted first
    (no row back: the id is taken, nothing more is written), then its first batch's
    events and texts."""
    session_id = batch.header.id
    return _session_row(batch.header, incarnation, batch.summary), [
        *insert_events(event_rows(session_id, batch)),
        *insert_texts(session_id, batch.texts),
    ]


class Append(NamedTuple):
    """The statements of a batch that continues a stored log."""

    statements: list[Statement]
    #: Whether the first statement is the one INSERT into the ``batch_rows`` view that
    #: carries the whole batch: then, with no text, it commits on its own.
    one_statement: bool


@functools.lru_cache(maxsize=64)
def _insert_batch_rows(count: int) -> str:
    """The INSERT of *count* rows into the ``batch_rows`` view (schema v2): events, their
    search texts and, on the last row, the session's summary, in one statement."""
    placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    return (
        f"INSERT INTO batch_rows (session_id, {EVENT_COLUMNS}, members, text, "
        f"summary_events, first_activity, last_activity, open_turn, closes) VALUES {placeholders}"
    )


def _batch_rows(event_rows: list[tuple[Any, ...]], batch: Batch) -> list[tuple[Any, ...]] | None:
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
    appended[-1] = (*appended[-1][:10], *_summary_values(batch.summary), 1)
    return appended


def append_statements(batch: Batch) -> Append:
    """The statements of *batch*, which continues the stored log.

    The common append is one statement into the ``batch_rows`` view, whose triggers check
    that the rows continue the stored log (a stale writer is refused), advance its end and
    revision, and store the texts and the summary; with texts, two more statements index
    the waiting texts when enough wait. A batch of many rows is inserted statement by
    statement, followed by its summary and texts.
    """
    session_id = batch.header.id
    rows_of_events = event_rows(session_id, batch)
    appended = _batch_rows(rows_of_events, batch)
    if appended is not None:
        statements: list[Statement] = [(_insert_batch_rows(len(appended)), _flat(appended))]
        if batch.texts:
            statements.extend(index_waiting())
        return Append(statements, one_statement=True)
    return Append(
        [
            *insert_events(rows_of_events),
            update_summary(session_id, batch.summary),
            *insert_texts(session_id, batch.texts),
        ],
        one_statement=False,
    )
