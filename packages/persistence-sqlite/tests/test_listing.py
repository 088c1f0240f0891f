"""Schema v2 of the SQLite store: summaries, listing queries, full-text search, the audit log
and the upgrade from v1, on real database files.

The reference for every answer is the core: ``listing.select`` over the summaries the core
computes, and the memory backend (which has no index, so the policy scans every log) for
search.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import sessionledger_sqlite
import sessionledger_sqlite.plugin as sqlite_plugin
from sessionledger import (
    CorruptLogError,
    FormatUnsupportedError,
    SessionEvent,
    SessionHeader,
    user_message,
)
from sessionledger.runtime._opening import open_store
from sessionledger.storage._listing import SessionInfo, SessionQuery, select, sort_key
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.views._summaries import SessionSummary, summarize
from sessionledger_sqlite import SqlitePersistence, queries as sql_queries, writing
from sessionledger_sqlite.schema import EXPECTED_OBJECTS, SCHEMA_VERSION, SHADOW_TABLES

CHILD = Path(__file__).with_name("sqlite_child.py")

# The DDL of schema v1, as releases before v2 created it: the stored format an upgrade
# starts from (kept here verbatim, not imported, so a change to the store's DDL cannot
# change what "v1" means to these tests).
V1_DDL = (
    """CREATE TABLE sessions (
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
) STRICT""",
    """CREATE TABLE events (
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
) STRICT""",
    "CREATE INDEX sessions_by_created_at ON sessions (created_at, id)",
    """CREATE TRIGGER events_continue_the_log BEFORE INSERT ON events
WHEN NEW.seq IS NOT (SELECT next_seq FROM sessions WHERE id = NEW.session_id)
BEGIN SELECT RAISE(ABORT, 'sessionledger: seq mismatch'); END""",
    """CREATE TRIGGER events_advance_the_log AFTER INSERT ON events
