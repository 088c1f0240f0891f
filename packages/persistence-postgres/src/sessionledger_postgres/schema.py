"""The PostgreSQL store's format: DDL, identity and version checks, race-free creation.

Everything lives in one dedicated PostgreSQL schema (``sessionledger`` unless the URL
names another), so the store can share a database with other applications. The schema
belongs to sessionledger when its ``store_info`` row says ``application =
'sessionledger'`` and ``schema_version = SCHEMA_VERSION`` and its tables, columns and
indexes are exactly the ones below. Anything else is refused with
``FormatUnsupportedError`` before anything is written: bump and reject, never a silent
migration (the SQLite store's policy, carried over; docs/formats.md).

Creation is one transaction under a transaction-scoped advisory lock, so of several
workers that start at once against an empty database one creates the schema and the
others wait for its commit, then find it created. A schema that is already ours is
checked without taking the lock, which keeps the common start cheap.

Only asyncpg errors escape from here; the store translates them at its one boundary.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from sessionledger.errors import ConfigError, FormatUnsupportedError

__all__ = [
    "APPLICATION",
    "DEFAULT_SCHEMA",
    "EXPECTED_COLUMNS",
    "EXPECTED_RELATIONS",
    "LOCK_CLASS",
    "SCHEMA_VERSION",
    "Column",
    "check_schema_name",
    "ddl",
    "inspect_schema",
    "prepare",
    "quote",
]

#: The value of ``store_info.application`` in a schema sessionledger created.
APPLICATION: Final = "sessionledger"
#: ``store_info.schema_version``: the schema version this build reads and writes.
SCHEMA_VERSION: Final = 1
#: The PostgreSQL schema used when the URL names none.
DEFAULT_SCHEMA: Final = "sessionledger"
#: First key of every advisory lock this package takes: ASCII "SLDG" as an int4.
LOCK_CLASS: Final = 0x534C4447

_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_schema_name(name: str) -> str:
    """Return *name* if it is a plain lower-case SQL identifier, else raise ``ConfigError``.

    Restricting names to ``[a-z_][a-z0-9_]*`` (at most 63 bytes, PostgreSQL's limit) means
    the quoted and the unquoted spelling name the same schema, so ``psql`` users find it.
    """
    if type(name) is not str or not _SCHEMA_NAME.fullmatch(name) or name.startswith("pg_"):
        raise ConfigError(
            f"PostgreSQL schema name must match [a-z_][a-z0-9_]* (at most 63 characters, not "
            f"starting with pg_), got {name!r}"
        )
    return name


def quote(name: str) -> str:
    """Quote a checked schema name for SQL text (names cannot be bound parameters)."""
    return '"' + check_schema_name(name) + '"'


def ddl(schema: str) -> tuple[str, ...]:
    """Return the statements that create the tables and indexes inside *schema*, in order.

    Data columns hold JSON as ``text``, byte for byte what ``jsoncodec.dumps`` wrote (the
    README explains why not ``jsonb``). Ids use the ``C`` collation: bytewise order and
    equality, whatever the database's locale. ``ignorable = 0`` marks a packed chunk row
    (docs/formats.md, "SQLite"); NULL or 1 an event.
    """
    s = quote(schema)
    return (
        f"""CREATE TABLE {s}.store_info (
  singleton      boolean NOT NULL DEFAULT true PRIMARY KEY CHECK (singleton),
  application    text NOT NULL,
  schema_version integer NOT NULL
)""",
        f"""CREATE TABLE {s}.sessions (
  id               text COLLATE "C" NOT NULL PRIMARY KEY,
  version          integer NOT NULL,
  created_at       bigint NOT NULL,
  cwd              text,
  parent_session   text,
  seed_length      bigint,
  delegation_depth bigint NOT NULL,
  title            text,
  meta             text,
  incarnation      text NOT NULL,
  revision         bigint NOT NULL,
  next_seq         bigint NOT NULL
)""",
        f"""CREATE TABLE {s}.events (
  session_id        text COLLATE "C" NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE,
  seq               bigint NOT NULL,
  type              text NOT NULL,
  time              bigint NOT NULL,
  data              text NOT NULL,
  source_event_seqs text,
  surface_op        text,
  ignorable         smallint CHECK (ignorable IN (0, 1)),
  PRIMARY KEY (session_id, seq)
)""",
        f"CREATE INDEX sessions_by_created_at ON {s}.sessions (created_at, id)",
        f"INSERT INTO {s}.store_info (application, schema_version) "
        f"VALUES ('{APPLICATION}', {SCHEMA_VERSION:d})",
    )


class Column(NamedTuple):
    """One column as the catalog describes it: table, name, SQL type, NOT NULL."""

    table: str
    name: str
    type: str
    not_null: bool


def _columns(table: str, *spec: tuple[str, str, bool]) -> list[Column]:
    return [Column(table, name, kind, not_null) for name, kind, not_null in spec]


#: The relations (tables and indexes) of a v1 schema: ``(name, relkind)``, sorted.
EXPECTED_RELATIONS: Final = tuple(
    sorted(
        [
            ("store_info", "r"),
            ("store_info_pkey", "i"),
            ("sessions", "r"),
            ("sessions_pkey", "i"),
            ("sessions_by_created_at", "i"),
            ("events", "r"),
            ("events_pkey", "i"),
        ]
    )
)

#: The columns of a v1 schema, sorted by (table, name).
EXPECTED_COLUMNS: Final = tuple(
    sorted(
        _columns(
            "store_info",
            ("singleton", "boolean", True),
            ("application", "text", True),
            ("schema_version", "integer", True),
        )
        + _columns(
            "sessions",
            ("id", "text", True),
            ("version", "integer", True),
            ("created_at", "bigint", True),
            ("cwd", "text", False),
            ("parent_session", "text", False),
            ("seed_length", "bigint", False),
            ("delegation_depth", "bigint", True),
            ("title", "text", False),
            ("meta", "text", False),
            ("incarnation", "text", True),
            ("revision", "bigint", True),
            ("next_seq", "bigint", True),
        )
        + _columns(
            "events",
            ("session_id", "text", True),
            ("seq", "bigint", True),
            ("type", "text", True),
            ("time", "bigint", True),
            ("data", "text", True),
            ("source_event_seqs", "text", False),
            ("surface_op", "text", False),
            ("ignorable", "smallint", False),
        )
    )
)

_NAMESPACE: Final = "SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1"
_RELATIONS: Final = (
    "SELECT relname, relkind::text FROM pg_catalog.pg_class WHERE relnamespace = $1 "
    "ORDER BY relname"
)
_COLUMNS: Final = (
    "SELECT c.relname, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), "
    "a.attnotnull FROM pg_catalog.pg_attribute a "
    "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
    "WHERE c.relnamespace = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped"
)


def _foreign(schema: str, why: str) -> FormatUnsupportedError:
    return FormatUnsupportedError(
        f"PostgreSQL schema {schema!r} is not a sessionledger store ({why}); refusing to use "
        "it (name another with ?schema=NAME)",
        code="FOREIGN_STORE",
        path=schema,
    )


async def inspect_schema(conn: asyncpg.Connection | PoolConnectionProxy, schema: str) -> bool:
    """Return True when *schema* is missing or empty (to be created), False when it is a
    v1 sessionledger store.

    Raise ``FormatUnsupportedError``: ``FORMAT_NEWER`` / ``FORMAT_OLDER`` for a
    sessionledger store of another schema version, ``FOREIGN_STORE`` for anything else
    (another application's tables, or ours altered). Reads the catalog only.
    """
    oid = await conn.fetchval(_NAMESPACE, schema)
    if oid is None:
        return True
    relations = tuple(sorted((row[0], row[1]) for row in await conn.fetch(_RELATIONS, oid)))
    if not relations:
        return True
    columns = tuple(
        sorted(Column(row[0], row[1], row[2], row[3]) for row in await conn.fetch(_COLUMNS, oid))
    )
    info_columns = {column.name for column in columns if column.table == "store_info"}
    if not {"application", "schema_version"} <= info_columns:
        found = ", ".join(name for name, _ in relations[:8])
        raise _foreign(schema, f"it has no store_info table of ours; found {found}")
    rows = await conn.fetch(
        f"SELECT application, schema_version FROM {quote(schema)}.store_info LIMIT 2"
    )
    if len(rows) != 1:
        raise _foreign(schema, f"store_info has {len(rows)} rows, not 1")
    application, version = rows[0]
    if application != APPLICATION:
        raise _foreign(schema, f"store_info names the application {application!r}")
    _check_version(schema, version)
    if relations != EXPECTED_RELATIONS or columns != EXPECTED_COLUMNS:
        raise _foreign(
            schema, f"its tables differ from schema v{SCHEMA_VERSION}'s; was it altered by hand?"
        )
    return False


def _check_version(schema: str, version: object) -> None:
    if type(version) is not int:
        raise _foreign(schema, f"store_info.schema_version is {version!r}")
    if version > SCHEMA_VERSION:
        raise FormatUnsupportedError(
            f"PostgreSQL schema {schema!r} is at store schema v{version}, written by a newer "
            f"sessionledger-postgres (this build reads v{SCHEMA_VERSION}); upgrade to open it",
            code="FORMAT_NEWER",
            path=schema,
        )
    if version < SCHEMA_VERSION:
        raise FormatUnsupportedError(
            f"PostgreSQL schema {schema!r} is at store schema v{version}, older than "
            f"v{SCHEMA_VERSION}, and this build has no upgrade path for it",
            code="FORMAT_OLDER",
            path=schema,
        )


async def prepare(conn: asyncpg.Connection | PoolConnectionProxy, schema: str) -> None:
    """Check *schema* and create it when missing or empty, race-free.

    The unlocked check settles the usual case (a store of ours) and refuses a foreign or
    newer one at once. Only for a missing schema a transaction takes the advisory lock
    ``(LOCK_CLASS, hashtext(schema))``, checks again (another worker may have created it
    meanwhile) and runs the DDL; PostgreSQL DDL is transactional, so a failure or a crash
    leaves nothing half-created.
    """
    if not await inspect_schema(conn, schema):
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", LOCK_CLASS, schema)
        if not await inspect_schema(conn, schema):
            return
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
        for statement in ddl(schema):
            await conn.execute(statement)
