"""Power loss on the JSONL store: what an acknowledgement promised survives every crash state.

The store makes every file-system call through ``FileSystem``; ``Recorder`` performs each
call and writes down what it changed (by inode: mkdir, create, write, truncate, fsync,
link, unlink, rmdir). A model replays that trace, and after every call it builds the
states a power loss could leave (the ALICE / CrashMonkey approach, with no kernel
module):

- **durable**: only what was fsynced (a directory's entries by fsyncing the directory, a
  file's bytes by fsyncing the file);
- **cache**: everything, as if the page cache had reached the disk (a process crash);
- **names**: every directory entry, but only the fsynced bytes of each file;
- **data**: every byte written, but only the fsynced directory entries;
- **prefix**: the fsynced bytes plus a prefix of what was written after them;
- **hole**: everything, but one 4 KiB block of the not-yet-fsynced bytes lost (zeros).

Each state is written to a fresh directory and recovered with a fresh, un-instrumented
store. The oracle checks what must survive: every event whose batch was acknowledged
before the crash point is there, byte for byte; bytes a repair or salvage cut are in a
quarantine file (or still in the log); a deleted session stays deleted once the delete
returned; the invariants checker passes; a second load changes nothing; a new append
works. Scenarios: writes (chunk runs packed into rows included), a repair of a torn tail,
a salvage, a delete, and a publication whose directory fsync fails with EIO and is
retried. ``test_the_harness_fails_without_each_load_bearing_fsync`` is its self-check:
with each fsync call site of the store skipped in turn, the harness must find a lost
acknowledgement.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import shutil
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sessionledger import SessionEvent, SessionHeader
from sessionledger._errors import CorruptLogError, SessionNotFoundError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._session import Session
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger_invariants import check_log
from sessionledger_jsonl import JsonlPersistence
from sessionledger_jsonl._files import FileSystem

BLOCK = 4096
SESSION = "power"
HEADER = SessionHeader(id=SESSION, created_at=1_000, cwd="/srv/app")


def wire(event: SessionEvent) -> bytes:
    return jsoncodec.dumps(event.to_json())


# -- the recorder -------------------------------------------------------------------------


@dataclass
class Op:
    kind: str
    args: tuple[Any, ...]
    site: str  # where in the store the call came from (for the self-check)


class Recorder(FileSystem):
    """A ``FileSystem`` that performs each call and records what it changed.

    ``skip`` names fsync call sites to leave out (the self-check): such an fsync is
    neither performed nor recorded. ``fail`` maps a call site to the 1-based fsync calls
    there that raise EIO (the fault-injection scenario).
    """

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.skip: set[str] = set()
        self.fail: dict[str, set[int]] = {}
        self.seen: dict[str, int] = {}

    @staticmethod
    def _site() -> str:
        """The store's line that made the call: ``file:function:source``."""
        for frame in reversed(traceback.extract_stack()[:-2]):
            if "sessionledger_jsonl" in frame.filename:
                return f"{Path(frame.filename).name}:{frame.name}:{frame.line}"
        return "?"

    def _note(self, kind: str, *args: Any) -> None:
        self.ops.append(Op(kind, args, self._site()))

    def mkdir(self, name: str, dir_fd: int) -> None:
        super().mkdir(name, dir_fd)
        child = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino
        self._note("mkdir", os.fstat(dir_fd).st_ino, name, child)

    def create(self, name: str, dir_fd: int, *, exclusive: bool = True) -> int:
        existed = self.kind(name, dir_fd) is not None
        fd = super().create(name, dir_fd, exclusive=exclusive)
        if not existed:
            self._note("create", os.fstat(dir_fd).st_ino, name, os.fstat(fd).st_ino)
        return fd

    def write(self, fd: int, data: bytes, *, point: str | None = None) -> None:
        offset = os.fstat(fd).st_size
        super().write(fd, data, point=point)
        self._note("write", os.fstat(fd).st_ino, offset, bytes(data))

    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        self._note("truncate", os.fstat(fd).st_ino, size)

    def fsync(self, fd: int) -> None:
        site = self._site()
        if site in self.skip:
            return
        count = self.seen[site] = self.seen.get(site, 0) + 1
        if count in self.fail.get(site, set()):
            raise OSError(errno.EIO, "injected EIO", site)
        super().fsync(fd)
        self.ops.append(Op("fsync", (os.fstat(fd).st_ino,), site))

    def link(self, source: str, target: str, dir_fd: int) -> None:
        super().link(source, target, dir_fd)
        ino = os.stat(target, dir_fd=dir_fd, follow_symlinks=False).st_ino
        self._note("link", os.fstat(dir_fd).st_ino, target, ino)

    def unlink(self, name: str, dir_fd: int) -> None:
        super().unlink(name, dir_fd)
        self._note("unlink", os.fstat(dir_fd).st_ino, name)

    def rmdir(self, name: str, dir_fd: int) -> None:
        super().rmdir(name, dir_fd)
        self._note("unlink", os.fstat(dir_fd).st_ino, name)