BEGIN UPDATE sessions SET next_seq = NEW.seq + NEW.members, revision = revision + 1
WHERE id = NEW.session_id; END""",
)
# What v2 added to v1, verbatim as its releases ran it (every text indexed at once).
V2_DDL = (
    "ALTER TABLE sessions ADD COLUMN events INTEGER CHECK (events >= 0)",
    "ALTER TABLE sessions ADD COLUMN first_activity INTEGER",
    "ALTER TABLE sessions ADD COLUMN last_activity INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN open_turn INTEGER",
    "CREATE INDEX sessions_by_last_activity ON sessions (last_activity DESC, id)",
    "CREATE INDEX sessions_newest_first ON sessions (created_at DESC, id)",
    "CREATE INDEX sessions_unsummarized ON sessions (id) WHERE events IS NULL",
    """CREATE TABLE search_texts (
  id         INTEGER PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  seq        INTEGER NOT NULL,
  type       TEXT NOT NULL,
  time       INTEGER NOT NULL,
  text       TEXT NOT NULL
) STRICT""",
    "CREATE INDEX search_texts_by_session ON search_texts (session_id, seq)",
    (
        "CREATE VIRTUAL TABLE search_index USING fts5(text, content = 'search_texts', "
        "content_rowid = 'id', tokenize = \"unicode61 remove_diacritics 0\")"
    ),
    """CREATE TABLE audit (
  seq    INTEGER PRIMARY KEY,
  record TEXT NOT NULL
) STRICT""",
    """CREATE TRIGGER audit_is_append_only BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'sessionledger: the audit log is append-only'); END""",
    """CREATE TRIGGER audit_keeps_its_records BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'sessionledger: the audit log is append-only'); END""",
    """CREATE VIEW batch_rows (
  session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable, members,
  text, summary_events, first_activity, last_activity, open_turn, closes
) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL WHERE 0""",
    """CREATE TRIGGER batch_rows_append INSTEAD OF INSERT ON batch_rows
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
END""",
)
V1_SESSION_COLUMNS = (
    "id, version, created_at, cwd, parent_session, seed_length, delegation_depth, title, "
    "meta, incarnation"
)
EVENT_COLUMNS = (
    "session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable, members"
)


# -- building stores --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """A session to store: its header and its events (JSON envelopes)."""

    header: SessionHeader
    events: tuple[dict[str, Any], ...]

    def summary(self) -> SessionSummary:
        return summarize([SessionEvent.from_json(event) for event in self.events])


def event(kind: str, seq: int, time: int, *, turn: int = 1, text: str = "") -> dict[str, Any]:
    if kind == "turn/start":
        data: dict[str, Any] = {"turn": turn}
    elif kind == "turn/end":
        data = {"turn": turn, "reason": {"kind": "completed"}}
    else:
        data = user_message(text or "hello", id=f"u{seq}")
        return {"type": kind, "seq": seq, "time": time, "data": data, "surfaceOp": "append"}
    return {"type": kind, "seq": seq, "time": time, "data": data}


async def fill(store: SessionPersistence, specs: Sequence[Spec]) -> None:
    for spec in specs:
        await store.create(spec.header)
        if spec.events:
            await store.append(spec.header.id, list(spec.events))


def sqlite_at(path: Path, **options: Any) -> SqlitePersistence:
    # NORMAL: these tests check answers, not power-loss durability, and build many files.
    return SqlitePersistence(path, synchronous="NORMAL", **options)


def reference(specs: Sequence[Spec]) -> list[SessionInfo]:
    """The listing rows of what ``fill`` stores (a session is stored with its first event)."""
    return [SessionInfo(spec.header, "", spec.summary()) for spec in specs if spec.events]


def listed(infos: Sequence[SessionInfo]) -> list[tuple[str, SessionSummary]]:
    return [(info.id, info.summary) for info in infos]


async def every_page(store: SessionPersistence, query: SessionQuery) -> list[SessionInfo]:
    """Page through *query* the way ``SessionListing`` does, following each cursor."""
    found: list[SessionInfo] = []
    while True:
        page = await store.list_sessions(query)
        found.extend(page.sessions)
        if page.next is None:
            return found
        last = page.sessions[-1]
        query = dataclasses.replace(query, after=(sort_key(last, query.order), last.id))


# -- listing parity with listing.select -------------------------------------------------------

TITLES = [None, "Fix the Bug", "fix the bug", "BUGFIX", "Écoles", "écoles", "Straße", "x"]
TITLE_QUERIES = ["bug", "BUG", "Fix", "É", "é", "ÉCOLES", "ss", "ß", "x", "the b"]
KINDS = ["turn/start", "turn/end", "user/message"]
META_KEYS = ["k", "a.b", 'q"uote', "ü", "$"]
META_VALUES: list[Any] = [1, True, "1", None, 0, False, "x", "True"]

meta_values = st.sampled_from(META_VALUES)
metas = st.none() | st.dictionaries(st.sampled_from(META_KEYS), meta_values, max_size=3)


@st.composite
def specs_strategy(draw: st.DrawFn) -> list[Spec]:
    ids = draw(st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=8))
    specs = []
    for session_id in ids:
        created = draw(st.sampled_from([0, 10, 20]))
        kinds = draw(st.lists(st.sampled_from(KINDS), max_size=3))
        times = sorted(draw(st.lists(st.sampled_from([5, 10, 15, 20, 30]), min_size=3, max_size=3)))
        events = tuple(event(kind, seq, times[seq], turn=seq + 1) for seq, kind in enumerate(kinds))
        header = SessionHeader(
            id=session_id,
            created_at=created,
            title=draw(st.sampled_from(TITLES)),
            meta=draw(metas),
        )
        specs.append(Spec(header, events))
    return specs


@st.composite
def queries(draw: st.DrawFn) -> SessionQuery:
    meta = draw(st.dictionaries(st.sampled_from(META_KEYS), meta_values, max_size=2))
    # 2**70: beyond SQLite's integers (a bound that keeps every row or none).
    bound = st.none() | st.sampled_from([0, 5, 10, 15, 20, 30, 31, 2**70, -(2**70)])
    return SessionQuery(
        order=draw(st.sampled_from(["last_activity", "created"])),
        limit=draw(st.none() | st.integers(1, 4)),
        title=draw(st.none() | st.sampled_from(TITLE_QUERIES)),
        meta=tuple(sorted(meta.items())),
        since=draw(bound),
        until=draw(bound),
        after=draw(
            st.none()
            | st.tuples(
                st.sampled_from([0, 5, 10, 15, 20, 30, 2**70, -(2**70)]),
                st.sampled_from("abcdefghij"),
            )
        ),
    )


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=specs_strategy(), asked=st.lists(queries(), min_size=1, max_size=12))
def test_listing_equals_listing_select(
    tmp_path_factory: pytest.TempPathFactory, specs: list[Spec], asked: list[SessionQuery]
) -> None:
    path = tmp_path_factory.mktemp("listing") / "ledger.db"

    async def check() -> None:
        store = sqlite_at(path)
        try:
            await fill(store, specs)
            infos = reference(specs)
            for query in asked:
                rows = await store.log_store.query_sessions(query)
                assert rows is not None  # every summary is trusted: the index answers
                page = await store.list_sessions(query)
                expected = select(infos, query)
                limit = query.limit
                assert listed(page.sessions) == listed(expected[:limit]), query
                assert (page.next is not None) == (limit is not None and len(expected) > limit)
                # Paging from the first page yields every match exactly once, in order.
                whole = dataclasses.replace(query, after=None)
                assert listed(await every_page(store, whole)) == listed(
                    select(infos, dataclasses.replace(whole, limit=None))
                )
            assert sorted(
                (row.header["id"], row.summary) for row in await store.log_store.list_summaries()
            ) == sorted((info.id, info.summary) for info in infos)
        finally:
            await store.close()

    asyncio.run(check())


async def test_listing_scans_an_index_in_order_without_sorting(tmp_path: Path) -> None:
    """``ls --limit 50`` reads an index from its start: no sort of every session."""
    path = tmp_path / "ledger.db"
    store = sqlite_at(path)
    statements: list[str] = []
    try:
        await fill(
            store,
            [
                Spec(SessionHeader(id=f"s{n}", created_at=n), (event("turn/start", 0, n % 7),))
                for n in range(30)
            ],
        )
        db = store.log_store.connection
        assert db is not None
        await db.set_trace_callback(statements.append)
        for order in ("last_activity", "created"):
            await store.list_sessions(SessionQuery(order=order, limit=5))  # type: ignore[arg-type]
            await store.list_sessions(
                SessionQuery(order=order, limit=5, after=(10, "s10"))  # type: ignore[arg-type]
            )
        await db.set_trace_callback(None)
    finally:
        await store.close()
    scans = [sql for sql in statements if "ORDER BY" in sql and "FROM sessions" in sql]
    assert len(scans) == 4
    with sqlite3.connect(path) as raw:
        for sql in scans:
            plan = " | ".join(row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}"))
            assert "TEMP B-TREE" not in plan, plan
            assert "sessions_by_last_activity" in plan or "sessions_newest_first" in plan, plan


async def test_an_untrusted_summary_is_computed_and_listing_stays_exact(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    specs = [
        Spec(SessionHeader(id="a", created_at=1), (event("turn/start", 0, 50),)),
        Spec(SessionHeader(id="b", created_at=2), (event("user/message", 0, 40),)),
    ]
    store = sqlite_at(path)
    try:
        await fill(store, specs)
    finally:
        await store.close()
    with sqlite3.connect(path) as raw:  # as a lost index entry would leave it
        raw.execute("UPDATE sessions SET events = NULL, last_activity = 0 WHERE id = 'a'")
    store = sqlite_at(path)
    try:
        assert await store.log_store.query_sessions(SessionQuery()) is None
        page = await store.list_sessions(SessionQuery())
        assert listed(page.sessions) == listed(select(reference(specs), SessionQuery()))
        assert [info.id for info in page.sessions if info.stale] == ["a"]
        # Listing writes nothing (docs/listing.md): the summary is still untrusted...
        assert await store.log_store.query_sessions(SessionQuery()) is None
        await store.reindex("a")  # ...until reindex stores it
        assert await store.log_store.query_sessions(SessionQuery()) is not None
        page = await store.list_sessions(SessionQuery())
        assert listed(page.sessions) == listed(select(reference(specs), SessionQuery()))
        assert not any(info.stale for info in page.sessions)
    finally:
        await store.close()


# -- summaries after a crash repair -----------------------------------------------------------


def _child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    src = str(Path(sessionledger_sqlite.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    env.update(extra)
    return env


async def test_summary_after_an_interrupted_turn_is_closed_by_repair(tmp_path: Path) -> None:
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
        assert child.stdout.readline().strip() == "FLUSHED"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    store = SqlitePersistence(path)
    try:
        before = (await store.list_sessions()).sessions[0]
        assert before.open_turn == 1  # the turn the crash interrupted
        assert before.summary == summarize(await store.read_from("crashy", 0))  # as stored
        stored = await store.load("crashy")  # commits the repair: closers, turn/end
        after = (await store.list_sessions()).sessions[0]
        assert after.open_turn is None
        assert after.summary == summarize(stored.events)
        assert after.events > before.events
        assert after.last_activity == stored.events[-1].time
    finally:
        await store.close()


# -- search -----------------------------------------------------------------------------------

WORDS = ["alpha", "Beta", "GAMMA", "delta", "Über", "über", "café", "naïve", "x1", "42"]


@st.composite
def text_specs(draw: st.DrawFn) -> list[Spec]:
    specs = []
    for index, session_id in enumerate(draw(st.lists(st.sampled_from("pqrs"), unique=True))):
        events = []
        for seq in range(draw(st.integers(0, 4))):
            picked = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
            separator = draw(st.sampled_from([" ", ", ", "_", "-", "\n"]))
            time = draw(st.sampled_from([1, 2, 3]))
            events.append(event("user/message", seq, time, text=separator.join(picked)))
        specs.append(Spec(SessionHeader(id=session_id, created_at=index), tuple(events)))
    return specs


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=text_specs(),
    asked=st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=2),
            st.integers(1, 5),
            st.none() | st.sampled_from("pqrs"),
        ),
        min_size=1,
        max_size=8,
    ),
    every=st.sampled_from([1, 2, 5, writing.INDEX_EVERY]),
)
def test_search_equals_the_core_scan(
    tmp_path_factory: pytest.TempPathFactory,
    specs: list[Spec],
    asked: list[tuple[list[str], int, str | None]],
    every: int,
) -> None:
    """Whether a text is indexed or still waits, search finds what a scan finds."""
    path = tmp_path_factory.mktemp("search") / "ledger.db"

    async def check() -> None:
        store, scanned = sqlite_at(path), MemoryPersistence()
        try:
            await fill(store, specs)
            await fill(scanned, specs)
            if any(spec.events for spec in specs):
                check_index(path, every)
            present = {spec.header.id for spec in specs if spec.events}
            for words, limit, session in asked:
                if session is not None and session not in present:
                    continue
                text = " ".join(words)
                hits = await store.search(text, limit=limit, session=session)
                assert hits == await scanned.search(text, limit=limit, session=session), text
                typed = await store.search(text, limit=limit, types=["assistant/message"])
                assert typed == []
        finally:
            await store.close()
            await scanned.close()

    with indexing_every(every):
        asyncio.run(check())


@contextlib.contextmanager
def indexing_every(count: int) -> Iterator[None]:
    """Index the waiting texts once *count* of them wait (the store's rule, at another
    size, so that a few texts cover both halves: indexed and waiting)."""
    kept = writing.INDEX_EVERY
    writing.INDEX_EVERY = count  # type: ignore[misc]
    try:
        yield
    finally:
        writing.INDEX_EVERY = kept  # type: ignore[misc]


def check_index(path: Path, every: int = writing.INDEX_EVERY) -> int:
    """Check the text index's rule: the texts up to the mark, and only they, are in the
    FTS5 index, and fewer than *every* wait; return how many wait."""
    with sqlite3.connect(path) as raw:
        # rank 1: also compare the index with its content, the texts up to the mark.
        raw.execute("INSERT INTO search_index (search_index, rank) VALUES ('integrity-check', 1)")
        (mark,) = raw.execute("SELECT indexed_upto FROM search_state").fetchone()
        (waiting,) = raw.execute(
            "SELECT count(*) FROM search_texts WHERE id > ?", (mark,)
        ).fetchone()
        (highest,) = raw.execute("SELECT coalesce(max(id), 0) FROM search_texts").fetchone()
    assert mark <= highest or waiting == 0
    assert waiting < every
    return int(waiting)


def _texts(path: Path, session_id: str) -> int:
    check_index(path)
    with sqlite3.connect(path) as raw:
        return int(
            raw.execute(
                "SELECT count(*) FROM search_texts WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
        )


# Every text indexed at once, and every text waiting: the paths that delete texts keep the
# index's rule in both.
EVERY = pytest.mark.parametrize("every", [1, writing.INDEX_EVERY], ids=["indexed", "waiting"])


@EVERY
async def test_deleting_a_session_removes_its_search_texts(tmp_path: Path, every: int) -> None:
    path = tmp_path / "ledger.db"
    specs = [
        Spec(SessionHeader(id=name, created_at=0), (event("user/message", 0, 1, text="keep me"),))
        for name in ("a", "b")
    ]
    store = sqlite_at(path)
    try:
        with indexing_every(every):
            await fill(store, specs)
            assert [hit.session_id for hit in await store.search("keep")] == ["a", "b"]
            await store.delete("b")  # the highest ids: an id used again must wait
            assert [hit.session_id for hit in await store.search("keep")] == ["a"]
            await fill(
                store,
                [
                    Spec(
                        SessionHeader(id="c", created_at=0),
                        (event("user/message", 0, 1, text="keep new"),),
                    )
                ],
            )
            assert [hit.session_id for hit in await store.search("keep")] == ["a", "c"]
            assert [hit.session_id for hit in await store.search("new")] == ["c"]
            check_index(path, every)
    finally:
        await store.close()
    assert _texts(path, "a") == 1
    assert _texts(path, "b") == 0
    assert _texts(path, "c") == 1


@EVERY
async def test_a_repair_cut_removes_the_texts_of_the_events_it_drops(
    tmp_path: Path, every: int
) -> None:
    path = tmp_path / "ledger.db"
    events = tuple(event("user/message", seq, seq, text=f"word{seq} common") for seq in range(4))
    store = sqlite_at(path)
    try:
        with indexing_every(every):
            await fill(store, [Spec(SessionHeader(id="s", created_at=0), events)])
    finally:
        await store.close()
    with sqlite3.connect(path) as raw:  # the last two rows lost, as a damaged file would
        raw.execute("DELETE FROM events WHERE session_id = 's' AND seq >= 2")
    store = sqlite_at(path)
    try:
        with indexing_every(every):
            loaded = await store.load("s")  # the stored end disagrees with the rows: cut there
            assert [item.seq for item in loaded.events] == [0, 1]
            assert [hit.seq for hit in await store.search("common")] == [1, 0]
            assert await store.search("word3") == []
            (info,) = (await store.list_sessions()).sessions
            assert info.summary == summarize(loaded.events)
            check_index(path, every)
            # The cut texts had the highest ids: the next text may take one of them.
            await store.append("s", [event("user/message", 2, 9, text="fresh common")])
            assert [hit.seq for hit in await store.search("common")] == [2, 1, 0]
            assert [hit.seq for hit in await store.search("fresh")] == [2]
            check_index(path, every)
    finally:
        await store.close()
    assert _texts(path, "s") == 3


async def test_reindex_rebuilds_summaries_and_texts(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    spec = Spec(SessionHeader(id="s", created_at=0), (event("user/message", 0, 7, text="find me"),))
    store = sqlite_at(path)
    try:
        await fill(store, [spec])
    finally:
        await store.close()
    with sqlite3.connect(path) as raw:  # an index that lost everything
        raw.execute("INSERT INTO search_index (search_index) VALUES ('delete-all')")
        raw.execute("DELETE FROM search_texts")
        raw.execute("UPDATE sessions SET events = 0, first_activity = NULL, last_activity = 0")
    store = sqlite_at(path)
    try:
        assert await store.search("find") == []
        report = await store.reindex()
        assert report.reindexed == 1
        assert [hit.seq for hit in await store.search("find")] == [0]
        assert (await store.list_sessions()).sessions[0].summary == spec.summary()
    finally:
        await store.close()
    assert _texts(path, "s") == 1


async def test_stored_bytes_counts_the_session_rows(tmp_path: Path) -> None:
    store = sqlite_at(tmp_path / "ledger.db")
    try:
        await fill(store, [Spec(SessionHeader(id="s", created_at=0), (event("turn/start", 0, 1),))])
        small = await store.log_store.stored_bytes("s")
        await store.append("s", [event("user/message", 1, 2, text="ü" * 1000)])
        large = await store.log_store.stored_bytes("s")
        assert small is not None
        assert large is not None
        assert large - small >= 2 * 2000  # UTF-8 bytes, in the event's data and its text
        assert await store.log_store.stored_bytes("nobody") is None
    finally:
        await store.close()


async def test_stored_bytes_many_sizes_sessions_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_at(tmp_path / "ledger.db")
    try:
        specs = [
            Spec(SessionHeader(id=f"s{n}", created_at=n), (event("turn/start", 0, 1),))
            for n in range(5)
        ]
        await fill(store, specs)
        await store.append("s3", [event("user/message", 1, 2, text="x" * 100)])
        one_by_one = [await store.log_store.stored_bytes(f"s{n}") for n in range(5)]
        monkeypatch.setattr(sql_queries, "STORED_BYTES_CHUNK", 2)  # chunks of 2, 2 and 1
        asked = ["s4", "s0", "nobody", "s3", "s1", "s2", "s0"]
        assert await store.log_store.stored_bytes_many(asked) == [
            one_by_one[4],
            one_by_one[0],
            None,
            one_by_one[3],
            one_by_one[1],
            one_by_one[2],
            one_by_one[0],
        ]
    finally:
        await store.close()
    empty = sqlite_at(tmp_path / "none" / "ledger.db")  # no database file yet
    try:
        assert await empty.log_store.stored_bytes_many(["s0"]) == [None]
    finally:
        await empty.close()


# -- the audit log ----------------------------------------------------------------------------


async def test_the_audit_log_survives_reopening_and_refuses_rewrites(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    records = [{"action": "prune", "phase": "begin", "n": 1}, {"action": "prune", "phase": "end"}]
    store = SqlitePersistence(path)
    try:
        assert store.log_store.keeps_audit
        assert store.log_store.indexes_text
        for record in records:
            await store.log_store.append_audit(record)
    finally:
        await store.close()
    store = SqlitePersistence(path)
    try:
        assert await store.audit() == records
    finally:
        await store.close()
    with sqlite3.connect(path) as raw:
        for sql in ("DELETE FROM audit", "UPDATE audit SET record = '{}'"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                raw.execute(sql)


async def test_prune_deletes_and_records_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    specs = [
        Spec(SessionHeader(id=name, created_at=0), (event("user/message", 0, time, text="old"),))
        for name, time in (("a", 1), ("b", 2), ("c", 3))
    ]
    store = sqlite_at(path)
    try:
        await fill(store, specs)
    finally:
        await store.close()
    store = sqlite_at(path)  # prune skips the sessions this instance writes
    try:
        plan = await store.prune(keep_last=1, dry_run=False)
        assert sorted(plan.deleted) == ["a", "b"]
        assert [info.id for info in (await store.list_sessions()).sessions] == ["c"]
        assert [hit.session_id for hit in await store.search("old")] == ["c"]
        assert [record["phase"] for record in await store.audit()] == ["begin", "end"]
    finally:
        await store.close()
    assert _texts(path, "a") == 0


# -- upgrading a v1 or v2 database---------------------------------------------------------------


def upgrade_specs() -> list[Spec]:
    return [
        Spec(
            SessionHeader(id="one", created_at=5, title="First Talk", meta={"user": "ana", "n": 1}),
            (
                event("turn/start", 0, 10),
                event("user/message", 1, 11, text="Where is the config file?"),
                event("turn/end", 2, 12),
            ),
        ),
        Spec(
            SessionHeader(id="two", created_at=6, meta={"n": True}),
            (event("turn/start", 0, 20, turn=4), event("user/message", 1, 21, text="config")),
        ),
        Spec(SessionHeader(id="three", created_at=7), (event("user/message", 0, 5, text="hi"),)),
    ]


def build_older(version: int, path: Path, source: Path) -> None:
    """Write a v1 or v2 database holding the rows of the current database at *source*, as
    releases of that version stored them (the rows of sessions and events are the same
    in all three; v2 adds the summaries and the texts, each of them indexed)."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("BEGIN")
        for statement in V1_DDL if version == 1 else (*V1_DDL, *V2_DDL):
            db.execute(statement)
        db.execute("ATTACH DATABASE ? AS source", (str(source),))
        if version == 1:
            db.execute(
                f"INSERT INTO sessions ({V1_SESSION_COLUMNS}, revision, next_seq) "
                f"SELECT {V1_SESSION_COLUMNS}, 0, 0 FROM source.sessions"
            )
        else:
            db.execute("INSERT INTO sessions SELECT * FROM source.sessions")
            db.execute("UPDATE sessions SET revision = 0, next_seq = 0")  # the events advance it
            db.execute("INSERT INTO search_texts SELECT * FROM source.search_texts")
            db.execute("INSERT INTO search_index (search_index) VALUES ('rebuild')")
        db.execute(
            f"INSERT INTO events ({EVENT_COLUMNS}) SELECT {EVENT_COLUMNS} FROM source.events "
            "ORDER BY session_id, seq"
        )
        db.execute(f"PRAGMA application_id = {0x534C4447}")  # "SLDG"
        db.execute(f"PRAGMA user_version = {version}")
        db.execute("COMMIT")
        db.execute("DETACH DATABASE source")
    finally:
        db.close()


