"""Upgrading a v1 database: every session's summary and search texts, which v2 added,
computed from its stored events (docs/formats.md, "SQLite"). A v2 database has them
already: its upgrade only remakes the text index (``ddl.V3_DDL``).

``fill_v2`` runs inside the one transaction ``schema`` opens for the upgrade, after the
new columns and tables exist. A session it cannot read stops the whole upgrade: the
transaction rolls back and the database stays a v1 database, every byte as it was.
"""

from __future__ import annotations

from typing import Final

import aiosqlite

from sessionledger import CorruptLogError, LedgerError
from sessionledger.storage import indexed_texts, scan_log, summarize
from sessionledger_sqlite import writing
from sessionledger_sqlite.reading import EVENT_COLUMNS, SESSION_COLUMNS, raw_log

__all__ = ["fill_v2"]

_SESSIONS: Final = f"SELECT {SESSION_COLUMNS} FROM sessions ORDER BY id"
_EVENTS: Final = f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? ORDER BY seq"


async def fill_v2(db: aiosqlite.Connection, location: str | None = None) -> None:
    """Write the summary and search texts of every stored session, as the store's read
    path decodes its events (``scan_log``); ``CorruptLogError`` names a session that
    cannot be read."""
    for session in await db.execute_fetchall(_SESSIONS):
        session_id = session[0]
        event_rows = list(await db.execute_fetchall(_EVENTS, (session_id,)))
        try:
            scan = scan_log(session_id, raw_log(session, event_rows, location), contiguous_from=0)
        except LedgerError as error:
            raise CorruptLogError(
                f"cannot upgrade the database: session {session_id!r} cannot be read "
                f"({error.code}: {error}); nothing was changed (repair or delete that "
                "session with a release that reads v1, then upgrade)",
                session_id=session_id,
                path=location,
            ) from error
        for sql, values in (
            writing.update_summary(session_id, summarize(scan.events)),
            *writing.insert_texts(session_id, indexed_texts(scan.events)),
        ):
            await db.execute_fetchall(sql, values)
