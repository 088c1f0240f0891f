"""Schema v2 of the PostgreSQL store: summaries, listing in SQL, the text index, the audit
log, and the upgrade of a v1 schema in place. Every expectation is the core's own answer
(``listing.select``, the memory backend's scan) over the same sessions."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from sessionledger import CorruptLogError, FormatUnsupportedError, Session, SessionHeader
from sessionledger.storage._listing import SessionInfo, SessionQuery, select, sort_key
from sessionledger.storage._logstore import Batch, Repair
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.views._searching import IndexedText, indexed_texts
from sessionledger.views._summaries import summarize
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.plugin import parse_postgres_url
from sessionledger_postgres.schema import EXPECTED_COLUMNS, EXPECTED_RELATIONS
from sessionledger_postgres.testing import with_options

Make = Callable[..., PostgresPersistence]

#: The v1 schema exactly as sessionledger-postgres 1 created it (the earlier release's
#: format, kept here as a fixture: the upgrade must take what that release wrote).
V1_DDL = (
    """CREATE TABLE {s}.store_info (
  singleton      boolean NOT NULL DEFAULT true PRIMARY KEY CHECK (singleton),
  application    text NOT NULL,
  schema_version integer NOT NULL
)""",
    """CREATE TABLE {s}.sessions (
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
    """CREATE TABLE {s}.events (
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
    "CREATE INDEX sessions_by_created_at ON {s}.sessions (created_at, id)",
    "INSERT INTO {s}.store_info (application, schema_version) VALUES ('sessionledger', 1)",
)
_V1_SESSION_COLUMNS = (
    "id, version, created_at, cwd, parent_session, seed_length, delegation_depth, title, meta, "
    "incarnation, revision, next_seq"
)
_EVENT_COLUMNS = "session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable"


# -- helpers ----------------------------------------------------------------------------------


def user(seq: int, time: int, text: str) -> dict[str, Any]:
    return {
        "type": "user/message",
        "seq": seq,
        "time": time,
        "data": {"id": f"m{seq}", "role": "user", "content": [{"type": "text", "text": text}]},
    }


def note(seq: int, time: int) -> dict[str, Any]:
    return {"type": "x/note", "seq": seq, "time": time, "data": {}, "ignorable": True}


async def both(stores: list[SessionPersistence], header: SessionHeader, events: Any) -> None:
    for store in stores:
        await store.create(header)
        await store.append(header.id, events)


async def sql(dsn: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(statement, *args))
    finally:
        await conn.close()


def dsn_of(url: str) -> str:
    return parse_postgres_url(url)[0]


async def snapshot(dsn: str, schema: str) -> list[tuple[Any, ...]]:
    """Relations, columns and every row: what a refused upgrade must leave as it was."""
    found = [
        tuple(row)
        for row in await sql(
            dsn,
            "SELECT c.relname, c.relkind::text, a.attname, a.attnotnull FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_attribute a "
            "ON a.attrelid = c.oid AND a.attnum > 0 WHERE n.nspname = $1 ORDER BY 1, 3",
            schema,
        )
    ]
    for table in ("store_info", "sessions", "events"):
        rows = await sql(dsn, f'SELECT * FROM "{schema}".{table} ORDER BY 1, 2')
        found.extend(tuple(row) for row in rows)
    return found


TITLES = [None, "Alpha Build", "alpha BUILD", "ÉCOLE d'été", "école", "Straße", "STRASSE", "x"]
METAS: list[dict[str, Any] | None] = [
    None,
    {"k": 1},
    {"k": True},
    {"k": "1"},
    {"k": None},
    {"k": 1.0},
    {"k": 0},
    {"k": False},
    {"n": {"k": 1}},
    {"k": "x\u0000y", "j": 1},
    {"k": 1, "j": "é"},
]


async def fill(stores: list[SessionPersistence], count: int, seed: int) -> None:
    """*count* sessions with mixed-case and non-ASCII titles, every kind of meta value,
    and few distinct times (so order ties are settled by id)."""
    rng = random.Random(seed)
    for number in range(count):
        session_id = rng.choice(["s", "S", "é", "a"]) + f"{number:03d}"
        created = rng.choice([100, 200, 300])
        header = SessionHeader(
            id=session_id, created_at=created, title=rng.choice(TITLES), meta=rng.choice(METAS)
        )
        times = sorted(rng.choice([created, created + 50, 900, 1000]) for _ in range(3))
        events = [user(0, times[0], "hello"), note(1, times[1]), note(2, times[2])]
        await both(stores, header, events[: rng.randint(1, 3)])


def queries(seed: int, count: int) -> list[SessionQuery]:
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        meta: tuple[tuple[str, Any], ...] = ()
        if rng.random() < 0.5:
            meta = ((rng.choice(["k", "j", "n"]), rng.choice([1, True, "1", None, 0, False])),)
            if rng.random() < 0.2:
                meta += (("j", rng.choice([1, "é"])),)
        found.append(
            SessionQuery(
                order=rng.choice(["last_activity", "created"]),
                limit=rng.choice([None, 1, 3, 7]),
                title=rng.choice([None, "a", "A", "build", "É", "é", "ss", "ß", "cole", ""]),
                meta=meta,
                since=rng.choice([None, 100, 250, 900]),
                until=rng.choice([None, 300, 1000, 1001]),
            )
        )
    return found


def ids(infos: Any) -> list[str]:
    return [info.id for info in infos]


# -- listing ---------------------------------------------------------------------------------


async def test_listing_in_sql_equals_the_cores_select(make_store: Make) -> None:
    pg, memory = make_store(), MemoryPersistence()
    await fill([pg, memory], 60, seed=7)
    reference = await memory.list_sessions()  # every summary, as the policy holds it
    assert sorted(ids(reference.sessions)) == sorted(
        row.header["id"] for row in await pg.log_store.list_summaries()
    )
    for query in queries(seed=11, count=150):
        page = await pg.list_sessions(query)
        expected = await memory.list_sessions(query)
        assert ids(page.sessions) == ids(expected.sessions), query
        assert (page.next is None) == (expected.next is None), query
        assert [info.summary for info in page.sessions] == [
            info.summary for info in expected.sessions
        ]
        rows = await pg.log_store.query_sessions(query)
        assert rows is not None  # answered by the index
        assert [row.header["id"] for row in rows] == ids(select(reference.sessions, query))


async def test_paging_with_cursors_yields_every_session_once(make_store: Make) -> None:
    pg, memory = make_store(), MemoryPersistence()
    await fill([pg, memory], 40, seed=3)
    for order in ("last_activity", "created"):
        for size in (1, 2, 5):
            query = SessionQuery(order=order, limit=size)  # type: ignore[arg-type]
            seen: list[SessionInfo] = []
            while True:
                page = await pg.list_sessions(query)
                seen.extend(page.sessions)
                if page.next is None:
                    break
                last = page.sessions[-1]
                query = dataclasses.replace(query, after=(sort_key(last, order), last.id))  # type: ignore[arg-type]
            everything = await memory.list_sessions(SessionQuery(order=order))  # type: ignore[arg-type]
            assert ids(seen) == ids(everything.sessions)
            assert len(set(ids(seen))) == 40


async def test_an_untrusted_summary_is_computed_by_the_policy_and_reindex_stores_it(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    pg = make_store()
    await both([pg], SessionHeader(id="s1", created_at=5), [note(0, 10), note(1, 20)])
    await sql(dsn_of(pg_url), f'UPDATE "{pg_schema}".sessions SET events = NULL')
    assert await pg.log_store.query_sessions(SessionQuery()) is None
    page = await pg.list_sessions(SessionQuery(since=20))
    assert [(info.id, info.events, info.last_activity) for info in page.sessions] == [("s1", 2, 20)]
    assert [info.stale for info in page.sessions] == [True]
    # Listing writes nothing (docs/listing.md): untrusted until reindex stores it.
    assert await pg.log_store.query_sessions(SessionQuery()) is None
    await pg.reindex("s1")
    assert await pg.log_store.query_sessions(SessionQuery()) is not None


async def test_unreadable_headers_do_not_take_a_place_in_the_page(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    pg = make_store()
    for number in range(4):
        header = SessionHeader(id=f"s{number}", created_at=number, meta={"k": 1})
        await both([pg], header, [note(0, number)])
    await sql(
        dsn_of(pg_url), f"UPDATE \"{pg_schema}\".sessions SET meta = '{{broken' WHERE id = 's2'"
    )
    page = await pg.list_sessions(SessionQuery(limit=2, meta=(("k", 1),)))
    assert ids(page.sessions) == ["s3", "s1"]
    assert page.next is not None  # s0 follows: the broken row was not counted


async def test_summaries_are_written_with_each_batch_and_after_crash_repair(
    make_store: Make,
) -> None:
    session = Session.create("crashed", clock=iter(range(1_000, 10_000, 7)).__next__)
    closed_turn(session, 1, answer="an answer")
    open_turn_with_pending_call(session, 2)
    events = list(session.events)
    first = make_store()
    await first.create(session.header)
    await first.append("crashed", events[:3])
    await first.append("crashed", events[3:])
    [row] = await first.log_store.list_summaries()
    assert row.summary == summarize(events)
    assert row.summary is not None
    assert row.summary.open_turn == 2
    await first.close()  # the writer "dies" with its turn open

    second = make_store()
    stored = await second.load("crashed")  # repair: closers appended
    assert len(stored.events) > len(events)
    [row] = await second.log_store.list_summaries()
    assert row.summary == summarize(stored.events)
    assert row.summary is not None
    assert row.summary.open_turn is None
    hits = await second.search("an answer", session="crashed")
    assert {hit.seq for hit in hits} == {
        item.seq for item in indexed_texts(stored.events) if "answer" in item.text
    }


async def test_u0000_in_meta_and_title_filters_is_answered_exactly(make_store: Make) -> None:
    pg = make_store()
    await both([pg], SessionHeader(id="s1", created_at=1, meta={"a\u0000": 1}), [note(0, 1)])
    by_meta = SessionQuery(meta=(("a\u0000", 1),))
    rows = await pg.log_store.query_sessions(by_meta)  # JSON escapes it: SQL can carry it
    assert rows is not None
    assert [row.header["id"] for row in rows] == ["s1"]
    by_title = SessionQuery(title="\u0000")  # no parameter can carry it: the policy answers
    assert await pg.log_store.query_sessions(by_title) is None
    assert (await pg.list_sessions(by_title)).sessions == ()


# -- search ----------------------------------------------------------------------------------


async def test_a_stale_batch_indexes_nothing(make_store: Make, pg_url: str, pg_schema: str) -> None:
    pg = make_store()
    header = SessionHeader(id="s1", created_at=1)
    await both([pg], header, [user(0, 1, "first")])
    stale = Batch(
        header,
        [user(0, 2, "stale")],
        first_seq=0,
        end_seq=1,
        summary=summarize([]),
        texts=[IndexedText(0, "user/message", 2, "stale")],
    )
    assert await pg.log_store.write_batch(stale) is False
    assert await pg.search("stale") == []
    [row] = await pg.log_store.list_summaries()
    assert row.summary is not None
    assert row.summary.events == 1


WORDS = ["alpha", "beta", "Gamma", "delta", "42", "x1", "café", "naïve"]


async def test_search_on_plain_words_equals_the_cores_scan(make_store: Make) -> None:
    pg, memory = make_store(), MemoryPersistence()
    assert pg.log_store.indexes_text
    assert not memory.log_store.indexes_text
    rng = random.Random(5)
    for number in range(25):
        events = []
        for seq in range(rng.randint(1, 6)):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
            text = text.replace(" ", rng.choice([" ", ", ", "\n", "_", ". "]), 1)
            events.append(user(seq, rng.choice([10, 20, 30]), text))
        await both([pg, memory], SessionHeader(id=f"s{number:02d}", created_at=1), events)
    for words in ["alpha", "ALPHA beta", "gamma", "42", "x1 delta", "café", "naïve alpha", "zeta"]:
        for limit in (1, 5, 100):
            for session in (None, "s03"):
                got = await pg.search(words, limit=limit, session=session)
                want = await memory.search(words, limit=limit, session=session)
                assert [hit.to_json() for hit in got] == [hit.to_json() for hit in want], words
    got = await pg.search("alpha", types=["assistant/message"])
    assert got == []


async def test_texts_go_with_delete_and_with_a_repair_cut(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    pg = make_store()
    header = SessionHeader(id="s1", created_at=1)
    await both([pg], header, [user(seq, 10 + seq, f"word{seq} common") for seq in range(4)])
    await both([pg], SessionHeader(id="s2", created_at=1), [user(0, 5, "common")])
    assert len(await pg.search("common")) == 5
    store = pg.log_store
    revision = await store.read_revision("s1")
    assert revision is not None
    # The primitive: a repair that keeps two events drops the texts from seq 2 on.
    summary = summarize([])
    receipt = await store.commit_repair(Repair(header, revision, kept_events=2, summary=summary))
    assert receipt is not None
    count = f'SELECT session_id, seq FROM "{pg_schema}".search_text ORDER BY 1, 2'
    assert [tuple(row) for row in await sql(dsn_of(pg_url), count)] == [
        ("s1", 0),
        ("s1", 1),
        ("s2", 0),
    ]
    await pg.delete("s2")
    assert [tuple(row) for row in await sql(dsn_of(pg_url), count)] == [("s1", 0), ("s1", 1)]


async def test_text_postgres_cannot_hold_is_indexed_as_a_word_break(make_store: Make) -> None:
    pg = make_store()
    await both([pg], SessionHeader(id="s1", created_at=1), [user(0, 1, "nul\u0000byte")])
    [hit] = await pg.search("byte")
    assert hit.seq == 0
    [stored] = await pg.read_from("s1", 0)
    assert stored.data["content"][0]["text"] == "nul\u0000byte"  # the log keeps it exactly


async def test_a_huge_text_is_stored_and_its_start_indexed(make_store: Make) -> None:
    pg = make_store()
    huge = "start " + " ".join(f"w{number}x" for number in range(400_000))
    await both([pg], SessionHeader(id="s1", created_at=1), [user(0, 1, huge)])
    assert [hit.seq for hit in await pg.search("start")] == [0]


async def test_reindex_rewrites_summary_and_texts(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    pg = make_store()
    await both([pg], SessionHeader(id="s1", created_at=1), [user(0, 7, "findme")])
    dsn = dsn_of(pg_url)
    await sql(dsn, f'DELETE FROM "{pg_schema}".search_text')
    await sql(dsn, f'UPDATE "{pg_schema}".sessions SET events = 99')
    assert await pg.search("findme") == []
    report = await pg.reindex()
    assert report.unreadable == ()
    assert [hit.seq for hit in await pg.search("findme")] == [0]
    [row] = await pg.log_store.list_summaries()
    assert row.summary is not None
    assert row.summary.events == 1
    stale = await pg.log_store.rewrite_index(
        SessionHeader(id="s1", created_at=1), "nope:0", summarize([]), [IndexedText(0, "a", 1, "b")]
    )
    assert stale is False


async def test_stored_bytes_counts_the_sessions_rows(make_store: Make) -> None:
    pg = make_store()
    await both([pg], SessionHeader(id="small", created_at=1), [user(0, 1, "x")])
    await both([pg], SessionHeader(id="big", created_at=1), [user(0, 1, "y " * 20_000)])
    small = await pg.log_store.stored_bytes("small")
    big = await pg.log_store.stored_bytes("big")
    assert small is not None
    assert big is not None
    assert 0 < small < big
    assert await pg.log_store.stored_bytes("missing") is None


# -- audit -----------------------------------------------------------------------------------


async def test_audit_records_survive_a_reconnect_oldest_first(make_store: Make) -> None:
    first = make_store()
    assert first.log_store.keeps_audit
    records = [{"action": "test", "n": number, "text": "nul\u0000é"} for number in range(3)]
    for record in records:
        await first.log_store.append_audit(record)
    await first.close()
    assert await make_store().audit() == records


async def test_prune_deletes_and_audits(make_store: Make) -> None:
    pg = make_store()
    for number in range(3):
        await both([pg], SessionHeader(id=f"s{number}", created_at=number), [note(0, number)])
    await pg.close()
    pruner = make_store()  # not the writer of these sessions
    plan = await pruner.prune(keep_last=1, dry_run=False, now=10_000)
    assert sorted(plan.deleted) == ["s0", "s1"]
    assert [info.header.id for info in await pruner.list_snapshots()] == ["s2"]
    audit = await make_store().audit()
    assert [record["phase"] for record in audit] == ["begin", "end"]


# -- identity and upgrade --------------------------------------------------------------------


async def test_a_v2_schema_missing_its_text_index_is_refused(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    await schema_made(make_store())
    await sql(dsn_of(pg_url), f'DROP INDEX "{pg_schema}".search_text_words')
    with pytest.raises(FormatUnsupportedError) as refused:
        await make_store().list()
    assert refused.value.code == "FOREIGN_STORE"


async def schema_made(store: PostgresPersistence) -> None:
    """Have *store* create its schema, as its first write does (a read creates nothing)."""
    async with store.log_store.connection():
        pass


async def v1_copy_of(dsn: str, source: str, target: str) -> None:
    """Build *target* from the v1 DDL and copy *source*'s sessions and events into it,
    as the v1 release stored them (the same columns, written by the same row mapping)."""
    s = f'"{target}"'
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(f"CREATE SCHEMA {s}")
            for statement in V1_DDL:
                await conn.execute(statement.format(s=s))
            await conn.execute(
                f'INSERT INTO {s}.sessions SELECT {_V1_SESSION_COLUMNS} FROM "{source}".sessions'
            )
            await conn.execute(
                f'INSERT INTO {s}.events SELECT {_EVENT_COLUMNS} FROM "{source}".events'
            )
    finally:
        await conn.close()


async def test_a_v1_schema_is_refused_then_upgraded_in_place(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    dsn = dsn_of(pg_url)
    source = make_store()
    session = Session.create("turns", clock=iter(range(1_000, 10_000, 7)).__next__)
    closed_turn(session, 1, answer="streamed words " * 4)
    open_turn_with_pending_call(session, 2)
    await both([source], session.header, list(session.events))
    await both(
        [source],
        SessionHeader(id="plain", created_at=3, title="Plain", meta={"k": 1}),
        [user(0, 50, "zebra world"), note(1, 60)],
    )
    await source.close()
    target = f"{pg_schema}_v1"
    try:
        await v1_copy_of(dsn, pg_schema, target)
        before = await snapshot(dsn, target)
        refusing = make_store(schema=target)
        with pytest.raises(FormatUnsupportedError) as refused:
            await refusing.list()
        assert refused.value.code == "FORMAT_OLDER"
        assert "upgrade=1" in str(refused.value)
        assert await snapshot(dsn, target) == before

        upgraded = make_store(schema=target, upgrade=True)
        summaries = {
            row.header["id"]: row.summary for row in await upgraded.log_store.list_summaries()
        }
        relations = await sql(
            dsn,
            "SELECT relname, relkind::text FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE nspname = $1 ORDER BY relname",
            target,
        )
        assert tuple((row[0], row[1]) for row in relations) == EXPECTED_RELATIONS
        version = await sql(dsn, f'SELECT schema_version FROM "{target}".store_info')
        assert version[0][0] == 2
        stored = await upgraded.read_from("turns", 0)  # as stored: no closers
        assert summaries["turns"] == summarize(stored)
        assert summaries["turns"] is not None
        assert summaries["turns"].open_turn == 2
        assert summaries["plain"] == summarize(await upgraded.read_from("plain", 0))
        assert [hit.session_id for hit in await upgraded.search("zebra")] == ["plain"]
        assert [hit.session_id for hit in await upgraded.search("streamed")] == ["turns"]
        page = await upgraded.list_sessions(SessionQuery(meta=(("k", 1),)))
        assert ids(page.sessions) == ["plain"]
        # Opened again, with or without the option, it is simply v2.
        assert len(await make_store(schema=target).list()) == 2
        assert len(await make_store(schema=target, upgrade=True).list()) == 2
        columns = await sql(
            dsn,
            "SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE nspname = $1 "
            "AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped",
            target,
        )
        assert columns[0][0] == len(EXPECTED_COLUMNS)
    finally:
        await sql(dsn, f'DROP SCHEMA IF EXISTS "{target}" CASCADE')


async def test_an_undecodable_session_fails_the_whole_upgrade_changing_nothing(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    dsn = dsn_of(pg_url)
    source = make_store()
    await both([source], SessionHeader(id="good", created_at=1), [user(0, 1, "fine")])
    await both([source], SessionHeader(id="bad", created_at=2), [note(0, 1), note(1, 2)])
    await source.close()
    target = f"{pg_schema}_v1"
    try:
        await v1_copy_of(dsn, pg_schema, target)
        await sql(dsn, f"UPDATE \"{target}\".events SET data = '{{broken' WHERE session_id = 'bad'")
        before = await snapshot(dsn, target)
        with pytest.raises(CorruptLogError) as refused:
            await make_store(schema=target, upgrade=True).list()
        assert refused.value.code == "CORRUPT"
        assert refused.value.session_id == "bad"
        assert await snapshot(dsn, target) == before
    finally:
        await sql(dsn, f'DROP SCHEMA IF EXISTS "{target}" CASCADE')


async def test_an_altered_v1_schema_is_not_upgraded(
    make_store: Make, pg_url: str, pg_schema: str
) -> None:
    dsn = dsn_of(pg_url)
    await schema_made(make_store())
    target = f"{pg_schema}_v1"
    try:
        await v1_copy_of(dsn, pg_schema, target)
        await sql(dsn, f'ALTER TABLE "{target}".events ADD COLUMN extra int')
        before = await snapshot(dsn, target)
        with pytest.raises(FormatUnsupportedError) as refused:
            await make_store(schema=target, upgrade=True).list()
        assert refused.value.code == "FOREIGN_STORE"
        assert await snapshot(dsn, target) == before
    finally:
        await sql(dsn, f'DROP SCHEMA IF EXISTS "{target}" CASCADE')


def test_two_processes_upgrading_at_once_upgrade_once(pg_url: str, pg_schema: str) -> None:
    dsn = dsn_of(pg_url)

    async def build() -> None:
        source = PostgresPersistence(dsn, schema=pg_schema)
        try:
            for number in range(5):
                header = SessionHeader(id=f"s{number}", created_at=number)
                await both([source], header, [user(0, number, f"word{number}"), note(1, 9)])
        finally:
            await source.close()
        await v1_copy_of(dsn, pg_schema, f"{pg_schema}_v1")

    asyncio.run(build())
    target = f"{pg_schema}_v1"
    try:
        url = with_options(pg_url, schema=target, upgrade=1)
        child = Path(__file__).with_name("pg_child.py")
        children = [
            subprocess.Popen(
                [sys.executable, str(child), "migrate", url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [process.communicate("go\n", timeout=120) for process in children]
        assert [out.strip() for out, _ in outputs] == ["ok", "ok"], outputs
        found = asyncio.run(
            sql(dsn, f'SELECT count(*), min(events) FROM "{target}".sessions WHERE events = 2')
        )
        assert tuple(found[0]) == (5, 2)
        texts = asyncio.run(sql(dsn, f'SELECT count(*) FROM "{target}".search_text'))
        assert texts[0][0] == 5
    finally:
        asyncio.run(sql(dsn, f'DROP SCHEMA IF EXISTS "{target}" CASCADE'))


def test_the_upgrade_url_option() -> None:
    assert parse_postgres_url("postgresql://u@h/db?upgrade=1&x=y") == (
        "postgresql://u@h/db?x=y",
        {"upgrade": True},
    )
