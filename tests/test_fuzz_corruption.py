"""Fuzzed corruption: what survives damage is read back exactly, or the read fails typed.

Each case damages a real stored log (bit flips, truncation, garbage/empty/NUL lines,
duplicated, dropped or reordered lines, malformed packed rows, bad header lines; for
SQLite, rows with wrong values, gaps and bad session rows), then runs every read
operation and ``load`` on it. The rules:

- every outcome is a valid view (seqs contiguous from 0, every turn closed, the surface
  rules hold; a damaged type name reads as an unknown type) or one of ``CorruptLogError``,
  ``FormatUnsupportedError``, ``StorageRowError``, ``HeaderError``; never another
  exception, never a hang (a watchdog kills a case that takes longer than a minute);
- a view holds, exactly and at its seq, every event whose stored unit the damage left
  intact: for JSONL the batches before the first damaged byte and after the last one, for
  memory the records, for SQLite the rows the case did not change (docs/durability.md: an
  intact acknowledged batch is never dropped); and a JSONL view never holds an event its log did
  not (checksummed batches: the stored part of a view is a prefix of the original log);
- ``inspect``, ``read_from`` and ``list_snapshots`` never modify storage (JSONL: the whole
  tree hashed before and after; SQLite and memory: the stored rows/records);
- ``load`` returns exactly what ``inspect`` showed (or the same error, writing nothing),
  and a second ``load`` changes nothing; a view holding an unknown type is refused by
  ``load`` (``UNKNOWN_EVENT_TYPE`` at that event's seq), writing nothing;
- truncating a JSONL log anywhere in its last records is never corruption: the view is
  exactly the complete batches plus their crash-repair closers (checked at every byte).

The large case counts run under ``slow``; ``CASES`` counts what actually ran.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import faulthandler
import hashlib
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionledger import SessionEvent, SessionHeader
from sessionledger._errors import (
    CorruptLogError,
    FormatUnsupportedError,
    HeaderError,
    StorageRowError,
)
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._repair import interrupted_turn_closers
from sessionledger.model._session import Session
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.storage._stored import StoredSession
from sessionledger.testing.builders import closed_turn, compact, open_turn_with_pending_call
from sessionledger_jsonl import JsonlPersistence
from sessionledger_sqlite import SqlitePersistence

#: The only errors a damaged log may produce.
TYPED = (CorruptLogError, FormatUnsupportedError, StorageRowError, HeaderError)
#: Cases run per kind, reported in RELIABILITY.md.
CASES: collections.Counter[str] = collections.Counter()
WATCHDOG_SECONDS = 60
DEEP = 3_000  # deeper than orjson parses, shallower than what makes a case slow


def wire(event: SessionEvent | dict[str, Any]) -> bytes:
    return jsoncodec.dumps(event.to_json() if isinstance(event, SessionEvent) else event)


# -- base logs ---------------------------------------------------------------------------


def _base_sessions() -> list[tuple[SessionHeader, list[list[SessionEvent]]]]:
    """Three logs, each as the batches it is appended in (batches decide packed rows)."""
    bases = []
    # 1: two closed turns, a compaction, then an open turn with a recorded call.
    header = SessionHeader(id="alpha", created_at=1_000, cwd="/srv/app", title="fuzz")
    session = Session.create(header=header)
    batches = [closed_turn(session, 1), closed_turn(session, 2)]
    batches.append([compact(session)])
    batches.append(open_turn_with_pending_call(session, 3))
    bases.append((header, batches))
    # 2: ends with a turn/end; an unknown ignorable type and unicode text on the way.
    header = SessionHeader(id="beta ü/..", created_at=2_000, meta={"k": [1, 2.5, None]})
    session = Session.create(header=header)
    first = closed_turn(session, 1, prompt="grüße ✓ 𝄞", answer="ŝtreamed ånswer with émojis 🎉")
    extra = session.append("plugin/note", {"text": "x" * 200}, ignorable=True)
    bases.append((header, [first, [extra, *closed_turn(session, 2)]]))
    # 3: one open turn whose model call was never recorded (TOOL_NOT_STARTED).
    header = SessionHeader(id="gamma", created_at=3_000, cwd="/w")
    session = Session.create(header=header)
    bases.append((header, [open_turn_with_pending_call(session, 1, call_recorded=False)]))
    return bases


BASES = _base_sessions()


@dataclass
class JsonlBase:
    header: SessionHeader
    events: list[SessionEvent]
    relative: str  # the log's path inside the root
    content: bytes
    batches: list[tuple[int, int, int]]  # (first byte, end byte, events before it) each
    records: list[bytes]  # the record lines, commit records left out (what memory holds)
    record_ends: list[int]  # the seq after each record


def _is_commit(line: bytes) -> bool:
    with contextlib.suppress(orjson.JSONDecodeError):
        value = orjson.loads(line)
        return isinstance(value, dict) and list(value) == ["commit"]
    return False


def _jsonl_bases() -> list[JsonlBase]:
    async def build() -> list[JsonlBase]:
        out = []
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            store = JsonlPersistence(root, fsync=False)
            for header, batches in BASES:
                await store.create(header)
                for batch in batches:
                    await store.append(header.id, batch)
                path = Path(store.locate(header))
                content = path.read_bytes()
                events = [event for batch in batches for event in batch]
                spans, records, ends = [], [], []
                start = position = content.index(b"\n") + 1
                seq = 0
                before = 0
                for line in content.split(b"\n")[1:-1]:
                    position += len(line) + 1
                    if _is_commit(line):
                        spans.append((start, position, before))
                        start, before = position, seq
                        continue
                    records.append(line)
                    value = jsoncodec.loads(line)
                    seq += len(value["data"]["dt"]) + 1 if "seq0" in value else 1
                    ends.append(seq)
                assert seq == len(events)
                relative = str(path.relative_to(root))
                out.append(JsonlBase(header, events, relative, content, spans, records, ends))
            await store.close()
        return out

    return asyncio.run(build())


JSONL_BASES = _jsonl_bases()


# -- what a read may return ---------------------------------------------------------------


def check_view(stored: StoredSession, session_id: str) -> None:
    """A valid view: contiguous, balanced, and a session can be built."""
    events = stored.events
    assert stored.header.id == session_id
    assert [event.seq for event in events] == list(range(len(events)))
    assert interrupted_turn_closers(events) == []
    for event in events:
        assert wire(SessionEvent.from_json(jsoncodec.loads(wire(event)))) == wire(event)
    Session.restore(stored.header, events)


async def outcome(operation: Any) -> Any:
    """Run one read with a timeout; return its value or the typed error it raised."""
    try:
        return await asyncio.wait_for(operation, WATCHDOG_SECONDS)
    except TYPED as error:
        return error


def same_outcome(left: Any, right: Any) -> bool:
    if isinstance(left, BaseException) or isinstance(right, BaseException):
        return type(left) is type(right)
    return [wire(e) for e in left.events] == [wire(e) for e in right.events]


@dataclass
class Probe:
    """How one backend's stored state is read back and fingerprinted for a case.

    ``survivors`` maps seq -> stored bytes of each event the damage left intact: a view
    must hold every one of them exactly. ``original`` (JSONL) is the whole undamaged log:
    the stored part of a view must be a prefix of it.
    """

    make: Callable[[], SessionPersistence]
    fingerprint: Callable[[], Any]
    session_id: str
    survivors: dict[int, bytes] = field(default_factory=dict)
    original: list[bytes] | None = None


def check_survivors(probe: Probe, events: Any, *, stored: bool = False) -> None:
    """The view holds every intact event exactly; and (JSONL) the *stored* part of a log
    (``read_from``'s, without closers) holds nothing the log did not."""
    view = [wire(event) for event in events]
    for seq, kept in probe.survivors.items():
        assert seq < len(view), f"an intact event (seq {seq}) is missing from the view"
        assert view[seq] == kept, f"an intact event (seq {seq}) reads back changed"
    if stored and probe.original is not None:
        assert view == probe.original[: len(view)], "the view holds an event never written"


def common_ends(left: bytes, right: bytes) -> tuple[int, int]:
    """The lengths of the longest common prefix and (not overlapping it) suffix."""
    limit = min(len(left), len(right))
    prefix = 0
    while prefix < limit and left[prefix] == right[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and left[-1 - suffix] == right[-1 - suffix]:
        suffix += 1
    return prefix, suffix


def intact_units(
    base: bytes, damaged: bytes, units: list[tuple[int, int, list[SessionEvent]]]
) -> dict[int, bytes]:
    """seq -> bytes of the events of every unit (a byte span of *base*) the damage left
    wholly alone: before its first changed byte or after its last.

    A reader reads lines: bytes put in front of a line with no line break of their own
    join that line, so the line after them is damaged too (the unit it starts is not
    left alone, though its own bytes are unchanged)."""
    prefix, suffix = common_ends(base, damaged)
    tail = len(base) - suffix
    put = damaged[prefix : len(damaged) - suffix]
    if put and not put.endswith(b"\n") and (tail == 0 or base[tail - 1] == ord("\n")):
        tail = base.find(b"\n", tail) + 1 or len(base)
    return {
        event.seq: wire(event)
        for start, end, events in units
        if end <= prefix or start >= tail
        for event in events
    }


async def run_reads(probe: Probe) -> None:
    """Apply the rules of the module docstring to one damaged session."""
    before = probe.fingerprint()
    store = probe.make()
    try:
        inspected = await outcome(store.inspect(probe.session_id))
        suffix = await outcome(store.read_from(probe.session_id, 0))
        listed = await asyncio.wait_for(store.list_snapshots(), WATCHDOG_SECONDS)
        assert all(info.header.id for info in listed)
    finally:
        await store.close()
    assert probe.fingerprint() == before, "a read modified storage"
    if not isinstance(inspected, BaseException):
        check_view(inspected, probe.session_id)
        check_survivors(probe, inspected.events)
    if not isinstance(suffix, BaseException):
        assert [event.seq for event in suffix] == list(range(len(suffix)))
        check_survivors(probe, suffix, stored=True)
        if not isinstance(inspected, BaseException):
            # The view is the stored log plus, in memory, the closers of its open turn.
            stored = [wire(e) for e in suffix]
            closers = [wire(c) for c in interrupted_turn_closers(suffix)]
            assert [wire(e) for e in inspected.events] == stored + closers
    store = probe.make()
    try:
        loaded = await outcome(store.load(probe.session_id))
    finally:
        await store.close()
    if isinstance(loaded, CorruptLogError) and not isinstance(inspected, BaseException):
        # Damage only a write touches (SQLite: a revision counter at its maximum) lets
        # inspect show the log while load refuses to write to it; nothing may change.
        assert probe.fingerprint() == before, "a refused load modified storage"
        CASES["load-refused"] += 1
        return
    if (
        isinstance(loaded, FormatUnsupportedError)
        and loaded.code == "UNKNOWN_EVENT_TYPE"
        and not isinstance(inspected, BaseException)
    ):
        # Damage that turns a type name into an unknown one: reading shows the event as
        # stored, going live refuses it, naming its seq; nothing may change.
        assert loaded.seq is not None
        assert inspected.events[loaded.seq].type not in store.event_types
        assert probe.fingerprint() == before, "a refused load modified storage"
        CASES["unknown-type"] += 1
        return
    assert same_outcome(loaded, inspected)
    if isinstance(loaded, BaseException):
        assert probe.fingerprint() == before, "a failed load modified storage"
        return
    check_survivors(probe, loaded.events)
    settled = probe.fingerprint()
    store = probe.make()
    try:
        again = await outcome(store.load(probe.session_id))
    finally:
        await store.close()
    assert same_outcome(again, loaded)
    assert probe.fingerprint() == settled, "a second load changed storage"


def watched(loop: asyncio.AbstractEventLoop, coroutine: Any) -> None:
    """Run one case under a watchdog: a hang dumps every thread's stack and fails CI."""
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS * 3, exit=True)
    try:
        loop.run_until_complete(coroutine)
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def loop() -> Any:
    """One event loop (and its worker threads) for every example of a test."""
    running = asyncio.new_event_loop()
    try:
        yield running
    finally:
        running.run_until_complete(running.shutdown_default_executor())
        running.close()


# -- mutations of a JSONL file ----------------------------------------------------------

HOSTILE_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    -(2**53),
    2**53,
    2**63,
    "",
    "x",
    "turn/end",
    "text-chunks",
    [],
    [1],
    {},
    {"type": "x"},
    "\u0000",
    "é" * 50,
]
GARBAGE_LINES = [
    b"",
    b" ",
    b"\x00" * 7,
    b"{",
    b"}",
    b"[",
    b"null",
    b"[]",
    b"{}",
    b"42",
    b'"x"',
    b'{"type":"turn/end","seq":0,"time":0,"data":{}}',
    b'{"type":"text-chunks","seq0":0,"time0":0,"data":{}}',
    b"\xff\xfe\xfd",
    b"\xed\xa0\x80",
    b'{"a":' * 40,
    b"[" * 2000,
    b"1e999",
    b"-0",
    b"\r",
    b'{"type":"session","version":1,"id":"alpha","createdAt":1}',
]


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def m_flip_bit(draw: Any, data: bytes) -> bytes:
    if not data:
        return data
    position = draw(st.integers(0, len(data) - 1))
    mutated = bytearray(data)
    mutated[position] ^= 1 << draw(st.integers(0, 7))
    return bytes(mutated)


