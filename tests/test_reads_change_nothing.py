"""Reading changes nothing in a store, on every backend (docs/listing.md, "reading never
writes"; docs/durability.md, "reading creates nothing"), and every command shows every
time and depth the ledger accepts.

One store per backend (memory, JSONL, SQLite, PostgreSQL) holds sessions with
summaries the store lacks or holds stale (made so by editing the store: an
``index.jsonl`` line deleted, a summary row cleared), an open turn that a load would
repair, times at both ends of the ledger's range (±(2**53 - 1) ms, far beyond the years
a date shows) and values nested 100,000 deep. While another process holds one session
as its writer (and, on SQLite, the database's write lock), every read API and every
read-only command runs against it, most in this process (the command line's own
``main``), a few as real subprocesses; the viewer serves every page of every session. The
oracle is the store itself, taken before and after: every file's bytes and the set of
files (JSONL, SQLite), every row of every table of the store's schema with its ``xmin``
and ``ctid`` (PostgreSQL: a rewrite with equal values moves both), every stored record
and summary (memory). Only SQLite's
shared-memory index (``-shm``), which its readers must update to read at all, may
change its bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import os
import signal
import sqlite3
import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionledger import Ledger, SessionNotFoundError, user_message
from sessionledger.cli.__main__ import main
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._snapshot import MAX_SAFE_INTEGER
from sessionledger.runtime._opening import open_store
from sessionledger.storage._listing import make_query
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.views._summaries import summarize

BACKENDS = ("memory", "jsonl", "sqlite", "postgresql")
#: The latest and earliest event times the ledger accepts.
LATEST, EARLIEST = MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER
DEPTH = 2_500
#: Sessions whose stored summary is made missing or stale.
STALE = ("closed", "open")
#: The session another process holds as its writer while everything reads.
HELD = "held"
IDS = ("closed", "open", HELD, "far", "past", "deep")


def deep_value(depth: int = DEPTH) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"k": value}
    return value


def clock_from(*times: int) -> Callable[[], int]:
    """A clock giving *times*, then the last one again and again."""
    given = iter(times)
    last = times[-1]

    def tick() -> int:
        nonlocal last
        last = next(given, last)
        return last

    return tick


async def fill(url: str) -> None:
    async with Ledger.open(url) as ledger:
        closed = ledger.create("closed", title="two turns", meta={"team": "core"})
        closed_turn(closed, 1, prompt="hello zebra")
        await ledger.flush(closed)
        closed_turn(closed, 2)  # a second batch: a second index entry (JSONL)
        opened = ledger.create("open")
        closed_turn(opened, 1)
        open_turn_with_pending_call(opened, 2)
        closed_turn(ledger.create(HELD), 1)
    # The last events at the latest time the ledger accepts, created just before it.
    async with Ledger.open(url, clock=clock_from(*range(LATEST - 12, LATEST + 1))) as ledger:
        closed_turn(ledger.create("far", title="far future"), 1, prompt="hello far")
    # Created at the epoch (a header time is never negative), events from the earliest.
    async with Ledger.open(url, clock=clock_from(0, *range(EARLIEST, EARLIEST + 40))) as ledger:
        closed_turn(ledger.create("past", title="far past"), 1, prompt="hello past")
    async with Ledger.open(url) as ledger:
        session = ledger.create("deep", meta={"deep": deep_value()})
        session.append("turn/start", {"turn": 1})
        message = {**user_message("hello deep"), "extra": deep_value()}
        session.append("user/message", message, surface_op="append")
        session.append("plugin/deep", deep_value(), ignorable=True)
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})


# -- making summaries missing or stale, by editing the store ---------------------------------


def drop_index_entries(root: Path) -> None:
    """JSONL: delete every index line of ``open`` (missing) and the last of ``closed`` (its
    earlier line, of an earlier revision, stays: stale); tear ``open``'s log (a load would
    move the torn bytes aside)."""
    index = root / "index.jsonl"
    lines = index.read_bytes().splitlines(keepends=True)
    ids = [jsoncodec.loads(line)["id"] for line in lines]
    last_closed = max(number for number, id in enumerate(ids) if id == "closed")
    kept = [
        line
        for number, (line, id) in enumerate(zip(lines, ids, strict=True))
        if id != "open" and number != last_closed
    ]
    assert ids.count("closed") == 2
    assert len(kept) == len(lines) - 2
    index.write_bytes(b"".join(kept))
    [log] = [path for path in root.rglob("session.jsonl") if '"id":"open"' in path.read_text()]
    with log.open("ab") as file:
        file.write(b'{"type":"turn/st')


async def clear_summaries(backend: str, url: str, where: Any) -> None:
    if backend == "memory":
        for session_id in STALE:
            where[session_id].summary = None
    elif backend == "jsonl":
        drop_index_entries(where)
    elif backend == "sqlite":
        with contextlib.closing(sqlite3.connect(where)) as db:
            db.execute("UPDATE sessions SET events = NULL WHERE id IN (?, ?)", STALE)
            db.commit()
    else:
        conn = await pg_connect(url)
        try:
            await conn.execute(
                f"UPDATE {quoted(where)}.sessions SET events = NULL WHERE id = ANY($1)",
                list(STALE),
            )
        finally:
            await conn.close()


# -- the store as it is, byte for byte --------------------------------------------------------


def files_state(top: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under *top*; SQLite's ``-shm`` by name only."""
    state: dict[str, bytes | None] = {}
    for path in sorted(top.rglob("*")):
        name = str(path.relative_to(top))
        if path.is_dir():
            state[name] = None
        else:
            state[name] = b"-shm" if name.endswith("-shm") else path.read_bytes()
    return state


