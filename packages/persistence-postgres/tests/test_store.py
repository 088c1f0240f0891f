"""PostgreSQL-specific behaviour of ``PostgresPersistence`` beyond the shared contract kit."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import sessionledger_postgres
import sessionledger_postgres.plugin as pg_plugin
from sessionledger import (
    ConfigError,
    CorruptLogError,
    FormatUnsupportedError,
    JsonValueError,
    Session,
    SessionEvent,
    SessionHeader,
    SessionLockedError,
    SessionNotFoundError,
)
from sessionledger.runtime._opening import open_store
from sessionledger.storage._logstore import Batch
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.plugin import parse_postgres_url
from sessionledger_postgres.schema import EXPECTED_COLUMNS, EXPECTED_RELATIONS, SCHEMA_VERSION
from sessionledger_postgres.testing import drop_schema, with_options

CHILD = Path(__file__).with_name("pg_child.py")
Make = Callable[..., PostgresPersistence]


# -- helpers ----------------------------------------------------------------------------------


def header(session_id: str = "s1", created_at: int = 1_000) -> SessionHeader:
    return SessionHeader(id=session_id, created_at=created_at, cwd="/srv/app")


def note(seq: int, **data: Any) -> dict[str, Any]:
    return {"type": "x/note", "seq": seq, "time": seq, "data": data, "ignorable": True}


def clock() -> Callable[[], int]:
    state = [1_700_000_000_000]

    def tick() -> int:
        state[0] += 3
        return state[0]

    return tick


def session_log(session_id: str, *, turns: int = 2, open_call: bool = False) -> list[SessionEvent]:
    session = Session.create(session_id, clock=clock())
    for number in range(1, turns + 1):
        closed_turn(session, number, answer="streamed answer " * 8)
    if open_call:
        open_turn_with_pending_call(session, turns + 1)
    return list(session.events)


def base_dsn(url: str) -> str:
    return parse_postgres_url(url)[0]


def as_json(events: Any) -> list[dict[str, Any]]:
    return [event.to_json() for event in events]


async def query(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(base_dsn(url))
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(base_dsn(url))
    try:
        async with conn.transaction():
            for statement in statements:
                await conn.execute(statement)
    finally:
        await conn.close()


async def snapshot_schema(url: str, schema: str) -> list[tuple[Any, ...]]:
    """Everything a refusal must leave as it was: relations, columns and row counts."""
    relations = await query(
        url,
        "SELECT c.relname, c.relkind::text, a.attname, format_type(a.atttypid, a.atttypmod) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
        "WHERE n.nspname = $1 ORDER BY 1, 3",
        schema,
    )
    return [tuple(row) for row in relations]


def spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )


def release(children: list[subprocess.Popen[str]], line: str = "go") -> None:
    for child in children:
        assert child.stdin is not None
        child.stdin.write(f"{line}\n")
        child.stdin.flush()


def finish(children: list[subprocess.Popen[str]], timeout: float = 240) -> list[str]:
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=timeout)
        assert child.returncode == 0, f"child failed ({child.returncode}): {out}\n{err}"
        outputs.append(out.strip())
    return outputs


def read_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line:
        _, err = child.communicate(timeout=30)
        pytest.fail(f"child exited early ({child.returncode}): {err}")
    return line


# -- URLs and plugin --------------------------------------------------------------------------


def test_url_options_are_taken_out_and_the_rest_kept_verbatim() -> None:
    dsn, options = parse_postgres_url(
        "postgresql://me:secret@db.example:6543/ledger?host=%2Frun%2Fpg&schema=agents"
        "&pool_min_size=0&pool_max_size=16&exclusive=true&connect_timeout=2.5"
        "&command_timeout=30&application_name=harness"
    )
    assert (
        dsn
        == "postgresql://me:secret@db.example:6543/ledger?host=%2Frun%2Fpg&application_name=harness"
    )
    assert options == {
        "schema": "agents",
        "pool_min_size": 0,
        "pool_max_size": 16,
        "exclusive": True,
        "connect_timeout": 2.5,
        "command_timeout": 30.0,
    }
    assert parse_postgres_url("postgres://u@h/d") == ("postgres://u@h/d", {})


@pytest.mark.parametrize(
    "url",
    [
        "postgresql:/no-slashes",
        "mysql://u@h/d",
        "postgresql://u@h/d?schema=a&schema=b",
        "postgresql://u@h/d?pool_max_size=many",
        "postgresql://u@h/d?exclusive=maybe",
        "postgresql://u@h/d?connect_timeout=soon",
        "postgresql://u@h/d?schema",
    ],
)
def test_bad_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_postgres_url(url)


@pytest.mark.parametrize(
    "options",
    [
        {"schema": "Bad-Name"},
        {"schema": "pg_catalog"},
        {"schema": "x" * 64},
        {"pool_min_size": 5, "pool_max_size": 2},
        {"pool_max_size": 0},
        {"connect_timeout": 0},
        {"command_timeout": float("nan")},
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        PostgresPersistence("postgresql://u@h/d", **options)


def test_both_schemes_resolve_through_open_store(pg_url: str) -> None:
    for scheme in ("postgresql", "postgres"):
        url = scheme + ":" + pg_url.partition(":")[2]
        store = open_store(url, plugins=[pg_plugin], load_entrypoints=False)
        assert isinstance(store, sessionledger_postgres.PostgresPersistence)
        assert store.schema == "sessionledger"


async def test_an_unreachable_server_is_a_config_error(tmp_path: Path) -> None:
    store = PostgresPersistence(f"postgresql://u@/d?host={tmp_path}&port=1", connect_timeout=2)
    with pytest.raises(ConfigError, match="cannot connect"):
        await store.list()
    await store.close()


# -- schema creation, identity, versions ------------------------------------------------------


async def test_the_first_write_creates_the_current_schema(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    store = make_store()
    assert await snapshot_schema(pg_url, pg_schema) == []  # construction touches nothing
    assert await store.list() == []
    assert await snapshot_schema(pg_url, pg_schema) == []  # nor does a read
    await store.create(header())
    await store.append("s1", [note(0)])
    relations = await query(
        pg_url,
        "SELECT relname, relkind::text FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE nspname = $1 ORDER BY relname",
        pg_schema,
    )
    assert tuple((row[0], row[1]) for row in relations) == EXPECTED_RELATIONS
    info = await query(pg_url, f'SELECT application, schema_version FROM "{pg_schema}".store_info')
    assert [tuple(row) for row in info] == [("sessionledger", SCHEMA_VERSION)]
    columns = await query(
        pg_url,
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 "
        "AND NOT a.attisdropped ORDER BY 1, 2",
        pg_schema,
    )
    assert tuple(tuple(row) for row in columns) == EXPECTED_COLUMNS
    assert len(EXPECTED_COLUMNS) == 34


async def test_a_pre_created_empty_schema_is_initialized(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    await execute(pg_url, f'CREATE SCHEMA "{pg_schema}"')
    store = make_store()
    await store.create(header())
    await store.append("s1", [note(0)])
    assert len(await store.list()) == 1


def test_two_processes_create_the_schema_at_once(pg_url: str) -> None:
    for _ in range(4):
        schema = f"race_{uuid.uuid4().hex[:10]}"
        url = with_options(pg_url, schema=schema)
        try:
            children = [spawn("migrate", url) for _ in range(2)]
            release(children)
            assert finish(children) == ["ok", "ok"]
            rows = asyncio.run(query(pg_url, f'SELECT schema_version FROM "{schema}".store_info'))
            assert [row[0] for row in rows] == [SCHEMA_VERSION]
        finally:
            asyncio.run(drop_schema(pg_url, schema))


# A real v1 schema, refused until upgraded, is test_index's.
@pytest.mark.parametrize(("version", "code"), [(3, "FORMAT_NEWER"), (0, "FORMAT_OLDER")])
async def test_another_schema_version_is_refused_without_modification(
    make_store: Make, pg_url: str, pg_schema: str, version: int, code: str
) -> None:
    first = make_store()
    await first.create(header())
    await first.append("s1", [note(0)])
    await first.close()
    await execute(pg_url, f'UPDATE "{pg_schema}".store_info SET schema_version = {version}')
    before = await snapshot_schema(pg_url, pg_schema)
    store = make_store()
    for operation in (store.list, lambda: store.load("s1"), lambda: store.create(header("s2"))):
        with pytest.raises(FormatUnsupportedError) as refused:
            await operation()
        assert refused.value.code == code
    assert await snapshot_schema(pg_url, pg_schema) == before
    rows = await query(pg_url, f'SELECT count(*) FROM "{pg_schema}".events')
    assert rows[0][0] == 1


@pytest.mark.parametrize(
    "setup",
    [
        ['CREATE TABLE "{s}".widgets (id int)'],
        [
            'CREATE TABLE "{s}".store_info (application text, schema_version int)',
            "INSERT INTO \"{s}\".store_info VALUES ('otherapp', 1)",
        ],
        [
            'CREATE TABLE "{s}".store_info (application text, schema_version int)',
            "INSERT INTO \"{s}\".store_info VALUES ('sessionledger', 1)",
        ],
    ],
    ids=["other-tables", "other-application", "our-identity-without-our-tables"],
)
async def test_a_foreign_schema_is_refused_without_modification(
    make_store: Make, pg_url: str, pg_schema: str, setup: list[str]
) -> None:
    await execute(pg_url, f'CREATE SCHEMA "{pg_schema}"', *(s.format(s=pg_schema) for s in setup))
    before = await snapshot_schema(pg_url, pg_schema)
    store = make_store()
    with pytest.raises(FormatUnsupportedError) as refused:
        await store.list()
    assert refused.value.code == "FOREIGN_STORE"
    assert await snapshot_schema(pg_url, pg_schema) == before


async def test_an_altered_schema_is_refused(make_store: Make, pg_url: str, pg_schema: str) -> None:
    first = make_store()
    await first.create(header())
    await first.append("s1", [note(0)])
    await execute(pg_url, f'ALTER TABLE "{pg_schema}".events ADD COLUMN extra int')
    with pytest.raises(FormatUnsupportedError) as refused:
        await make_store().list()
    assert refused.value.code == "FOREIGN_STORE"


# -- appends, stale writers, ownership ---------------------------------------------------------


async def test_a_batch_that_does_not_continue_the_log_inserts_nothing(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    # The last line of defence under ownership: the append statement itself
    # advances next_seq only from the batch's first seq, and inserts rows only then.
    store = make_store()
    await store.create(header())
    await store.append("s1", [note(seq) for seq in range(5)])
    rows_sql = f'SELECT seq, type, time, data, ignorable FROM "{pg_schema}".events ORDER BY seq'
    before = [tuple(row) for row in await query(pg_url, rows_sql)]
    stale = Batch(header(), [note(3, by="stale")], first_seq=3, end_seq=4)
    assert await store.log_store.write_batch(stale) is False
    assert [tuple(row) for row in await query(pg_url, rows_sql)] == before


async def test_a_second_store_is_locked_out_until_the_first_closes_and_names_it(
    make_store: Make,
) -> None:
    first, second = make_store(), make_store()
    await first.create(header())
    await first.append("s1", [note(0)])
    await second.inspect("s1")  # reading is never locked out
    with pytest.raises(SessionLockedError) as locked:
        await second.append("s1", [note(1)])
    assert locked.value.code == "LOCKED"
    assert f"sessionledger pid {os.getpid()} on " in str(locked.value)
    await first.append("s1", [note(1)])
    await first.close()
    await second.load("s1")
    await second.append("s1", [note(2)])
    assert len((await second.load("s1")).events) == 3


async def test_the_claim_is_released_by_delete(make_store: Make) -> None:
    first, second = make_store(), make_store()
    await first.create(header())
    await first.append("s1", [note(0)])
    await first.delete("s1")
    await second.create(header())
    await second.append("s1", [note(0)])


@pytest.mark.parametrize("value", [False, "true", 1])
def test_exclusive_can_no_longer_be_turned_off(value: object) -> None:
    with pytest.raises(ConfigError, match="one writer"):
        PostgresPersistence("postgresql://u@h/d", exclusive=value)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="one writer"):
        open_store(
            "postgresql://u@h/d?exclusive=false", plugins=[pg_plugin], load_entrypoints=False
        )
    assert PostgresPersistence("postgresql://u@h/d", exclusive=True).scheme == "postgresql"


@pytest.mark.parametrize(("kind", "flaw"), [("x/\0note", "U\\+0000"), ("x/\ud800", "surrogate")])
async def test_text_postgres_cannot_hold_is_refused_and_writes_nothing(
    make_store: Make, kind: str, flaw: str
) -> None:
    store = make_store()
    await store.create(header())
    await store.append("s1", [note(0)])
    revision = (await store.list_snapshots())[0].revision
    bad = {"type": kind, "seq": 1, "time": 1, "data": {}, "ignorable": True}
    with pytest.raises(JsonValueError, match=flaw):
        await store.append("s1", [bad])
    assert (await store.list_snapshots())[0].revision == revision
    with pytest.raises(SessionNotFoundError):
        await store.load(kind)  # an id no row can have is simply not stored
    # NUL inside JSON data is just an escape in the text column.
    await store.append("s1", [note(1, text="a\0b")])
    loaded = await store.load("s1")
    assert loaded.events[1].data["text"] == "a\0b"
    assert len(loaded.events) == 2


async def test_floats_and_key_order_round_trip_exactly(make_store: Make) -> None:
    store = make_store()
    data = {"z": 1e30, "a": -2.5e-7, "m": {"b": 1, "a": 2}, "x": 1.0}
    await store.create(header())
    await store.append("s1", [note(0, **data)])
    event = (await store.load("s1")).events[0]
    assert list(event.data) == ["z", "a", "m", "x"]
    assert list(event.data["m"]) == ["b", "a"]
    assert type(event.data["z"]) is float
    assert event.data["z"] == 1e30
    assert type(event.data["x"]) is float


async def test_malformed_meta_column_is_corruption(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    store = make_store()
    await store.create(SessionHeader(id="s1", created_at=1, meta={"k": 1}))
    await store.append("s1", [note(0)])
    await execute(pg_url, f"UPDATE \"{pg_schema}\".sessions SET meta = '{{broken'")
    with pytest.raises(CorruptLogError):
        await make_store().load("s1")
    assert await make_store().list() == []  # unreadable headers are skipped, not fatal


# -- packed rows ------------------------------------------------------------------------------


async def test_packed_rows_are_stored_as_rows_and_read_back_exactly(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    events = session_log("packed", turns=1)
    store = make_store()
    await store.create(header("packed"))
    await store.append("packed", events)
    rows = await query(
        pg_url,
        f'SELECT seq, type, time, ignorable, data FROM "{pg_schema}".events ORDER BY seq',
    )
    packed = [row for row in rows if row["ignorable"] == 0]
    assert packed, "the streamed answer should have been packed"
    assert len(rows) < len(events)
    for row in packed:
        first = events[row["seq"]]
        assert row["type"] == "text-chunks"
        assert row["time"] == first.time
        assert row["data"].startswith('{"turn":1,"step":')
    assert as_json((await make_store().inspect("packed")).events) == as_json(events)
    middle = packed[0]["seq"] + 1
    assert as_json(await store.read_from("packed", middle)) == as_json(events[middle:])


async def test_long_runs_are_split_at_the_row_cap(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    chunk = {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "ab"}}
    events = [
        {"type": "assistant/chunk", "seq": seq, "time": seq, "data": chunk} for seq in range(2500)
    ]
    store = make_store()
    await store.create(header())
    await store.append("s1", events)
    rows = await query(pg_url, f'SELECT seq FROM "{pg_schema}".events ORDER BY seq')
    assert [row[0] for row in rows] == [0, 1024, 2048]
    assert len((await store.load("s1")).events) == 2500


# -- many processes ---------------------------------------------------------------------------


def test_eight_processes_append_500_events_each_without_errors(pg_url: str, pg_schema: str) -> None:
    url = with_options(pg_url, schema=pg_schema, pool_max_size=2)
    ids = [f"worker-{index}" for index in range(8)]
    children = [spawn("append", url, session_id, "500") for session_id in ids]
    release(children)  # all eight also race to create the (new) schema
    assert finish(children) == ["ok 500"] * 8

    async def check() -> None:
        store = PostgresPersistence(base_dsn(url), schema=pg_schema)
        try:
            for session_id in ids:
                events = (await store.load(session_id)).events
                assert [event.seq for event in events] == list(range(500))
                assert {event.data["worker"] for event in events} == {session_id}
        finally:
            await store.close()

    asyncio.run(check())


FLEET_SESSIONS = 100


async def _seed_fleet(url: str) -> None:
    store = open_store(url, plugins=[pg_plugin], load_entrypoints=False)
    try:
        for index in range(FLEET_SESSIONS):
            await store.create(header(f"fleet-{index}"))
            await store.append(f"fleet-{index}", [note(0)])
    finally:
        await store.close()


async def _stored_notes(url: str) -> list[tuple[Any, ...]]:
    store = open_store(url, plugins=[pg_plugin], load_entrypoints=False)
    try:
        notes = []
        for index in range(FLEET_SESSIONS):
            events = (await store.inspect(f"fleet-{index}")).events
            notes += [tuple(e.data["id"]) for e in events if e.type == "fleet/note"]
        return notes
    finally:
        await store.close()


def fleet_problems(url: str, *, rounds: int, env: dict[str, str] | None = None) -> list[str]:
    """Run eight workers handing the fleet's sessions between them; return what went
    wrong: a worker's error, an acknowledged note lost or stored twice, a note stored
    that nobody acknowledged, a refusal that is not ``LOCKED``, or no contention at all."""
    asyncio.run(_seed_fleet(url))
    children = [
        spawn("fleet", url, f"w{index}", str(rounds), str(FLEET_SESSIONS), str(index), env=env)
        for index in range(8)
    ]
    release(children)
    problems: list[str] = []
    acknowledged: collections.Counter[tuple[Any, ...]] = collections.Counter()
    refusals = 0
    for child in children:
        out, err = child.communicate(timeout=300)
        if child.returncode != 0:
            problems.append(f"worker failed ({child.returncode}): {out.strip()} {err[-300:]}")
            continue
        report = json.loads(out)
        acknowledged.update(tuple(note_id) for note_id in report["acknowledged"])
        refusals += sum(report["refused"].values())
        problems += [f"refused with {code}" for code in report["refused"] if code != "LOCKED"]
    stored = collections.Counter(asyncio.run(_stored_notes(url)))
    problems += [
        f"stored {count} times: {note_id}" for note_id, count in stored.items() if count > 1
    ]
    problems += [f"lost: {note_id}" for note_id in acknowledged - stored]
    if not problems:  # a failed worker may have stored what it never saw acknowledged
        problems += [f"never acknowledged: {note_id}" for note_id in stored - acknowledged]
    if refusals == 0 and not problems:
        problems.append("no resume was ever refused: the workers never contended")
    holds = len({note_id[:3] for note_id in acknowledged})
    print(f"fleet: {holds} holds, {refusals} refused resumes, {sum(stored.values())} notes")
    return problems


def test_eight_workers_hand_a_hundred_sessions_between_them_and_lose_nothing(
    pg_url: str, pg_schema: str
) -> None:
    url = with_options(pg_url, schema=pg_schema, pool_max_size=2)
    assert fleet_problems(url, rounds=150) == []


def test_the_fleet_test_catches_writers_without_claims(pg_url: str, pg_schema: str) -> None:
    # Self-check: with claims switched off in every worker, two workers hold one session
    # at once and the oracle must notice.
    url = with_options(pg_url, schema=pg_schema, pool_max_size=2)
    assert fleet_problems(url, rounds=150, env={"FLEET_BREAK_CLAIMS": "1"}) != []


# -- pool and connections ---------------------------------------------------------------------


async def test_pool_size_comes_from_the_url_and_close_releases_it(
    pg_url: str, pg_schema: str
) -> None:
    name = f"sl-{uuid.uuid4().hex[:8]}"
    url = with_options(pg_url, schema=pg_schema, pool_max_size=2, application_name=name)
    store = open_store(url, plugins=[pg_plugin], load_entrypoints=False)
    logs = {f"c{index}": session_log(f"c{index}", turns=1) for index in range(6)}

    async def write(session_id: str) -> None:
        await store.create(header(session_id))
        events = logs[session_id]
        for start in range(0, len(events), 4):
            await store.append(session_id, events[start : start + 4])

    await asyncio.gather(*(write(session_id) for session_id in logs))
    count_sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
    connections = (await query(pg_url, count_sql, name))[0][0]
    assert 1 <= connections <= 2
    await store.close()
    for _ in range(100):  # the server notices closed sockets asynchronously
        if (await query(pg_url, count_sql, name))[0][0] == 0:
            break
        await asyncio.sleep(0.02)
    assert (await query(pg_url, count_sql, name))[0][0] == 0
    with pytest.raises(ConfigError, match="closed"):
        await store.list()


async def test_commits_are_made_durable_even_if_the_server_default_is_not(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    url = with_options(pg_url, schema=pg_schema, synchronous_commit="off")
    store = open_store(url, plugins=[pg_plugin], load_entrypoints=False)
    assert isinstance(store, PostgresPersistence)
    try:
        # a setting of pooled connections, seen on one of them
        async with store.log_store.connection() as conn:
            assert await conn.fetchval("SHOW synchronous_commit") == "on"
    finally:
        await store.close()


# -- copying between backends -----------------------------------------------------------------


async def _fill(store: SessionPersistence) -> dict[str, list[dict[str, Any]]]:
    logs = {
        "closed": session_log("closed", turns=2),
        "interrupted": session_log("interrupted", turns=1, open_call=True),
    }
    for session_id, events in logs.items():
        await store.create(
            SessionHeader(id=session_id, created_at=5, title="t", meta={"k": [1, "é"]})
        )
        await store.append(session_id, events)
    return {session_id: as_json(events) for session_id, events in logs.items()}


async def _copy(source: SessionPersistence, target: SessionPersistence) -> None:
    for info in await source.list_snapshots():
        stored = await source.inspect(info.header.id)
        await target.create(stored.header)
        for start in range(0, len(stored.events), 7):
            await target.append(info.header.id, stored.events[start : start + 7])


async def test_copy_round_trip_through_memory_and_sqlite(
    make_store: Make, pg_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("sessionledger_sqlite")
    source = make_store()
    await _fill(source)
    expected = {
        info.header.id: (info.header, as_json((await source.inspect(info.header.id)).events))
        for info in await source.list_snapshots()
    }
    memory = open_store(f"memory:pg-{uuid.uuid4().hex}", load_entrypoints=False)
    sqlite = open_store(f"sqlite:{tmp_path / 'copy.db'}")
    back_schema = f"t_{uuid.uuid4().hex[:12]}"
    back = open_store(with_options(pg_url, schema=back_schema))
    try:
        await _copy(source, memory)
        await _copy(memory, sqlite)
        await _copy(sqlite, back)
        for store in (memory, sqlite, back):
            for session_id, (stored_header, events) in expected.items():
                copied = await store.load(session_id)
                assert copied.header == stored_header
                assert as_json(copied.events) == events
    finally:
        for store in (memory, sqlite, back):
            await store.close()
        await drop_schema(pg_url, back_schema)


def test_cli_copy_between_postgres_and_sqlite(pg_url: str, pg_schema: str, tmp_path: Path) -> None:
    pytest.importorskip("sessionledger_sqlite")
    url = with_options(pg_url, schema=pg_schema)

    async def fill() -> dict[str, list[dict[str, Any]]]:
        store = open_store(url)
        try:
            await _fill(store)
            return {
                info.header.id: as_json((await store.inspect(info.header.id)).events)
                for info in await store.list_snapshots()
            }
        finally:
            await store.close()

    expected = asyncio.run(fill())
    sqlite_url = f"sqlite:{tmp_path / 'cli.db'}"
    back_schema = f"t_{uuid.uuid4().hex[:12]}"
    back_url = with_options(pg_url, schema=back_schema)
    env = {key: value for key, value in os.environ.items() if key != "SESSIONLEDGER_STORE"}
    try:
        for source, target in ((url, sqlite_url), (sqlite_url, back_url)):
            done = subprocess.run(
                [sys.executable, "-m", "sessionledger", "copy", "--from", source, "--to", target],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert "identical" in done.stdout

        async def check() -> None:
            store = open_store(back_url)
            try:
                for session_id, events in expected.items():
                    assert as_json((await store.load(session_id)).events) == events
            finally:
                await store.close()

        asyncio.run(check())
    finally:
        asyncio.run(drop_schema(pg_url, back_schema))
