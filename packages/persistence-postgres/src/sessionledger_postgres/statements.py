"""The SQL text of the PostgreSQL store: every statement, with its schema spelled in.

Names cannot be bound parameters, so each store builds its statements once, for its
schema (``schema.quote`` checked the name). Batches travel as parallel arrays that the
statements ``unnest``: one message, one statement, whatever the batch size, so a batch
is as large as one message may be (``LARGEST_BATCH``).
"""

from __future__ import annotations

from typing import Final

from sessionledger_postgres.schema import INDEXED_CHARS, quote

__all__ = ["EVENT_COLUMNS", "HEADER_COLUMNS", "LARGEST_BATCH", "SUMMARY_COLUMNS", "Statements"]

#: The largest batch (and event) the store writes, as ``event_bytes`` counts them
#: (docs/backends.md, "the primitives"). PostgreSQL takes no message and no value over
#: 1 GiB, and a batch is one message with each column one array value. It carries each
#: event's data and search text (never longer than the data), each row's other columns
#: (less than the envelope ``event_bytes`` counts around the data), and the header and
#: summary: twice a batch's bytes, plus a 32 MiB reserve, stays under 1 GiB.
LARGEST_BATCH: Final = ((1 << 30) - (32 << 20)) // 2

HEADER_COLUMNS: Final = (
    "id, version, created_at, cwd, parent_session, seed_length, delegation_depth, title, meta"
)
EVENT_COLUMNS: Final = "seq, type, time, data, source_event_seqs, surface_op, ignorable"
# The batch travels as seven parallel arrays: one message, one statement, any batch size.
_UNNEST: Final = (
    "unnest({0}::bigint[], {1}::text[], {2}::bigint[], {3}::text[], {4}::text[], {5}::text[], "
    "{6}::smallint[]) AS r (seq, type, time, data, source_event_seqs, surface_op, ignorable)"
)
SUMMARY_COLUMNS: Final = "events, first_activity, last_activity, open_turn"
_UNNEST_TEXTS: Final = (
    "unnest({0}::bigint[], {1}::text[], {2}::bigint[], {3}::text[]) AS t (seq, type, time, text)"
)


