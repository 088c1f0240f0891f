"""The live feed (docs/feed.md) across real processes, on every backend another process
can read: JSONL, SQLite and PostgreSQL.

A feed promises that a follower sees exactly the acknowledged events, in seq order,
once each, whichever process wrote them and whatever happened meanwhile. So the oracle
is exact: a follower's output, event for event as full JSON, equals what the writer
acknowledged (each batch printed by ``feed_child.py`` once its flush returned), which
equals the final stored log. Nothing is de-duplicated, except where a killed follower
is resumed: it resumes right after the last event (or cursor) it printed, so the union
of its runs must equal the log exactly once.

- ``test_followers_see_exactly_what_the_writer_acknowledged``: a writer flushes 40
  batches of 1-5 events; three followers (started before it, after its first flush and
  halfway), ``tail ID -f --json``, ``tail --all -f --json`` and a ``follow_all``
  follower all print exactly its acknowledged log.
- ``test_a_killed_follower_resumes_exactly_after_what_it_printed``: followers SIGKILLed
  while the writer writes and started again from their last seq or cursor; ``tail --all
  -f`` stopped with Ctrl-C and run again from the cursor it printed.
- ``test_a_killed_writer_shows_its_acknowledged_events_then_the_repair``: the writer is
  SIGKILLed inside a turn, between flushes, with events appended but not flushed; the
  follower shows the acknowledged events, never the unflushed ones, then the closers
  another process's resume appends. ``..._inside_a_flush_...``: killed at a failpoint
  inside a flush (a torn tail, a batch written but not synced, committed but not
  acknowledged): the follower shows exactly what the store holds, then the closers.
- ``test_a_postgresql_restart_loses_and_repeats_nothing``: the server restarts while two
  followers follow and the writer retries its flush until it succeeds.
- ``test_a_deleted_session_ends_its_followers_after_every_acknowledged_event``: the
  ``delete`` command ends a follower with ``SessionDeletedError``, ``tail -f`` with its
  message, and a ``follow_all`` follower gets the deletion as an item.
- ``test_the_oracle_catches_a_broken_follower_or_writer``: the same scenarios with a
  follower that drops an event, one that resumes one event early, and a writer that
  lets the store have events it never acknowledged: the comparison must fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger import open_store
from sessionledger.model._repair import interrupted_turn_closers
from sessionledger_postgres.testing import (
    ThrowawayServer,
    drop_schema,
    with_options,
)

CHILD = Path(__file__).with_name("feed_child.py")
SESSION = "followed"
TIMEOUT = 60.0  # the longest any wait lasts: nothing hangs past it
SETTLE = 0.3  # after a follower caught up, how long it gets to print anything extra
Json = dict[str, Any]
Reader = Callable[["Child"], list[Json]]


@pytest.fixture(params=["jsonl", "sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store of each kind other processes can open."""
    if request.param == "jsonl":
        yield f"jsonl:{tmp_path / 'sessions'}"
    elif request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'ledger.db'}"
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"feed_{uuid.uuid4().hex[:12]}"
        yield with_options(base, schema=schema, pool_max_size=2)
        asyncio.run(drop_schema(base, schema))


# -- the children ------------------------------------------------------------------------


class Child:
    """A child process whose stdout and stderr go to files, read at any time; with
    *commands*, its stdin is a pipe to ``send`` lines through."""

    def __init__(
        self, name: str, argv: list[str], folder: Path, env: Mapping[str, str], commands: bool
    ) -> None:
        self.name = name
        self.out = folder / f"{name}.out"
        self.err = folder / f"{name}.err"
        environment = {k: v for k, v in os.environ.items() if not k.startswith("FEED_CHILD_")}
        environment.update(env)
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, *argv],
                stdin=subprocess.PIPE if commands else subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=environment,
            )

    def send(self, line: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        self.process.stdin.flush()

    def end_input(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()

    def lines(self) -> list[bytes]:
        """The complete lines written so far (a torn last line is left out)."""
        return self.out.read_bytes().split(b"\n")[:-1]

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def exited(self) -> bool:
        return self.process.poll() is not None

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} did not exit in {TIMEOUT}s:\n{self.stderr()}")

    def signal(self, number: int) -> None:
        if not self.exited():
            os.kill(self.process.pid, number)
        self.wait()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)


