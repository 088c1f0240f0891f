"""Hostile input: ids, payloads and stored files chosen to hurt.

- Session ids with separators, ``..``, NUL, control characters, unicode of every plane
  and thousands of characters never make the JSONL store create anything outside its
  root: each id is one directory directly under a project directory, found again by id.
- Values nested 100,000 deep and 50 MB strings are appended, stored, loaded, resumed,
  forked and retried without ``RecursionError``; a load's peak memory (measured in a
  fresh process) stays a small multiple of the payload.
- Stored damage nested too deep for ``repr`` is a typed error, never a ``RecursionError``.
- Files are ``0600`` and directories ``0700`` whatever the umask; SQLite runs with
  ``trusted_schema=OFF`` and refuses a database carrying extra schema objects (triggers,
  views) before running anything from it; no source module unpickles or evaluates, and a
  load of code-shaped payloads calls neither.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import hashlib
import marshal
import os
import pickle
import sqlite3
import stat
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionledger_sqlite.schema
from sessionledger import Ledger, SessionHeader
from sessionledger._errors import (
    ConfigError,
    CorruptLogError,
    FormatUnsupportedError,
    HeaderError,
    StorageRowError,
)
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.storage._persistence import SessionPersistence
from sessionledger_jsonl import JsonlPersistence
from sessionledger_jsonl.paths import MAX_NAME_BYTES
from sessionledger_sqlite import SqlitePersistence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# -- session ids that try to escape ---------------------------------------------------------

PIECES = [
    "/",
    "\\",
    "..",
    ".",
    "\x00",
    "~",
    ":",
    "%2e",
    "\n",
    "\r",
    "\t",
    "*",
    "?",
    "|",
    "<",
    ">",
    '"',
    "'",
    " ",
    "-",
    "_",
    "/..",
    "../",
    "..\\",
    "//",
    "~0000",
    "~~",
    "$HOME",
    "\u202e",
    "\u0301",
    "é",
    "ß",
    "İ",
    "日本",
    "𝄞",
    "🎉",
    "\ufeff",
    "\uffff",
    "\x7f",
    "CON",
    "NUL",
    "a" * 300,
    "/etc/passwd",
    "C:\\Windows",
    "\\\\server\\share",
]


@st.composite
def hostile_ids(draw: Any) -> str:
    parts = draw(
        st.lists(
            st.one_of(st.sampled_from(PIECES), st.text(min_size=1, max_size=12)),
            min_size=1,
            max_size=8,
        )
    )
    text = "".join(parts)
    if draw(st.integers(0, 20)) == 0:
        text = text * draw(st.integers(10, 400))  # thousands of characters
    return text


class Tree:
    """What a test directory holds: every path under it, as relative strings."""

    def __init__(self, top: Path) -> None:
        self.top = top

    def paths(self) -> set[str]:
        return {str(path.relative_to(self.top)) for path in self.top.rglob("*")}


async def store_one(root: Path, session_id: str) -> str | None:
    """Create and append one event for *session_id*; return the log's path (None when
    the id is refused with a typed error)."""
    store = JsonlPersistence(root, fsync=False)
    try:
        try:
            header = SessionHeader(id=session_id, created_at=1, cwd="/srv/../../etc")
        except HeaderError:
            return None  # e.g. a lone surrogate: no JSON file can hold it
        try:
            await store.create(header)
            await store.append(
                session_id, [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}]
            )
        except ConfigError:
            return None
        path = store.locate(header)
        events = (await store.inspect(session_id)).events
        assert [event.type for event in events] == ["turn/start", "turn/end"]
        await store.delete(session_id)
        return path
    finally:
        await store.close()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop (and its worker threads) for every example of a test."""
    running = asyncio.new_event_loop()
    try:
        yield running
    finally:
        running.run_until_complete(running.shutdown_default_executor())
        running.close()


def check_ids(loop: asyncio.AbstractEventLoop, tmp_path: Path, session_id: str) -> None:
    root = tmp_path / "inside" / "root"
    outside = Tree(tmp_path)
    before = outside.paths()
    path = loop.run_until_complete(store_one(root, session_id))
    created = outside.paths() - before
    inside = str(Path("inside") / "root")
    assert all(
        name == inside or name.startswith(inside + os.sep) or name == "inside" for name in created
    ), created
    if path is None:
        return
    relative = Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
    assert len(relative.parts) == 3  # project / encoded id / session.jsonl
    _project, name, log = relative.parts
    assert log == "session.jsonl"
    assert name not in (".", "..")
    assert "\x00" not in name
    assert len(name.encode()) <= MAX_NAME_BYTES