def memory_state(storage: dict[str, Any]) -> Any:
    from sessionledger.storage import _memory as memory

    logs = {
        session_id: (
            stored.header,
            tuple(stored.records),
            tuple(stored.ends),
            stored.incarnation,
            stored.changes,
            tuple(stored.quarantined),
            stored.summary,
        )
        for session_id, stored in storage.items()
    }
    holders = {session_id: ref() for session_id, ref in memory._holders(storage).items()}
    return logs, tuple(memory._audit_log(storage)), holders


def quoted(name: str) -> str:
    from sessionledger_postgres.schema import quote

    return quote(name)


async def pg_connect(url: str) -> Any:
    import asyncpg

    from sessionledger_postgres.plugin import parse_postgres_url

    return await asyncpg.connect(parse_postgres_url(url)[0])


async def pg_state(url: str, schema: str) -> dict[str, Any]:
    """Every relation of *schema*; every row of each table with its ``xmin`` and ``ctid``;
    each sequence's position; the database's schemas and advisory locks."""
    conn = await pg_connect(url)
    try:
        relations = await conn.fetch(
            "SELECT c.relname, c.relkind::text FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1",
            schema,
        )
        state: dict[str, Any] = {"relations": [tuple(row) for row in relations]}
        for name, kind in relations:
            table = f"{quoted(schema)}.{quoted(name)}"
            if kind == "r":
                rows = await conn.fetch(
                    f"SELECT xmin::text, ctid::text, t::text FROM {table} AS t ORDER BY ctid"
                )
                state[name] = [tuple(row) for row in rows]
            elif kind == "S":
                state[name] = tuple(
                    await conn.fetchrow(f"SELECT last_value, is_called FROM {table}")
                )
        tables = [name for name, kind in relations if kind == "r"]
        assert {"sessions", "events", "search_text", "audit"} <= set(tables), tables
        state["schemas"] = [row[0] for row in await conn.fetch("SELECT nspname FROM pg_namespace")]
        locks = await conn.fetch(
            "SELECT classid, objid, pid FROM pg_locks WHERE locktype = 'advisory' ORDER BY 1, 2"
        )
        state["advisory locks"] = [tuple(row) for row in locks]
        return state
    finally:
        await conn.close()


# -- another process holding a session ---------------------------------------------------------

HOLDER = """
import asyncio, sqlite3, sys
from sessionledger import Ledger

async def main(url, database):
    async with Ledger.open(url) as ledger:
        session = await ledger.resume(sys.argv[3])  # its one writer from now on
        await ledger.flush(session)  # what resuming appends (session/end-seed), before reads
        if database:  # and a writer in the middle of a transaction: the write lock
            db = sqlite3.connect(database, isolation_level=None)
            db.execute("BEGIN IMMEDIATE")
        print("HOLDING", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@contextlib.contextmanager
def held(backend: str, url: str, database: str) -> Iterator[None]:
    """Hold ``HELD`` as its writer in another process (in this one for memory, which no
    other process can reach: another ledger)."""
    if backend == "memory":
        ledger = Ledger.open(url)

        async def resume() -> None:
            await ledger.flush(await ledger.resume(HELD))

        asyncio.run(resume())
        yield
        return
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, database, HELD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "HOLDING"
        yield
    finally:
        child.communicate(timeout=60)
    assert child.returncode == 0


# -- reading, every way there is ----------------------------------------------------------------


@dataclasses.dataclass
class Run:
    code: int | None  # None: the command raised (``err`` holds the traceback)
    out: str
    err: str


def in_process(url: str, words: list[str]) -> Run:
    """Run the command line's ``main`` in this process on *url*."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.StringIO()
    handler = signal.getsignal(signal.SIGINT)  # main takes SIGINT over: give it back
    code: int | None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--store", url, *words])
    except BaseException:
        code = None
        err.write(traceback.format_exc())
    finally:
        signal.signal(signal.SIGINT, handler)
    out.flush()
    buffer = out.buffer
    assert isinstance(buffer, io.BytesIO)
    return Run(code, buffer.getvalue().decode(), err.getvalue())