def m_set_byte(draw: Any, data: bytes) -> bytes:
    if not data:
        return data
    position = draw(st.integers(0, len(data) - 1))
    mutated = bytearray(data)
    mutated[position] = draw(st.sampled_from(b'\x00\n{}[]",:0 \xff'))
    return bytes(mutated)


def m_truncate(draw: Any, data: bytes) -> bytes:
    return data[: draw(st.integers(max(0, len(data) - 600), len(data)))]


def m_nul_run(draw: Any, data: bytes) -> bytes:
    start = draw(st.integers(0, len(data)))
    length = draw(st.integers(1, 64))
    overwrite = draw(st.booleans())
    run = b"\x00" * length
    return data[:start] + run + data[start + (length if overwrite else 0) :]


def m_insert_line(draw: Any, data: bytes) -> bytes:
    lines = _lines(data)
    position = draw(st.integers(0, len(lines)))
    garbage = draw(
        st.one_of(
            st.sampled_from(GARBAGE_LINES),
            st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
        )
    )
    lines.insert(position, garbage)
    return b"\n".join(lines)


def m_duplicate_line(draw: Any, data: bytes) -> bytes:
    lines = _lines(data)
    source = draw(st.integers(0, len(lines) - 1))
    lines.insert(draw(st.integers(0, len(lines))), lines[source])
    return b"\n".join(lines)