ID_SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}


@settings(max_examples=300, **ID_SETTINGS)
@given(session_id=hostile_ids())
def test_hostile_ids_never_leave_the_jsonl_root(
    session_id: str, loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    check_ids(loop, tmp_path, session_id)


@pytest.mark.slow
@settings(max_examples=10_000, **ID_SETTINGS)
@given(session_id=hostile_ids())
def test_ten_thousand_hostile_ids_never_leave_the_jsonl_root(
    session_id: str, loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    check_ids(loop, tmp_path, session_id)


def test_ids_that_differ_get_different_directories(tmp_path: Path) -> None:
    ids = ["a/b", "a~002Fb", "a\\b", "..", "~002E~002E", ".", "a" * 300, "a" * 301, "\x00", ""]

    async def run() -> set[str]:
        store = JsonlPersistence(tmp_path / "root", fsync=False)
        places = set()
        for session_id in ids[:-1]:
            header = SessionHeader(id=session_id, created_at=1)
            await store.create(header)
            await store.append(
                session_id, [{"type": "x/y", "seq": 0, "time": 1, "data": {}, "ignorable": True}]
            )
            places.add(store.locate(header))
        with pytest.raises(HeaderError):
            SessionHeader(id=ids[-1], created_at=1)
        for session_id in ids[:-1]:
            assert (await store.inspect(session_id)).header.id == session_id
        await store.close()
        return places

    assert len(asyncio.run(run())) == len(ids) - 1


# -- deep and huge payloads -----------------------------------------------------------------

DEPTH = 100_000


def deep_value(depth: int = DEPTH) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value] if depth % 2 else {"k": value}
    return value


def backends(tmp_path: Path) -> dict[str, SessionPersistence]:
    return {
        "jsonl": JsonlPersistence(tmp_path / "jsonl", fsync=False),
        "sqlite": SqlitePersistence(tmp_path / "l.db"),
        "memory": MemoryPersistence(store={}),
    }


@pytest.mark.parametrize(
    "kind",
    [
        "jsonl",
        pytest.param("sqlite", marks=pytest.mark.slow),
        pytest.param("memory", marks=pytest.mark.slow),
    ],
)
async def test_values_nested_a_hundred_thousand_deep_go_everywhere(
    kind: str, tmp_path: Path
) -> None:
    store = backends(tmp_path)[kind]
    nested = {"tree": deep_value(), "list": deep_value(DEPTH + 1)}
    async with Ledger(persistence=store) as ledger:
        session = ledger.create("deep")
        session.append("turn/start", {"turn": 1})
        session.append("plugin/deep", nested, ignorable=True)
        await ledger.flush(session)
        copy = await ledger.inspect("deep")  # of the live session: its log + end-seed
        assert jsoncodec.dumps(copy.events[1].data) == jsoncodec.dumps(nested)
    expected = jsoncodec.dumps(nested)
    async with Ledger(persistence=type(store)(**_same(store))) as ledger:
        view = await ledger.inspect("deep")
        resumed = await ledger.resume("deep")  # repair closes the open turn
        assert jsoncodec.dumps(resumed.events[1].data) == expected
        assert resumed.events[-2].type == "turn/end"
        assert [m["role"] for m in view.derive_messages()] == []
        child = await ledger.fork("deep", boundary=len(resumed.events) - 1)
        assert jsoncodec.dumps(child.events[1].data) == expected
        backend = ledger.persistence
        assert backend is not None
        suffix = await backend.read_from("deep", 1)
        assert jsoncodec.dumps(suffix[0].data) == expected
        assert "deep" in [info.header.id for info in await backend.list_snapshots()]
        await ledger.delete("deep")


def _same(store: SessionPersistence) -> dict[str, Any]:
    """Constructor arguments for a second backend object on the same storage."""
    if isinstance(store, JsonlPersistence):
        return {"root": store.root, "fsync": False}
    if isinstance(store, SqlitePersistence):
        return {"path": store.path}
    assert isinstance(store, MemoryPersistence)
    return {"store": store.store}


async def test_a_retried_deep_batch_that_already_landed_counts_as_written() -> None:
    shared: dict[str, Any] = {}
    first, second = MemoryPersistence(store=shared), MemoryPersistence(store=shared)
    header = SessionHeader(id="twice", created_at=1)
    await first.create(header)
    await second.create(header)
    batch = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        # 5,000 levels: far past what == can recurse through, cheap to build.
        {
            "type": "x/deep",
            "seq": 1,
            "time": 1,
            "data": {"d": deep_value(5_000)},
            "ignorable": True,
        },
    ]
    await first.append("twice", batch)
    await first.release("twice")  # so that the second store may write it
    await second.append("twice", batch)  # the same batch: already stored, nothing to do
    assert len(await first.read_from("twice", 0)) == 2