# -- the model ----------------------------------------------------------------------------


@dataclass
class Node:
    is_dir: bool
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    entries: dict[str, int] = field(default_factory=dict)
    durable_entries: dict[str, int] = field(default_factory=dict)


class Model:
    """The file system as the trace leaves it: what is written, and what is durable."""

    def __init__(self, top: int, existing: dict[int, Node]) -> None:
        self.top = top
        self.nodes = existing

    def apply(self, op: Op) -> None:
        kind, args = op.kind, op.args
        if kind in ("mkdir", "create"):
            parent, name, ino = args
            self.nodes[ino] = Node(kind == "mkdir")  # a new inode (its number may be reused)
            self.nodes[parent].entries[name] = ino
        elif kind == "link":
            parent, name, ino = args
            self.nodes[parent].entries[name] = ino
        elif kind == "write":
            ino, offset, data = args
            node = self.nodes[ino]
            if len(node.data) < offset:
                node.data.extend(bytes(offset - len(node.data)))
            node.data[offset : offset + len(data)] = data
        elif kind == "truncate":
            ino, size = args
            node = self.nodes[ino]
            del node.data[size:]
        elif kind == "fsync":
            node = self.nodes.get(args[0])
            if node is None:
                return  # above the modelled tree, which is durable already
            if node.is_dir:
                node.durable_entries = dict(node.entries)
            else:
                node.durable = bytes(node.data)
        elif kind == "unlink":
            parent, name = args
            self.nodes[parent].entries.pop(name, None)

    def states(
        self,
    ) -> Iterator[tuple[str, Callable[[Node], dict[str, int]], Callable[[Node], bytes]]]:
        """(name, entries of a directory, bytes of a file) for each crash state."""

        def durable_entries(node: Node) -> dict[str, int]:
            return node.durable_entries

        def entries(node: Node) -> dict[str, int]:
            return node.entries

        yield "durable", durable_entries, lambda node: node.durable
        yield "cache", entries, lambda node: bytes(node.data)
        yield "names", entries, lambda node: node.durable
        yield "data", durable_entries, lambda node: bytes(node.data)
        for fraction in (0.01, 0.5, 0.99):
            yield f"prefix-{fraction}", entries, lambda node, f=fraction: _prefix(node, f)
        yield "hole-first", entries, lambda node: _hole(node, first=True)
        yield "hole-last", entries, lambda node: _hole(node, first=False)

    def tree(
        self, entries: Callable[[Node], dict[str, int]], content: Callable[[Node], bytes]
    ) -> tuple[tuple[str, bytes | None], ...]:
        """One crash state as (path, bytes, or None for a directory), sorted."""
        found: list[tuple[str, bytes | None]] = []

        def walk(node: Node, path: str) -> None:
            for name, ino in sorted(entries(node).items()):
                child = self.nodes[ino]
                if child.is_dir:
                    found.append((f"{path}{name}", None))
                    walk(child, f"{path}{name}/")
                else:
                    found.append((f"{path}{name}", content(child)))

        walk(self.nodes[self.top], "")
        return tuple(found)


def write_out(target: Path, tree: tuple[tuple[str, bytes | None], ...]) -> None:
    """Write one crash state under *target*."""
    target.mkdir(parents=True)
    for path, data in tree:
        if data is None:
            (target / path).mkdir(mode=0o700)
        else:
            (target / path).write_bytes(data)


def _unsynced_start(node: Node) -> int:
    """Where the bytes written since the last fsync begin."""
    data, durable = bytes(node.data), node.durable
    limit = min(len(data), len(durable))
    start = 0
    while start < limit and data[start] == durable[start]:
        start += 1
    return start


