"""SQLite-specific behaviour of ``SqlitePersistence`` beyond the shared contract kit."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import sessionledger_sqlite
import sessionledger_sqlite.plugin as sqlite_plugin
from sessionledger import (
    ConfigError,
    CorruptLogError,
    EventType,
    EventTypeRegistry,
    FormatUnsupportedError,
    Ledger,
    SessionEvent,
    SessionExistsError,
    SessionHeader,
    SessionLockedError,
    SessionNotFoundError,
    user_message,
)
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._repair import TOOL_OUTCOME_UNKNOWN
from sessionledger.runtime._opening import open_store
from sessionledger.storage._logstore import Batch, Repair
from sessionledger_sqlite import SqlitePersistence
from sessionledger_sqlite.plugin import parse_sqlite_url
from sessionledger_sqlite.schema import (
    APPLICATION_ID,
    DDL,
    EXPECTED_OBJECTS,
    SCHEMA_VERSION,
    SHADOW_TABLES,
)

CHILD = Path(__file__).with_name("sqlite_child.py")


# -- helpers ----------------------------------------------------------------------------------


def registry(*extra: EventType) -> EventTypeRegistry:
    types = EventTypeRegistry.with_core()
    types.register_all(extra, plugin="test")
    return types


def store_at(path: Path | str, **options: Any) -> SqlitePersistence:
    return SqlitePersistence(path, event_types=registry(), **options)


def header(session_id: str = "s1", created_at: int = 1_000) -> SessionHeader:
    return SessionHeader(id=session_id, created_at=created_at)


def turn(seq: int, number: int) -> list[dict[str, Any]]:
    """A complete turn of three events starting at *seq*."""
    return [
        {"type": "turn/start", "seq": seq, "time": seq, "data": {"turn": number}},
        {"type": "step/start", "seq": seq + 1, "time": seq, "data": {"turn": number, "step": 1}},
        {
            "type": "turn/end",
            "seq": seq + 2,
            "time": seq,
            "data": {"turn": number, "reason": {"kind": "completed"}},
        },
    ]


def deltas(seq: int, count: int, kind: str = "text-delta", **chunk: Any) -> list[dict[str, Any]]:
    out = []
    for offset in range(count):
        body: dict[str, Any] = {"type": kind, "index": 0}
        if kind == "tool-call-delta":
            body.update(chunk)
            body["argumentsDelta"] = f"a{offset}"
        else:
            body["text"] = f"t{offset}"
        out.append(
            {
                "type": "assistant/chunk",
                "seq": seq + offset,
                "time": 50 + offset,
                "data": {"turn": 1, "step": 1, "chunk": body},
            }
        )
    return out


def chunk_log() -> list[dict[str, Any]]:
    """One turn with runs of text, reasoning, named and unnamed tool-call deltas."""
    events: list[dict[str, Any]] = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {"type": "step/start", "seq": 1, "time": 1, "data": {"turn": 1, "step": 1}},
    ]
    events += deltas(2, 5)
    events += deltas(7, 4, "reasoning-delta")
    events += deltas(11, 4, "tool-call-delta", id="c1", name="grep")
    events += deltas(15, 3, "tool-call-delta", id="c2")
    events += deltas(18, 2)  # too short to pack
    end = len(events)
    events += [
        {"type": "step/end", "seq": end, "time": 90, "data": {"turn": 1, "step": 1}},
        {
            "type": "turn/end",
            "seq": end + 1,
            "time": 90,
            "data": {"turn": 1, "reason": {"kind": "completed"}},
        },
    ]
    return events


def rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    with sqlite3.connect(path) as db:
        return db.execute(sql, params).fetchall()


def execute(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            db.execute(statement)
    finally:
        db.close()


def as_json(events: Any) -> list[dict[str, Any]]:
    return [
        SessionEvent.from_json(e).to_json() if isinstance(e, dict) else e.to_json() for e in events
    ]


async def stored(path: Path, session_id: str, *events: dict[str, Any]) -> None:
    store = store_at(path)
    try:
        await store.create(header(session_id))
        await store.append(session_id, list(events))
    finally:
        await store.close()


# -- opening, pragmas, identity ---------------------------------------------------------------


async def test_construction_and_unused_close_create_no_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.db"
    store = store_at(path)
    assert not path.exists()
    await store.close()
    assert not path.exists()
    assert not path.parent.exists()


async def test_the_first_write_creates_private_files_and_directory(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.db"
    store = store_at(path)
    try:
        assert await store.list() == []  # reading an absent store creates nothing
        with pytest.raises(SessionNotFoundError):
            await store.inspect("s1")
        assert list(tmp_path.iterdir()) == []
        await store.create(header())
        await store.append("s1", turn(0, 1))
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(Path(f"{path}.owners").stat().st_mode) == 0o700
        for made in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}.locks")):
            assert stat.S_IMODE(made.stat().st_mode) == 0o600
    finally:
        await store.close()


async def test_pragmas_and_identity_of_a_new_database(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    store = store_at(path)
    try:
        await store.create(header())
        await store.append("s1", turn(0, 1))
        db = store.log_store.connection  # connection-level pragmas are only visible on it
        assert db is not None
        for pragma, expected in [
            ("journal_mode", "wal"),
            ("synchronous", 2),
            ("foreign_keys", 1),
            ("trusted_schema", 0),
            ("busy_timeout", 5000),
        ]:
            assert list(await db.execute_fetchall(f"PRAGMA {pragma}")) == [(expected,)], pragma
    finally:
        await store.close()
    assert rows(path, "PRAGMA application_id") == [(0x534C4447,)]
    assert rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert rows(path, "PRAGMA journal_mode") == [("wal",)]  # persistent in the file


async def test_synchronous_normal_and_busy_timeout_are_configurable(tmp_path: Path) -> None:
    store = store_at(tmp_path / "ledger.db", synchronous="NORMAL", busy_timeout=0.25)
    try:
        await store.create(header())
        await store.append("s1", turn(0, 1))
        db = store.log_store.connection
        assert db is not None
        assert list(await db.execute_fetchall("PRAGMA synchronous")) == [(1,)]
        assert list(await db.execute_fetchall("PRAGMA busy_timeout")) == [(250,)]
    finally:
        await store.close()


@pytest.mark.parametrize(
    "options",
    [
        {"synchronous": "OFF"},
        {"busy_timeout": -1},
        {"busy_timeout": float("nan")},
        {"busy_timeout": True},
    ],
)
def test_bad_options_raise_config_error(tmp_path: Path, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        store_at(tmp_path / "ledger.db", **options)


def test_expected_schema_objects_match_what_sqlite_records() -> None:
    db = sqlite3.connect(":memory:")
    for statement in DDL:
        db.execute(statement)
    found = db.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema "
        "WHERE name NOT LIKE 'sqlite%' ORDER BY type, name"
    ).fetchall()
    # FTS5 writes its shadow tables' text itself; the identity check ignores it.
    assert [
        (t, n, tb, None if n in SHADOW_TABLES else " ".join(sql.split())) for t, n, tb, sql in found
    ] == [tuple(item) for item in EXPECTED_OBJECTS]
    assert APPLICATION_ID == 0x534C4447
    assert SCHEMA_VERSION == 3


async def test_empty_file_is_initialized(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    path.touch()
    await stored(path, "s1", *turn(0, 1))
    assert rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


def _foreign(path: Path) -> None:
    execute(path, "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('mine')")


def _other_app(path: Path) -> None:
    execute(path, "PRAGMA application_id = 12345", "CREATE TABLE t (x)")


def _ours(user_version: int, *extra: str) -> Any:
    def build(path: Path) -> None:
        execute(
            path,
            *DDL,
            *extra,
            f"PRAGMA application_id = {APPLICATION_ID}",
            f"PRAGMA user_version = {user_version}",
        )

    return build


def _not_sqlite(path: Path) -> None:
    path.write_bytes(b"this is a text file, not a database\n" * 200)


@pytest.mark.parametrize(
    ("build", "code"),
    [
        pytest.param(_foreign, "FOREIGN_STORE", id="unversioned-foreign-tables"),
        pytest.param(_other_app, "FOREIGN_STORE", id="other-application-id"),
        pytest.param(_not_sqlite, "FOREIGN_STORE", id="not-sqlite"),
        pytest.param(lambda path: path.write_bytes(b"hi"), "FOREIGN_STORE", id="short-garbage"),
        pytest.param(
            lambda path: path.write_bytes(b"SQLite format 3\0" + b"\xff" * 200),
            "FOREIGN_STORE",
            id="sqlite-magic-then-garbage",
        ),
        pytest.param(_ours(SCHEMA_VERSION + 1), "FORMAT_NEWER", id="newer"),
        pytest.param(_ours(0), "FORMAT_OLDER", id="older"),
        pytest.param(
            _ours(SCHEMA_VERSION, "CREATE TABLE extra (x)"), "FOREIGN_STORE", id="extra-table"
        ),
        pytest.param(
            _ours(SCHEMA_VERSION, "ALTER TABLE events ADD COLUMN extra TEXT"),
            "FOREIGN_STORE",
            id="extra-column",
        ),
        pytest.param(
            _ours(SCHEMA_VERSION, "DROP TABLE audit"), "FOREIGN_STORE", id="missing-table"
        ),
        pytest.param(_ours(1), "FOREIGN_STORE", id="v3-objects-as-v1"),
        pytest.param(_ours(2), "FOREIGN_STORE", id="v3-objects-as-v2"),
        pytest.param(
            _ours(SCHEMA_VERSION, "CREATE INDEX events_by_type ON events (type)"),
            "FOREIGN_STORE",
            id="extra-index",
        ),
    ],
)
async def test_foreign_or_other_version_database_is_refused_unmodified(
    tmp_path: Path, build: Any, code: str
) -> None:
    path = tmp_path / "other.db"
    build(path)
    before = path.read_bytes()
    listing = sorted(os.listdir(tmp_path))
    store = store_at(path)
    try:
        for _ in range(2):  # refused on every attempt, not only the first
            with pytest.raises(FormatUnsupportedError) as caught:
                await store.list()
            assert caught.value.code == code
            assert caught.value.path == str(path)
        with pytest.raises(FormatUnsupportedError):
            await store.create(header())
    finally:
        await store.close()
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == listing  # no -wal / -journal left behind


async def test_non_strict_tables_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "loose.db"
    loose = [statement.replace(") STRICT", ")") for statement in DDL]
    execute(
        path,
        *loose,
        f"PRAGMA application_id = {APPLICATION_ID}",
        f"PRAGMA user_version = {SCHEMA_VERSION}",
    )
    with pytest.raises(FormatUnsupportedError) as caught:
        await stored(path, "s1", *turn(0, 1))
    assert caught.value.code == "FOREIGN_STORE"


async def test_in_memory_database(tmp_path: Path) -> None:
    store = open_store("sqlite::memory:", plugins=[sqlite_plugin], load_entrypoints=False)
    assert isinstance(store, SqlitePersistence)
    assert store.path == ":memory:"
    try:
        await store.create(header())
        await store.append("s1", chunk_log())
        assert as_json((await store.load("s1")).events) == as_json(chunk_log())
        assert store.locate(header()) is None
    finally:
        await store.close()
    assert os.listdir(tmp_path) == []


async def test_unusable_paths_raise_config_error(tmp_path: Path) -> None:
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "a-file").write_text("x")
    for path in (tmp_path / "a-directory", tmp_path / "a-file" / "ledger.db"):
        store = store_at(path)
        with pytest.raises(ConfigError):
            await store.list()  # to read
        with pytest.raises(ConfigError):
            await store.log_store.write_batch(Batch(header(), turn(0, 1), 0, 3, creates=True))
        await store.close()
    for bad in ("", "nul\0byte.db"):
        with pytest.raises(ConfigError):
            store_at(bad)


async def test_closed_store_refuses_use_and_close_is_idempotent(tmp_path: Path) -> None:
    store = store_at(tmp_path / "ledger.db")
    await store.list()
    await store.close()
    await store.close()
    with pytest.raises(ConfigError):
        await store.list()


# -- URLs and discovery -------------------------------------------------------------------------


def test_url_forms() -> None:
    assert parse_sqlite_url("sqlite:a/b.db") == ("a/b.db", {})
    assert parse_sqlite_url("sqlite::memory:") == (":memory:", {})
    assert parse_sqlite_url("sqlite:x.db?synchronous=NORMAL&busy_timeout=2") == (
        "x.db",
        {"synchronous": "NORMAL", "busy_timeout": 2.0},
    )
    for bad in [
        "sqlite:",
        "sqlite:x.db?mode=ro",
        "sqlite:x.db?busy_timeout=soon",
        "sqlite:x.db?synchronous=FULL&synchronous=NORMAL",
        "jsonl:x",
    ]:
        with pytest.raises(ConfigError):
            parse_sqlite_url(bad)


def test_url_options_reach_the_store(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path}/x.db?synchronous=normal&busy_timeout=0.5"
    store = open_store(url, plugins=[sqlite_plugin], load_entrypoints=False)
    assert isinstance(store, SqlitePersistence)
    assert store.path == str(tmp_path / "x.db")
    assert store.log_store.synchronous == "NORMAL"
    assert store.log_store.busy_timeout == 0.5
    with pytest.raises(ConfigError):
        open_store(
            f"sqlite:{tmp_path}/x.db?synchronous=OFF",
            plugins=[sqlite_plugin],
            load_entrypoints=False,
        )


def test_scheme_is_discovered_through_the_entry_point(tmp_path: Path) -> None:
    store = open_store(f"sqlite:{tmp_path}/x.db")
    assert type(store) is SqlitePersistence
    assert store.scheme == "sqlite"
    assert store.log_store.can_tear is False
    assert sessionledger_sqlite.__all__ == ["SqlitePersistence"]


def test_relative_path_resolves_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert store_at("rel.db").path == str(tmp_path / "rel.db")
    assert store_at("rel.db").locate(header()) == str(tmp_path / "rel.db")


# -- rows, revisions, repair ------------------------------------------------------------------


async def test_packed_rows_for_chunk_runs_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    log = chunk_log()
    store = store_at(path)
    try:
        await store.create(header())
        await store.append("s1", log[:9])  # splits the reasoning run across batches
        await store.append("s1", log[9:])
        assert as_json((await store.load("s1")).events) == as_json(log)
        for start in range(len(log) + 2):
            suffix = await store.read_from("s1", start)
            assert as_json(suffix) == as_json(log[start:]), start
    finally:
        await store.close()
    packed = rows(
        path,
        "SELECT seq, type, source_event_seqs, surface_op FROM events "
        "WHERE ignorable = 0 ORDER BY seq",
    )
    assert packed == [
        (2, "text-chunks", None, None),
        (11, "tool-call-chunks", None, None),
        (15, "tool-call-chunks", None, None),
    ]  # the 4 reasoning deltas were split 2 + 2 by the batch boundary: stored verbatim
    assert rows(path, "SELECT count(*) FROM events WHERE ignorable IS NULL") == [(len(log) - 12,)]
    texts = rows(path, "SELECT data FROM events WHERE seq = 2")[0][0]
    assert '"texts":["t0","t1","t2","t3","t4"]' in texts


async def test_long_runs_are_capped_at_1024_members_per_row(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    log = [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}]
    log.append({"type": "step/start", "seq": 1, "time": 0, "data": {"turn": 1, "step": 1}})
    log += deltas(2, 2000)
    store = store_at(path)
    try:
        await store.create(header())
        await store.append("s1", log)
        loaded = await store.inspect("s1")
        assert as_json(loaded.events) == as_json(log) + as_json(loaded.events[len(log) :])
        assert as_json(await store.read_from("s1", 1500)) == as_json(log[1500:])
    finally:
        await store.close()
    assert rows(path, "SELECT seq FROM events WHERE ignorable = 0 ORDER BY seq") == [(2,), (1026,)]


async def test_envelope_columns_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    deep: Any = "leaf"
    for _ in range(10_000):  # deeper than orjson nests
        deep = [deep]
    types = registry()  # x/note is unknown to the reader: kept because it is ignorable
    ledger = Ledger(SqlitePersistence(path, event_types=types), load_entrypoints=False)
    async with ledger:
        session = ledger.create("s1", cwd="/srv/app", title="t", meta={"k": [1, {"x": None}]})
        session.append("turn/start", {"turn": 1})
        user = session.append(
            "user/message",
            {
                "id": "m1",
                "role": "user",
                "content": [{"type": "text", "text": "hé"}],
                "source": {"kind": "user"},
            },
            surface_op="append",
        )
        session.append("x/note", {"deep": deep}, ignorable=True)
        session.append(
            "user/message",
            {
                "id": "m2",
                "role": "user",
                "content": [{"type": "text", "text": "sum"}],
                "source": {"kind": "user"},
            },
            surface_op={"op": "replace", "start": user.seq, "end": user.seq},
            source_event_seqs=[user.seq],
        )
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        expected = [jsoncodec.dumps(event.to_json()) for event in session.events]
        await ledger.flush(session)
    assert rows(
        path,
        "SELECT seq, surface_op, source_event_seqs, ignorable FROM events "
        "WHERE seq IN (1, 2, 3) ORDER BY seq",
    ) == [
        (1, '"append"', None, None),
        (2, None, None, 1),
        (3, '{"op":"replace","start":1,"end":1}', "[1]", None),
    ]
    store = SqlitePersistence(path, event_types=types)
    try:
        loaded = await store.load("s1")
        # Compared as bytes: == on a 10,000-deep value would exceed the recursion limit.
        assert [jsoncodec.dumps(event.to_json()) for event in loaded.events] == expected
        assert loaded.header == SessionHeader(
            id="s1",
            created_at=loaded.header.created_at,
            cwd="/srv/app",
            title="t",
            meta={"k": [1, {"x": None}]},  # type: ignore[arg-type]
        )
    finally:
        await store.close()


async def test_revision_changes_only_with_durable_changes(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    store = store_at(path)
    try:
        await store.create(header())
        await store.append("s1", turn(0, 1))
        first = (await store.load("s1")).revision
        assert (await store.inspect("s1")).revision == first
        await store.read_from("s1", 1)
        assert (await store.list_snapshots())[0].revision == first
        await store.append("s1", turn(3, 2))
        second = (await store.inspect("s1")).revision
        assert second != first
    finally:
        await store.close()
    reopened = store_at(path)
    try:
        assert (await reopened.inspect("s1")).revision == second  # stable across reopening
        await reopened.delete("s1")
        await reopened.create(header())
        await reopened.append("s1", turn(0, 1))
        assert (await reopened.inspect("s1")).revision not in (first, second)
    finally:
        await reopened.close()


async def test_delete_removes_session_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    await stored(path, "a", *chunk_log())
    await stored(path, "b", *turn(0, 1))
    store = store_at(path)
    try:
        await store.delete("a")
        with pytest.raises(SessionNotFoundError):
            await store.load("a")
        with pytest.raises(SessionNotFoundError):
            await store.delete("a")
        assert [h.id for h in await store.list()] == ["b"]
    finally:
        await store.close()
    assert rows(path, "SELECT DISTINCT session_id FROM events") == [("b",)]


async def test_list_is_ordered_by_the_created_at_index(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    store = store_at(path)
    try:
        for session_id, created in [("c", 5), ("b", 9), ("a", 5), ("d", 1)]:
            await store.create(header(session_id, created))
            await store.append(session_id, turn(0, 1))
        await store.create(header("never-written", 0))  # not materialized: not listed
        assert [h.id for h in await store.list()] == ["d", "a", "c", "b"]
    finally:
        await store.close()
    plan = rows(path, "EXPLAIN QUERY PLAN SELECT id FROM sessions ORDER BY created_at, id")
    assert "USING INDEX sessions_by_created_at" in plan[0][3] or "COVERING INDEX" in plan[0][3]
    assert not any("TEMP B-TREE" in row[3] for row in plan)


async def test_undecodable_committed_row_is_corruption_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    await stored(path, "s1", *turn(0, 1), *turn(3, 2))
    execute(path, "UPDATE events SET data = '{not json' WHERE seq = 1")
    before = rows(path, "SELECT * FROM events ORDER BY seq")
    store = store_at(path)
    try:
        with pytest.raises(CorruptLogError) as caught:
            await store.load("s1")
        assert "row seq 1" in str(caught.value)
    finally:
        await store.close()
    assert rows(path, "SELECT * FROM events ORDER BY seq") == before


async def test_a_damaged_last_row_is_corruption_until_salvaged(tmp_path: Path) -> None:
    # A transaction cannot tear: damage in the last row is damage, not a torn tail. Only an
    # explicit salvage cuts it, and the rows it cuts go to a quarantine file first.
    path = tmp_path / "ledger.db"
    await stored(path, "s1", *turn(0, 1), *deltas(3, 1), *deltas(4, 1))
    execute(path, "UPDATE events SET data = '[' WHERE seq = 3")
    before = rows(path, "SELECT * FROM events ORDER BY seq")
    store = store_at(path)
    try:
        for read in (store.inspect, store.load):
            with pytest.raises(CorruptLogError):
                await read("s1")
        assert rows(path, "SELECT * FROM events ORDER BY seq") == before  # nothing written
        report = await store.salvage("s1")
        assert (report.kept_events, report.moved_records) == (3, 2)
        assert report.moved_seqs == (4, 4)  # seq 3 does not decode
        assert report.quarantine is not None
        moved = Path(report.quarantine).read_bytes().splitlines()
        assert [orjson.loads(line)["seq"] for line in moved] == [3, 4]
        assert stat.S_IMODE(Path(report.quarantine).stat().st_mode) == 0o600
        assert as_json((await store.load("s1")).events) == as_json(turn(0, 1))
        assert rows(path, "SELECT seq FROM events ORDER BY seq") == [(0,), (1,), (2,)]
        await store.append("s1", turn(3, 2))
        assert len((await store.load("s1")).events) == 6
    finally:
        await store.close()


async def test_packed_row_with_surface_columns_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    await stored(path, "s1", *turn(0, 1), *deltas(3, 4))
    execute(path, "UPDATE events SET surface_op = '\"append\"' WHERE ignorable = 0")
    store = store_at(path)
    try:
        with pytest.raises(CorruptLogError, match="malformed text-chunks row"):
            await store.inspect("s1")
        with pytest.raises(CorruptLogError):
            await store.read_from("s1", 3)
    finally:
        await store.close()


async def test_repair_computed_from_a_stale_read_deletes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    await stored(path, "s1", *turn(0, 1), *deltas(3, 1))
    execute(path, "UPDATE events SET data = 'x' WHERE seq = 3")
    first, second = store_at(path), store_at(path)
    try:
        raw = await first.log_store.read_log("s1")  # the step a repair takes before cutting
        assert raw is not None
        await second.salvage("s1")  # cuts seq 3 itself
        await second.append("s1", turn(3, 2))
        stale = Repair(header(), raw.revision, cut_at=3)
        assert await first.log_store.commit_repair(stale) is None  # refused: the log moved on
        assert rows(path, "SELECT seq FROM events ORDER BY seq") == [(i,) for i in range(6)]
    finally:
        await first.close()
        await second.close()


# -- concurrency --------------------------------------------------------------------------------


async def test_stale_writer_is_rejected_and_winner_rows_untouched(tmp_path: Path) -> None:
    # Ownership keeps a second writer out (docs/durability.md); the last line of defence is the
    # write itself, which stores nothing unless the batch continues the log.
    path = tmp_path / "ledger.db"
    one, two = store_at(path), store_at(path)
    try:
        await one.create(header())
        await one.append("s1", deltas(0, 2))
        with pytest.raises(SessionLockedError):
            await two.load("s1")
        winner = rows(path, "SELECT rowid, * FROM events ORDER BY seq")
        stale = deltas(1, 1)
        stale[0]["data"]["chunk"]["text"] = "stale"  # the same batch would count as landed
        late = Batch(header(), stale, first_seq=1, end_seq=2)
        assert await one.log_store.write_batch(late) is False
        assert rows(path, "SELECT rowid, * FROM events ORDER BY seq") == winner
        with pytest.raises(SessionExistsError):
            await two.create(header())
    finally:
        await one.close()
        await two.close()


async def test_materializing_an_id_another_store_wrote_raises_exists(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    one, two = store_at(path), store_at(path)
    try:
        await one.create(header())
        await two.create(header())  # nothing stored yet: both may register it
        await two.append("s1", turn(0, 1))
        late = turn(0, 1)
        late[0]["time"] = 99  # an identical batch would count as already stored
        with pytest.raises(SessionLockedError):  # two holds what it wrote
            await one.append("s1", late)
        await two.release("s1")
        with pytest.raises(SessionExistsError):
            await one.append("s1", late)
        assert rows(path, "SELECT time FROM events ORDER BY seq") == [(0,), (0,), (0,)]
    finally:
        await one.close()
        await two.close()


async def test_write_lock_held_past_busy_timeout_raises_locked(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    await stored(path, "s1", *turn(0, 1))
    holder = sqlite3.connect(path, isolation_level=None)
    store = store_at(path, busy_timeout=0.05)
    try:
        await store.load("s1")
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(SessionLockedError) as caught:
            await store.append("s1", turn(3, 2))
        assert caught.value.code == "LOCKED"
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        holder.execute("ROLLBACK")
        await store.append("s1", turn(3, 2))  # the failed batch left nothing behind
        assert len((await store.inspect("s1")).events) == 6
    finally:
        holder.close()
        await store.close()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    src = str(Path(sessionledger_sqlite.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


async def test_four_processes_append_to_one_new_file_without_errors(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    workers, count = 4, 500
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), "append", str(path), f"w{index}", str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        for index in range(workers)
    ]
    for child in children:  # all open the not-yet-existing file at about the same time
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    results = [child.communicate(timeout=300) for child in children]
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == f"ok {count}"
    store = store_at(path)
    try:
        infos = await store.list_snapshots()
        assert sorted(info.header.id for info in infos) == [f"w{i}" for i in range(workers)]
        for index in range(workers):
            events = (await store.inspect(f"w{index}")).events
            assert [event.seq for event in events] == list(range(count))
    finally:
        await store.close()
    assert rows(path, "SELECT count(*) FROM events") == [(workers * count,)]


async def test_a_process_that_never_closes_its_store_still_exits(tmp_path: Path) -> None:
    path = tmp_path / "abandoned.db"
    done = subprocess.run(
        [sys.executable, str(CHILD), "abandon", str(path), "left"],
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=120,  # aiosqlite's non-daemon worker thread would block exit forever
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "STORED"
    store = store_at(path)
    try:
        assert len((await store.load("left")).events) == 2  # what was committed is there
    finally:
        await store.close()


async def test_a_dropped_store_stops_its_connection_with_a_warning(tmp_path: Path) -> None:
    store = store_at(tmp_path / "ledger.db")
    await store.create(header())
    await store.append("s1", turn(0, 1))
    with pytest.warns(ResourceWarning, match="without close"):
        del store  # the last reference: the finalizer runs now


async def test_killed_child_after_flushed_tool_call_resumes_to_outcome_unknown(
    tmp_path: Path,
) -> None:
    path = tmp_path / "crash.db"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), "crash", str(path), "crashy"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(),
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "FLUSHED", child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        assert child.returncode == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    async with Ledger(SqlitePersistence(path)) as ledger:
        session = await ledger.resume("crashy")
        events = session.events
        assert [event.type for event in events[:7]] == [
            "turn/start",
            "step/start",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end",
        ]
        # The core marks where a resumed (seeded) log ends; nothing else may follow.
        assert {event.type for event in events[7:]} <= {"session/end-seed"}
        call_seq = events[3].seq
        result = events[4]
        assert result.data["error"]["code"] == TOOL_OUTCOME_UNKNOWN
        assert result.source_event_seqs == (call_seq,)
        assert result.data["message"]["source"] == {"kind": "tool", "callId": "call-1"}
        assert events[6].data["reason"] == {"kind": "interrupted"}
        length = len(events)
    async with Ledger(SqlitePersistence(path)) as again:
        store = again.persistence
        assert store is not None
        before = (await store.inspect("crashy")).revision
        resumed = await again.resume("crashy")
        assert len(resumed.events) == length  # a second resume adds nothing
        await again.flush(resumed)
        assert (await store.inspect("crashy")).revision == before


# -- durable directory entries (strace) -----------------------------------------------------

FIRST_WRITE = """
import asyncio, sys
from sessionledger import SessionHeader
from sessionledger_sqlite import SqlitePersistence

