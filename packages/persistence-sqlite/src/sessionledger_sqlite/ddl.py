"""The SQLite store's schema as text: every statement that creates it, and the objects
those statements leave in ``sqlite_schema`` (docs/formats.md, "SQLite").

Each version is the one before plus its own statements (``V2_DDL``, ``V3_DDL``): a new
database runs every list, an older one the lists after its version (``UPGRADES``), so both
end with the very same schema text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

__all__ = [
    "APPLICATION_ID",
    "DDL",
    "EXPECTED_OBJECTS",
    "OLDER_OBJECTS",
    "SCHEMA_VERSION",
    "SEQ_MISMATCH",
    "SHADOW_TABLES",
    "UPGRADES",
    "V1_DDL",
    "V1_OBJECTS",
    "V2_DDL",
    "V2_OBJECTS",
    "V3_DDL",
    "SchemaObject",
    "normalize",
]

#: ``PRAGMA application_id`` of a sessionledger database: ASCII "SLDG".
APPLICATION_ID: Final = 0x534C4447
#: ``PRAGMA user_version``: the schema version this build reads and writes.
SCHEMA_VERSION: Final = 3

_SESSIONS: Final = """CREATE TABLE sessions (
  id               TEXT NOT NULL PRIMARY KEY,
  version          INTEGER NOT NULL,
  created_at       INTEGER NOT NULL,
  cwd              TEXT,
  parent_session   TEXT,
  seed_length      INTEGER,
  delegation_depth INTEGER NOT NULL,
  title            TEXT,
  meta             TEXT,
  incarnation      TEXT NOT NULL,
  revision         INTEGER NOT NULL,
  next_seq         INTEGER NOT NULL
) STRICT"""

# ``ignorable = 0`` marks a packed chunk row (docs/formats.md, "SQLite"); NULL or 1 an event.
_EVENTS: Final = """CREATE TABLE events (
  session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  seq               INTEGER NOT NULL,
  type              TEXT NOT NULL,
  time              INTEGER NOT NULL,
  data              TEXT NOT NULL,
  source_event_seqs TEXT,
  surface_op        TEXT,
  ignorable         INTEGER CHECK (ignorable IN (0, 1)),
  members           INTEGER NOT NULL DEFAULT 1 CHECK (members >= 1),
  PRIMARY KEY (session_id, seq)
) STRICT"""

# The database itself keeps each log contiguous, so an append is one INSERT statement
# (one round trip, committed atomically on its own): a row must start where the stored
# log ends, and each row moves that end on by the events it holds (``members``: 1, or
# the member count of a packed row). A stale writer's first row fails the check and the
# whole statement is rolled back (docs/durability.md). No SQL function is used: with
# ``trusted_schema=OFF`` SQLite allows only innocuous ones in triggers.
_CONTINUE: Final = """CREATE TRIGGER events_continue_the_log BEFORE INSERT ON events
WHEN NEW.seq IS NOT (SELECT next_seq FROM sessions WHERE id = NEW.session_id)
BEGIN SELECT RAISE(ABORT, 'sessionledger: seq mismatch'); END"""
_ADVANCE: Final = """CREATE TRIGGER events_advance_the_log AFTER INSERT ON events
BEGIN UPDATE sessions SET next_seq = NEW.seq + NEW.members, revision = revision + 1
WHERE id = NEW.session_id; END"""

#: The message of the ``RAISE`` above, which the store turns into ``SeqMismatchError``.
SEQ_MISMATCH: Final = "sessionledger: seq mismatch"

# ``list`` reads sessions in (created_at, id) order straight from this index.
_SESSIONS_ORDER: Final = "CREATE INDEX sessions_by_created_at ON sessions (created_at, id)"

#: The statements that created schema v1 (the stored format of earlier releases).
V1_DDL: Final = (_SESSIONS, _EVENTS, _SESSIONS_ORDER, _CONTINUE, _ADVANCE)

# v2: each session's summary (docs/listing.md), written in the transaction of each batch.
# ``events`` NULL marks a summary the store cannot trust (the policy rebuilds it);
# ``last_activity`` is the last event's time, or ``created_at`` while there is none, so
# both listing orders are one index scan.
_SUMMARY_COLUMNS: Final = (
    "events INTEGER CHECK (events >= 0)",
    "first_activity INTEGER",
    "last_activity INTEGER NOT NULL DEFAULT 0",
    "open_turn INTEGER",
)
_BY_ACTIVITY: Final = "CREATE INDEX sessions_by_last_activity ON sessions (last_activity DESC, id)"
_BY_CREATION: Final = "CREATE INDEX sessions_newest_first ON sessions (created_at DESC, id)"
# Finding a summary to rebuild must not read every session row.
_UNSUMMARIZED: Final = "CREATE INDEX sessions_unsummarized ON sessions (id) WHERE events IS NULL"
# The searchable texts (sessionledger.views._searching), and an FTS5 index over them that keeps
# no copy (external content). FTS5 tables cannot be written from triggers under
# ``trusted_schema=OFF`` (nor cascade): the store writes and deletes both explicitly, in
# the transaction of the events they come from.
_TEXTS: Final = """CREATE TABLE search_texts (
  id         INTEGER PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  seq        INTEGER NOT NULL,
  type       TEXT NOT NULL,
  time       INTEGER NOT NULL,
  text       TEXT NOT NULL
) STRICT"""
_TEXTS_BY_SESSION: Final = "CREATE INDEX search_texts_by_session ON search_texts (session_id, seq)"
# unicode61 without diacritic folding splits words at punctuation and "_" and folds case,
# as ``sessionledger.views._searching.words`` does.
_TEXT_INDEX: Final = (
    "CREATE VIRTUAL TABLE search_index USING fts5(text, content = 'search_texts', "
    "content_rowid = 'id', tokenize = \"unicode61 remove_diacritics 0\")"
)
#: The tables FTS5 creates for ``search_index``: their text is SQLite's, not ours.
SHADOW_TABLES: Final = frozenset(
    f"search_index_{suffix}" for suffix in ("data", "idx", "docsize", "config")
)
_AUDIT: Final = """CREATE TABLE audit (
  seq    INTEGER PRIMARY KEY,
  record TEXT NOT NULL
) STRICT"""
# Append-only in the file itself: nothing, not even another program's SQL, rewrites it.
_AUDIT_NO_UPDATE: Final = """CREATE TRIGGER audit_is_append_only BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'sessionledger: the audit log is append-only'); END"""
_AUDIT_NO_DELETE: Final = """CREATE TRIGGER audit_keeps_its_records BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'sessionledger: the audit log is append-only'); END"""

# An append is one INSERT into this view, committed on its own (one round trip, as in v1):
# its trigger inserts each event row (the events triggers check and advance the log), the
# row's search text when it has one, and, on the batch's last row (``closes``), the
# session's summary. Only the FTS5 index cannot be written here (no virtual table in a
# trigger under ``trusted_schema=OFF``): a batch with texts adds it in a transaction.
_BATCH_ROWS: Final = """CREATE VIEW batch_rows (
  session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable, members,
  text, summary_events, first_activity, last_activity, open_turn, closes
) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL WHERE 0"""
_APPEND: Final = """CREATE TRIGGER batch_rows_append INSTEAD OF INSERT ON batch_rows
BEGIN
INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op,
  ignorable, members)