class Children:
    """Start children; every one still running is killed at the end of the test."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[Child] = []

    def start(self, name: str, argv: list[str], env: Mapping[str, str]) -> Child:
        name = f"{len(self.started):02d}-{name}"
        child = Child(name, argv, self.folder, env, commands="stepped" in argv)
        self.started.append(child)
        return child

    def feed_child(self, mode: str, *args: object, env: Mapping[str, str] | None = None) -> Child:
        return self.start(mode, [str(CHILD), mode, *map(str, args)], env or {})

    def cli(self, url: str, *words: str) -> Child:
        return self.start("cli-" + words[0], ["-m", "sessionledger", "--store", url, *words], {})

    def stop_all(self) -> None:
        for child in self.started:
            if not child.exited():
                child.process.kill()
            with contextlib.suppress(OSError):
                child.end_input()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=TIMEOUT)


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    started = Children(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def must(predicate: Callable[[], bool], what: str, *involved: Child) -> None:
    if not wait_until(predicate):
        logs = "\n".join(f"--- {child.name}:\n{child.stderr()}" for child in involved)
        pytest.fail(f"timed out after {TIMEOUT}s waiting for {what}\n{logs}")


# -- what the children printed -----------------------------------------------------------


@dataclass
class Written:
    """What a writer printed: the events acknowledged (flushed), those appended but left
    unflushed (``park``), and how far it got."""

    acked: list[Json]
    pending: list[Json]
    batches: int
    done: bool
    parked: bool


def written(writer: Child) -> Written:
    events: list[Json] = []
    acked: list[Json] = []
    pending: list[Json] = []
    batches = 0
    done = parked = False
    for line in writer.lines():
        word, _, rest = line.partition(b" ")
        if word == b"EVENT":
            events.append(orjson.loads(rest))
        elif word == b"ACKED":
            assert events, line
            assert events[-1]["seq"] == int(rest), line
            acked = list(events)
            batches += 1
        elif word == b"PENDING":
            pending.append(orjson.loads(rest))
        done |= word == b"DONE"
        parked |= word == b"PARKED"
    return Written(acked, pending, batches, done, parked)


def acked_batches(writer: Child, count: int) -> Callable[[], bool]:
    return lambda: written(writer).batches >= count or writer.exited()


def more_than(follower: Child, count: int, read: Reader | None = None) -> Callable[[], bool]:
    """Whether *follower* printed more than *count* values (read by *read*), or exited."""
    return lambda: len((read or printed)(follower)) > count or follower.exited()


def printed(follower: Child) -> list[Json]:
    """A follower's output: one JSON value a line."""
    return [orjson.loads(line) for line in follower.lines()]


def feed_items(follower: Child) -> list[Json]:
    """The items a ``follow_all`` follower printed, without its cursor lines."""
    return [item for item in printed(follower) if "cursor" not in item]


def cursor_lines(follower: Child) -> list[Json]:
    return [item for item in printed(follower) if "cursor" in item]


def up_to_last_cursor(follower: Child) -> tuple[list[Json], str | None]:
    """The items a ``follow_all`` follower printed before the last cursor it printed,
    and that cursor: what a follower resumed from it must not print again."""
    lines = printed(follower)
    last = max((index for index, item in enumerate(lines) if "cursor" in item), default=-1)
    items = [item for item in lines[:last] if "cursor" not in item]
    return items, (lines[last]["cursor"] if last >= 0 else None)


def as_items(events: list[Json]) -> list[Json]:
    return [{"session": SESSION, "event": event} for event in events]


async def _read_stored(url: str) -> list[Json]:
    store = open_store(url)
    try:
        events = await store.read_from(SESSION, 0)
    finally:
        await store.close()
    return [orjson.loads(orjson.dumps(event.to_json())) for event in events]


def stored_log(url: str) -> list[Json]:
    """The session's events as stored, read in this process (no writer runs then)."""
    return asyncio.run(_read_stored(url))


# -- the oracle --------------------------------------------------------------------------


class OracleFailed(AssertionError):
    """A follower's output is not exactly the log it should be."""


def _seq(value: Json) -> object:
    event = value.get("event", value)
    return event.get("seq") if isinstance(event, dict) else value