async def main():
    store = SqlitePersistence(sys.argv[1])
    await store.create(SessionHeader(id="s", created_at=1))
    await store.append("s", [{"type": "x/n", "seq": 0, "time": 1, "data": {}, "ignorable": True}])
    await store.close()

asyncio.run(main())
"""


def test_a_new_database_and_its_new_parents_are_durable_before_the_first_commit(
    tmp_path: Path,
) -> None:
    # Every directory entry an acknowledged write depends on is fsynced first.
    # Watched from outside with strace(1): each new directory's entry (fsync of its
    # parent), then the new file's (fsync of its directory), before SQLite syncs a byte.
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("needs strace(1) to watch the system calls (.ci/run installs it)")
    database = tmp_path / "a" / "b" / "c" / "ledger.db"
    trace = tmp_path / "trace.txt"
    done = subprocess.run(
        [
            strace,
            "-f",
            "-y",
            "-o",
            str(trace),
            "-e",
            "trace=mkdir,mkdirat,openat,fsync,fdatasync",
            sys.executable,
            "-c",
            FIRST_WRITE,
            str(database),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0 and "ptrace" in done.stderr.lower():
        pytest.skip(f"strace may not trace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    calls: list[tuple[str, str]] = []
    for line in trace.read_text().splitlines():
        if match := re.search(r'\bmkdir(?:at)?\((?:[^,]*, )?"([^"]+)"', line):
            if line.rstrip().endswith("= 0"):
                calls.append(("mkdir", match.group(1)))
        elif match := re.search(r"\b(?:fsync|fdatasync)\(\d+<([^>]+)>\)", line):
            calls.append(("sync", match.group(1)))
        elif "O_EXCL" in line and (match := re.search(r'openat\([^,]+, "([^"]+)"', line)):
            calls.append(("create", match.group(1)))
    first_data_sync = next(
        index
        for index, (kind, path) in enumerate(calls)
        if kind == "sync" and path.startswith(str(database))
    )
    made = [path for kind, path in calls[:first_data_sync] if kind == "mkdir"]
    assert made[:3] == [str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(database.parent)]
    for directory in made[:3]:
        at = calls.index(("mkdir", directory))
        assert ("sync", os.path.dirname(directory)) in calls[at:first_data_sync], directory
    created = calls.index(("create", str(database)))
    assert ("sync", str(database.parent)) in calls[created:first_data_sync]


# -- a write costs one hop to the connection's thread ------------------------------------------


@pytest.mark.parametrize("kind", ["message", "deltas", "long-batch"])
async def test_a_flush_hands_the_connection_thread_its_whole_transaction_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Each statement handed to aiosqlite's thread is one wake-up of the event loop; a
    flush hands it the whole write (begin, rows, texts and their index, commit) in one."""
    store = store_at(tmp_path / "hops.db")
    async with Ledger(persistence=store, write_delay_ms=3_600_000) as ledger:
        session = ledger.create("hops")
        session.append("user/message", user_message("first", id="u0"), surface_op="append")
        await ledger.flush(session)  # creates the session
        db = store.log_store.connection
        assert db is not None
        calls: list[Any] = []
        statements: list[str] = []
        queue = db._execute

        def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(fn)
            return queue(fn, *args, **kwargs)

        monkeypatch.setattr(db, "_execute", counted)
        await db.set_trace_callback(statements.append)
        calls.clear()
        if kind == "message":
            message = user_message("searchable words", id="u1")
            session.append("user/message", message, surface_op="append")
        elif kind == "deltas":
            session.append("turn/start", {"turn": 1})
            session.append("step/start", {"turn": 1, "step": 1})
            for k in range(5):
                chunk = {"type": "text-delta", "index": 0, "text": f"t{k}"}
                session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})
        else:  # more rows than one INSERT of the batch view takes: statement by statement
            for k in range(700):
                message = user_message(f"message {k}", id=f"m{k}")
                session.append("user/message", message, surface_op="append")
        await ledger.flush(session)
        assert len(calls) == 1
        await db.set_trace_callback(None)
        monkeypatch.undo()
        if kind != "deltas":
            assert statements[0] == "BEGIN IMMEDIATE"
            assert statements[-1] == "COMMIT"
            assert any(sql.startswith("INSERT INTO search_index") for sql in statements)
        hits = await store.search("searchable" if kind == "message" else "message")
        assert hits or kind == "deltas"
    reopened = store_at(tmp_path / "hops.db")
    try:
        stored = await reopened.inspect("hops")
        # What was flushed reads back exactly (an inspect may add closers after it).
        assert list(stored.events[: len(session.events)]) == list(session.events)
    finally:
        await reopened.close()


