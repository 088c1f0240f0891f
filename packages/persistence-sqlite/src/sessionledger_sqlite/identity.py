"""Whether a database file is sessionledger's: its identity read and judged.

A database belongs to sessionledger when its ``application_id`` is ``APPLICATION_ID``
("SLDG"), its ``user_version`` is ``SCHEMA_VERSION`` and its schema objects are exactly
``EXPECTED_OBJECTS``. Anything else is refused with ``FormatUnsupportedError`` before a
single byte of the file is written: bump and reject, never a silent migration. The one way
forward is asked for by name: ``upgrade=1`` upgrades a v1 or v2 database in place, in
one transaction (docs/formats.md, "SQLite").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, TypeAlias

import aiosqlite

from sessionledger import FormatUnsupportedError
from sessionledger_sqlite.ddl import (
    APPLICATION_ID,
    EXPECTED_OBJECTS,
    OLDER_OBJECTS,
    SCHEMA_VERSION,
    SHADOW_TABLES,
    SchemaObject,
    normalize,
)

__all__ = ["Identity", "check_identity", "read_identity"]

_IDS: Final = "SELECT application_id, user_version FROM pragma_application_id, pragma_user_version"
_OBJECTS: Final = (
    "SELECT type, name, tbl_name, sql FROM sqlite_schema "
    "WHERE substr(name, 1, 7) <> 'sqlite_' ORDER BY type, name"
)


def _shown_sql(name: str, sql: str | None) -> str | None:
    return None if name in SHADOW_TABLES else normalize(sql)


async def read_identity(db: aiosqlite.Connection) -> tuple[int, int, list[SchemaObject]]:
    """Return ``(application_id, user_version, schema objects)``; call inside a transaction
    so the three come from one snapshot."""
    ids = list(await db.execute_fetchall(_IDS))
    objects = [
        # The text of FTS5's shadow tables is SQLite's, and may change with its version.
        SchemaObject(row[0], row[1], row[2], _shown_sql(row[1], row[3]))
        for row in await db.execute_fetchall(_OBJECTS)
    ]
    return int(ids[0][0]), int(ids[0][1]), objects


#: What ``check_identity`` found: a new file, one of ours, or an older one to upgrade.
Identity: TypeAlias = Literal["pristine", "current", "upgradable"]


def _how_to_upgrade(version: int) -> str:
    return (
        "open it once with upgrade=1 (sqlite:PATH?upgrade=1, or SqlitePersistence(path, "
        "upgrade=True)) to upgrade it in place in one transaction; releases that read "
        f"v{version} cannot read it afterwards, so copy the file first to keep a copy they can"
    )


def _foreign(objects: Sequence[SchemaObject], location: str) -> FormatUnsupportedError:
    found = ", ".join(f"{item.type} {item.name}" for item in objects) or "none"
    return FormatUnsupportedError(
        "database has sessionledger's identity but not its schema objects "
        f"(found: {found}); refusing to use it",
        code="FOREIGN_STORE",
        path=location,
    )


def check_identity(
    application_id: int,
    user_version: int,
    objects: Sequence[SchemaObject],
    location: str,
    *,
    upgrade: bool = False,
) -> Identity:
    """Say whether the database is pristine (to be initialized), ours, or (only when
    *upgrade* is asked for) an intact older database to upgrade (``OLDER_OBJECTS``).

    Raise ``FormatUnsupportedError``: ``FOREIGN_STORE`` for another application's database
    or schema objects that differ from ours, ``FORMAT_NEWER`` / ``FORMAT_OLDER`` for our
    application id with another schema version (an upgradable one says how to upgrade it).
    """
    if application_id == APPLICATION_ID:
        if user_version > SCHEMA_VERSION:
            raise FormatUnsupportedError(
                f"database schema v{user_version} was written by a newer sessionledger (this "
                f"build reads v{SCHEMA_VERSION}); upgrade sessionledger-sqlite to open it",
                code="FORMAT_NEWER",
                path=location,
            )
        older = OLDER_OBJECTS.get(user_version)
        if older is not None:
            if tuple(objects) != older:
                raise _foreign(objects, location)
            if upgrade:
                return "upgradable"
            raise FormatUnsupportedError(
                f"database schema v{user_version} is older than v{SCHEMA_VERSION}: "
                f"{_how_to_upgrade(user_version)}",
                code="FORMAT_OLDER",
                path=location,
            )
        if user_version < SCHEMA_VERSION:
            raise FormatUnsupportedError(
                f"database schema v{user_version} is older than v{SCHEMA_VERSION} and this "
                "build has no upgrade path for it",
                code="FORMAT_OLDER",
                path=location,
            )
        if tuple(objects) != EXPECTED_OBJECTS:
            raise _foreign(objects, location)
        return "current"
    if application_id == 0 and user_version == 0 and not objects:
        return "pristine"
    raise FormatUnsupportedError(
        f"not a sessionledger database (application_id {application_id:#x}, user_version "
        f"{user_version}, {len(objects)} schema objects; expected application_id "
        f"{APPLICATION_ID:#x}); refusing to use it",
        code="FOREIGN_STORE",
        path=location,
    )