def _prefix(node: Node, fraction: float) -> bytes:
    start = _unsynced_start(node)
    data = bytes(node.data)
    if start >= len(data):
        return node.durable if len(node.durable) <= len(data) else data
    keep = start + max(1, int((len(data) - start) * fraction))
    return data[:keep]


def _hole(node: Node, *, first: bool) -> bytes:
    start = _unsynced_start(node)
    data = bytearray(node.data)
    if start >= len(data):
        return bytes(data)
    blocks = range(start // BLOCK, (len(data) - 1) // BLOCK + 1)
    block = blocks[0] if first else blocks[len(blocks) // 2]
    begin, end = max(block * BLOCK, start), min((block + 1) * BLOCK, len(data))
    data[begin:end] = bytes(end - begin)
    return bytes(data)


# -- scenarios ----------------------------------------------------------------------------


@dataclass
class Expectation:
    """What must survive a crash after a given trace position."""

    acked: list[bytes] = field(default_factory=list)  # events every state must hold
    moved: bytes = b""  # bytes a repair cut: in the log or in quarantine
    deleted: bool = False
    salvage: bool = False  # recover with salvage (the log may be damaged on purpose)


@dataclass
class Run:
    recorder: Recorder
    top: Path
    root: Path
    checkpoints: list[tuple[int, Expectation]]  # (trace length when reached, what holds)
    initial: dict[int, Node]


def _snapshot_tree(top: Path) -> dict[int, Node]:
    """Model nodes for a tree that exists before the scenario, all of it durable."""
    nodes: dict[int, Node] = {}

    def visit(path: Path) -> int:
        status = path.lstat()
        if path.is_dir():
            node = Node(True)
            for child in sorted(path.iterdir()):
                node.entries[child.name] = visit(child)
            node.durable_entries = dict(node.entries)
        else:
            node = Node(False, bytearray(path.read_bytes()), path.read_bytes())
        nodes[status.st_ino] = node
        return status.st_ino

    visit(top)
    return nodes


def _history(turns: int = 2) -> list[list[SessionEvent]]:
    """Batches of a session: one per closed turn, then an open turn cut into pieces."""
    session = Session.create(SESSION, clock=itertools.count(1_700_000_000_000, 7).__next__)
    batches = [closed_turn(session, turn, answer="stream " * 40) for turn in range(1, turns + 1)]
    pending = open_turn_with_pending_call(session, turns + 1)
    batches.extend([pending[:2], pending[2:]])
    big = session.append("x/output", {"text": "y" * 9_000}, ignorable=True)  # > 2 blocks
    batches.append([big])
    return batches


async def _write_scenario(recorder: Recorder, root: Path, checkpoints: list[Any]) -> None:
    store = JsonlPersistence(root, filesystem=recorder)
    await store.create(HEADER)
    acked: list[bytes] = []
    for batch in _history():
        await store.append(SESSION, batch)
        acked = [*acked, *map(wire, batch)]
        checkpoints.append((len(recorder.ops), Expectation(acked)))
    await store.close()


async def _eio_scenario(recorder: Recorder, root: Path, checkpoints: list[Any]) -> None:
    # The directory fsync after publishing fails once; the retry must make it durable
    # before it counts the landed batch as written.
    recorder.fail = {"_writing.py:_publish:system.fsync(directory)": {1}}
    store = JsonlPersistence(root, filesystem=recorder)
    await store.create(HEADER)
    first, *rest = _history()
    with pytest.raises(OSError, match="injected EIO"):
        await store.append(SESSION, first)
    await store.append(SESSION, first)  # the documented retry
    acked = list(map(wire, first))
    checkpoints.append((len(recorder.ops), Expectation(acked)))
    await store.append(SESSION, rest[0])
    checkpoints.append((len(recorder.ops), Expectation([*acked, *map(wire, rest[0])])))
    await store.close()


def _prepared(root: Path, *, torn: bool = False, damaged: bool = False) -> list[SessionEvent]:
    """Write a session without the recorder (durable before the scenario starts)."""

    async def write() -> list[SessionEvent]:
        store = JsonlPersistence(root)
        await store.create(HEADER)
        events = []
        for batch in _history():
            await store.append(SESSION, batch)
            events.extend(batch)
        await store.close()
        return events

    events = asyncio.run(write())
    (log,) = root.glob("*/*/session.jsonl")
    data = log.read_bytes()
    if torn:
        data += b'{"type":"tool/result","seq":99,"time":1,"da'
    if damaged:
        lines = data.split(b"\n")
        second = next(i for i, line in enumerate(lines) if line.startswith(b'{"commit"')) + 2
        lines[second] = lines[second][:-3] + b"?!"  # a record of the second batch
        data = b"\n".join(lines)
    log.write_bytes(data)
    return events


async def _repair_scenario(recorder: Recorder, root: Path, checkpoints: list[Any]) -> None:
    (log,) = root.glob("*/*/session.jsonl")
    whole = log.read_bytes()
    moved = whole[whole.rindex(b"\n") + 1 :]
    acked = [wire(e) for e in _events_of(whole)]
    checkpoints.append((0, Expectation(acked, moved=moved)))
    store = JsonlPersistence(root, filesystem=recorder)
    await store.load(SESSION)
    await store.close()


async def _salvage_scenario(recorder: Recorder, root: Path, checkpoints: list[Any]) -> None:
    (log,) = root.glob("*/*/session.jsonl")
    whole = log.read_bytes()
    events = _events_of(whole)
    first_batch_end = next(i for i, e in enumerate(events) if e.type == "turn/end") + 1
    start = _batch_end(whole, 1)
    checkpoints.append(
        (0, Expectation([wire(e) for e in events[:first_batch_end]], whole[start:], salvage=True))
    )
    store = JsonlPersistence(root, filesystem=recorder)
    await store.salvage(SESSION)
    await store.close()


async def _delete_scenario(recorder: Recorder, root: Path, checkpoints: list[Any]) -> None:
    store = JsonlPersistence(root, filesystem=recorder)
    await store.delete(SESSION)
    checkpoints.append((len(recorder.ops), Expectation(deleted=True)))
    await store.close()


def _events_of(data: bytes) -> list[SessionEvent]:
    """The events of the intact batches of a log's bytes (through the real reader)."""
    from sessionledger_jsonl._format import split_batches

    records, batches = split_batches(data, data.index(b"\n") + 1)
    from sessionledger.storage._chunks import unpack_events

    out: list[SessionEvent] = []
    for batch in batches:
        if batch.problem is not None:
            break
        for record in records[batch.start : batch.end]:
            out.extend(unpack_events(record.value))
    return out


def _batch_end(data: bytes, count: int) -> int:
    """The byte after the *count*-th commit record."""
    position = data.index(b"\n") + 1
    seen = 0
    for line in data[position:].split(b"\n"):
        position += len(line) + 1
        if line.startswith(b'{"commit"'):
            seen += 1
            if seen == count:
                return position
    raise AssertionError("no such batch")


async def _eio_mkdir_scenario(recorder: Recorder, root: Path, checkpoints: list[Any]) -> None:
    # The fsync that makes a new root's entry durable fails once; the retry finds the
    # root there and must still make its entry durable before acknowledging.
    recorder.fail = {"_files.py:make_root:self.fsync(parent_fd)": {1}}
    store = JsonlPersistence(root, filesystem=recorder)
    await store.create(HEADER)
    first = _history()[0]
    with pytest.raises(OSError, match="injected EIO"):
        await store.append(SESSION, first)
    await store.append(SESSION, first)
    checkpoints.append((len(recorder.ops), Expectation(list(map(wire, first)))))
    await store.close()


async def _eio_append_scenario(recorder: Recorder, root: Path, checkpoints: list[Any]) -> None:
    # An append's fsync fails: the batch is cut back and the retry writes it once.
    recorder.fail = {"_writing.py:_append:system.fsync(fd)": {2}}
    store = JsonlPersistence(root, filesystem=recorder)
    await store.create(HEADER)
    first, second, third, *_ = _history()
    await store.append(SESSION, first)
    acked = list(map(wire, first))
    checkpoints.append((len(recorder.ops), Expectation(acked)))
    await store.append(SESSION, second)
    with pytest.raises(OSError, match="injected EIO"):
        await store.append(SESSION, third)
    await store.append(SESSION, third)
    acked = [*acked, *map(wire, second), *map(wire, third)]
    checkpoints.append((len(recorder.ops), Expectation(acked)))
    await store.close()


SCENARIOS: dict[str, tuple[Callable[..., Any], dict[str, bool] | None]] = {
    "write": (_write_scenario, None),
    "eio-retry": (_eio_scenario, None),
    "eio-mkdir": (_eio_mkdir_scenario, None),
    "eio-append": (_eio_append_scenario, None),
    "repair": (_repair_scenario, {"torn": True}),
    "salvage": (_salvage_scenario, {"damaged": True}),
    "delete": (_delete_scenario, {}),
}


def record(name: str, workspace: Path, recorder: Recorder | None = None) -> Run:
    scenario, prepare = SCENARIOS[name]
    top = workspace / "top"
    root = top / "store"
    top.mkdir(parents=True)
    if prepare is not None:
        _prepared(root, **prepare)
    initial = _snapshot_tree(top)
    recorder = recorder or Recorder()
    checkpoints: list[tuple[int, Expectation]] = []
    asyncio.run(scenario(recorder, root, checkpoints))
    return Run(recorder, top, root, checkpoints, initial)


# -- recovery and the oracle --------------------------------------------------------------


def _expected_at(run: Run, position: int) -> Expectation:
    """What must hold in a crash after *position* calls of the trace."""
    found = Expectation()
    for reached, expectation in run.checkpoints:
        if reached <= position:
            found = expectation
    return found


def recover(state: Path, expected: Expectation) -> str | None:
    """Recover one crash state with a fresh store; return what broke, or None."""
    return asyncio.run(_recover(state, expected))


async def _recover(state: Path, expected: Expectation) -> str | None:
    root = state / "store"
    store = JsonlPersistence(root)
    try:
        if expected.deleted:
            try:
                await store.load(SESSION)
            except SessionNotFoundError:
                return None
            return "a deleted session came back"
        if expected.salvage:
            with_moved = _moved_bytes(root)
            await store.salvage(SESSION)
        try:
            loaded = await store.load(SESSION)
        except SessionNotFoundError:
            return "the session is gone" if expected.acked else None
        except CorruptLogError as error:
            return f"recovery refused the log: {error}"
        events = [wire(e) for e in loaded.events]
        if events[: len(expected.acked)] != expected.acked:
            kept = next(
                (i for i, (a, b) in enumerate(zip(events, expected.acked, strict=False)) if a != b),
                min(len(events), len(expected.acked)),
            )
            return f"acknowledged events lost: {len(expected.acked)} acked, {kept} read back"
        violations = check_log(loaded.events)
        if violations:
            return f"invariants: {violations[0]}"
        if expected.moved and not _kept_somewhere(root, expected.moved):
            return "bytes a repair cut are neither in the log nor in quarantine"
        if expected.salvage and not _kept_somewhere(root, expected.moved, with_moved):
            return "bytes salvage cut are neither in the log nor in quarantine"
        await store.release(SESSION)  # another store loads it next
        again = await _load_fresh(root)
        if [wire(e) for e in again.events] != events or again.revision != loaded.revision:
            return "a second load changed the log"
        session = Session.restore(again.header, again.events)
        batch = closed_turn(session, _next_turn(again.events))
        marker = list(session.events[len(again.events) : len(session.events) - len(batch)])
        await store.append(SESSION, [*marker, *batch])
        await store.release(SESSION)
        final = await _load_fresh(root)
        if len(final.events) != len(session.events):
            return "a new append did not read back"
        return None
    finally:
        await store.close()


async def _load_fresh(root: Path) -> Any:
    store = JsonlPersistence(root)
    try:
        return await store.load(SESSION)
    finally:
        await store.close()


def _next_turn(events: Any) -> int:
    return 1 + max((e.data["turn"] for e in events if e.type == "turn/start"), default=0)


def _moved_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.glob("*/*/session.jsonl*")))