def measure_load(url: str, kind: str) -> int:
    env = dict(os.environ, SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD="1")
    for mode in ("write", "load"):
        done = subprocess.run(
            [sys.executable, str(HERE / "hostile_child.py"), mode, url, kind],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    fields = done.stdout.split()
    assert fields[0] == "LOADED"
    assert int(fields[1]) >= 3
    return int(fields[2])


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_loading_a_hundred_thousand_levels_needs_bounded_memory(
    backend: str, tmp_path: Path
) -> None:
    url = f"jsonl:{tmp_path / 'j'}" if backend == "jsonl" else f"sqlite:{tmp_path / 'l.db'}"
    assert measure_load(url, "deep") < 160 * 2**20


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_loading_a_fifty_megabyte_string_needs_a_few_times_its_size(
    backend: str, tmp_path: Path
) -> None:
    url = f"jsonl:{tmp_path / 'j'}" if backend == "jsonl" else f"sqlite:{tmp_path / 'l.db'}"
    assert measure_load(url, "huge") < 6 * 50_000_000


# -- damage too deep for repr ---------------------------------------------------------------

DEEP_TEXT = "[" * 100_000 + "]" * 100_000
HOSTILE_RECORDS = {
    "deep-type": '{"type":%s,"seq":1,"time":1,"data":{}}',
    "deep-seq": '{"type":"x/y","seq":%s,"time":1,"data":{}}',
    "deep-time": '{"type":"x/y","seq":1,"time":%s,"data":{}}',
    "deep-ignorable": '{"type":"x/y","seq":1,"time":1,"data":{},"ignorable":%s}',
    "deep-surface-op": '{"type":"user/message","seq":1,"time":1,"data":{},"surfaceOp":%s}',
    "deep-sources": '{"type":"user/message","seq":1,"time":1,"data":{},"sourceEventSeqs":[%s]}',
    "deep-row-id": '{"type":"tool-call-chunks","seq0":1,"time0":1,"data":{"turn":1,"step":1,'
    '"index":0,"dt":[0,0],"id":%s,"args":["a","b","c"]}}',
    "deep-row-text": '{"type":"text-chunks","seq0":1,"time0":1,"data":{"turn":1,"step":1,'
    '"index":0,"dt":[0,0],"texts":["a",%s,"c"]}}',
    "deep-row-gap": '{"type":"text-chunks","seq0":1,"time0":1,"data":{"turn":1,"step":1,'
    '"index":0,"dt":[0,%s],"texts":["a","b","c"]}}',
}
HOSTILE_HEADER_FIELDS = [
    "version",
    "id",
    "createdAt",
    "cwd",
    "title",
    "parentSession",
    "seedLength",
    "delegationDepth",
    "meta",
    "incarnation",
    "storageFormat",
]
TYPED = (CorruptLogError, FormatUnsupportedError, StorageRowError, HeaderError)


async def jsonl_with(tmp_path: Path, lines: list[bytes], header: bytes | None = None) -> Path:
    root = tmp_path / "root"
    store = JsonlPersistence(root, fsync=False)
    await store.create(SessionHeader(id="h", created_at=1))
    await store.append("h", [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}])
    await store.close()
    (path,) = root.glob("*/*/session.jsonl")
    first, _, rest = path.read_bytes().partition(b"\n")
    path.write_bytes((header or first) + b"\n" + rest + b"".join(line + b"\n" for line in lines))
    return root