def m_drop_line(draw: Any, data: bytes) -> bytes:
    lines = _lines(data)
    del lines[draw(st.integers(0, len(lines) - 1))]
    return b"\n".join(lines)


def m_swap_lines(draw: Any, data: bytes) -> bytes:
    lines = _lines(data)
    first = draw(st.integers(0, len(lines) - 1))
    second = draw(st.integers(0, len(lines) - 1))
    lines[first], lines[second] = lines[second], lines[first]
    return b"\n".join(lines)


def _slots(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) inside a JSON value, breadth first, at most 300."""
    found: list[tuple[Any, Any]] = []
    queue = collections.deque([value])
    while queue and len(found) < 300:
        container = queue.popleft()
        members = container.items() if isinstance(container, dict) else enumerate(container)
        for key, member in members:
            found.append((container, key))
            if isinstance(member, dict | list) and member:
                queue.append(member)
    return found


def _mutate_json(draw: Any, value: Any) -> Any:
    """Change one slot somewhere in a record: a hostile value, a removal, an extra key or
    a value nested deeper than orjson reads."""
    slots = _slots(value) if isinstance(value, dict | list) else []
    if not slots:
        return draw(st.sampled_from(HOSTILE_VALUES))
    container, key = draw(st.sampled_from(slots))
    action = draw(st.sampled_from(["set", "set", "delete", "add", "deep"]))
    if action == "delete":
        del container[key]
    elif action == "add":
        if isinstance(container, dict):
            extra = draw(
                st.sampled_from(["extra", "seq", "seq0", "ignorable", "surfaceOp", "name"])
            )
            container[extra] = draw(st.sampled_from(HOSTILE_VALUES))
        else:
            container.append(draw(st.sampled_from(HOSTILE_VALUES)))
    elif action == "deep":
        container[key] = orjson.Fragment(_deep(DEEP))
    else:
        container[key] = draw(st.sampled_from(HOSTILE_VALUES))
    return value


def m_json_record(draw: Any, data: bytes) -> bytes:
    """Rewrite one record (the header included) with a structural change, as valid JSON."""
    lines = _lines(data)
    candidates = [i for i, line in enumerate(lines) if line.startswith(b"{")]
    if not candidates:
        return data
    # Packed rows and the header are picked more often: their decoders are the strictest.
    special = [i for i in candidates if b'"seq0"' in lines[i][:40] or i == 0]
    pool = special if special and draw(st.booleans()) else candidates
    index = draw(st.sampled_from(pool))
    try:
        value = orjson.loads(lines[index])
    except orjson.JSONDecodeError:
        return data
    lines[index] = orjson.dumps(_mutate_json(draw, value))
    return b"\n".join(lines)


MUTATIONS = [
    m_flip_bit,
    m_set_byte,
    m_truncate,
    m_nul_run,
    m_insert_line,
    m_duplicate_line,
    m_drop_line,
    m_swap_lines,
    m_json_record,
    m_json_record,
]


def memory_content(base: JsonlBase) -> bytes:
    """The base log as the memory backend holds it: its header JSON, then the records."""
    lines = [jsoncodec.dumps(base.header.to_json()), *base.records]
    return b"\n".join(lines) + b"\n"


def jsonl_units(base: JsonlBase) -> list[tuple[int, int, list[SessionEvent]]]:
    """Each batch of a base log as (first byte, end byte, its events); the first batch
    starts at byte 0, as its checksum covers the header line."""
    ends = [before for _, _, before in base.batches[1:]] + [len(base.events)]
    return [
        (0 if index == 0 else start, end, base.events[before:after])
        for index, ((start, end, before), after) in enumerate(zip(base.batches, ends, strict=True))
    ]


def memory_units(base: JsonlBase) -> list[tuple[int, int, list[SessionEvent]]]:
    """Each record of a base log as memory holds it: (first byte, end byte, its events)."""
    units = []
    position = len(jsoncodec.dumps(base.header.to_json())) + 1
    first = 0
    for line, end in zip(base.records, base.record_ends, strict=True):
        units.append((position, position + len(line) + 1, base.events[first:end]))
        position += len(line) + 1
        first = end
    return units


@st.composite
def damaged(draw: Any, memory: bool = False) -> tuple[int, bytes]:
    index = draw(st.integers(0, len(JSONL_BASES) - 1))
    base = JSONL_BASES[index]
    data = memory_content(base) if memory else base.content
    for _ in range(draw(st.integers(1, 3))):
        data = draw(st.sampled_from(MUTATIONS))(draw, data)
    return index, data


def tree_fingerprint(root: Path) -> list[tuple[str, int, str]]:
    return [
        (
            str(path.relative_to(root)),
            path.lstat().st_mode,
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "",
        )
        for path in sorted(root.rglob("*"))
    ]


def run_jsonl_case(
    loop: asyncio.AbstractEventLoop, workspace: Path, index: int, data: bytes
) -> None:
    base = JSONL_BASES[index]
    root = workspace / "case"
    shutil.rmtree(root, ignore_errors=True)
    path = root / base.relative
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    probe = Probe(
        lambda: JsonlPersistence(root, fsync=False),
        lambda: tree_fingerprint(root),
        base.header.id,
        intact_units(base.content, data, jsonl_units(base)),
        [wire(event) for event in base.events],
    )
    watched(loop, run_reads(probe))
    CASES["jsonl"] += 1


def run_memory_case(loop: asyncio.AbstractEventLoop, index: int, data: bytes) -> None:
    base = JSONL_BASES[index]
    store: dict[str, Any] = {}
    seed = MemoryPersistence(store=store)

    async def case() -> None:
        await seed.create(base.header)
        await seed.append(base.header.id, base.events)
        header, _, rest = data.partition(b"\n")
        seed.replace_raw_header(base.header.id, header)
        records = rest.split(b"\n")
        if records and records[-1] == b"":
            records.pop()
        seed.replace_raw_records(base.header.id, records)
        await seed.release(base.header.id)  # the probes' stores load it next

        def fingerprint() -> Any:
            stored = store.get(base.header.id)
            return None if stored is None else (stored.header, list(stored.records))

        survivors = intact_units(memory_content(base), data, memory_units(base))
        await run_reads(
            Probe(lambda: MemoryPersistence(store=store), fingerprint, base.header.id, survivors)
        )

    watched(loop, case())
    CASES["memory"] += 1


FUZZ_SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    "derandomize": False,
}


@settings(max_examples=150, **FUZZ_SETTINGS)
@given(case=damaged())
def test_damaged_jsonl_logs_read_as_valid_views_or_typed_errors(
    case: tuple[int, bytes], loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    run_jsonl_case(loop, tmp_path, *case)


@settings(max_examples=100, **FUZZ_SETTINGS)
@given(case=damaged(memory=True))
def test_damaged_memory_records_read_as_valid_views_or_typed_errors(
    case: tuple[int, bytes], loop: asyncio.AbstractEventLoop
) -> None:
    run_memory_case(loop, *case)


@pytest.mark.slow
@settings(max_examples=5_000, **FUZZ_SETTINGS)
@given(case=damaged())
def test_many_damaged_jsonl_logs(
    case: tuple[int, bytes], loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    run_jsonl_case(loop, tmp_path, *case)


@pytest.mark.parametrize("index", range(len(JSONL_BASES)))
@pytest.mark.parametrize("damage_a_record", [False, True], ids=["break-only", "and-a-record"])
def test_a_commit_record_fused_with_the_next_batch_is_no_torn_tail(
    index: int, damage_a_record: bool, loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    # A case the random search once found: the line break after the first commit record
    # turned into another byte (and a record of that batch damaged). The batches after it
    # are intact and acknowledged, so no read may show a view without them.
    base = JSONL_BASES[index]
    data = base.content
    if damage_a_record:
        data = data.replace(b'"seq":0,', b'"seq":null,', 1)
    after_commit = jsonl_units(base)[0][1] - 1 + len(data) - len(base.content)
    assert data[after_commit : after_commit + 1] == b"\n"
    run_jsonl_case(loop, tmp_path, index, data[:after_commit] + b"\x0b" + data[after_commit + 1 :])


@pytest.mark.parametrize("index", range(len(JSONL_BASES)))
@pytest.mark.parametrize("put", [b"\x00", b"\x00" * 7, b"x", b"{"])
def test_bytes_put_in_front_of_a_batch_damage_its_first_line(
    index: int, put: bytes, loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    # A case the random search once found: NULs inserted right where the last batch
    # begins join its first line, so that batch fails its check: a reader cannot tell it
    # from a torn last write, and the load moves it aside. Any batch before it survives.
    base = JSONL_BASES[index]
    for start, _, _ in base.batches:
        run_jsonl_case(loop, tmp_path, index, base.content[:start] + put + base.content[start:])


@pytest.mark.slow
@settings(max_examples=1_500, **FUZZ_SETTINGS)
@given(case=damaged(memory=True))
def test_many_damaged_memory_logs(case: tuple[int, bytes], loop: asyncio.AbstractEventLoop) -> None:
    run_memory_case(loop, *case)


# -- truncation at every byte of the last records -------------------------------------------


def truncation_offsets(base: JsonlBase, records: int) -> range:
    ends = [index for index, byte in enumerate(base.content) if byte == ord("\n")]
    start = ends[-records - 1] + 1 if len(ends) > records else ends[0] + 1
    return range(start, len(base.content) + 1)


def expected_after_cut(base: JsonlBase, cut: int) -> list[SessionEvent]:
    """The events of the batches a cut at *cut* leaves whole (commit record included)."""
    kept = [unit for unit in jsonl_units(base) if unit[1] <= cut]
    return base.events[: sum(len(events) for *_, events in kept)]


async def check_cut(root: Path, base: JsonlBase, cut: int) -> None:
    shutil.rmtree(root, ignore_errors=True)
    path = root / base.relative
    path.parent.mkdir(parents=True)
    path.write_bytes(base.content[:cut])
    kept = expected_after_cut(base, cut)
    closers = interrupted_turn_closers(kept)
    expected = [*map(wire, kept), *map(wire, closers)]
    before = tree_fingerprint(root)
    store = JsonlPersistence(root, fsync=False)
    try:
        view = await store.inspect(base.header.id)
        assert [wire(e) for e in view.events] == expected
        assert tree_fingerprint(root) == before
        loaded = await store.load(base.header.id)
        assert [wire(e) for e in loaded.events] == expected
    finally:
        await store.close()
    repaired = path.read_bytes()
    whole = max((end for _, end, _ in jsonl_units(base) if end <= cut), default=0)
    assert repaired.startswith(base.content[:whole])
    store = JsonlPersistence(root, fsync=False)
    try:
        again = await store.load(base.header.id)
        assert [wire(e) for e in again.events] == expected
    finally:
        await store.close()
    assert path.read_bytes() == repaired


@pytest.mark.parametrize(
    ("index", "records"),
    [pytest.param(0, 1, id="alpha-last-record"), pytest.param(1, 1, id="beta-last-record")],
)
def test_a_cut_in_the_last_record_keeps_every_complete_one(
    index: int, records: int, loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    base = JSONL_BASES[index]
    for cut in truncation_offsets(base, records):
        watched(loop, check_cut(tmp_path / "cut", base, cut))
        CASES["truncation"] += 1


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(JSONL_BASES)))
def test_a_cut_anywhere_in_the_last_records_keeps_every_complete_one(
    index: int, loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    base = JSONL_BASES[index]
    for cut in truncation_offsets(base, 6):
        watched(loop, check_cut(tmp_path / "cut", base, cut))
        CASES["truncation"] += 1


# -- SQLite: damaged rows -----------------------------------------------------------------

TEXT_PALETTE = [
    "",
    " ",
    "null",
    "[]",
    "{}",
    "[1,2]",
    '{"turn":1}',
    "1e999",
    "-0",
    '"x"',
    "\x00",
    "{",
    '{"turn":1,"step":',
    "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
    _deep(DEEP).decode(),
    '{"a":' * 40,
]
INT_PALETTE = [-1, 0, 1, 5, 2**31, 2**53, -(2**53), 2**63 - 1, -(2**63)]
TYPE_PALETTE = [
    "",
    "x",
    "turn/end",
    "turn/start",
    "assistant/chunk",
    "text-chunks",
    "tool-call-chunks",
    "reasoning-chunks",
    "session",
    "é/ü",
    "user/message",
]
SESSION_COLUMNS = {
    "version": [0, 2, -1, 2**63 - 1],
    "created_at": [-1, 2**53, 2**63 - 1],
    "cwd": ["", "relative/path", "/ok", "\x00"],
    "parent_session": ["", "p"],
    "seed_length": [-1, 2**53, 0],
    "delegation_depth": [-1, 2**53],
    "title": ["", "t" * 300],
    "meta": [*TEXT_PALETTE[:8], '{"k":[1,2]}'],
    "incarnation": ["", "x"],
    "revision": [-1, 0, 2**63 - 1],
    "next_seq": [0, 1, 10_000, -1],
}


def _mutate_text(draw: Any, text: str) -> str:
    choice = draw(st.sampled_from(["palette", "flip", "cut", "json"]))
    if choice == "palette" or not text:
        return draw(st.sampled_from(TEXT_PALETTE))
    if choice == "flip":
        position = draw(st.integers(0, len(text) - 1))
        return (
            text[:position]
            + chr((ord(text[position]) ^ (1 << draw(st.integers(0, 6)))) or 1)
            + text[position + 1 :]
        )
    if choice == "cut":
        return text[: draw(st.integers(0, len(text)))]
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return orjson.dumps(_mutate_json(draw, value)).decode()


def s_event_column(draw: Any, db: sqlite3.Connection, sid: str, seqs: list[int]) -> None:
    seq = draw(st.sampled_from(seqs))
    column = draw(
        st.sampled_from(
            ["data", "data", "type", "time", "seq", "ignorable", "surface_op", "source_event_seqs"]
        )
    )
    if column in ("data", "surface_op", "source_event_seqs"):
        (current,) = db.execute(
            f"SELECT {column} FROM events WHERE session_id = ? AND seq = ?", (sid, seq)
        ).fetchone()
        value: Any = (
            _mutate_text(draw, current or "")
            if current or column == "data"
            else (draw(st.sampled_from([None, *TEXT_PALETTE])))
        )
    elif column == "type":
        value = draw(st.sampled_from(TYPE_PALETTE))
    elif column == "ignorable":
        value = draw(st.sampled_from([None, 0, 1, 2, -1]))
    else:
        value = draw(st.sampled_from([*INT_PALETTE, seq + 1, seq + 2, seq - 1]))
    db.execute(
        f"UPDATE events SET {column} = ? WHERE session_id = ? AND seq = ?", (value, sid, seq)
    )


def s_delete_row(draw: Any, db: sqlite3.Connection, sid: str, seqs: list[int]) -> None:
    seq = draw(st.sampled_from([seqs[-1], *seqs]))
    db.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (sid, seq))


def s_insert_row(draw: Any, db: sqlite3.Connection, sid: str, seqs: list[int]) -> None:
    seq = draw(st.sampled_from([seqs[-1] + 1, seqs[-1] + 2, seqs[-1] + 1000]))
    row = (
        sid,
        seq,
        draw(st.sampled_from(TYPE_PALETTE)),
        draw(st.sampled_from(INT_PALETTE)),
        draw(
            st.sampled_from([*TEXT_PALETTE, '{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}'])
        ),
        draw(st.sampled_from([None, 0, 1])),
    )
    # The schema's triggers accept a row only where the log ends, so a foreign row lands
    # there first and is then moved where the draw puts it, with the session's counters
    # put back: the database ends up holding a row its writer never accounted for.
    ((end, revision),) = db.execute(
        "SELECT next_seq, revision FROM sessions WHERE id = ?", (sid,)
    ).fetchall()
    try:
        db.execute(
            "INSERT INTO events (session_id, seq, type, time, data, ignorable) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (sid, end, *row[2:]),
        )
        db.execute("UPDATE events SET seq = ? WHERE session_id = ? AND seq = ?", (seq, sid, end))
    except sqlite3.IntegrityError:
        return  # an earlier mutation already took that place: nothing to add
    finally:
        db.execute(
            "UPDATE sessions SET next_seq = ?, revision = ? WHERE id = ?", (end, revision, sid)
        )


def s_session_column(draw: Any, db: sqlite3.Connection, sid: str, seqs: list[int]) -> None:
    column = draw(st.sampled_from(sorted(SESSION_COLUMNS)))
    value = draw(st.sampled_from([None, *SESSION_COLUMNS[column]]))
    db.execute(f"UPDATE sessions SET {column} = ? WHERE id = ?", (value, sid))


SQL_MUTATIONS = [
    s_event_column,
    s_event_column,
    s_event_column,
    s_delete_row,
    s_insert_row,
    s_session_column,
]


@dataclass
class SqliteFuzz:
    """One database with the base logs, one loop and one store for every case."""

    path: Path
    loop: asyncio.AbstractEventLoop
    db: sqlite3.Connection
    next_case: Any
    store: SqlitePersistence

    def make_case(self, base: int) -> str:
        source = BASES[base][0].id
        case = f"case-{next(self.next_case)}"
        columns = (
            "version, created_at, cwd, parent_session, seed_length, delegation_depth, "
            "title, meta, incarnation, revision, next_seq"
        )
        self.db.execute(
            f"INSERT INTO sessions (id, {columns}) SELECT ?, {columns} FROM sessions WHERE id = ?",
            (case, source),
        )
        # The rows go in from the start of the log (the schema's triggers accept a row only
        # where the log ends, and move the end on), then the copied counters are restored.
        self.db.execute("UPDATE sessions SET next_seq = 0 WHERE id = ?", (case,))
        self.db.execute(
            "INSERT INTO events SELECT ?, seq, type, time, data, source_event_seqs, surface_op, "
            "ignorable, members FROM events WHERE session_id = ? ORDER BY seq",
            (case, source),
        )
        self.db.execute(
            "UPDATE sessions SET (next_seq, revision) = "
            "(SELECT next_seq, revision FROM sessions WHERE id = ?) WHERE id = ?",
            (source, case),
        )
        return case

    def rows(self, sid: str) -> list[Any]:
        return [
            *self.db.execute("SELECT * FROM sessions WHERE id = ?", (sid,)),
            *self.db.execute("SELECT * FROM events WHERE session_id = ? ORDER BY seq", (sid,)),
        ]


@pytest.fixture
def sqlite_fuzz(tmp_path: Path) -> Any:
    path = tmp_path / "fuzz.db"
    loop = asyncio.new_event_loop()

    async def seed() -> None:
        store = SqlitePersistence(path)
        for header, batches in BASES:
            await store.create(header)
            for batch in batches:
                await store.append(header.id, batch)
        await store.close()

    loop.run_until_complete(seed())
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA ignore_check_constraints = ON")  # lets a case store ignorable = 2
    import itertools

    store = SqlitePersistence(path)
    try:
        yield SqliteFuzz(path, loop, db, itertools.count(), store)
    finally:
        loop.run_until_complete(store.close())
        db.close()
        loop.close()


@st.composite
def sql_damage(draw: Any) -> tuple[int, list[Any]]:
    return draw(st.integers(0, len(BASES) - 1)), [
        draw(st.sampled_from(SQL_MUTATIONS)) for _ in range(draw(st.integers(1, 3)))
    ]


def run_sqlite_case(fuzz: SqliteFuzz, draw: Any, base: int, mutations: list[Any]) -> None:
    sid = fuzz.make_case(base)
    for mutate in mutations:
        seqs = [
            row[0]
            for row in fuzz.db.execute(
                "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (sid,)
            )
        ]
        if not seqs:
            break
        # STRICT, the primary key or int64 may refuse the damage: then it did not happen.
        with contextlib.suppress(sqlite3.Error, OverflowError):
            mutate(draw, fuzz.db, sid, seqs)
    store = fuzz.store

    class Shared:
        """The one store, whose close() is deferred to the end of the test."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        async def close(self) -> None:
            return None

    probe = Probe(Shared, lambda: fuzz.rows(sid), sid)  # type: ignore[arg-type]
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS * 3, exit=True)
    try:
        fuzz.loop.run_until_complete(run_reads(probe))
    finally:
        faulthandler.cancel_dump_traceback_later()
        fuzz.db.execute("DELETE FROM events WHERE session_id = ?", (sid,))
        fuzz.db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    CASES["sqlite"] += 1