def expect_same(got: list[Json], want: list[Json], who: str) -> None:
    """Fail unless *got* is *want*, value for value: no gap, no duplicate, no extra."""
    if got == want:
        return
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    if first is None:
        first = min(len(got), len(want))
    got_seqs = [_seq(value) for value in got]
    want_seqs = [_seq(value) for value in want]
    raise OracleFailed(
        f"{who}: {len(got)} values where {len(want)} were expected; the first difference "
        f"is at index {first}: got seqs {got_seqs[first : first + 5]}, expected "
        f"{want_seqs[first : first + 5]}"
        + (f"\n  got:      {got[first]}" if first < len(got) else "")
        + (f"\n  expected: {want[first]}" if first < len(want) else "")
    )


def _reached(follower: Child, want: list[Json], read: Reader) -> bool:
    got = read(follower)
    return follower.exited() or len(got) >= len(want) or bool(got and got[-1] == want[-1])


def settled(*expected: tuple[Child, list[Json], Reader]) -> None:
    """For each (follower, values, read): wait until *read* finds that the follower
    printed the last of *values* (or as many, or exited); give them all *SETTLE* seconds
    more to print what they should not; then fail unless each one's output is exactly
    its values and each one still runs (a feed ends only when its session goes)."""
    for follower, want, read in expected:
        wait_until(functools.partial(_reached, follower, want, read))
    time.sleep(SETTLE)
    problems = []
    for follower, want, read in expected:
        try:
            expect_same(read(follower), want, f"{follower.name} ({read.__name__})")
        except OracleFailed as failed:
            problems.append(str(failed))
        if follower.exited():
            code = follower.process.returncode
            problems.append(f"{follower.name} stopped (exit {code}): {follower.stderr()[-800:]}")
    if problems:
        raise OracleFailed("\n".join(problems))


# -- the scenarios (run by the tests, and broken on purpose by the self-check) -----------


def live(*followers: Child, read: Reader = printed) -> None:
    """Wait until each follower printed something: it follows, live."""
    for follower in followers:
        must(more_than(follower, 0, read), "a first event", follower)


def run_live(url: str, children: Children, follower_env: Mapping[str, str] | None = None) -> None:
    """Followers started before the writer, after its first flush and in the middle of
    its 40 batches; each one prints exactly the acknowledged log."""
    env = dict(follower_env or {})
    early = children.feed_child("follow", url, SESSION, -1, env=env)
    writer = children.feed_child("write", url, SESSION, 0, 1, "stepped")
    writer.send(1)
    must(acked_batches(writer, 1), "the first flush", writer)
    at_start = children.feed_child("follow", url, SESSION, -1, env=env)
    everything = children.feed_child("follow-all", url)
    tail = children.cli(url, "tail", SESSION, "-f", "--json")
    tail_all = children.cli(url, "tail", "--all", "-f", "--json")
    live(early, at_start, tail)
    live(everything, tail_all, read=feed_items)
    writer.send(20)  # every follower waits for these
    meanwhile = children.feed_child("follow", url, SESSION, -1, env=env)
    live(meanwhile)
    writer.send(19)
    writer.end_input()
    assert writer.wait() == 0, writer.stderr()
    log = stored_log(url)
    record = written(writer)
    assert record.done
    assert record.batches == 40
    expect_same(record.acked, log, "the writer's acknowledged events vs the stored log")
    settled(
        *[(follower, log, printed) for follower in (early, at_start, meanwhile, tail)],
        *[(follower, as_items(log), feed_items) for follower in (everything, tail_all)],
    )