@pytest.mark.parametrize("name", sorted(HOSTILE_RECORDS))
@pytest.mark.parametrize("closed", [False, True], ids=["torn-tail", "committed"])
async def test_records_too_deep_for_repr_are_damage_not_a_crash(
    name: str, closed: bool, tmp_path: Path
) -> None:
    bad = (HOSTILE_RECORDS[name] % DEEP_TEXT).encode()
    end = b'{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}'
    if closed:
        # A whole batch, checksum and all: the record was written that way, not torn.
        body = bad + b"\n" + end + b"\n"
        commit = {"commit": {"first": 1, "next": 3, "records": 2, "crc32": zlib.crc32(body)}}
        root = await jsonl_with(tmp_path, [bad, end, orjson.dumps(commit)])
    else:  # a last batch without its commit record: a torn tail
        root = await jsonl_with(tmp_path, [bad])
    store = JsonlPersistence(root, fsync=False)
    try:
        if closed:
            with pytest.raises(CorruptLogError):
                await store.inspect("h")
        else:
            assert [e.type for e in (await store.inspect("h")).events] == ["turn/start", "turn/end"]
    finally:
        await store.close()


@pytest.mark.parametrize("field", ["first", "next", "records", "crc32"])
async def test_a_commit_record_field_too_deep_for_repr_is_damage_not_a_crash(
    field: str, tmp_path: Path
) -> None:
    fields = {"first": 1, "next": 2, "records": 1, "crc32": 0, field: "@@"}
    commit = orjson.dumps({"commit": fields}).replace(b'"@@"', DEEP_TEXT.encode())
    end = b'{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}'
    root = await jsonl_with(tmp_path, [end, commit])
    store = JsonlPersistence(root, fsync=False)
    try:
        view = await store.inspect("h")  # the damaged last batch is a torn tail
        assert [event.type for event in view.events] == ["turn/start", "turn/end"]
    finally:
        await store.close()


@pytest.mark.parametrize("field", HOSTILE_HEADER_FIELDS)
async def test_a_header_field_too_deep_for_repr_is_damage_not_a_crash(
    field: str, tmp_path: Path
) -> None:
    header = orjson.loads(
        orjson.dumps(
            {"type": "session", "version": 1, "id": "h", "createdAt": 1, "delegationDepth": 0}
        )
    )
    header[field] = "@@"
    text = orjson.dumps(header).replace(b'"@@"', DEEP_TEXT.encode())
    root = await jsonl_with(tmp_path, [], header=text)
    store = JsonlPersistence(root, fsync=False)
    try:
        with pytest.raises(TYPED):
            await store.inspect("h")
        assert await store.list() == []  # skipped, with a warning
    finally:
        await store.close()


# -- permissions ----------------------------------------------------------------------------


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def modes(top: Path) -> dict[Path, int]:
    return {p: stat.S_IMODE(p.lstat().st_mode) for p in top.rglob("*")}


