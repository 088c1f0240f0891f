"""The SQLite store's listing, search and size queries, built from a core query
(docs/listing.md).

A listing (``listing.SessionQuery``) is one keyset scan of the index of its order, with
the same filters, order and cursor as ``listing.select``; a search (``searching.TextQuery``)
is one FTS5 query in which every word is a quoted phrase.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sessionledger.storage import (
    SessionQuery,
    SessionSummary,
    StoredSummary,
    TextQuery,
    _rows as rows,
)
from sessionledger_sqlite.reading import HEADER_COLUMNS, SUMMARY_COLUMNS

__all__ = [
    "ANY_UNSUMMARIZED",
    "SELECT_SUMMARIES",
    "STORED_BYTES",
    "session_query",
    "stored_summary",
    "text_query",
    "waiting_texts",
]

# The columns of a listing row, as ``stored_summary`` reads them.
_SUMMARY_ROW: Final = f"{HEADER_COLUMNS}, incarnation, revision, {SUMMARY_COLUMNS}"
#: Every session's listing row, oldest first.
SELECT_SUMMARIES: Final = f"SELECT {_SUMMARY_ROW} FROM sessions ORDER BY created_at, id"
#: Whether some summary is untrusted; the partial index ``sessions_unsummarized`` answers
#: it without reading the table.
ANY_UNSUMMARIZED: Final = "SELECT 1 FROM sessions WHERE events IS NULL LIMIT 1"


def _bytes(column: str) -> str:
    return f"coalesce(length(CAST({column} AS BLOB)), 0)"


def _stored_bytes(session: str) -> str:
    """The UTF-8 bytes of the stored text of the session whose id is *session* (an SQL
    expression), in a query over ``sessions``."""
    return (
        "("
        + " + ".join(
            _bytes(column)
            for column in ("id", "cwd", "parent_session", "title", "meta", "incarnation")
        )
        + ") + (SELECT coalesce(sum("
        + " + ".join(
            _bytes(column) for column in ("type", "data", "source_event_seqs", "surface_op")
        )
        + f"), 0) FROM events WHERE session_id = {session}) + (SELECT coalesce(sum("
        + " + ".join(_bytes(column) for column in ("type", "text"))
        + f"), 0) FROM search_texts WHERE session_id = {session})"
    )


#: The UTF-8 bytes of one session's stored text (``SqliteLogStore.stored_bytes``).
STORED_BYTES: Final = f"SELECT {_stored_bytes('?1')} FROM sessions WHERE id = ?1"

#: How many sessions one ``stored_bytes_many`` statement sizes (well under SQLite's limit
#: on parameters; a full chunk is always the same statement, so it is prepared once).
STORED_BYTES_CHUNK: Final = 500


def stored_bytes_many(count: int) -> str:
    """The id and stored bytes of each of *count* sessions (``?`` parameters)."""
    marks = ", ".join(["?"] * count)
    return f"SELECT id, {_stored_bytes('sessions.id')} FROM sessions WHERE id IN ({marks})"


_SEARCH: Final = (
    "SELECT t.session_id, t.seq, t.type, t.time, t.text FROM search_index "
    "JOIN search_texts AS t ON t.id = search_index.rowid WHERE search_index MATCH ?"
)
# The texts no FTS5 entry covers yet (fewer than ``writing.INDEX_EVERY``).
_WAITING_TEXTS: Final = (
    "SELECT t.session_id, t.seq, t.type, t.time, t.text FROM search_texts AS t "
    "WHERE t.id > (SELECT indexed_upto FROM search_state)"
)


def stored_summary(row: Sequence[Any]) -> StoredSummary:
    """A listing row of ``_SUMMARY_ROW`` columns."""
    return StoredSummary(
        rows.header_json(row),
        rows.revision_string(row[9], row[10]),
        _summary_from_columns(*row[11:15]),
    )


def _summary_from_columns(
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


#: The JSON type ``json_each`` reports for each kind of ``meta`` filter value.
def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "integer" if type(value) is int else "text"


_INT64: Final = range(-(1 << 63), 1 << 63)
# A ``meta`` that is not JSON (a damaged row) matches no filter instead of failing the
# query; the policy skips such a header anyway.
_META_ITEMS: Final = (
    "json_each(CASE WHEN json_valid(meta) THEN meta END) WHERE key = ? AND type = ?"
)


def _bounded(
    where: list[str], parameters: list[Any], condition: str, value: int, *, keeps_all: bool
) -> None:
    if value in _INT64:
        where.append(condition)
        parameters.append(value)
    elif not keeps_all:
        where.append("0")


def session_query(query: SessionQuery) -> tuple[str, list[Any]]:
    """The SQL of ``listing.select`` for *query*: the same filters, order and keyset."""
    key = "last_activity" if query.order == "last_activity" else "created_at"
    where: list[str] = []
    parameters: list[Any] = []
    if query.title is not None:
        # SQLite's lower() folds ASCII letters only, as ``listing.ascii_lower`` does.
        where.append("instr(lower(title), lower(?)) > 0")
        parameters.append(query.title)
    for name, value in query.meta:
        # json_each reads the key unquoted (any character), and its type tells 1, true
        # and "1" apart.
        kind = _json_type(value)
        if kind in ("integer", "text"):
            if kind == "integer" and value not in _INT64:
                where.append("0")  # SQLite keeps no such integer
                continue
            where.append(f"EXISTS (SELECT 1 FROM {_META_ITEMS} AND atom = ?)")
            parameters.extend((name, kind, value))
        else:
            where.append(f"EXISTS (SELECT 1 FROM {_META_ITEMS})")
            parameters.extend((name, kind))
    # Times beyond SQLite's 64-bit integers cannot be bound, and every stored time is
    # within them: such a bound keeps every row or none.
    if query.since is not None:
        _bounded(where, parameters, "last_activity >= ?", query.since, keeps_all=query.since < 0)
    if query.until is not None:
        _bounded(where, parameters, "last_activity < ?", query.until, keeps_all=query.until > 0)
    if query.after is not None:
        # The first condition is the index range; the second skips the ties already shown.
        last, last_id = query.after
        if last in _INT64:
            where.append(f"{key} <= ? AND ({key} < ? OR id > ?)")
            parameters.extend((last, last, last_id))
        elif last < 0:
            where.append("0")
    sql = f"SELECT {_SUMMARY_ROW} FROM sessions"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY {key} DESC, id"
    if query.limit is not None:
        sql += " LIMIT ?"
        parameters.append(query.limit + 1)
    return sql, parameters


def _filters(query: TextQuery) -> tuple[str, list[Any]]:
    """The conditions on ``search_texts AS t`` of *query*'s session and types."""
    sql, parameters = "", []
    if query.session is not None:
        sql += " AND t.session_id = ?"
        parameters.append(query.session)
    if query.types is not None:
        chosen = sorted(query.types)
        sql += f" AND t.type IN ({', '.join('?' * len(chosen))})"
        parameters.extend(chosen)
    return sql, parameters


def text_query(query: TextQuery) -> tuple[str, list[Any]]:
    """The FTS5 query of *query*: each word a quoted phrase, all of them required."""
    match = " ".join('"' + word.replace('"', '""') + '"' for word in query.words)
    filters, parameters = _filters(query)
    sql = f"{_SEARCH}{filters} ORDER BY t.time DESC, t.session_id, t.seq DESC LIMIT ?"
    return sql, [match, *parameters, query.limit]


def waiting_texts(query: TextQuery) -> tuple[str, list[Any]]:
    """The texts of *query*'s session and types that wait for their FTS5 entries: the
    caller matches their words itself."""
    filters, parameters = _filters(query)
    return _WAITING_TEXTS + filters, parameters