def _kept_somewhere(root: Path, moved: bytes, before: bytes = b"") -> bool:
    """Whether *moved* is in the log or a quarantine file (or was, before recovery)."""
    if not moved:
        return True
    everything = _moved_bytes(root) + before
    return moved in everything


def crash_states(run: Run) -> Iterator[tuple[int, str, Model, Any, Any]]:
    """Every (position, state name, model, entries, content) after each call."""
    top = run.top.lstat().st_ino
    for position in range(len(run.recorder.ops) + 1):
        model = Model(top, _copy_nodes(run.initial))
        for op in run.recorder.ops[:position]:
            model.apply(op)
        for name, entries, content in model.states():
            yield position, name, model, entries, content


def _copy_nodes(nodes: dict[int, Node]) -> dict[int, Node]:
    return {
        ino: Node(n.is_dir, bytearray(n.data), n.durable, dict(n.entries), dict(n.durable_entries))
        for ino, n in nodes.items()
    }


def failures(run: Run, workspace: Path, *, only: set[str] | None = None) -> list[str]:
    """Recover every distinct crash state of *run*; return what broke in each that did."""
    found = []
    seen: dict[Any, str | None] = {}
    for index, (position, name, model, entries, content) in enumerate(crash_states(run)):
        if only is not None and name not in only:
            continue
        tree = model.tree(entries, content)
        expected = _expected_at(run, position)
        key = (tree, repr(expected))
        if key not in seen:
            target = workspace / f"state-{index}"
            write_out(target, tree)
            seen[key] = recover(target, expected)
            shutil.rmtree(target)
        problem = seen[key]
        if problem is not None:
            op = run.recorder.ops[position - 1] if position else None
            where = f"{op.kind} at {op.site}" if op else "before any call"
            found.append(f"after call {position} ({where}), state {name}: {problem}")
    return found


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_crash_state_keeps_what_was_acknowledged(scenario: str, tmp_path: Path) -> None:
    run = record(scenario, tmp_path / "run")
    assert run.recorder.ops, "the scenario made no file-system call"
    assert failures(run, tmp_path / "states") == []