@pytest.mark.usefixtures("open_umask")
async def test_everything_the_stores_create_is_private_whatever_the_umask(tmp_path: Path) -> None:
    jsonl_root = tmp_path / "a" / "b" / "jsonl"
    db = tmp_path / "c" / "d" / "ledger.db"
    for store in (JsonlPersistence(jsonl_root), SqlitePersistence(db)):
        async with Ledger(persistence=store) as ledger:
            session = ledger.create("private", cwd="/srv/app")
            session.append("turn/start", {"turn": 1})
            await ledger.flush(session)
            other = ledger.create("gone")
            other.append("turn/start", {"turn": 1})
            await ledger.flush(other)
            await ledger.delete("gone")
            if isinstance(store, SqlitePersistence):
                sidecars = {p.name for p in db.parent.iterdir()}
                assert {"ledger.db-wal", "ledger.db-shm"} <= sidecars
                wal_modes = modes(db.parent)
        async with Ledger(persistence=type(store)(**_same_durable(store))) as ledger:
            await ledger.resume("private")  # a repair write (closers)
    for path, mode in {**modes(tmp_path / "a" / "b"), **wal_modes}.items():
        expected = 0o700 if path.is_dir() else 0o600
        assert mode == expected, (path, oct(mode))
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    for directory in (db.parent, db.parent.parent, jsonl_root.parent, jsonl_root.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def _same_durable(store: SessionPersistence) -> dict[str, Any]:
    if isinstance(store, JsonlPersistence):
        return {"root": store.root}
    assert isinstance(store, SqlitePersistence)
    return {"path": store.path}


# -- symbolic links inside a JSONL store ----------------------------------------------------


def tree_state(top: Path) -> dict[str, bytes | None]:
    """Every path under *top* (links not followed) with its bytes (None: a directory)."""
    found: dict[str, bytes | None] = {}
    for path in sorted(top.rglob("*")):
        if path.is_symlink():
            found[str(path.relative_to(top))] = b"-> " + os.readlink(path).encode()
        elif path.is_dir():
            found[str(path.relative_to(top))] = None
        else:
            found[str(path.relative_to(top))] = path.read_bytes()
    return found


async def _stored_victim(root: Path) -> None:
    async with Ledger(persistence=JsonlPersistence(root), load_entrypoints=False) as ledger:
        session = ledger.create("victim", cwd="/srv/app")
        session.append("turn/start", {"turn": 1})


@pytest.mark.parametrize("where", ["project", "session", "log", "lock file"])
async def test_a_symlink_inside_a_jsonl_store_is_never_followed(tmp_path: Path, where: str) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    await _stored_victim(root)
    project = root / "--srv-app--"
    planted = {
        "project": project,
        "session": project / "victim",
        "log": project / "victim" / "session.jsonl",
        "lock file": root / ".locks",
    }[where]
    planted.rename(outside / planted.name)  # what it held now lives outside the root
    planted.symlink_to(outside / planted.name)
    before = tree_state(outside)
    store = JsonlPersistence(root)
    attempts: list[Any] = [
        store.load("victim"),
        store.inspect("victim"),
        store.read_from("victim", 0),
        store.delete("victim"),
        store.salvage("victim"),
    ]
    outcomes = []
    refusals: list[str] = []
    for attempt in attempts:
        try:
            await attempt
            outcomes.append("ok")
        except ConfigError as error:
            refusals.append(str(error))
            outcomes.append("refused")
        except LookupError:  # SessionNotFoundError: the link hid the session's directory
            outcomes.append("not found")
    for refusal in refusals:  # each names the link
        assert str(planted) in refusal
        assert "symbolic link" in refusal
    writer = Ledger(persistence=JsonlPersistence(root), load_entrypoints=False)
    session = writer.create("newcomer", cwd="/srv/app")
    session.append("turn/start", {"turn": 1})
    if where in ("project", "lock file"):  # the newcomer's own path goes through the link
        with pytest.raises(ConfigError, match="symbolic link"):
            await writer.flush(session)
    else:  # another session of the store is not hurt by the link
        await writer.flush(session)
    with contextlib.suppress(ConfigError):  # refused too where the link stands in its way
        await writer.delete("newcomer")
    await writer.close()
    listed = [info.header.id for info in await store.list_snapshots()]
    await store.close()
    assert "victim" not in listed or where == "lock file"
    assert tree_state(outside) == before  # nothing outside the root read-written or removed
    if where != "lock file":
        assert "ok" not in outcomes[:4], outcomes  # every operation refused the link
    assert [p for p in tmp_path.iterdir() if p.name not in ("root", "outside")] == []


# -- SQLite runs nothing from the database --------------------------------------------------


async def test_sqlite_connections_run_with_trusted_schema_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[Any] = []
    original = sessionledger_sqlite.schema.open_database

    async def open_database(*args: Any, **kwargs: Any) -> Any:
        connection = await original(*args, **kwargs)
        seen.append(list(await connection.execute_fetchall("PRAGMA trusted_schema")))
        return connection

    async def open_reader(*args: Any, **kwargs: Any) -> Any:
        connection = await original_reader(*args, **kwargs)
        if connection is not None:
            seen.append(list(await connection.execute_fetchall("PRAGMA trusted_schema")))
        return connection

    original_reader = sessionledger_sqlite.schema.open_reader
    monkeypatch.setattr(sessionledger_sqlite.schema, "open_database", open_database)
    monkeypatch.setattr(sessionledger_sqlite.schema, "open_reader", open_reader)
    store = SqlitePersistence(tmp_path / "l.db")
    try:
        await store.create(SessionHeader(id="s", created_at=1))
        await store.append(
            "s", [{"type": "x/n", "seq": 0, "time": 1, "data": {}, "ignorable": True}]
        )
    finally:
        await store.close()
    reader = SqlitePersistence(tmp_path / "l.db")  # a new store reads read-only
    try:
        assert [header.id for header in await reader.list()] == ["s"]
    finally:
        await reader.close()
    assert seen == [[(0,)], [(0,)]]  # the writing connection, then the reading one


@pytest.mark.parametrize(
    "extra",
    [
        "CREATE TRIGGER evil AFTER INSERT ON events BEGIN SELECT load_extension('x'); END",
        "CREATE VIEW evil AS SELECT load_extension('x')",
        "CREATE TABLE evil (x INTEGER DEFAULT (random()))",
        "CREATE INDEX evil ON events (abs(time))",
    ],
)
async def test_a_database_with_extra_schema_objects_is_refused_untouched(
    extra: str, tmp_path: Path
) -> None:
    path = tmp_path / "l.db"
    store = SqlitePersistence(path)
    await store.create(SessionHeader(id="s", created_at=1))
    await store.append("s", [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}])
    await store.close()
    db = sqlite3.connect(path)
    db.execute(extra)
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    store = SqlitePersistence(path)
    try:
        with pytest.raises(FormatUnsupportedError) as refused:
            await store.inspect("s")
        assert refused.value.code == "FOREIGN_STORE"
    finally:
        await store.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