def run_restarts(
    url: str, children: Children, follower_env: Mapping[str, str] | None = None
) -> None:
    """Followers SIGKILLed while the writer writes, each started again from the last seq
    (or the last cursor) it printed, and ``tail --all -f`` stopped with Ctrl-C and run
    again from the cursor it printed: their runs together print the log exactly once."""
    env = dict(follower_env or {})
    writer = children.feed_child(
        "write", url, SESSION, 0, 2, "stepped", env={"FEED_CHILD_PAUSE_MS": "40"}
    )
    writer.send(1)
    must(acked_batches(writer, 1), "the first flush", writer)
    runs = [children.feed_child("follow", url, SESSION, -1, env=env)]
    feeds = [children.feed_child("follow-all", url)]
    tail_all = children.cli(url, "tail", "--all", "-f", "--json")
    live(runs[0])
    live(feeds[0], tail_all, read=feed_items)
    after = -1
    for round_end in (11, 21):
        run, feed = runs[-1], feeds[-1]
        seen, cursors = len(printed(run)), len(cursor_lines(feed))
        writer.send(10)
        must(more_than(run, seen), "a new event", run)
        run.kill()
        after = printed(run)[-1]["seq"] if printed(run) else after
        runs.append(children.feed_child("follow", url, SESSION, after, env=env))
        must(more_than(feed, cursors, cursor_lines), "a new cursor", feed)
        feed.kill()
        cursor = up_to_last_cursor(feed)[1]
        assert cursor is not None, feed.stderr()
        feeds.append(children.feed_child("follow-all", url, cursor))
        must(acked_batches(writer, round_end), f"{round_end} flushes", writer)
    seen = len(printed(tail_all))
    writer.send(10)
    must(more_than(tail_all, seen), "tail --all to print more", tail_all)
    tail_all.signal(signal.SIGINT)  # Ctrl-C: it prints the cursor to resume from
    writer.end_input()
    assert writer.wait() == 0, writer.stderr()
    log = stored_log(url)
    expect_same(written(writer).acked, log, "the writer's acknowledged events vs the stored log")

    def run_union(last: Child) -> list[Json]:
        return [event for run in runs for event in printed(run)]

    def feed_union(last: Child) -> list[Json]:
        items = [item for feed in feeds[:-1] for item in up_to_last_cursor(feed)[0]]
        return items + feed_items(last)

    settled((runs[-1], log, run_union), (feeds[-1], as_items(log), feed_union))

    resume = [line for line in tail_all.stderr().splitlines() if "resume with: --after" in line]
    assert resume, tail_all.stderr()
    rest = children.cli(url, "tail", "--all", "--json", "--after", resume[-1].split()[-1])
    assert rest.wait() == 0, rest.stderr()
    expect_same(printed(tail_all) + printed(rest), as_items(log), "tail --all, then --after")


def run_writer_crash(
    url: str,
    children: Children,
    writer_env: Mapping[str, str] | None = None,
    failpoint: str | None = None,
    in_flight: bool | None = None,
) -> None:
    """A writer SIGKILLed inside a turn, then the session resumed by another process.

    Without *failpoint* the writer is killed between flushes, with events appended but
    never flushed: the follower prints exactly the acknowledged events, never the
    unflushed ones. With it, the writer is killed inside a flush, at that failpoint: the
    follower prints exactly what the store holds then (the acknowledged events, and the
    batch in flight if it was written, never a torn part of it); *in_flight* says whether
    that batch is stored (None: either may be). Then it prints the closers of the repair:
    in each case, exactly the final log."""
    follower = children.feed_child("follow", url, SESSION, -1)
    everything = children.feed_child("follow-all", url)
    env = dict(writer_env or {})
    if failpoint is not None:
        env["SESSIONLEDGER_FAILPOINT"] = failpoint
    writer = children.feed_child("write", url, SESSION, 12, 3, "park", env=env)
    if failpoint is None:
        must(lambda: written(writer).parked or writer.exited(), "the writer to park", writer)
    else:
        must(lambda: "FAILPOINT" in writer.stderr() or writer.exited(), failpoint, writer)
    record = written(writer)
    assert not writer.exited(), writer.stderr()
    if failpoint is None:  # the oracle is what the writer acknowledged
        assert record.pending, writer.stderr()
        settled((follower, record.acked, printed), (everything, as_items(record.acked), feed_items))
    stored = stored_log(url)  # the writer is frozen: this is what a follower may show
    expect_same(stored[: len(record.acked)], record.acked, "the stored acknowledged events")
    if failpoint is None:
        expect_same(stored, record.acked, "the stored log of a writer between flushes")
    else:
        assert in_flight is None or (len(stored) > len(record.acked)) == in_flight
        settled((follower, stored, printed), (everything, as_items(stored), feed_items))
    writer.kill()
    settled((follower, stored, printed), (everything, as_items(stored), feed_items))

    repair = children.feed_child("resume", url, SESSION)
    assert repair.wait() == 0, repair.stderr()
    log = stored_log(url)
    closers = orjson.loads(orjson.dumps(interrupted_turn_closers(stored)))
    assert closers, "the writer died inside a turn: the repair must close it"
    expect_same(log[: len(stored)], stored, "the final log up to the kill")
    expect_same(log[len(stored) : len(stored) + len(closers)], closers, "the closers")
    assert [event["type"] for event in log[len(stored) + len(closers) :]] == ["session/end-seed"]

    settled((follower, log, printed), (everything, as_items(log), feed_items))
    assert not [event for event in record.pending if event in printed(follower)]


# -- the tests ---------------------------------------------------------------------------


