"""The PostgreSQL store's format: DDL, identity and version checks, race-free creation.

Everything lives in one dedicated PostgreSQL schema (``sessionledger`` unless the URL
names another), so the store can share a database with other applications. The schema
belongs to sessionledger when its ``store_info`` row says ``application =
'sessionledger'`` and ``schema_version = SCHEMA_VERSION`` and its tables, columns and
indexes are exactly the ones below. Anything else is refused with
``FormatUnsupportedError`` before anything is written: bump and reject, never a silent
migration (the SQLite store's policy, carried over; docs/formats.md). A v1 schema is
upgraded in place only when asked (``upgrade=1``; ``sessionledger_postgres.upgrade``).

Creation is one transaction under a transaction-scoped advisory lock, so of several
workers that start at once against an empty database one creates the schema and the
others wait for its commit, then find it created. A schema that is already ours is
checked without taking the lock, which keeps the common start cheap.

Only asyncpg errors escape from here; the store translates them at its one boundary.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Final, NamedTuple, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from sessionledger._errors import ConfigError, FormatUnsupportedError

__all__ = [
    "APPLICATION",
    "DEFAULT_SCHEMA",
    "EXPECTED_COLUMNS",
    "EXPECTED_RELATIONS",
    "LOCK_CLASS",
    "INDEXED_CHARS",
    "SCHEMA_VERSION",
    "V1_COLUMNS",
    "V1_RELATIONS",
    "Column",
    "Upgrader",
    "check_schema_name",
    "ddl",
    "inspect_schema",
    "prepare",
    "quote",
    "v2_additions",
]

#: The value of ``store_info.application`` in a schema sessionledger created.
APPLICATION: Final = "sessionledger"
#: ``store_info.schema_version``: the schema version this build reads and writes.
SCHEMA_VERSION: Final = 2
#: The characters of an event's text the full-text index reads: PostgreSQL refuses a
#: tsvector whose lexemes exceed 1 MiB, and an append must never fail over its index
#: (200,000 characters are at most 800 KB of UTF-8, lower-cased included).
INDEXED_CHARS: Final = 200_000
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
  next_seq         bigint NOT NULL,
  events           bigint,
  first_activity   bigint,
  last_activity    bigint NOT NULL,
  open_turn        bigint
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
        *v2_additions(schema),
        f"INSERT INTO {s}.store_info (application, schema_version) "
        f"VALUES ('{APPLICATION}', {SCHEMA_VERSION:d})",
    )


def v2_additions(schema: str) -> tuple[str, ...]:
    """Return the statements v2 adds to v1's tables (a new schema and the upgrade run
    them alike): the listing indexes, the text index and the audit log.

    ``sessions.events`` NULL marks a summary the store cannot trust (a batch came without
    one): listing rebuilds it. The text index reads the first ``INDEXED_CHARS`` characters
    (the query must spell the same expression for PostgreSQL to use it).
    """
    s = quote(schema)
    return (
        f"CREATE INDEX sessions_by_last_activity ON {s}.sessions (last_activity DESC, id)",
        f"CREATE INDEX sessions_by_created ON {s}.sessions (created_at DESC, id)",
        f"CREATE INDEX sessions_unsummarized ON {s}.sessions (id) WHERE events IS NULL",
        f"""CREATE TABLE {s}.search_text (
  session_id text COLLATE "C" NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE,
  seq        bigint NOT NULL,
  type       text NOT NULL,
  time       bigint NOT NULL,
  text       text NOT NULL,
  PRIMARY KEY (session_id, seq)
)""",
        f"CREATE INDEX search_text_words ON {s}.search_text USING gin "
        f"(to_tsvector('simple'::regconfig, left(text, {INDEXED_CHARS:d})))",
        f"""CREATE TABLE {s}.audit (
  id     bigserial NOT NULL PRIMARY KEY,
  record text NOT NULL
)""",
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
V1_RELATIONS: Final = tuple(
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

#: The relations of a v2 schema: v1's but its created_at index, and what v2 adds.
EXPECTED_RELATIONS: Final = tuple(
    sorted(
        [relation for relation in V1_RELATIONS if relation[0] != "sessions_by_created_at"]
        + [
            ("sessions_by_last_activity", "i"),
            ("sessions_by_created", "i"),
            ("sessions_unsummarized", "i"),
            ("search_text", "r"),
            ("search_text_pkey", "i"),
            ("search_text_words", "i"),
            ("audit", "r"),
            ("audit_pkey", "i"),
            ("audit_id_seq", "S"),
        ]
    )
)

#: The columns of a v1 schema, sorted by (table, name).
V1_COLUMNS: Final = tuple(
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

#: The columns of a v2 schema, sorted by (table, name).
EXPECTED_COLUMNS: Final = tuple(
    sorted(
        list(V1_COLUMNS)
        + _columns(
            "sessions",
            ("events", "bigint", False),
            ("first_activity", "bigint", False),
            ("last_activity", "bigint", True),
            ("open_turn", "bigint", False),
        )
        + _columns(
            "search_text",
            ("session_id", "text", True),
            ("seq", "bigint", True),
            ("type", "text", True),
            ("time", "bigint", True),
            ("text", "text", True),
        )
        + _columns("audit", ("id", "bigint", True), ("record", "text", True))
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


Connection: TypeAlias = asyncpg.Connection | PoolConnectionProxy
#: Upgrades a checked v1 schema to v2 inside the caller's transaction (``upgrade.py``).
Upgrader: TypeAlias = Callable[[Connection, str], Awaitable[None]]

_UPGRADABLE: Final = 1


async def inspect_schema(conn: Connection, schema: str, *, upgrade: bool = False) -> int | None:
    """Return None when *schema* is missing or empty (to be created), else its schema
    version: ``SCHEMA_VERSION``, or 1 for an intact v1 store when *upgrade* is asked.

    Raise ``FormatUnsupportedError``: ``FORMAT_NEWER`` / ``FORMAT_OLDER`` for a
    sessionledger store of another schema version (v1 without *upgrade*: the message
    says how), ``FOREIGN_STORE`` for anything else (another application's tables, or ours
    altered). Reads the catalog only.
    """
    oid = await conn.fetchval(_NAMESPACE, schema)
    if oid is None:
        return None
    relations = tuple(sorted((row[0], row[1]) for row in await conn.fetch(_RELATIONS, oid)))
    if not relations:
        return None
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
    if version == _UPGRADABLE:
        # Only an intact v1 store is offered the upgrade: anything else is not ours.
        _check_identity(schema, version, (relations, columns), (V1_RELATIONS, V1_COLUMNS))
    _check_version(schema, version, upgrade=upgrade)
    if version == SCHEMA_VERSION:
        expected = (EXPECTED_RELATIONS, EXPECTED_COLUMNS)
        _check_identity(schema, version, (relations, columns), expected)
    return int(version)


def _check_identity(schema: str, version: int, found: object, expected: object) -> None:
    if found != expected:
        raise _foreign(
            schema, f"its tables differ from schema v{version}'s; was it altered by hand?"
        )


def _check_version(schema: str, version: object, *, upgrade: bool) -> None:
    if type(version) is not int:
        raise _foreign(schema, f"store_info.schema_version is {version!r}")
    if version > SCHEMA_VERSION:
        raise FormatUnsupportedError(
            f"PostgreSQL schema {schema!r} is at store schema v{version}, written by a newer "
            f"sessionledger-postgres (this build reads v{SCHEMA_VERSION}); upgrade to open it",
            code="FORMAT_NEWER",
            path=schema,
        )
    if version == _UPGRADABLE and not upgrade:
        raise FormatUnsupportedError(
            f"PostgreSQL schema {schema!r} is at store schema v1, older than "
            f"v{SCHEMA_VERSION}: stop every process of the older build, then open it once "
            "with ?upgrade=1 in the store URL (PostgresPersistence(..., upgrade=True)) to "
            "upgrade it in place, in one transaction (docs/formats.md, PostgreSQL)",
            code="FORMAT_OLDER",
            path=schema,
        )
    if version < SCHEMA_VERSION and version != _UPGRADABLE:
        raise FormatUnsupportedError(
            f"PostgreSQL schema {schema!r} is at store schema v{version}, older than "
            f"v{SCHEMA_VERSION}, and this build has no upgrade path for it",
            code="FORMAT_OLDER",
            path=schema,
        )


async def prepare(conn: Connection, schema: str, upgrade: Upgrader | None = None) -> None:
    """Check *schema* and create it when missing or empty (or upgrade a v1 one with
    *upgrade*, when given), race-free.

    The unlocked check settles the usual case (a store of ours) and refuses a foreign or
    newer one at once. Only for a missing (or v1) schema a transaction takes the advisory
    lock ``(LOCK_CLASS, hashtext(schema))``, checks again (another worker may have
    created or upgraded it meanwhile) and runs the DDL; PostgreSQL DDL is transactional,
    so a failure or a crash leaves nothing half-created or half-upgraded.
    """
    asked = upgrade is not None
    if await inspect_schema(conn, schema, upgrade=asked) == SCHEMA_VERSION:
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", LOCK_CLASS, schema)
        found = await inspect_schema(conn, schema, upgrade=asked)
        if found == SCHEMA_VERSION:
            return
        if found is not None and upgrade is not None:
            await upgrade(conn, schema)
            return
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
        for statement in ddl(schema):
            await conn.execute(statement)
