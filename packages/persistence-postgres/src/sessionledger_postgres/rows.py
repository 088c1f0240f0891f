"""Rows of the ``sessions``, ``events`` and ``search_text`` tables <-> the core's records.

The logical columns are SQLite's, and the mapping is the core's (``sessionledger.storage._rows``,
shared by the SQL backends); this module adds what is PostgreSQL's own: ``text`` columns
cannot hold U+0000 or lone surrogates, and a batch is inserted as column arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from sessionledger._errors import JsonValueError
from sessionledger.storage import _rows as core_rows
from sessionledger.views._searching import IndexedText
from sessionledger.views._summaries import SessionSummary

__all__ = [
    "batch_columns",
    "header_json",
    "json_text",
    "member_count",
    "parse_json",
    "plain_text",
    "revision_string",
    "row_end",
    "searchable",
    "summary_columns",
    "summary_from_columns",
    "text_columns",
    "storage_record",
    "text_flaw",
]


def text_flaw(value: str) -> str | None:
    """Return why PostgreSQL ``text`` cannot hold *value*, or None when it can."""
    if "\0" in value:
        return "U+0000 (NUL)"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate"
    return None


def plain_text(value: str | None, what: str, session_id: str) -> str | None:
    """Return *value*, refusing what PostgreSQL ``text`` cannot hold (U+0000, lone
    surrogates). JSON text escapes both, so only the plain columns need the check."""
    flaw = None if value is None else text_flaw(value)
    if flaw is not None:
        raise JsonValueError(
            f"{what} contains {flaw}, which PostgreSQL text cannot store",
            session_id=session_id if text_flaw(session_id) is None else None,
        )
    return value


#: The core's row mapping, under the names this backend's store uses.
json_text = core_rows.json_text
parse_json = core_rows.parse_json_text
member_count = core_rows.member_count
revision_string = core_rows.revision_string


def header_json(row: asyncpg.Record | Sequence[Any]) -> dict[str, Any]:
    """Rebuild the header JSON (documented key names) from a ``sessions`` row."""
    return core_rows.header_json(tuple(row))


def batch_columns(session_id: str, records: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """Turn storage records into the seven parallel column arrays the store's insert
    unnests: seq, type, time, data, source_event_seqs, surface_op, ignorable."""
    event_rows = [core_rows.event_columns(record) for record in records]
    for row in event_rows:
        plain_text(row[1], "event type", session_id)
    return [list(column) for column in zip(*event_rows, strict=True)] if event_rows else [[]] * 7


def storage_record(row: asyncpg.Record | Sequence[Any]) -> Any:
    """Rebuild the storage record of one ``events`` row, or ``UNPARSABLE``."""
    return core_rows.record_from_columns(*row)


def row_end(tail: asyncpg.Record | Sequence[Any] | None) -> int:
    """Return the next seq after the last stored row (0 when there is none)."""
    return 0 if tail is None else core_rows.row_end(*tail)


def summary_columns(summary: SessionSummary | None, created_at: int) -> tuple[int | None, ...]:
    """Return the ``sessions`` summary columns: events, first_activity, last_activity,
    open_turn. No summary stores ``events`` NULL (untrusted: listing rebuilds it); the
    last activity of a session without events is its creation time, as listing sorts."""
    if summary is None:
        return (None, None, created_at, None)
    last = created_at if summary.last_activity is None else summary.last_activity
    return (summary.events, summary.first_activity, last, summary.open_turn)


def summary_from_columns(
    events: int | None, first: int | None, last: int | None, open_turn: int | None
) -> SessionSummary | None:
    """Return the stored summary, or None when the store holds none it trusts. The stored
    last activity of a session without events is its creation time: the summary's is None."""
    if events is None:
        return None
    return SessionSummary(events, first, last if events else None, open_turn)


def searchable(text: str) -> str:
    """Return *text* as the index can hold it: U+0000 and lone surrogates (which
    PostgreSQL text cannot store) become spaces, which separate words just as they do."""
    if text_flaw(text) is None:
        return text
    return "".join(" " if char == "\0" or "\ud800" <= char <= "\udfff" else char for char in text)


def text_columns(texts: Sequence[IndexedText]) -> list[list[Any]]:
    """Turn indexed texts into the four parallel arrays an insert unnests: seq, type,
    time, text."""
    return [
        [item.seq for item in texts],
        [item.type for item in texts],
        [item.time for item in texts],
        [searchable(item.text) for item in texts],
    ]
