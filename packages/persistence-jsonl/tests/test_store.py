"""Format-specific behaviour of ``JsonlPersistence`` (docs/formats.md), beyond the shared kit."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import re
import resource
import select
import signal
import stat
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger import (
    ConfigError,
    CorruptLogError,
    EventTypeRegistry,
    Ledger,
    Session,
    SessionEvent,
    SessionExistsError,
    SessionHeader,
    SessionLockedError,
)
from sessionledger.runtime._opening import open_store
from sessionledger.storage._logstore import Batch
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger_jsonl import JsonlPersistence, plugin
from sessionledger_jsonl.paths import encode_session_id

CORE = EventTypeRegistry.with_core()


def make_store(root: Path, **options: Any) -> JsonlPersistence:
    return JsonlPersistence(root, event_types=CORE, **options)


def ticking(start: int = 2000, step: int = 5) -> Callable[[], int]:
    state = [start - step]

    def clock() -> int:
        state[0] += step
        return state[0]

    return clock


def header(session_id: str, cwd: str | None = "/srv/app") -> SessionHeader:
    return SessionHeader(id=session_id, created_at=1000, cwd=cwd)


def turns(session_id: str, count: int = 1, *, open_call: bool = False) -> list[SessionEvent]:
    session = Session.create(session_id, clock=ticking())
    for turn in range(1, count + 1):
        closed_turn(session, turn)
    if open_call:
        open_turn_with_pending_call(session, count + 1)
    return list(session.events)


async def store_log(
    store: JsonlPersistence, session_id: str, events: list[SessionEvent], cwd: str | None = None
) -> Path:
    await store.create(header(session_id, cwd or "/srv/app"))
    await store.append(session_id, events)
    return Path(store.locate(header(session_id, cwd or "/srv/app")))


def same(left: Any, right: Any) -> bool:
    return [event.to_json() for event in left] == [event.to_json() for event in right]


def files_under(path: Path) -> Iterator[Path]:
    for directory, _, names in os.walk(path):
        for name in names:
            yield Path(directory, name)


# -- the on-disk format ---------------------------------------------------------------------

EXPECTED_RECORDS = b"""\
{"type":"turn/start","seq":0,"time":2000,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2005,"data":{"turn":1,"step":1}}
{"type":"text-chunks","seq0":2,"time0":2010,"data":{"turn":1,"step":1,"index":0,"dt":[5,5],\
"texts":["Hel","lo ","w\xc3\xb6"]}}
{"type":"assistant/chunk","seq":5,"time":2025,"data":{"turn":1,"step":1,"chunk":\
{"type":"reasoning-delta","index":1,"text":"hm"}}}
{"type":"assistant/chunk","seq":6,"time":2030,"data":{"turn":1,"step":1,"chunk":\
{"type":"reasoning-delta","index":1,"text":"m"}}}
{"type":"assistant/chunk","seq":7,"time":2035,"data":{"turn":1,"step":1,"chunk":\
{"type":"text-delta","index":0,"text":"rld"}}}
{"type":"step/end","seq":8,"time":2040,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":9,"time":2045,"data":{"turn":1,"reason":{"kind":"completed"}}}
"""


def small_session() -> list[SessionEvent]:
    session = Session.create(header=header("small"), clock=ticking())
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    for kind, index, text in (
        ("text-delta", 0, "Hel"),
        ("text-delta", 0, "lo "),
        ("text-delta", 0, "wö"),
        ("reasoning-delta", 1, "hm"),
        ("reasoning-delta", 1, "m"),
        ("text-delta", 0, "rld"),
    ):
        chunk = {"type": kind, "index": index, "text": text}
        session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return list(session.events)


async def test_a_small_session_has_these_exact_bytes_on_disk(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    events = small_session()
    path = await store_log(store, "small", events)
    assert path == tmp_path / "--srv-app--" / "small" / "session.jsonl"
    data = path.read_bytes()
    first, records = data.split(b"\n", 1)
    assert re.fullmatch(
        rb'\{"type":"session","version":1,"id":"small","createdAt":1000,"cwd":"/srv/app",'
        rb'"delegationDepth":0,"incarnation":"[0-9a-f]{16}","storageFormat":2\}',
        first,
    )
    assert records.startswith(EXPECTED_RECORDS)
    # The batch ends with its commit record: the seqs it spans, its record count and the
    # CRC-32 of its bytes, the header line's included (the first batch carries it).
    commit = records[len(EXPECTED_RECORDS) :]
    crc = zlib.crc32(data[: len(data) - len(commit)])
    assert commit == b'{"commit":{"first":0,"next":10,"records":8,"crc32":%d}}\n' % crc
    assert same(events, (await make_store(tmp_path).inspect("small")).events)
    await store.close()


async def test_a_reformatted_header_line_leaves_the_first_batch_intact(tmp_path: Path) -> None:
    # The first batch's checksum covers the header line; a space before it changes those
    # bytes but not the header, so the acknowledged batch must not read as a torn tail.
    events = small_session()
    path = await store_log(make_store(tmp_path), "small", events)
    path.write_bytes(b" " + path.read_bytes())
    damaged = path.read_bytes()
    assert same(events, (await make_store(tmp_path).inspect("small")).events)
    store = make_store(tmp_path)
    loaded = await store.load("small")
    assert loaded.torn_tail is None
    assert same(events, loaded.events[: len(events)])
    assert path.read_bytes().startswith(damaged)  # nothing cut, no quarantine
    assert not list(path.parent.glob("*quarantine*"))
    await store.close()


async def test_commit_records_are_found_however_their_key_is_spelled(tmp_path: Path) -> None:
    # A reader parses only the lines that can be commit records (every line that does not
    # begin as a record does, '{"type":'); one it missed would make an acknowledged batch
    # read as incomplete, and a load would cut it. Events that merely mention the key, or
    # hold an escaped character, stay events.
    session = Session.create(header=header("spelled"), clock=ticking())
    session.append("x/note", {"commit": {"first": 0, "next": 1}}, ignorable=True)
    session.append("x/note", {"text": "a\x01b", "commit": 1}, ignorable=True)
    session.append("x/note", {"text": "commit"}, ignorable=True)
    events = list(session.events)
    writer = make_store(tmp_path)
    path = await store_log(writer, "spelled", events)
    await writer.close()
    respelled = path.read_bytes().replace(b'\n{"commit":', b'\n{ "\\u0063ommit" :')
    assert respelled.count(b"\\u0063ommit") == 1
    path.write_bytes(respelled)
    assert same(events, (await make_store(tmp_path).inspect("spelled")).events)
    store = make_store(tmp_path)
    loaded = await store.load("spelled")
    assert loaded.torn_tail is None
    assert same(events, loaded.events)
    assert path.read_bytes() == respelled  # nothing cut, no quarantine
    assert not list(path.parent.glob("*quarantine*"))
    await store.close()


async def test_each_batch_is_packed_on_its_own(tmp_path: Path) -> None:
    events = small_session()
    store = make_store(tmp_path)
    await store.create(header("split"))
    await store.append("split", events[:3])  # the three-delta run is cut after its first
    await store.append("split", events[3:])
    lines = store.locate(header("split"))
    values = [orjson.loads(line) for line in Path(lines).read_bytes().splitlines()[1:]]
    types = [value.get("type", "(commit)") for value in values]
    assert "text-chunks" not in types
    assert types.count("assistant/chunk") == 6
    assert types.count("(commit)") == 2  # one commit record per batch
    assert same(events, (await store.load("split")).events)
    await store.close()


async def test_files_and_directories_are_private_whatever_the_umask(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "root"
    store = make_store(root)
    previous = os.umask(0)
    try:
        path = await store_log(store, "private", turns("private"))
    finally:
        os.umask(previous)
    for directory in (tmp_path / "deep", root, path.parent.parent, path.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((root / ".locks").stat().st_mode) == 0o600  # the store's writer locks
    assert sorted(entry.name for entry in path.parent.iterdir()) == ["session.jsonl"]
    await store.close()


async def test_a_publication_cut_short_by_a_crash_leaves_nothing_behind(tmp_path: Path) -> None:
    # A crash between writing the temp file and linking it leaves an orphan temp file
    # and no log: the id is free, and the next publication removes the orphan.
    directory = tmp_path / "--srv-app--" / "orphan"
    directory.mkdir(parents=True)
    (directory / "session.jsonl.0123456789ab.tmp").write_bytes(b'{"type":"session"}\n')
    store = make_store(tmp_path)
    assert await store.list() == []
    events = turns("orphan")
    path = await store_log(store, "orphan", events)
    assert sorted(entry.name for entry in path.parent.iterdir()) == ["session.jsonl"]
    assert same(events, (await store.load("orphan")).events)
    await store.close()


async def test_a_session_without_cwd_lives_under_no_cwd(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    await store.create(SessionHeader(id="nowhere", created_at=1))
    await store.append("nowhere", turns("nowhere"))
    assert (tmp_path / "_no-cwd" / "nowhere" / "session.jsonl").is_file()
    assert store.locate(SessionHeader(id="nowhere", created_at=1)) == str(
        tmp_path / "_no-cwd" / "nowhere" / "session.jsonl"
    )
    await store.close()


# -- torn tails and corruption --------------------------------------------------------------


async def test_a_torn_fragment_is_ignored_by_inspect_and_cut_by_load(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    events = turns("torn", 2)
    path = await store_log(store, "torn", events)
    committed = path.read_bytes()
    with path.open("ab") as file:
        file.write(b'{"type":"turn/start","seq":')
    damaged = path.read_bytes()
    view = await store.inspect("torn")
    assert same(events, view.events)
    assert path.read_bytes() == damaged
    with pytest.raises(SessionLockedError):  # the writer still holds the session
        await make_store(tmp_path).load("torn")
    await store.close()
    loaded = await make_store(tmp_path).load("torn")
    assert same(events, loaded.events)
    assert path.read_bytes() == committed


async def test_a_torn_open_turn_keeps_its_prefix_and_gets_closers(tmp_path: Path) -> None:
    events = turns("open", 1, open_call=True)
    store = make_store(tmp_path)
    path = await store_log(store, "open", events)
    committed = path.read_bytes()
    with path.open("ab") as file:
        file.write(b'{"type":"tool/result","seq":99,"da')
    await store.close()
    loaded = await make_store(tmp_path).load("open")
    assert same(events, loaded.events[: len(events)])
    closers = [event.type for event in loaded.events[len(events) :]]
    assert closers == ["tool/result", "step/end", "turn/end"]
    repaired = path.read_bytes()
    assert repaired.startswith(committed)
    assert repaired.count(b"\n") == committed.count(b"\n") + 4  # 3 closers, 1 commit record
    assert repaired.endswith(b"\n")
    # The torn bytes were moved aside, not destroyed.
    (moved,) = path.parent.glob("session.jsonl.quarantine-*")
    assert moved.read_bytes() == b'{"type":"tool/result","seq":99,"da'
    assert stat.S_IMODE(moved.stat().st_mode) == 0o600


async def test_damage_before_the_last_intact_batch_raises_and_changes_nothing(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path)
    events = turns("bad", 2)
    split = next(e.seq for e in events if e.type == "turn/end") + 1
    path = await store_log(store, "bad", events[:split])
    await store.append("bad", events[split:])  # a second batch, intact
    lines = path.read_bytes().split(b"\n")
    lines[4] = b'{"type": broken'
    path.write_bytes(b"\n".join(lines))
    damaged = path.read_bytes()
    fresh = make_store(tmp_path)
    await store.release("bad")  # so that a second store may try to make it live
    for read in (fresh.inspect, fresh.load, store.load):
        with pytest.raises(CorruptLogError) as raised:
            await read("bad")
        assert raised.value.path == str(path)
        assert "batch 1" in str(raised.value)
        assert raised.value.line == 2  # where the damaged batch starts
    assert path.read_bytes() == damaged
    await store.close()
    await fresh.close()


@pytest.mark.parametrize("damage_a_record", [False, True], ids=["break-only", "and-a-record"])
async def test_a_lost_line_break_after_a_commit_record_is_corruption_not_a_torn_tail(
    tmp_path: Path, damage_a_record: bool
) -> None:
    # The line break after batch 1's commit record turns into another byte, fusing that
    # record with batch 2's first line: no commit record closes batch 1 any more, and batch
    # 2's no longer matches. A crash cannot do this (it tears the last write only), and
    # batch 2 was acknowledged: the reads must refuse the log, not cut both batches away.
    store = make_store(tmp_path)
    events = turns("fused", 2)
    split = next(e.seq for e in events if e.type == "turn/end") + 1
    path = await store_log(store, "fused", events[:split])
    await store.append("fused", events[split:])
    await store.close()
    lines = path.read_bytes().split(b"\n")
    first_commit = next(i for i, line in enumerate(lines) if b'"commit"' in line)
    if damage_a_record:
        lines[1] = lines[1].replace(b'"seq":0,', b'"seq":null,')
    fused = b"\x0b".join(lines[first_commit : first_commit + 2])
    path.write_bytes(b"\n".join([*lines[:first_commit], fused, *lines[first_commit + 2 :]]))
    damaged = path.read_bytes()
    fresh = make_store(tmp_path)
    for read in (fresh.inspect, fresh.load):
        with pytest.raises(CorruptLogError, match="not a torn last write") as raised:
            await read("fused")
        assert raised.value.path == str(path)
        assert raised.value.seq == 0  # the committed region ends before seq 0
    assert path.read_bytes() == damaged
    assert not list(path.parent.glob("session.jsonl.quarantine-*"))
    await fresh.close()


@pytest.mark.parametrize(
    "first_line",
    [b"", b"not json", b'{"type":"turn/start","seq":0}', b"[1,2]", b'{"type":"session"'],
)
async def test_an_unreadable_header_line_is_corruption_at_line_1(
    tmp_path: Path, first_line: bytes
) -> None:
    store = make_store(tmp_path)
    path = await store_log(store, "head", turns("head"))
    rest = path.read_bytes().split(b"\n", 1)[1]
    path.write_bytes(first_line + b"\n" + rest)
    with pytest.raises(CorruptLogError) as raised:
        await make_store(tmp_path).inspect("head")
    assert (raised.value.path, raised.value.line) == (str(path), 1)
    # one unreadable log does not make the store unlistable
    assert await make_store(tmp_path).list() == []
    await store.close()


async def test_a_header_that_names_another_session_is_refused(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path_a = await store_log(store, "identity-a", turns("identity-a"))
    path_b = await store_log(store, "identity-b", turns("identity-b"))
    header_b = path_b.read_bytes().split(b"\n", 1)[0]
    path_a.write_bytes(header_b + b"\n" + path_a.read_bytes().split(b"\n", 1)[1])
    before = path_a.read_bytes(), path_b.read_bytes()
    await store.release("identity-a")
    with pytest.raises(CorruptLogError):
        await make_store(tmp_path).load("identity-a")
    assert (path_a.read_bytes(), path_b.read_bytes()) == before
    await store.close()


async def test_a_log_whose_cwd_points_elsewhere_is_refused(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = await store_log(store, "moved", turns("moved"))
    first, rest = path.read_bytes().split(b"\n", 1)
    path.write_bytes(first.replace(b'"/srv/app"', b'"/elsewhere"') + b"\n" + rest)
    await store.release("moved")
    with pytest.raises(CorruptLogError) as raised:
        await make_store(tmp_path).load("moved")
    assert raised.value.line == 1
    await store.close()


# -- ids, directories and lookup ------------------------------------------------------------

HOSTILE_IDS = [
    "../x",
    "../../etc/pwn",
    "/etc/passwd",
    "..",
    ".",
    "a\x00b",
    "~",
    "C:\\Windows\\x",
    "café ☕ 🙂",
    "x" * 255,
]


async def test_hostile_ids_stay_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = make_store(root)
    logs = {session_id: turns(session_id) for session_id in HOSTILE_IDS}
    for session_id, events in logs.items():
        await store_log(store, session_id, events)
    outside = [path for path in files_under(tmp_path) if root not in path.parents]
    assert outside == []
    project = root / "--srv-app--"
    assert sorted(entry.name for entry in project.iterdir()) == sorted(
        encode_session_id(session_id) for session_id in HOSTILE_IDS
    )
    assert (project / "..~002Fx").is_dir()
    assert (project / "~002Fetc~002Fpasswd").is_dir()
    assert (project / "~002E~002E").is_dir()
    assert (project / "a~0000b").is_dir()
    await store.close()
    reader = make_store(root)
    assert sorted(h.id for h in await reader.list()) == sorted(HOSTILE_IDS)
    for session_id, events in logs.items():
        assert same(events, (await reader.load(session_id)).events)


async def test_ids_too_long_for_a_plain_name_get_a_hashed_one(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = make_store(root)
    logs = {session_id: turns("long") for session_id in ("x" * 256, "x" * 257, "é" * 60)}
    for session_id, events in logs.items():
        await store_log(store, session_id, events)
    await store.close()
    names = [path.parent.name for path in root.glob("*/*/session.jsonl")]
    assert len(names) == 3
    assert all(len(name) <= 255 and "~~" in name for name in names)
    assert [path for path in files_under(tmp_path) if root not in path.parents] == []
    reader = make_store(root)
    assert sorted(h.id for h in await reader.list()) == sorted(logs)
    for session_id, events in logs.items():
        assert same(events, (await reader.load(session_id)).events)


async def test_a_session_is_found_by_id_whatever_its_cwd(tmp_path: Path) -> None:
    writer = make_store(tmp_path)
    for session_id, cwd in (("a", "/proj/a"), ("b", "/proj-b"), ("c", None)):
        await writer.create(SessionHeader(id=session_id, created_at=1, cwd=cwd))
        await writer.append(session_id, turns(session_id))
    await writer.close()
    reader = make_store(tmp_path)
    for session_id in ("c", "b", "a"):
        assert len((await reader.load(session_id)).events) == len(turns(session_id))
    assert sorted(header.id for header in await reader.list()) == ["a", "b", "c"]


async def test_one_id_in_two_project_directories_is_corruption(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = await store_log(store, "twin", turns("twin"), cwd="/a")
    await store.close()
    copy = tmp_path / "--b--" / "twin"
    copy.mkdir(parents=True)
    (copy / "session.jsonl").write_bytes(path.read_bytes())
    with pytest.raises(CorruptLogError, match="2 project directories"):
        await make_store(tmp_path).load("twin")


async def test_listing_reads_headers_only_and_skips_what_is_not_a_session(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = await store_log(store, "real", turns("real", 2))
    lines = path.read_bytes().split(b"\n")
    lines[3] = b"garbage in the committed region"
    path.write_bytes(b"\n".join(lines))
    junk = tmp_path / "--srv-app--"
    (junk / "empty").mkdir()
    (junk / "empty" / "session.jsonl").write_bytes(b"")
    (junk / "no-newline").mkdir()
    (junk / "no-newline" / "session.jsonl").write_bytes(b'{"type":"session"')
    (junk / "wrong-id").mkdir()
    (junk / "wrong-id" / "session.jsonl").write_bytes(path.read_bytes())
    (junk / "no-log").mkdir()
    (junk / "stray.jsonl").write_bytes(b"{}\n")
    (tmp_path / "stray-file").write_bytes(b"x")
    big = SessionHeader(id="big", created_at=2, cwd="/srv/app", title="t" * 20_000)
    await store.create(big)
    await store.append("big", turns("big"))
    listed = await make_store(tmp_path).list()
    assert [h.id for h in listed] == ["big", "real"]
    assert listed[0] == big
    await store.close()


async def test_delete_removes_the_session_directory_only(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = await store_log(store, "gone", turns("gone"))
    await store_log(store, "kept", turns("kept"))
    await store.delete("gone")
    assert not path.parent.exists()
    assert path.parent.parent.is_dir()
    assert [h.id for h in await store.list()] == ["kept"]
    await store.close()


async def test_delete_and_recreate_gives_a_new_revision(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    events = turns("again")
    await store_log(store, "again", events)
    (before,) = await store.list_snapshots()
    await store.delete("again")
    await store_log(store, "again", events)
    (after,) = await store.list_snapshots()
    assert after.revision != before.revision
    await store.close()


# -- locking and stale writers -------------------------------------------------------------


async def test_a_second_writer_fails_fast_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    events = turns("shared", 2)
    split = next(i for i, event in enumerate(events) if event.type == "turn/end") + 1
    first = make_store(tmp_path)
    path = await store_log(first, "shared", events[:split])
    second = make_store(tmp_path)
    assert same(events[:split], (await second.inspect("shared")).events)  # reading never locks
    with pytest.raises(SessionLockedError):
        await second.load("shared")  # going live does
    with pytest.raises(SessionLockedError) as raised:
        await second.append("shared", events[split:])
    assert raised.value.code == "LOCKED"
    assert raised.value.session_id == "shared"
    with pytest.raises(SessionLockedError):
        await second.delete("shared")
    assert same(events[:split], (await second.inspect("shared")).events)
    await first.close()
    await second.append("shared", events[split:])
    assert same(events, (await make_store(tmp_path).inspect("shared")).events)
    assert path.read_bytes().count(b'"turn/end"') == 2
    await second.close()


async def test_a_write_that_does_not_continue_the_log_writes_nothing(tmp_path: Path) -> None:
    # Ownership keeps a second writer out (docs/durability.md); the last line of defence is the
    # write itself, which appends nothing unless the batch continues the committed log.
    events = turns("stale", 3)
    ends = [i + 1 for i, event in enumerate(events) if event.type == "turn/end"]
    winner = make_store(tmp_path)
    path = await store_log(winner, "stale", events[: ends[0]])
    await winner.append("stale", events[ends[0] : ends[1]])
    await winner.close()
    written = path.read_bytes()
    stale = make_store(tmp_path)
    # (the very batch the winner wrote would count as an already-landed retry)
    late = [
        {"type": "x/note", "seq": seq, "time": 1, "data": {"stale": True}}
        for seq in range(ends[0], ends[1])
    ]
    batch = Batch(header("stale"), late, first_seq=ends[0], end_seq=ends[1])
    assert await stale.log_store.write_batch(batch) is False
    assert path.read_bytes() == written
    await stale.load("stale")
    await stale.append("stale", events[ends[1] :])
    assert same(events, (await stale.load("stale")).events)
    await stale.close()


async def test_publishing_never_overwrites_a_log_another_store_published(tmp_path: Path) -> None:
    one, two = make_store(tmp_path), make_store(tmp_path)
    await one.create(header("race"))
    await two.create(header("race"))
    await one.append("race", turns("race"))
    written = Path(one.locate(header("race"))).read_bytes()
    with pytest.raises(SessionLockedError):  # one holds what it wrote
        await two.append("race", turns("race"))
    await one.release("race")
    with pytest.raises(SessionExistsError):
        await two.append("race", turns("race"))
    assert Path(one.locate(header("race"))).read_bytes() == written
    await one.close()
    await two.close()


# -- write failures and cancellation --------------------------------------------------------


async def test_a_failed_append_is_cut_back_and_a_retry_duplicates_nothing(tmp_path: Path) -> None:
    events = turns("full", 2)
    split = next(i for i, event in enumerate(events) if event.type == "turn/end") + 1
    store = make_store(tmp_path)
    path = await store_log(store, "full", events[:split])
    committed = path.read_bytes()
    # A real short write: the file-size limit lets part of the batch in, then EFBIG.
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(committed) + 40, limits[1]))
    try:
        with pytest.raises(OSError, match="too large"):
            await store.append("full", events[split:])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert path.read_bytes() == committed
    await store.append("full", events[split:])
    assert same(events, (await make_store(tmp_path).inspect("full")).events)
    await store.close()


async def test_a_cancelled_append_can_be_retried_without_duplicates(tmp_path: Path) -> None:
    # Cancel at successive points: before the write, while its thread runs, after it.
    # Whatever landed, retrying the same batch must neither fail nor duplicate a seq.
    events = turns("cancel", 2)
    split = next(i for i, event in enumerate(events) if event.type == "turn/end") + 1
    store = make_store(tmp_path)
    for pause in range(12):
        session_id = f"cancel-{pause}"
        await store.create(header(session_id))
        await store.append(session_id, events[:split])
        task = asyncio.create_task(store.append(session_id, events[split:]))
        for _ in range(pause):
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            await store.append(session_id, events[split:])
        assert same(events, (await store.inspect(session_id)).events)
    await store.close()


# -- construction and the plugin ------------------------------------------------------------


def test_a_root_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ConfigError):
        make_store(tmp_path / "file")
    with pytest.raises(ConfigError):
        JsonlPersistence("")


async def test_a_project_path_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "--srv-app--").write_bytes(b"")
    store = make_store(tmp_path)
    await store.create(header("blocked"))
    with pytest.raises(ConfigError):
        await store.append("blocked", turns("blocked"))
    await store.close()


def test_the_jsonl_scheme_resolves_a_relative_directory_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("jsonl:sessions", plugins=[plugin], load_entrypoints=False)
    assert isinstance(store, JsonlPersistence)
    monkeypatch.chdir("/")
    assert store.root == str(tmp_path / "sessions")
    assert store.locate(header("x")).startswith(str(tmp_path / "sessions") + os.sep)


def test_the_jsonl_scheme_needs_a_directory() -> None:
    with pytest.raises(ConfigError, match="directory"):
        open_store("jsonl:", plugins=[plugin], load_entrypoints=False)


def test_the_package_registers_its_plugin_as_an_entry_point() -> None:
    (entry,) = [
        entry
        for entry in importlib.metadata.entry_points(group="sessionledger")
        if entry.value == "sessionledger_jsonl.plugin"
    ]
    assert entry.load() is plugin
    assert plugin.ledger_backends() == {"jsonl": plugin.open_jsonl_store}


# -- a real crash ---------------------------------------------------------------------------

CHILD = Path(__file__).with_name("sigkill_child.py")
SOURCE = Path(__file__).resolve().parents[1] / "src"


def start_child(root: Path, session_id: str) -> tuple[subprocess.Popen[str], int]:
    """Start the child and wait (at most a minute) for its ``flushed <seq>`` line."""
    env = dict(os.environ, SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE), env.get("PYTHONPATH")]))
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(root), session_id],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], 60)
    line = child.stdout.readline() if ready else ""
    if not line.startswith("flushed "):
        child.kill()
        child.wait()
        pytest.fail(f"the child did not report its flush (got {line!r})")
    return child, int(line.split()[1])


async def test_a_sigkilled_writer_is_resumed_with_closers_exactly_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    child, call_seq = start_child(root, "killed")
    try:
        path = Path(make_store(root).locate(header("killed")))
        flushed = path.read_bytes()
        # While the child lives it holds the session: a resume must not repair it.
        async with Ledger(persistence=make_store(root), load_entrypoints=False) as ledger:
            with pytest.raises(SessionLockedError):
                await ledger.resume("killed")
        assert path.read_bytes() == flushed
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL

    async with Ledger(persistence=make_store(root), load_entrypoints=False) as ledger:
        session = await ledger.resume("killed")
        events = list(session.events)
    assert path.read_bytes().startswith(flushed)
    assert events[call_seq].type == "tool/call"
    result, step_end, turn_end = events[call_seq + 1 : call_seq + 4]
    assert result.type == "tool/result"
    assert result.data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert result.source_event_seqs == (call_seq,)
    assert result.data["message"]["content"][0]["toolCallId"] == "call-1"
    assert (step_end.type, step_end.data) == ("step/end", {"turn": 1, "step": 1})
    assert turn_end.type == "turn/end"
    assert turn_end.data == {"turn": 1, "reason": {"kind": "interrupted"}}
    assert all(event.type == "session/end-seed" for event in events[call_seq + 4 :])
    repaired = path.read_bytes()

    async with Ledger(persistence=make_store(root), load_entrypoints=False) as ledger:
        again = await ledger.resume("killed")
    assert same(events, again.events)
    assert path.read_bytes() == repaired


async def test_release_frees_the_writer_lock_for_another_store(tmp_path: Path) -> None:
    events = turns("handover", 2)
    ends = [i + 1 for i, event in enumerate(events) if event.type == "turn/end"]
    first = make_store(tmp_path)
    await store_log(first, "handover", events[: ends[0]])
    second = make_store(tmp_path)
    with pytest.raises(SessionLockedError):
        await second.append("handover", events[ends[0] :])
    await first.release("handover")
    await second.append("handover", events[ends[0] :])
    assert same(events, (await second.load("handover")).events)
    await first.close()
    await second.close()
