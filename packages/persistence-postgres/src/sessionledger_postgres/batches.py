"""The statements that write batches: one per batch, and a whole new log as one
transaction of them (``PostgresLogStore.write_log``; docs/backends.md, "whole logs").

Arguments are built, and every value serialized, before the server is touched: a value
PostgreSQL cannot hold writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from sessionledger._errors import SeqMismatchError
from sessionledger._failpoints import failpoint
from sessionledger.storage._logstore import Batch, RawLog, RawRecord
from sessionledger_postgres import rows
from sessionledger_postgres.statements import Statements

__all__ = ["Statement", "batch_statement", "raw_log", "row_count", "write_whole"]

#: A statement's SQL text and its arguments.
Statement = tuple[str, list[Any]]


def row_count(status: str) -> int:
    """Return the row count of a command status such as ``INSERT 0 12``."""
    return int(status.rsplit(" ", 1)[-1])


def batch_statement(sql: Statements, batch: Batch) -> Statement:
    """The one statement that writes *batch*: ``materialize`` (the session row, its
    summary, the rows and their texts) for a batch that creates the log, else
    ``advance`` (the stale-writer check, the revision, the rows and their texts)."""
    header = batch.header
    session_id = header.id
    rows.plain_text(session_id, "session id", session_id)
    columns = rows.batch_columns(session_id, batch.records)
    summary = rows.summary_columns(batch.summary, header.created_at)
    texts = rows.text_columns(batch.texts)
    if not batch.creates:
        arguments = [session_id, batch.end_seq, batch.first_seq, *columns, *summary, *texts]
        return sql.advance, arguments
    meta = None if header.meta is None else rows.json_text(header.meta)
    return sql.materialize, [
        session_id,
        header.version,
        header.created_at,
        rows.plain_text(header.cwd, "cwd", session_id),
        rows.plain_text(header.parent_session, "parent session", session_id),
        header.seed_length,
        header.delegation_depth,
        rows.plain_text(header.title, "title", session_id),
        meta,
        uuid.uuid4().hex,
        batch.end_seq,
        *columns,
        *summary,
        *texts,
    ]


def raw_log(head: asyncpg.Record, found: Sequence[asyncpg.Record], location: str | None) -> RawLog:
    """The log of one ``sessions`` row and its ``events`` rows (in seq order)."""
    records = [RawRecord(rows.storage_record(row), row[0], f"row seq {row[0]}") for row in found]
    revision = rows.revision_string(head[9], head[10])
    return RawLog(rows.header_json(head), records, revision, location)


async def write_whole(
    conn: PoolConnectionProxy,
    sql: Statements,
    batches: Sequence[Batch],
    check: Callable[[RawLog], None],
    location: str | None,
) -> bool:
    """Write a new log's batches in one transaction, a statement each, read the log back
    inside it for *check* and commit; False (nothing written) when the id is taken."""
    statements = [batch_statement(sql, batch) for batch in batches]
    session_id = batches[0].header.id
    async with conn.transaction():
        for (text, arguments), batch in zip(statements, batches, strict=True):
            if row_count(await conn.execute(text, *arguments)) == 0:
                if batch.creates:
                    return False  # another writer's log: nothing of ours was written
                raise SeqMismatchError(
                    "a batch of the new log did not continue it", session_id=session_id
                )
            failpoint("postgresql.publish.after-batch")
        head = await conn.fetchrow(sql.select_session, session_id)
        found = await conn.fetch(sql.select_events, session_id)
        if head is None:  # the row this transaction inserted: cannot be missing
            raise SeqMismatchError("the new log's row is not there", session_id=session_id)
        check(raw_log(head, found, location))
    return True