# -- the self-check -----------------------------------------------------------------------

#: fsync call sites whose removal no scenario can notice, and why.
REDUNDANT = {
    # make_root fsyncs the parent of a root it creates; sync_ancestors does it again
    # before the first publication is acknowledged, and is what a retry relies on.
    "_files.py:make_root:self.fsync(parent_fd)",
    # The cut is made durable again by the fsync that follows the closers' append; a
    # cut lost to a crash is made again by the next load (the bytes are in quarantine).
    "_writing.py:_cut:system.fsync(fd)",
    # A retried publication reaches this only after make_dirs made these entries durable.
    "_writing.py:_make_entries_durable:system.fsync(project)",
    # Either of delete's two fsyncs alone keeps a deleted session deleted: the unlink of
    # its log (session directory) or the removal of the directory (project directory).
    "_writing.py:delete:system.fsync(directory)",
    "_writing.py:delete:system.fsync(project)",
    # A rolled-back append is written again by its retry, whose fsync covers the file.
    "_writing.py:_roll_back:self._system.fsync(fd)",
}
#: Redundant sites that are load-bearing together: removing all of them must be noticed.
TOGETHER = [
    {"_writing.py:delete:system.fsync(directory)", "_writing.py:delete:system.fsync(project)"}
]


def fsync_sites() -> dict[str, str]:
    """Every fsync call site the scenarios reach, with the scenario that reaches it."""
    sites: dict[str, str] = {}
    for name in SCENARIOS:
        run = record(name, Path(os.environ.get("TMPDIR", "/tmp")) / f"sites-{os.getpid()}-{name}")
        shutil.rmtree(run.top.parent)
        for op in run.recorder.ops:
            if op.kind == "fsync":
                sites.setdefault(op.site, name)
    return sites