def snapshot(path: Path) -> tuple[Any, ...]:
    """Everything an older database holds that an upgrade must keep, byte for byte."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as raw:
        return (
            raw.execute("PRAGMA user_version").fetchall(),
            raw.execute("SELECT type, name, sql FROM sqlite_schema ORDER BY name").fetchall(),
            raw.execute("SELECT * FROM sessions ORDER BY id").fetchall(),
            raw.execute(
                "SELECT session_id, seq, CAST(data AS BLOB), type, time, source_event_seqs, "
                "surface_op, ignorable, members FROM events ORDER BY session_id, seq"
            ).fetchall(),
        )


async def _answers(store: SessionPersistence) -> tuple[Any, ...]:
    infos = list((await store.list_sessions()).sessions)
    return (
        [(info.id, info.summary, info.header) for info in infos],
        await store.search("config"),
        await store.search("where file"),
        [[e.to_json() for e in (await store.inspect(info.id)).events] for info in infos],
        [info.id for info in (await store.list_sessions(SessionQuery(meta=(("n", 1),)))).sessions],
    )


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def older_database(request: Any, tmp_path: Path) -> tuple[Path, tuple[Any, ...]]:
    """A v1 or v2 database and the answers a current store gave for the same sessions."""
    source = tmp_path / "source.db"

    async def build() -> tuple[Any, ...]:
        store = SqlitePersistence(source)
        try:
            await fill(store, upgrade_specs())
            return await _answers(store)
        finally:
            await store.close()

    answers = asyncio.run(build())
    path = tmp_path / "older.db"
    build_older(request.param, path, source)
    return path, answers


async def test_an_older_database_is_refused_with_how_to_upgrade(
    older_database: tuple[Path, tuple[Any, ...]],
) -> None:
    path, _ = older_database
    before = snapshot(path)
    store = SqlitePersistence(path)
    try:
        with pytest.raises(FormatUnsupportedError, match=r"upgrade=1") as caught:
            await store.list_sessions()
        assert caught.value.code == "FORMAT_OLDER"
    finally:
        await store.close()
    assert snapshot(path) == before


async def test_upgrade_keeps_every_answer(older_database: tuple[Path, tuple[Any, ...]]) -> None:
    path, answers = older_database
    v1_events = snapshot(path)[3]
    store = open_store(f"sqlite:{path}?upgrade=1", plugins=[sqlite_plugin], load_entrypoints=False)
    try:
        assert await _answers(store) == answers
    finally:
        await store.close()
    upgraded = snapshot(path)
    assert upgraded[0] == [(SCHEMA_VERSION,)]
    assert upgraded[3] == v1_events  # the events themselves are untouched
    with sqlite3.connect(path) as raw:
        found = raw.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_schema "
            "WHERE substr(name, 1, 7) <> 'sqlite_' ORDER BY type, name"
        ).fetchall()
    assert [
        (t, n, tb, None if n in SHADOW_TABLES else " ".join(sql.split())) for t, n, tb, sql in found
    ] == [tuple(item) for item in EXPECTED_OBJECTS]  # the same schema a new database has
    store = SqlitePersistence(path)  # now opens without asking
    try:
        assert await _answers(store) == answers
        assert _texts(path, "one") == 1
    finally:
        await store.close()


async def test_an_unreadable_session_fails_the_whole_upgrade(
    older_database: tuple[Path, tuple[Any, ...]],
) -> None:
    path, _ = older_database
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE events SET data = 'not json' WHERE session_id = 'two' AND seq = 1")
    before = snapshot(path)
    store = SqlitePersistence(path, upgrade=True)
    try:
        if before[0] == [(2,)]:
            # v2 has every summary and text: its upgrade reads no event, and leaves the
            # damaged one, byte for byte, to the load that finds it.
            await store.list_sessions()
        else:
            with pytest.raises(CorruptLogError, match="cannot upgrade") as caught:
                await store.list_sessions()
            assert caught.value.session_id == "two"
    finally:
        await store.close()
    after = snapshot(path)
    assert after[3] == before[3]
    assert after == before or before[0] == [(2,)]


async def test_upgrade_refuses_an_older_database_with_foreign_objects(
    older_database: tuple[Path, tuple[Any, ...]],
) -> None:
    path, _ = older_database
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE extra (x)")
    before = snapshot(path)
    store = SqlitePersistence(path, upgrade=True)
    try:
        with pytest.raises(FormatUnsupportedError) as caught:
            await store.list_sessions()
        assert caught.value.code == "FOREIGN_STORE"
    finally:
        await store.close()
    assert snapshot(path) == before


UPGRADER = """
import asyncio, sys
from sessionledger_sqlite import SqlitePersistence