class Statements:
    """The SQL text of one store, with its schema name spelled in (names cannot be bound)."""

    def __init__(self, schema: str) -> None:
        s = quote(schema)
        #: The channel of this store's change notifications (docs/feed.md): the schema's
        #: name after a prefix (at most 63 bytes, as PostgreSQL's names).
        self.channel = f"sessionledger_{schema}"[:63]
        # pg_notify's payload holds at most 8000 bytes: a longer id notifies every feed.
        notify = (
            f"pg_notify('{self.channel}', CASE WHEN octet_length({{0}}) <= 4000 THEN {{0}} "
            "ELSE '' END)"
        )
        self.notify = f"SELECT {notify.format('$1::text')}"
        into_events = f"INSERT INTO {s}.events (session_id, {EVENT_COLUMNS}) "
        into_texts = f"INSERT INTO {s}.search_text (session_id, seq, type, time, text) "
        self.select_session = (
            f"SELECT {HEADER_COLUMNS}, incarnation, revision FROM {s}.sessions WHERE id = $1"
        )
        self.select_headers = (
            f"SELECT {HEADER_COLUMNS}, incarnation, revision FROM {s}.sessions "
            "ORDER BY created_at, id"
        )
        self.select_events = (
            f"SELECT {EVENT_COLUMNS} FROM {s}.events WHERE session_id = $1 ORDER BY seq"
        )
        # Start at the row that covers from_seq: a packed row can begin before it.
        self.select_events_from = (
            f"SELECT {EVENT_COLUMNS} FROM {s}.events WHERE session_id = $1 AND seq >= "
            f"coalesce((SELECT max(seq) FROM {s}.events WHERE session_id = $1 AND seq <= $2), 0) "
            "ORDER BY seq"
        )
        # Materialize: the header row, its summary, the first batch and its texts in one
        # statement. A concurrent creator makes ON CONFLICT insert nothing, so no event or
        # text row is inserted either. Its status counts the notifications sent (one for
        # the created session, none otherwise), which PostgreSQL delivers on commit.
        self.materialize = (
            f"WITH created AS (INSERT INTO {s}.sessions ({HEADER_COLUMNS}, incarnation, "
            f"revision, next_seq, {SUMMARY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, "
            "$9, $10, 0, $11, $19, $20, $21, $22) ON CONFLICT (id) DO NOTHING RETURNING id), "
            f"indexed AS ({into_texts}SELECT created.id, t.* FROM created, "
            + _UNNEST_TEXTS.format("$23", "$24", "$25", "$26")
            + f"), inserted AS ({into_events}SELECT created.id, r.* FROM created, "
            + _UNNEST.format("$12", "$13", "$14", "$15", "$16", "$17", "$18")
            + f") SELECT {notify.format('created.id')} FROM created"
        )
        # Append: the stale-writer check, the revision bump, the summary, the rows and
        # their texts in one statement (docs/durability.md). Under READ COMMITTED a writer
        # that waited for the row lock re-evaluates next_seq = $3 on the winner's row
        # version and updates nothing, so it inserts nothing either (and notifies nothing).
        self.advance = (
            f"WITH advanced AS (UPDATE {s}.sessions SET next_seq = $2, revision = revision + 1, "
            "events = $11, first_activity = $12, last_activity = $13, open_turn = $14 "
            "WHERE id = $1 AND next_seq = $3 RETURNING id), "
            f"indexed AS ({into_texts}SELECT advanced.id, t.* FROM advanced, "
            + _UNNEST_TEXTS.format("$15", "$16", "$17", "$18")
            + f"), inserted AS ({into_events}SELECT advanced.id, r.* FROM advanced, "
            + _UNNEST.format("$4", "$5", "$6", "$7", "$8", "$9", "$10")
            + f") SELECT {notify.format('advanced.id')} FROM advanced"
        )
        self.set_summary = (
            f"UPDATE {s}.sessions SET events = $2, first_activity = $3, last_activity = $4, "
            "open_turn = $5 WHERE id = $1"
        )
        self.insert_texts = f"{into_texts}SELECT $1, t.* FROM " + _UNNEST_TEXTS.format(
            "$2", "$3", "$4", "$5"
        )
        self.delete_texts_from = f"DELETE FROM {s}.search_text WHERE session_id = $1 AND seq >= $2"
        self.delete_texts = f"DELETE FROM {s}.search_text WHERE session_id = $1"
        self.select_summaries = (
            f"SELECT {HEADER_COLUMNS}, incarnation, revision, {SUMMARY_COLUMNS} "
            f"FROM {s}.sessions ORDER BY created_at, id"
        )
        self.listing = (
            f"SELECT {HEADER_COLUMNS}, incarnation, revision, {SUMMARY_COLUMNS} FROM {s}.sessions"
        )
        self.unsummarized = f"SELECT EXISTS (SELECT 1 FROM {s}.sessions WHERE events IS NULL)"
        self.search = (
            f"SELECT session_id, seq, type, time, text FROM {s}.search_text WHERE "
            f"to_tsvector('simple'::regconfig, left(text, {INDEXED_CHARS:d})) "
            "@@ plainto_tsquery('simple'::regconfig, $1)"
        )
        # What deleting a session frees: its rows' stored (possibly compressed) sizes.
        self.stored_bytes = (
            f"SELECT pg_column_size(x.*) + coalesce((SELECT sum(pg_column_size(e.*)) FROM "
            f"{s}.events e WHERE e.session_id = $1), 0) + coalesce((SELECT "
            f"sum(pg_column_size(t.*)) FROM {s}.search_text t WHERE t.session_id = $1), 0) "
            f"FROM {s}.sessions x WHERE x.id = $1"
        )
        self.append_audit = f"INSERT INTO {s}.audit (record) VALUES ($1)"
        self.read_audit = f"SELECT record FROM {s}.audit ORDER BY id"
        self.revision = f"SELECT incarnation, revision FROM {s}.sessions WHERE id = $1"
        self.lock_session = f"{self.revision} FOR UPDATE"
        self.lock_summary = (
            f"SELECT incarnation, revision, created_at FROM {s}.sessions WHERE id = $1 FOR UPDATE"
        )
        self.delete_tail = f"DELETE FROM {s}.events WHERE session_id = $1 AND seq >= $2"
        self.count_tail = f"SELECT count(*) FROM {s}.events WHERE session_id = $1 AND seq >= $2"
        self.select_tail = (
            f"SELECT seq, ignorable, data FROM {s}.events WHERE session_id = $1 "
            "ORDER BY seq DESC LIMIT 1"
        )
        self.set_end = (
            f"UPDATE {s}.sessions SET next_seq = $2, revision = revision + 1 WHERE id = $1"
        )
        self.delete = f"DELETE FROM {s}.sessions WHERE id = $1 RETURNING 1"