VALUES (NEW.session_id, NEW.seq, NEW.type, NEW.time, NEW.data, NEW.source_event_seqs,
  NEW.surface_op, NEW.ignorable, NEW.members);
INSERT INTO search_texts (session_id, seq, type, time, text)
SELECT NEW.session_id, NEW.seq, NEW.type, NEW.time, NEW.text WHERE NEW.text IS NOT NULL;
UPDATE sessions SET events = NEW.summary_events, first_activity = NEW.first_activity,
  last_activity = CASE WHEN NEW.last_activity IS NULL THEN created_at
  ELSE NEW.last_activity END, open_turn = NEW.open_turn
WHERE id = NEW.session_id AND NEW.closes = 1;
END"""

#: What turns schema v1 into v2, in order.
V2_DDL: Final = (
    *(f"ALTER TABLE sessions ADD COLUMN {column}" for column in _SUMMARY_COLUMNS),
    _BY_ACTIVITY,
    _BY_CREATION,
    _UNSUMMARIZED,
    _TEXTS,
    _TEXTS_BY_SESSION,
    _TEXT_INDEX,
    _AUDIT,
    _AUDIT_NO_UPDATE,
    _AUDIT_NO_DELETE,
    _BATCH_ROWS,
    _APPEND,
)

# v3: the FTS5 entries of the newest texts may wait for a later batch. A new segment per
# transaction made FTS5 the dearest part of a one-message commit; now the texts of a batch
# are indexed once the texts waiting reach ``writing.INDEX_EVERY`` (fewer wait). The
# ``search_texts`` rows up to ``indexed_upto`` are in the index and none after it, so a
# search reads the few waiting rows directly and misses nothing (docs/formats.md, "SQLite").
_SEARCH_STATE: Final = """CREATE TABLE search_state (
  id           INTEGER PRIMARY KEY CHECK (id = 1),
  indexed_upto INTEGER NOT NULL CHECK (indexed_upto >= 0)
) STRICT"""
# Every text of a v2 database is indexed; a new or v1 database has none yet.
_SEARCH_STATE_ROW: Final = (
    "INSERT INTO search_state (id, indexed_upto) SELECT 1, coalesce(max(id), 0) FROM search_texts"
)
# The index's content is the texts it covers, so FTS5's own checks ('integrity-check',
# 'rebuild') hold while texts wait.
_INDEXED_TEXTS: Final = """CREATE VIEW indexed_texts (id, text) AS SELECT id, text
FROM search_texts WHERE id <= (SELECT indexed_upto FROM search_state)"""
_TEXT_INDEX_V3: Final = (
    "CREATE VIRTUAL TABLE search_index USING fts5(text, content = 'indexed_texts', "
    "content_rowid = 'id', tokenize = \"unicode61 remove_diacritics 0\")"
)

#: What turns schema v2 into v3, in order: the index is made again over its new content.
V3_DDL: Final = (
    "DROP TABLE search_index",
    _SEARCH_STATE,
    _SEARCH_STATE_ROW,
    _INDEXED_TEXTS,
    _TEXT_INDEX_V3,
    "INSERT INTO search_index (search_index) VALUES ('rebuild')",
)

#: What turns a database of each older version into the current one, in order.
UPGRADES: Final = {1: (*V2_DDL, *V3_DDL), 2: V3_DDL}

#: The statements that create the schema, in order.
DDL: Final = (*V1_DDL, *V2_DDL, *V3_DDL)


class SchemaObject(NamedTuple):
    """One row of ``sqlite_schema`` (internal ``sqlite_*`` objects excluded)."""

    type: str
    name: str
    table: str
    sql: str | None


def normalize(sql: str | None) -> str | None:
    """*sql* with its whitespace collapsed: how a statement is compared with the text
    ``sqlite_schema`` keeps of it (here and in ``identity.read_identity``)."""
    return None if sql is None else " ".join(sql.split())


def _sorted(objects: Sequence[SchemaObject]) -> tuple[SchemaObject, ...]:
    return tuple(sorted(objects, key=lambda item: (item.type, item.name)))


#: What ``sqlite_schema`` holds for a v1 database, sorted by (type, name).
V1_OBJECTS: Final = _sorted(
    (
        SchemaObject("table", "sessions", "sessions", normalize(_SESSIONS)),
        SchemaObject("table", "events", "events", normalize(_EVENTS)),
        SchemaObject("index", "sessions_by_created_at", "sessions", normalize(_SESSIONS_ORDER)),
        SchemaObject("trigger", "events_continue_the_log", "events", normalize(_CONTINUE)),
        SchemaObject("trigger", "events_advance_the_log", "events", normalize(_ADVANCE)),
    )
)

# ``ALTER TABLE ... ADD COLUMN`` stores the table's text with ", <column>" put before
# its closing parenthesis.
_SESSIONS_V2: Final = (
    _SESSIONS.removesuffix(") STRICT") + ", " + ", ".join(_SUMMARY_COLUMNS) + ") STRICT"
)

#: What ``sqlite_schema`` holds for a v2 database, sorted by (type, name). SQLite keeps
#: each CREATE statement's text as it was executed; the text of the FTS5 shadow tables is
#: SQLite's own and is not compared (``read_identity`` reads it as None).
V2_OBJECTS: Final = _sorted(
    (
        *(item for item in V1_OBJECTS if item.name != "sessions"),
        SchemaObject("table", "sessions", "sessions", normalize(_SESSIONS_V2)),
        SchemaObject("index", "sessions_by_last_activity", "sessions", normalize(_BY_ACTIVITY)),
        SchemaObject("index", "sessions_newest_first", "sessions", normalize(_BY_CREATION)),
        SchemaObject("index", "sessions_unsummarized", "sessions", normalize(_UNSUMMARIZED)),
        SchemaObject("table", "search_texts", "search_texts", normalize(_TEXTS)),
        SchemaObject(
            "index", "search_texts_by_session", "search_texts", normalize(_TEXTS_BY_SESSION)
        ),
        SchemaObject("table", "search_index", "search_index", normalize(_TEXT_INDEX)),
        *(SchemaObject("table", name, name, None) for name in SHADOW_TABLES),
        SchemaObject("table", "audit", "audit", normalize(_AUDIT)),
        SchemaObject("trigger", "audit_is_append_only", "audit", normalize(_AUDIT_NO_UPDATE)),
        SchemaObject("trigger", "audit_keeps_its_records", "audit", normalize(_AUDIT_NO_DELETE)),
        SchemaObject("view", "batch_rows", "batch_rows", normalize(_BATCH_ROWS)),
        SchemaObject("trigger", "batch_rows_append", "batch_rows", normalize(_APPEND)),
    )
)

#: What ``sqlite_schema`` holds for a database this build created, sorted by (type, name).
EXPECTED_OBJECTS: Final = _sorted(
    (
        *(item for item in V2_OBJECTS if item.name != "search_index"),
        SchemaObject("table", "search_index", "search_index", normalize(_TEXT_INDEX_V3)),
        SchemaObject("table", "search_state", "search_state", normalize(_SEARCH_STATE)),
        SchemaObject("view", "indexed_texts", "indexed_texts", normalize(_INDEXED_TEXTS)),
    )
)

#: What ``sqlite_schema`` holds for a database of each version this build can upgrade.
OLDER_OBJECTS: Final = {1: V1_OBJECTS, 2: V2_OBJECTS}
