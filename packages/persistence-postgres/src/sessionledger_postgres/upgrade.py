"""Upgrade a v1 PostgreSQL schema to v2 in place: summaries, text index, audit log.

Runs only when the store is opened with ``upgrade=1`` (docs/formats.md, "PostgreSQL"),
inside ``schema.prepare``'s transaction, under its advisory lock, after the schema was
checked to be an intact v1 store. Every session's summary and searchable texts are
computed from its stored events, decoded exactly as a read decodes them
(``sessionledger.storage._committed.scan_log``), so the index starts as a write would have left
it. One transaction: a session that cannot be read fails the whole upgrade with
``CorruptLogError`` naming it (as the SQLite store's upgrade does) and the schema stays
v1, untouched.
"""

from __future__ import annotations

from typing import Final

from sessionledger._errors import CorruptLogError, LedgerError
from sessionledger.storage._committed import scan_log
from sessionledger.storage._logstore import RawLog, RawRecord
from sessionledger.views._searching import indexed_texts
from sessionledger.views._summaries import summarize
from sessionledger_postgres import rows
from sessionledger_postgres.schema import SCHEMA_VERSION, Connection, quote, v2_additions

__all__ = ["upgrade_v1"]

_HEADER_COLUMNS: Final = (
    "id, version, created_at, cwd, parent_session, seed_length, delegation_depth, title, meta, "
    "incarnation, revision"
)
_EVENT_COLUMNS: Final = "seq, type, time, data, source_event_seqs, surface_op, ignorable"


async def upgrade_v1(conn: Connection, schema: str) -> None:
    """Turn the intact v1 schema *schema* into v2, in the caller's transaction."""
    s = quote(schema)
    # Writers of the older build wait until the upgrade commits (or rolls back).
    await conn.execute(f"LOCK TABLE {s}.sessions, {s}.events IN ACCESS EXCLUSIVE MODE")
    await conn.execute(
        f"ALTER TABLE {s}.sessions ADD COLUMN events bigint, ADD COLUMN first_activity bigint, "
        "ADD COLUMN last_activity bigint, ADD COLUMN open_turn bigint"
    )
    await conn.execute(f"DROP INDEX {s}.sessions_by_created_at")
    for statement in v2_additions(schema):
        await conn.execute(statement)
    set_summary = (
        f"UPDATE {s}.sessions SET events = $2, first_activity = $3, last_activity = $4, "
        "open_turn = $5 WHERE id = $1"
    )
    insert_texts = (
        f"INSERT INTO {s}.search_text (session_id, seq, type, time, text) "
        "SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::text[])"
    )
    select_events = f"SELECT {_EVENT_COLUMNS} FROM {s}.events WHERE session_id = $1 ORDER BY seq"
    for head in await conn.fetch(f"SELECT {_HEADER_COLUMNS} FROM {s}.sessions ORDER BY id"):
        session_id = head[0]
        found = await conn.fetch(select_events, session_id)
        raw = RawLog(
            rows.header_json(head),
            [RawRecord(rows.storage_record(row), row[0], f"row seq {row[0]}") for row in found],
            rows.revision_string(head[9], head[10]),
            f"PostgreSQL schema {schema}",
        )
        try:
            events = scan_log(session_id, raw, contiguous_from=0).events
        except LedgerError as error:
            raise CorruptLogError(
                f"cannot upgrade PostgreSQL schema {schema!r} to v{SCHEMA_VERSION}: a stored "
                f"session cannot be read ({error.code}: {error}); nothing was changed. Copy "
                "or delete that session with the older build, then upgrade again",
                session_id=session_id,
                path=schema,
            ) from error
        summary = summarize(events)
        await conn.execute(set_summary, session_id, *rows.summary_columns(summary, head[2]))
        texts = indexed_texts(events)
        if texts:
            await conn.execute(insert_texts, session_id, *rows.text_columns(texts))
    await conn.execute(f"ALTER TABLE {s}.sessions ALTER COLUMN last_activity SET NOT NULL")
    await conn.execute(f"UPDATE {s}.store_info SET schema_version = {SCHEMA_VERSION:d}")