async def main() -> None:
    store = SqlitePersistence(sys.argv[1], upgrade=True)
    try:
        await store.list_sessions()
    finally:
        await store.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("point", ["sqlite.upgrade.after-ddl", "sqlite.upgrade.before-commit"])
async def test_a_crash_during_the_upgrade_leaves_the_older_database(
    older_database: tuple[Path, tuple[Any, ...]], point: str
) -> None:
    path, answers = older_database
    before = snapshot(path)
    child = subprocess.Popen(
        [sys.executable, "-c", UPGRADER, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(SESSIONLEDGER_FAILPOINT=point),
    )
    try:
        assert child.stderr is not None
        line = child.stderr.readline()
        assert line.startswith(f"FAILPOINT {point}"), line + child.stderr.read()
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
    assert snapshot(path) == before  # still the older version, every row as it was
    store = SqlitePersistence(path, upgrade=True)  # and the upgrade can run again
    try:
        assert await _answers(store) == answers
    finally:
        await store.close()


@pytest.mark.parametrize("value", ["yes", "2", ""])
def test_upgrade_option_must_be_0_or_1(value: str) -> None:
    with pytest.raises(Exception, match="upgrade must be 0 or 1"):
        sqlite_plugin.parse_sqlite_url(f"sqlite:x.db?upgrade={value}")
    assert sqlite_plugin.parse_sqlite_url("sqlite:x.db?upgrade=1")[1] == {"upgrade": True}
    assert sqlite_plugin.parse_sqlite_url("sqlite:x.db?upgrade=0")[1] == {"upgrade": False}


async def test_meta_filters_tell_json_types_apart(tmp_path: Path) -> None:
    values: list[Any] = [1, True, "1", None, 0, False]
    specs = [
        Spec(
            SessionHeader(id=f"s{index}", created_at=index, meta={'q"uote': value, "a.b": value}),
            (event("turn/start", 0, index),),
        )
        for index, value in enumerate(values)
    ]
    store = sqlite_at(tmp_path / "ledger.db")
    try:
        await fill(store, specs)
        for index, value in enumerate(values):
            for key in ('q"uote', "a.b"):
                query = SessionQuery(meta=((key, value),))
                page = await store.list_sessions(query)
                assert [info.id for info in page.sessions] == [f"s{index}"], (key, value)
        assert (await store.list_sessions(SessionQuery(meta=(("a", 1),)))).sessions == ()
    finally:
        await store.close()


async def test_a_damaged_meta_column_does_not_fail_a_filtered_listing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    specs = [
        Spec(SessionHeader(id=name, created_at=0, meta={"k": 1}), (event("turn/start", 0, 1),))
        for name in ("good", "bad")
    ]
    store = sqlite_at(path)
    try:
        await fill(store, specs)
    finally:
        await store.close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE sessions SET meta = '{not json' WHERE id = 'bad'")
    store = sqlite_at(path)
    try:
        for query in (SessionQuery(meta=(("k", 1),)), SessionQuery()):
            assert [info.id for info in (await store.list_sessions(query)).sessions] == ["good"]
    finally:
        await store.close()