def _caught_without(skipped: set[str], workspace: Path) -> int:
    """How many crash-state failures the harness finds with *skipped* fsyncs left out."""
    found = 0
    for scenario in SCENARIOS:
        recorder = Recorder()
        recorder.skip = set(skipped)
        label = f"{len(list(workspace.iterdir())) if workspace.exists() else 0}-{scenario}"
        try:
            run = record(scenario, workspace / label, recorder)
        except (OSError, pytest.fail.Exception):
            continue  # the scenario relied on a skipped call to fail (EIO)
        found += len(failures(run, workspace / f"states-{label}", only={"durable"}))
    return found


def test_the_harness_fails_without_each_load_bearing_fsync(tmp_path: Path) -> None:
    sites = fsync_sites()
    assert "_writing.py:_append:system.fsync(fd)" in sites  # it sees the store's fsyncs
    assert set(sites) >= REDUNDANT, sorted(REDUNDANT - set(sites))  # the list stays true
    caught = {site: _caught_without({site}, tmp_path / "one") for site in sorted(sites)}
    missed = sorted(site for site, found in caught.items() if not found and site not in REDUNDANT)
    assert missed == [], f"fsync sites the harness does not depend on: {missed} ({caught})"
    for group in TOGETHER:
        assert _caught_without(group, tmp_path / "group"), f"removing {sorted(group)} went unseen"