@settings(max_examples=100, **FUZZ_SETTINGS)
@given(case=sql_damage(), data=st.data())
def test_damaged_sqlite_rows_read_as_valid_views_or_typed_errors(
    case: tuple[int, list[Any]], data: st.DataObject, sqlite_fuzz: SqliteFuzz
) -> None:
    run_sqlite_case(sqlite_fuzz, data.draw, *case)


@pytest.mark.slow
@settings(max_examples=2_000, **FUZZ_SETTINGS)
@given(case=sql_damage(), data=st.data())
def test_many_damaged_sqlite_rows(
    case: tuple[int, list[Any]], data: st.DataObject, sqlite_fuzz: SqliteFuzz
) -> None:
    run_sqlite_case(sqlite_fuzz, data.draw, *case)


@pytest.fixture(scope="module", autouse=True)
def report_case_counts() -> Iterator[None]:
    """Print how many cases ran (visible with ``-s``; the figures in RELIABILITY.md)."""
    yield
    total = sum(count for kind, count in CASES.items() if kind != "load-refused")
    print(f"\nfuzzed corruption cases: {dict(CASES)} total {total}")


# -- regressions: what the fuzzer found, pinned down ------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "memory", "sqlite"])
async def test_read_from_refuses_a_log_that_lost_its_first_record(
    kind: str, tmp_path: Path
) -> None:
    # Found: read_from took the first stored seq as the start, so a log missing seq 0
    # read as a clean suffix while inspect reported the damage.
    header, batches = BASES[0]
    events = [event for batch in batches for event in batch]
    if kind == "jsonl":
        store: SessionPersistence = JsonlPersistence(tmp_path, fsync=False)
    elif kind == "memory":
        store = MemoryPersistence(store={})
    else:
        store = SqlitePersistence(tmp_path / "l.db")
    try:
        await store.create(header)
        # Two batches: the damaged first one is followed by an intact one (JSONL would
        # read damage in its last batch as a torn tail).
        await store.append(header.id, events[:-1])
        await store.append(header.id, events[-1:])
        if isinstance(store, JsonlPersistence):
            path = Path(store.locate(header))
            lines = path.read_bytes().split(b"\n")
            path.write_bytes(b"\n".join([lines[0], *lines[2:]]))
        elif isinstance(store, MemoryPersistence):
            store.replace_raw_records(header.id, store.raw_records(header.id)[1:])
        else:
            db = sqlite3.connect(tmp_path / "l.db")
            db.execute("DELETE FROM events WHERE session_id = ? AND seq = 0", (header.id,))
            db.commit()
            db.close()
        for read in (store.inspect(header.id), store.read_from(header.id, 0)):
            with pytest.raises(CorruptLogError):
                await read
    finally:
        await store.close()