class _PublicOnly:
    """An aiosqlite connection as one without its underscored internals would look."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self.hops: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._connection, name)

    async def execute_fetchall(self, sql: str, *args: Any) -> Any:
        self.hops.append(sql)
        return await self._connection.execute_fetchall(sql, *args)


async def test_without_aiosqlites_internals_a_write_goes_statement_by_statement(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path / "steps.db")
    async with Ledger(persistence=store, write_delay_ms=3_600_000) as ledger:
        session = ledger.create("steps")
        session.append("user/message", user_message("first", id="u0"), surface_op="append")
        await ledger.flush(session)
        connections = store.log_store._connections
        db = connections.db
        assert db is not None
        statements: list[str] = []
        await db.set_trace_callback(statements.append)
        public = _PublicOnly(db)
        connections._db = public  # type: ignore[assignment]
        try:
            message = user_message("searchable words", id="u1")
            session.append("user/message", message, surface_op="append")
            await ledger.flush(session)
        finally:
            connections._db = db
        await db.set_trace_callback(None)
        assert [sql.split(" (")[0] for sql in public.hops] == [
            "BEGIN IMMEDIATE",
            "INSERT INTO batch_rows",
            "INSERT INTO search_index",
            "UPDATE search_state SET indexed_upto =",
            "COMMIT",
        ]
        assert statements[0] == "BEGIN IMMEDIATE"
        assert statements[-1] == "COMMIT"
        assert [hit.seq for hit in await store.search("searchable")] == [1]
    reopened = store_at(tmp_path / "steps.db")
    try:
        stored = await reopened.inspect("steps")
        assert list(stored.events[: len(session.events)]) == list(session.events)
    finally:
        await reopened.close()
