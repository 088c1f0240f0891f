"""A session's stored rows as the core's ``RawLog``: what every read of the store, and
the v1 upgrade, hands to ``sessionledger.storage._committed.scan_log``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sessionledger.storage import RawLog, RawRecord, _rows as rows, collector_paused

__all__ = [
    "EVENT_COLUMNS",
    "HEADER_COLUMNS",
    "SESSION_COLUMNS",
    "SUMMARY_COLUMNS",
    "raw_log",
    "row_end",
]

#: The ``sessions`` columns that hold a session's header, in ``rows.header_json`` order.
HEADER_COLUMNS: Final = (
    "id, version, created_at, cwd, parent_session, seed_length, delegation_depth, title, meta"
)
#: The ``sessions`` columns ``raw_log`` reads, in order (the header's nine first).
SESSION_COLUMNS: Final = f"{HEADER_COLUMNS}, incarnation, revision, next_seq"
#: The summary columns of ``sessions`` (docs/listing.md).
SUMMARY_COLUMNS: Final = "events, first_activity, last_activity, open_turn"
#: The ``events`` columns ``raw_log`` reads, in order.
EVENT_COLUMNS: Final = "seq, type, time, data, source_event_seqs, surface_op, ignorable"


def row_end(tail: Sequence[Any]) -> int:
    """Return the next seq after the last stored row (0 when there is none); *tail* holds
    ``(seq, ignorable, data)`` of that row, or nothing."""
    return rows.row_end(*tail[0]) if tail else 0


def raw_log(
    session: Sequence[Any], event_rows: Sequence[Sequence[Any]], location: str | None
) -> RawLog:
    """The log of one ``sessions`` row (``SESSION_COLUMNS``) and its ``events`` rows
    (``EVENT_COLUMNS``, in seq order)."""
    # Each row is rebuilt when the decode reads it: the rows and their parsed form are
    # never both whole.
    build = rows.record_from_columns
    with collector_paused():
        records = [
            RawRecord.deferred(build, tuple(row), row[0], f"row seq {row[0]}") for row in event_rows
        ]
    torn_at = None
    last = event_rows[-1] if event_rows else None
    end = 0 if last is None else row_end([(last[0], last[6], last[3])])
    if session[11] != end:
        # The stored next seq disagrees with the rows (rows lost at the end, or a
        # damaged counter): like a torn tail, load cuts there, which rewrites the
        # counter; otherwise every repair append would fail its seq check forever.
        torn_at = end
    revision = rows.revision_string(session[9], session[10])
    return RawLog(rows.header_json(session), records, revision, location, torn_at)