async def test_a_memory_header_that_does_not_parse_is_a_typed_error() -> None:
    # Found: the memory backend let the JSON parser's ValueError escape.
    store = MemoryPersistence(store={})
    header, batches = BASES[2]
    await store.create(header)
    await store.append(header.id, batches[0])
    store.replace_raw_header(header.id, b'{"version":1,"id":')
    with pytest.raises(CorruptLogError):
        await store.inspect(header.id)
    assert await store.list() == []


async def test_a_sqlite_next_seq_counter_that_disagrees_with_the_rows_is_repaired(
    tmp_path: Path,
) -> None:
    # Found: with the last row gone (or the counter damaged), inspect showed the log but
    # every load failed forever with "another writer appended first".
    path = tmp_path / "l.db"
    header, batches = BASES[0]
    events = [event for batch in batches for event in batch]
    store = SqlitePersistence(path)
    await store.create(header)
    await store.append(header.id, events)
    await store.close()
    db = sqlite3.connect(path)
    db.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (header.id, len(events) - 1))
    db.commit()
    db.close()
    store = SqlitePersistence(path)
    try:
        view = await store.inspect(header.id)
        loaded = await store.load(header.id)
        assert [wire(e) for e in loaded.events] == [wire(e) for e in view.events]
        kept = events[:-1]
        assert [wire(e) for e in loaded.events[: len(kept)]] == [wire(e) for e in kept]
        more = {"type": "turn/start", "seq": len(loaded.events), "time": 9, "data": {"turn": 4}}
        await store.append(header.id, [more])  # the counter is right again
    finally:
        await store.close()