def as_subprocess(url: str, words: list[str]) -> Run:
    env = {key: value for key, value in os.environ.items() if key != "SESSIONLEDGER_STORE"}
    done = subprocess.run(
        [sys.executable, "-m", "sessionledger", "--store", url, *words],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
        env=env,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def as_viewer(url: str) -> Run:
    """``view`` in its own process: every page of every session fetched over HTTP (the
    listing, a search, each session's page, every event's, its messages now and at seq 0,
    its live tail), then Ctrl-C. ``code`` is 0 when every page answered
    200 and it stopped as Ctrl-C stops a command; ``err`` names what did not."""
    import json
    import urllib.error
    import urllib.request

    env = {key: value for key, value in os.environ.items() if key != "SESSIONLEDGER_STORE"}
    process = subprocess.Popen(
        [sys.executable, "-m", "sessionledger", "--store", url, "view", "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        env=env,
    )
    assert process.stdout is not None
    base = process.stdout.readline().strip().rstrip("/")
    problems: list[str] = []

    def get(path: str) -> str:
        try:
            with urllib.request.urlopen(base + path, timeout=60) as response:
                return str(response.read().decode())
        except (urllib.error.URLError, OSError) as error:
            problems.append(f"{path}: {error}")
            return ""

    if base.startswith("http://"):
        for path in ("/", "/?q=hello", "/?title=far"):
            get(path)
        for session_id in IDS:
            page = f"/sessions/{session_id}"
            for path in (page, f"{page}/messages", f"{page}/messages?at=0"):
                get(path)
            tail = get(f"/api{page}/tail?after=-1")
            for seq in range(json.loads(tail)["length"] if tail else 0):
                get(f"{page}/events/{seq}")
    else:
        problems.append(f"no URL first: {base!r}")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    if process.returncode != 130:
        problems.append(f"exit status {process.returncode}")
    return Run(0 if not problems else 1, base + "\n" + out, err + "\n".join(problems))


#: Every read-only command, each way it reads the store: the session commands on the
#: sessions whose reading could write (``closed``: its summary is stale; ``open``: torn,
#: and its open turn a load would close; ``held``: another process's).
GLOBAL_COMMANDS = (
    "ls",
    "ls --json --limit 2",
    "ls --title far --since 2d",
    "search hello",
    "search hello --session deep --json",
    "verify --all",
    "audit",
    "catalog",
    "prune --keep-last 0",
    "tail --all",
    "tail --all --json",
)
SESSION_COMMANDS = (
    "show {}",
    "show {} --json",
    "messages {}",
    "transcript {}",
    "stats {}",
    "verify {} --json",
    "repair {} --dry-run",
    "repair --salvage {} --dry-run",
    "export {} --format sts",
    "export {} --format markdown",
    "export {} --format html",
    "tail {}",
    "tail {} --json --after 1",
)
#: What shows the times and depths the ledger accepts: the same everywhere, each read
#: through the backend's own decoding.
DISPLAY_COMMANDS = (
    "ls --json",
    "show far",
    "show past",
    "show far --json",
    "show deep",
    "show deep --json",
    "export deep --format html",
    "export far --format html",
    "export past --format sts",
    "messages deep --json",
    "transcript deep --json",
    "stats past --json",
    "verify deep --json",
)
#: Every other output format, shown once (the memory store): they read as those above.
FORMAT_COMMANDS = (
    "ls --limit 2",
    "ls --order created --json",
    "ls --meta team=core --json",
    "search hello --json",
    "search zebra --type user/message",
    "verify --all --json",
    "audit --json",
    "prune --older-than 1d --json",
    "show far --from 3 --limit 4",
    "messages deep",
    "messages far --format openai",
    "messages deep --format anthropic",
    "transcript far",
    "stats deep",
    "stats far --json",
    "repair open --dry-run --json",
)
#: Run as real processes too (the rest runs in this process).
SUBPROCESS_COMMANDS = ("ls",)


def commands(backend: str) -> list[str]:
    per_session = [command.format(id) for id in (*STALE, HELD) for command in SESSION_COMMANDS]
    chosen = [*GLOBAL_COMMANDS, *per_session, *DISPLAY_COMMANDS]
    return [*chosen, *FORMAT_COMMANDS] if backend == "memory" else chosen


async def read_apis(url: str) -> dict[str, Any]:
    """Call every read API of a backend and of a ledger; return what some of them gave."""
    seen: dict[str, Any] = {}
    store = open_store(url)
    try:
        for session_id in IDS:
            seen[f"read_from {session_id}"] = await store.read_from(session_id, 0)
            await store.revision(session_id)
        for session_id in (*STALE, HELD):
            await store.inspect(session_id)
            await store.inspect_session(session_id)
            await store.read_from(session_id, 3)
            await store.cursor(session_id)
            await store.salvage(session_id, dry_run=True)
            seen[f"follow {session_id}"] = [
                event async for event in store.follow(session_id, wait=False)
            ]
            await store.read_acknowledged(session_id, 2)
        seen["follow_all"] = [item async for item in store.follow_all(wait=False)]
        await store.list()
        await store.list_snapshots()
        seen["list_sessions"] = await store.list_sessions()
        page = await store.list_sessions(make_query(limit=2))
        while page.next is not None:
            page = await store.list_sessions(make_query(limit=2, after=page.next))
        for query in (
            make_query(order="created"),
            make_query(title="far", meta={"team": "core"}),
            make_query(since=0, until=2**60),
        ):
            await store.list_sessions(query)
        seen["search"] = await store.search("hello")
        await store.search("hello", session="deep", types=["user/message"])
        await store.audit()
        seen["prune"] = await store.prune(keep_last=0)
        await store.prune(older_than="1d", title="far")
    finally:
        await store.close()
    async with Ledger.open(url) as ledger:
        for session_id in (*STALE, HELD):
            await ledger.inspect(session_id)
        await ledger.list_sessions(limit=2)
        seen["listed by a ledger"] = [info async for info in ledger.list_sessions(limit=2)]
        await ledger.search("hello", limit=3)
        for session_id in (*STALE, HELD):
            [event async for event in ledger.follow(session_id, after=1, wait=False)]
        [item async for item in ledger.follow_all(wait=False)]
        await ledger.prune(older_than="30d")
        await ledger.audit()
    return seen


@dataclasses.dataclass(repr=False)  # what it holds is nested too deep for repr
class Reading:
    """What reading a store every way did: the store before and after, what each command
    printed and what the APIs returned."""

    backend: str
    url: str
    before: Any
    after: Any
    runs: dict[str, Run]
    apis: dict[str, Any]


@pytest.fixture(scope="module", params=BACKENDS)
def reading(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Reading]:
    backend: str = request.param
    top = tmp_path_factory.mktemp(backend)
    database = ""
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
    if backend == "memory":
        url = f"memory:reads-{uuid.uuid4().hex}"
    elif backend == "jsonl":
        url = f"jsonl:{top / 'store'}"
    elif backend == "sqlite":
        database = str(top / "ledger.db")
        url = f"sqlite:{database}"
    else:
        from sessionledger_postgres.testing import drop_schema, with_options

        schema = f"reads_{uuid.uuid4().hex[:12]}"
        url = with_options(request.getfixturevalue("pg_url"), schema=schema)
        cleanup = lambda: asyncio.run(drop_schema(url, schema))  # noqa: E731
    asyncio.run(fill(url))
    where: Any = {
        "memory": lambda: open_store(url).log_store.storage,
        "jsonl": lambda: top / "store",
        "sqlite": lambda: database,
        "postgresql": lambda: url.rpartition("schema=")[2],
    }[backend]()

    def state() -> Any:
        if backend == "memory":
            return memory_state(where)
        if backend == "postgresql":
            return asyncio.run(pg_state(url, where))
        return files_state(top)

    asyncio.run(clear_summaries(backend, url, where))
    try:
        with held(backend, url, database):
            before = state()
            apis = asyncio.run(read_apis(url))
            runs = {command: in_process(url, command.split()) for command in commands(backend)}
            if backend != "memory":
                for command in SUBPROCESS_COMMANDS:
                    runs[f"process: {command}"] = as_subprocess(url, command.split())
                runs["process: view"] = as_viewer(url)
            after = state()
        yield Reading(backend, url, before, after, runs, apis)
    finally:
        cleanup()


# -- the tests ----------------------------------------------------------------------------------


def test_reading_every_way_changes_nothing_in_the_store(reading: Reading) -> None:
    failed = {
        command: run.err.strip().splitlines()[-1:]
        for command, run in reading.runs.items()
        if run.code != 0
    }
    assert not failed, failed  # no command failed, LOCKED above all
    if reading.backend == "postgresql":
        assert reading.after == reading.before
        return
    if reading.backend == "memory":
        assert reading.after == reading.before
        return
    assert sorted(reading.after) == sorted(reading.before), "files were created or removed"
    changed = [name for name in reading.before if reading.after[name] != reading.before[name]]
    assert not changed, f"reading changed {changed}"


def test_a_listing_computes_a_missing_or_stale_summary_and_says_so(reading: Reading) -> None:
    events = {session_id: reading.apis[f"read_from {session_id}"] for session_id in IDS}
    listed = {info.id: info for info in reading.apis["list_sessions"].sessions}
    assert sorted(listed) == sorted(IDS)
    for session_id, info in listed.items():
        assert info.stale is (session_id in STALE), session_id
        assert info.problem is None
        assert info.summary == summarize(events[session_id]), session_id
    rows = {row["id"]: row for row in orjson_page(reading.runs["ls --json"].out)}
    assert {id for id, row in rows.items() if row["stale"]} == set(STALE)
    hint = reading.runs["ls"].out.splitlines()[-1]
    assert hint.startswith("2 sessions listed from their logs: "), hint
    assert hint.endswith(" reindex' stores them"), hint


def orjson_page(text: str) -> list[dict[str, Any]]:
    page = jsoncodec.loads(text.encode())
    assert isinstance(page, dict)
    rows: list[dict[str, Any]] = page["sessions"]
    return rows


def test_every_command_shows_the_times_and_depths_the_ledger_accepts(reading: Reading) -> None:
    runs = reading.runs
    far, past = reading.apis["read_from far"], reading.apis["read_from past"]
    assert far[-1].time == LATEST
    assert past[0].time == EARLIEST
    latest, earliest = f"{LATEST} ms", f"{EARLIEST} ms"
    assert latest in runs["show far"].out
    assert earliest in runs["show past"].out
    assert f"created {LATEST - 12} ms" in runs["show far"].out
    for command in ("ls", "ls --title far --since 2d", "prune --keep-last 0"):
        assert latest in runs[command].out, command
    for events in (far, past):  # the time of each hit: its user message's
        said = next(event.time for event in events if event.type == "user/message")
        assert f"{said} ms" in runs["search hello"].out
    shown = [jsoncodec.loads(line.encode()) for line in runs["show far --json"].out.splitlines()]
    assert [event["time"] for event in shown] == [event.time for event in far]
    assert jsoncodec.loads(runs["stats past --json"].out.encode())["firstTime"] == EARLIEST
    # Nested deeper than Python recurses: every command reads it, JSON gives it back whole.
    expected = jsoncodec.dumps(deep_value())
    stored = [jsoncodec.loads(line.encode()) for line in runs["show deep --json"].out.splitlines()]
    assert jsoncodec.dumps(stored[2]["data"]) == expected
    assert jsoncodec.dumps(stored[1]["data"]["extra"]) == expected
    for command in ("messages deep --json", "transcript deep --json"):
        [message] = jsoncodec.loads(runs[command].out.encode())
        assert jsoncodec.dumps(message["extra"]) == expected, command
    assert "bottom" in runs["show deep"].out
    rows = {row["id"]: row for row in orjson_page(runs["ls --json"].out)}
    assert jsoncodec.dumps(rows["deep"]["meta"]["deep"]) == expected
    [hit] = jsoncodec.loads(runs["search hello --session deep --json"].out.encode())
    assert hit["sessionId"] == "deep"
    verified = jsoncodec.loads(runs["verify deep --json"].out.encode())
    assert verified["ok"] is True
    assert [report["events"] for report in verified["sessions"]] == [4]
    # The exports: a time no date shows, as its ms; a value too deep for the page, named.
    assert latest in runs["export far --format html"].out
    assert "nested too deep to show here" in runs["export deep --format html"].out
    [head, *lines] = [
        jsoncodec.loads(line.encode()) for line in runs["export past --format sts"].out.splitlines()
    ]
    assert head["id"] == "past"
    assert lines[0]["message"]["timestamp"] == next(
        e.time for e in past if e.type == "user/message"
    )


def test_only_reindex_stores_what_a_listing_computed(reading: Reading) -> None:
    """Listing left the summaries missing or stale (it wrote nothing); ``reindex`` stores
    them, and the next listing reads them from the store."""

    async def relist() -> dict[str, bool]:
        async with Ledger.open(reading.url) as ledger:
            before = {info.id: info.stale async for info in ledger.list_sessions()}
            report = await ledger.reindex()
            assert report.reindexed == len(IDS)
            assert not report.unreadable
            after = {info.id: info.stale async for info in ledger.list_sessions()}
        assert {id for id, stale in before.items() if stale} == set(STALE)
        return after

    assert not any(asyncio.run(relist()).values())
    assert "listed from" not in in_process(reading.url, ["ls"]).out


def test_a_value_too_deep_for_repr_is_refused_and_reported_not_a_crash() -> None:
    """A tool call whose ``arguments`` is an object (it must be JSON text) nested deeper
    than ``repr`` goes: appending it is refused with the typed error, and a store holding
    it anyway (written by another writer) is shown, and reported by ``verify``."""
    from sessionledger import Session
    from sessionledger._errors import EventDataError

    call = {"turn": 1, "step": 1, "callId": "c1", "name": "read", "arguments": deep_value()}
    session = Session.create("bad")
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    with pytest.raises(EventDataError, match="got an object of 1 keys"):
        session.append("tool/call", call)

    url = f"memory:deep-call-{uuid.uuid4().hex}"

    async def store_it() -> None:
        store = open_store(url)
        await store.create(session.header)
        stored = [*session.events, {"type": "tool/call", "seq": 2, "time": 5, "data": call}]
        await store.append("bad", stored)
        await store.close()

    asyncio.run(store_it())
    verified = in_process(url, ["verify", "bad", "--json"])
    assert verified.code == 1, verified.err
    [report] = jsoncodec.loads(verified.out.encode())["sessions"]
    assert "arguments must be the raw JSON text" in report["problems"][0]["message"]
    for words in (["show", "bad"], ["messages", "bad"], ["stats", "bad"], ["verify", "--all"]):
        run = in_process(url, words)
        assert run.code in (0, 1), (words, run.err)  # 1: verify's problems
    assert "bottom" in in_process(url, ["show", "bad"]).out


def test_a_listing_bound_the_next_page_could_not_name_is_a_bad_query() -> None:
    """``--since 999999999w`` reaches back before the year 1: the next page's command could
    not name it (it names bounds as ISO times), so it is refused before anything is read."""
    url = f"memory:bounds-{uuid.uuid4().hex}"
    for words in (["ls", "--since", "999999999w"], ["ls", "--until", "0001-01-01T00:00+01:00"]):
        run = in_process(url, words)
        assert run.code == 2, run.err
        assert run.err.startswith("error: BAD_QUERY: "), run.err
    assert in_process(url, ["ls", "--since", "9999w", "--limit", "1"]).code == 0


def test_reading_a_postgresql_schema_that_does_not_exist_creates_nothing(pg_url: str) -> None:
    # The schema is made by the first write; a read before it (every read API and the
    # read-only commands) answers "nothing stored" and leaves the database as it was.
    from sessionledger_postgres.testing import with_options

    schema = f"absent_{uuid.uuid4().hex[:12]}"
    url = with_options(pg_url, schema=schema)

    async def schemas() -> list[str]:
        conn = await pg_connect(url)
        try:
            return [row[0] for row in await conn.fetch("SELECT nspname FROM pg_namespace")]
        finally:
            await conn.close()

    async def read_everything() -> None:
        store = open_store(url)
        try:
            assert await store.list() == []
            assert (await store.list_sessions()).sessions == ()
            assert await store.search("hello") == []
            assert await store.audit() == []
            assert await store.revision("s") is None
            assert (await store.prune(keep_last=0)).sessions == ()
            with pytest.raises(SessionNotFoundError):
                await store.inspect("s")
            with pytest.raises(SessionNotFoundError):
                await store.read_from("s", 0)
        finally:
            await store.close()

    before = asyncio.run(schemas())
    assert schema not in before
    asyncio.run(read_everything())
    for words, code in ((["ls", "--json"], 0), (["search", "hello"], 0), (["show", "s"], 2)):
        run = in_process(url, words)
        assert run.code == code, (words, run.out, run.err)
    assert asyncio.run(schemas()) == before
