"""The statements that keep a session's summary and search texts beside its events.

Each runs inside the caller's transaction, the one that writes the events the summary
and the texts describe (docs/listing.md), so the indexes can never disagree with the
log: a crash leaves both as they were or both as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final

import aiosqlite

from sessionledger.views._searching import IndexedText
from sessionledger.views._summaries import SessionSummary

__all__ = [
    "SUMMARY_COLUMNS",
    "delete_texts",
    "index_texts",
    "insert_texts",
    "summary_from_columns",
    "summary_values",
    "write_summary",
]

#: The summary columns of ``sessions``, in ``summary_values`` order.
SUMMARY_COLUMNS: Final = "events, first_activity, last_activity, open_turn"

_UPDATE_SUMMARY: Final = (
    "UPDATE sessions SET events = ?, first_activity = ?, "
    "last_activity = coalesce(?, created_at), open_turn = ? WHERE id = ?"
)
#: Texts per INSERT statement (six bound variables each).
_TEXTS_PER_STATEMENT: Final = 500
# The index keeps no copy of the text (external content): it learns new rows from the
# table and forgets rows only when told their exact text, before they are deleted.
_INDEX_TEXTS: Final = (
    "INSERT INTO search_index (rowid, text) SELECT id, text FROM search_texts "
    "WHERE session_id = ? AND seq >= ?"
)
_UNINDEX_TEXTS: Final = (
    "INSERT INTO search_index (search_index, rowid, text) SELECT 'delete', id, text "
    "FROM search_texts WHERE session_id = ? AND seq >= ?"
)
_DELETE_TEXTS: Final = "DELETE FROM search_texts WHERE session_id = ? AND seq >= ?"


def summary_values(summary: SessionSummary | None) -> tuple[Any, Any, Any, Any]:
    """The summary columns for *summary*; None (a summary the caller does not know) is
    stored as untrusted (``events`` NULL), which makes the policy rebuild it."""
    if summary is None:
        return (None, None, None, None)
    return (summary.events, summary.first_activity, summary.last_activity, summary.open_turn)


def summary_from_columns(
    events: Any, first_activity: Any, last_activity: Any, open_turn: Any
) -> SessionSummary | None:
    """The summary the columns hold, or None when they hold none that can be trusted."""
    values = (first_activity, last_activity, open_turn)
    if type(events) is not int or events < 0:
        return None
    if any(value is not None and type(value) is not int for value in values):
        return None
    if events == 0:
        return SessionSummary()
    # ``last_activity`` is never NULL (it falls back to ``created_at``); with events it is
    # the last event's time.
    return SessionSummary(events, first_activity, last_activity, open_turn)


async def write_summary(
    db: aiosqlite.Connection, session_id: str, summary: SessionSummary | None
) -> None:
    """Replace the stored summary of *session_id*."""
    await db.execute_fetchall(_UPDATE_SUMMARY, (*summary_values(summary), session_id))


@functools.lru_cache(maxsize=64)
def _insert(count: int) -> str:
    placeholders = ", ".join(["(?, ?, ?, ?, ?)"] * count)
    return f"INSERT INTO search_texts (session_id, seq, type, time, text) VALUES {placeholders}"


async def insert_texts(
    db: aiosqlite.Connection, session_id: str, texts: Sequence[IndexedText]
) -> None:
    """Store and index *texts*, which follow every text the session already has."""
    if not texts:
        return
    for start in range(0, len(texts), _TEXTS_PER_STATEMENT):
        part = texts[start : start + _TEXTS_PER_STATEMENT]
        values = [
            value
            for item in part
            for value in (session_id, item.seq, item.type, item.time, item.text)
        ]
        await db.execute_fetchall(_insert(len(part)), values)
    await index_texts(db, session_id, texts[0].seq)


async def index_texts(db: aiosqlite.Connection, session_id: str, from_seq: int) -> None:
    """Add the session's stored texts of events at *from_seq* and after to the FTS5
    index (which is not yet told of them)."""
    await db.execute_fetchall(_INDEX_TEXTS, (session_id, from_seq))


async def delete_texts(db: aiosqlite.Connection, session_id: str, from_seq: int = 0) -> None:
    """Remove the session's texts of events at *from_seq* and after from the index and
    the table."""
    await db.execute_fetchall(_UNINDEX_TEXTS, (session_id, from_seq))
    await db.execute_fetchall(_DELETE_TEXTS, (session_id, from_seq))