def test_followers_see_exactly_what_the_writer_acknowledged(
    store_url: str, children: Children
) -> None:
    run_live(store_url, children)


def test_a_killed_follower_resumes_exactly_after_what_it_printed(
    store_url: str, children: Children
) -> None:
    run_restarts(store_url, children)


def test_a_killed_writer_shows_its_acknowledged_events_then_the_repair(
    store_url: str, children: Children
) -> None:
    run_writer_crash(store_url, children)


@pytest.mark.parametrize(
    ("store_url", "failpoint", "in_flight"),
    [
        ("jsonl", "jsonl.append.mid-write:6", None),  # a torn tail: never shown, cut by repair
        ("jsonl", "jsonl.append.after-write:6", True),  # written, not synced: the feed syncs it
        ("sqlite", "sqlite.write.after-commit:6", True),  # committed; the flush never returned
        ("postgresql", "core.writebehind.after-write:6", True),
    ],
    indirect=["store_url"],
)
def test_a_writer_killed_inside_a_flush_shows_what_was_stored_then_the_repair(
    store_url: str, failpoint: str, in_flight: bool | None, children: Children
) -> None:
    run_writer_crash(store_url, children, failpoint=failpoint, in_flight=in_flight)


def test_a_postgresql_restart_loses_and_repeats_nothing(
    children: Children, own_pg_server: ThrowawayServer
) -> None:
    server, url = own_pg_server, own_pg_server.url
    assert url is not None
    try:
        writer = children.feed_child(
            "write", url, SESSION, 0, 4, "retry", "stepped", env={"FEED_CHILD_PAUSE_MS": "30"}
        )
        writer.send(1)
        must(acked_batches(writer, 1), "the first flush", writer)
        follower = children.feed_child("follow", url, SESSION, -1)
        everything = children.feed_child("follow-all", url)
        live(follower)
        live(everything, read=feed_items)
        writer.send(40)
        writer.end_input()
        must(acked_batches(writer, 10), "10 flushes", writer)
        assert not written(writer).done, "the writer finished before the restart"
        server.restart()
        assert writer.wait() == 0, writer.stderr()
        log = stored_log(url)
        expect_same(written(writer).acked, log, "the writer's acknowledged events vs the log")
        settled((follower, log, printed), (everything, as_items(log), feed_items))
    finally:
        children.stop_all()


def test_a_deleted_session_ends_its_followers_after_every_acknowledged_event(
    store_url: str, children: Children
) -> None:
    writer = children.feed_child("write", store_url, SESSION, 10, 5)
    must(acked_batches(writer, 1), "the first flush", writer)
    follower = children.feed_child("follow", store_url, SESSION, -1)
    everything = children.feed_child("follow-all", store_url)
    tail = children.cli(store_url, "tail", SESSION, "-f", "--json")
    assert writer.wait() == 0, writer.stderr()
    log = stored_log(store_url)
    settled((follower, log, printed), (tail, log, printed), (everything, as_items(log), feed_items))

    deleting = children.cli(store_url, "delete", SESSION)
    assert deleting.wait() == 0, deleting.stderr()
    assert follower.wait() == 3, follower.stderr()
    assert f"DELETED {log[-1]['seq']}: " in follower.stderr()
    expect_same(printed(follower), log, follower.name)
    assert tail.wait() == 1, tail.stderr()
    assert "the session was deleted" in tail.stderr()
    expect_same(printed(tail), log, tail.name)
    gone = [*as_items(log), {"session": SESSION, "deleted": True}]
    settled((everything, gone, feed_items))


@pytest.mark.parametrize(
    ("scenario", "env", "caught"),
    [
        (run_live, {"FEED_CHILD_BREAK": "drop"}, r"^00-follow \(printed\): 1\d\d values"),
        (run_restarts, {"FEED_CHILD_BREAK": "again"}, r"\(run_union\)"),
        (run_writer_crash, {"FEED_CHILD_BREAK": "unacked"}, r"^00-follow \(printed\)"),
    ],
    ids=["follower-drops-an-event", "follower-resumes-early", "writer-leaks-unacked"],
)
def test_the_oracle_catches_a_broken_follower_or_writer(
    scenario: Callable[[str, Children, Mapping[str, str]], None],
    env: Mapping[str, str],
    caught: str,
    tmp_path: Path,
    children: Children,
) -> None:
    with pytest.raises(OracleFailed, match=caught):
        scenario(f"sqlite:{tmp_path / 'ledger.db'}", children, env)