# -- nothing is unpickled or evaluated -------------------------------------------------------

FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "yaml", "jsonpickle"}
#: Builtins that run code, and attributes that do (``ast.literal_eval`` parses only
#: literals but has no place here either; SQLite extensions run native code).
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_ATTRIBUTES = {
    "literal_eval",
    "load_extension",
    "enable_load_extension",
    "import_module",
    "resolve_name",
}
#: (file, call) pairs allowed with a reason, never on names from stored data: the CLI
#: imports its own command modules from its command table, and the plugins the user
#: names with ``--plugin``; the package imports its own modules from its export table.
ALLOWED = {
    ("cli/app.py", "import_module"),
    ("cli/plugins.py", "resolve_name"),
    ("sessionledger/__init__.py", "import_module"),
}


def test_no_library_module_unpickles_or_evaluates() -> None:
    offenders = []
    sources = [p for p in REPO.glob("packages/*/src/*/**/*.py") if "postgres" not in str(p)]
    assert sources
    for path in sources:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [alias.name for alias in node.names]
                if isinstance(node, ast.ImportFrom) and node.module:
                    names.append(node.module)
                offenders += [
                    f"{path}: import {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES
                ]
            elif isinstance(node, ast.Call):
                func = node.func
                where = "/".join(path.parts[-2:])
                if isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS:
                    offenders.append(f"{path}:{node.lineno}: {func.id}()")
                elif (
                    isinstance(func, ast.Attribute)
                    and func.attr in FORBIDDEN_ATTRIBUTES
                    and (where, func.attr) not in ALLOWED
                ):
                    offenders.append(f"{path}:{node.lineno}: {func.attr}()")
    assert offenders == []


CODE_SHAPED = [
    "__import__('os').system('touch PWNED')",
    "eval(compile('1','x','exec'))",
    pickle.dumps({"x": 1}).decode("latin-1"),
    marshal.dumps((1, 2)).decode("latin-1"),
    "!!python/object/apply:os.system ['touch PWNED']",
    "{{7*7}}",
]


async def test_loading_code_shaped_payloads_runs_none_of_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for store in (
        JsonlPersistence(tmp_path / "j", fsync=False),
        SqlitePersistence(tmp_path / "l.db"),
    ):
        async with Ledger(persistence=store) as ledger:
            session = ledger.create("payloads")
            session.append("turn/start", {"turn": 1})
            for index, text in enumerate(CODE_SHAPED):
                session.append("plugin/text", {"text": text, str(index): text}, ignorable=True)
            await ledger.flush(session)
        # Warm every lazy import first, then forbid the dangerous entry points.
        warm = type(store)(**_same(store))
        try:
            await warm.inspect("payloads")
        finally:
            await warm.close()

        def forbidden(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the read path tried to unpickle or evaluate")

        with monkeypatch.context() as patch:
            for module, name in [
                (pickle, "loads"),
                (pickle, "load"),
                (marshal, "loads"),
                (builtins, "eval"),
                (builtins, "exec"),
                (builtins, "compile"),
            ]:
                patch.setattr(module, name, forbidden)
            async with Ledger(persistence=type(store)(**_same(store))) as ledger:
                resumed = await ledger.resume("payloads")
                texts = [e.data["text"] for e in resumed.events if e.type == "plugin/text"]
        assert texts == CODE_SHAPED
    assert not list(tmp_path.rglob("PWNED"))
    assert not Path("PWNED").exists()
