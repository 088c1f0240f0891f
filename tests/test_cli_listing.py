"""``ls`` paging and filters, ``prune``, ``audit``, ``search`` and ``reindex`` on the
command line, run as real subprocesses on real SQLite files and JSONL directories.

The sessions are written with a fake clock (one minute per event, from mid-2025), so
every order and time filter has one right answer; a session written with the real clock
is "fresh" next to them. Whether a store keeps native summaries, a text index or an
audit log is asked of the store itself, so these tests hold before and after a backend
gains them.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger import Ledger
from sessionledger.runtime._opening import open_store
from sessionledger.storage._logstore import LogStore
from sessionledger.testing.builders import closed_turn

BACKENDS = ("sqlite", "jsonl")
#: The fake clock's start (2025-06-01T00:00:00Z) and step.
BASE, STEP = 1_748_736_000_000, 60_000
COUNT = 25


@dataclasses.dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return orjson.loads(self.out)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SESSIONLEDGER_STORE", None)
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), COLUMNS="200", PYTHONIOENCODING="utf-8")
    return env


def run_cli(env: dict[str, str], *args: str, command: list[str] | None = None) -> Run:
    done = subprocess.run(
        [*(command or [sys.executable, "-m", "sessionledger"]), *args],
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def store_url(kind: str, tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'store.db'}" if kind == "sqlite" else f"jsonl:{tmp_path / 'store'}"


def store_bytes(url: str) -> dict[str, bytes]:
    """Every file behind a local store, by relative path (for 'nothing was written')."""
    root = Path(url.partition(":")[2])
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root.parent)): p.read_bytes() for p in files}


def assert_one_line_error(result: Run, code: str) -> None:
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(f"error: {code}: "), result.err
    assert result.out == ""


def sid(i: int) -> str:
    return f"s{i:02}"


async def fill(url: str) -> None:
    """25 sessions, one closed turn each, written in order with the fake clock; then
    s03 gets a second turn, so it is the most recently active but not the newest."""
    clock = itertools.count(BASE, STEP).__next__
    async with Ledger.open(url, clock=clock) as ledger:
        for i in range(COUNT):
            fruit = "apples" if i % 3 == 0 else "pears"
            session = ledger.create(
                sid(i),
                title=f"task {i}" + (" URGENT" if i % 5 == 0 else ""),
                meta={"team": "red" if i % 2 else "blue", "n": i},
            )
            closed_turn(session, 1, prompt=f"question {i} about {fruit}")
            await ledger.flush(session)
        again = await ledger.resume(sid(3))
        closed_turn(again, 2, prompt="one more about apples")
        await ledger.flush(again)


#: The listing order: most recent activity first (s03's second turn came last).
ACTIVITY_ORDER = [sid(3)] + [sid(i) for i in reversed(range(COUNT)) if i != 3]
CREATED_ORDER = [sid(i) for i in reversed(range(COUNT))]


#: How the lines printed under a table begin.
ENDS_OF_TABLE = ("more:", "unreadable:", "total:", "nothing ", "recorded ", "skipped ")


def table_ids(out: str) -> list[str]:
    """The ids of ``ls``'s table, top to bottom."""
    lines = out.splitlines()
    heading = next(index for index, line in enumerate(lines) if line.split()[:1] == ["id"])
    ids = []
    for line in lines[heading + 1 :]:
        if not line.strip() or line.startswith(ENDS_OF_TABLE):
            break
        ids.append(line.split()[0])
    return ids


def more_command(out: str) -> list[str] | None:
    """The arguments of the command the last line names for the next page, or None."""
    last = out.splitlines()[-1]
    if not last.startswith("more: "):
        return None
    words = shlex.split(last.removeprefix("more: "))
    assert words[0] == "sessionledger"
    return words[1:]


def pages(env: dict[str, str], *args: str) -> list[list[str]]:
    """Follow ``ls`` page by page through the commands it prints."""
    result = run_cli(env, *args)
    found = []
    while True:
        assert result.code == 0, result.err
        found.append(table_ids(result.out))
        following = more_command(result.out)
        if following is None:
            return found
        result = run_cli(env, *following)


def iso(ms: int, offset_hours: int = 0) -> str:
    zone = datetime.timezone(datetime.timedelta(hours=offset_hours))
    moment = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        milliseconds=ms
    )
    return moment.astimezone(zone).isoformat(timespec="milliseconds")


async def logstore_type(url: str) -> tuple[type[LogStore], bool]:
    store = open_store(url)
    try:
        return type(store.log_store), store.log_store.keeps_audit
    finally:
        await store.close()


# -- ls ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
async def test_ls_pages_through_every_session_once_in_order(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    await fill(url)
    whole = run_cli(cli_env, "--store", url, "ls", "--json").json()
    assert whole["next"] is None
    assert [row["id"] for row in whole["sessions"]] == ACTIVITY_ORDER
    row = {row["id"]: row for row in whole["sessions"]}[sid(3)]
    assert row["events"] == 42
    assert row["lastActivity"] == max(row["lastActivity"] for row in whole["sessions"])
    assert (row["openTurn"], row["problem"], row["meta"]) == (None, None, {"team": "red", "n": 3})

    # The printed command of each page gives the next: every session once, in order.
    found = pages(cli_env, "--store", url, "ls", "--limit", "10")
    assert [len(page) for page in found] == [10, 10, 5]
    assert list(itertools.chain(*found)) == ACTIVITY_ORDER
    # The same through --json cursors.
    ids: list[str] = []
    after: tuple[str, ...] = ()
    while True:
        page = run_cli(cli_env, "--store", url, "ls", "--limit", "10", "--json", *after).json()
        ids += [row["id"] for row in page["sessions"]]
        if page["next"] is None:
            break
        after = ("--after", page["next"])
    assert ids == ACTIVITY_ORDER
    created = pages(cli_env, "--store", url, "ls", "--order", "created", "--limit", "7")
    assert list(itertools.chain(*created)) == CREATED_ORDER
    # A page with no next prints no "more" line.
    last = run_cli(cli_env, "--store", url, "ls", "--limit", "25")
    assert more_command(last.out) is None
    assert last.out.splitlines()[0].startswith("25 sessions in ")


@pytest.mark.parametrize("kind", BACKENDS)
async def test_ls_filters_by_title_meta_and_activity_time(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    await fill(url)
    before = store_bytes(url)
    whole = run_cli(cli_env, "--store", url, "ls", "--json").json()["sessions"]
    last = {row["id"]: row["lastActivity"] for row in whole}

    def listed(*args: str) -> list[str]:
        result = run_cli(cli_env, "--store", url, "ls", "--json", *args)
        assert result.code == 0, result.err
        return [row["id"] for row in result.json()["sessions"]]

    urgent = [i for i in ACTIVITY_ORDER if int(i[1:]) % 5 == 0]
    assert listed("--title", "urgent") == urgent  # any case
    red = [i for i in ACTIVITY_ORDER if int(i[1:]) % 2]
    assert listed("--meta", "team=red") == red
    assert listed("--meta", "n=3") == [sid(3)]
    assert listed("--meta", 'n="3"') == []  # the string "3" is not the number 3
    assert listed("--meta", "team=red", "--meta", "n=4") == []
    assert listed("--meta", "team=red", "--title", "URGENT") == [sid(i) for i in (15, 5)]
    moment = last[sid(10)]
    newer = [i for i in ACTIVITY_ORDER if last[i] >= moment]
    assert listed("--since", iso(moment)) == newer
    assert listed("--since", iso(moment, offset_hours=2)) == newer  # the same instant
    assert listed("--until", iso(moment)) == [i for i in ACTIVITY_ORDER if last[i] < moment]
    assert listed("--since", "2025-06-01") == ACTIVITY_ORDER  # a date: midnight UTC
    assert listed("--until", "2025-06-01") == []
    assert listed("--since", "1h") == []  # all written long ago by the fake clock
    assert listed("--until", "1h") == ACTIVITY_ORDER
    empty = run_cli(cli_env, "--store", url, "ls", "--title", "no such title")
    assert (empty.code, empty.out) == (0, f"no matching sessions in {url}\n")

    # Filters carry over to the next page, and a duration becomes the time it named.
    found = pages(
        cli_env, "--store", url, "ls", "--limit", "4", "--meta", "team=red", "--since", "3650d"
    )
    assert [len(page) for page in found] == [4, 4, 4]  # 12: the last page ends them
    assert list(itertools.chain(*found)) == red
    assert store_bytes(url) == before  # listing wrote nothing


def corrupt_logs(url: str, ids: list[str]) -> None:
    """Damage a committed event of each session in place (same length, same mtime): a
    read of its events fails, while what is stored beside them stays as it was."""
    path = Path(url.partition(":")[2])
    if url.startswith("sqlite:"):
        with sqlite3.connect(path) as db:
            for session_id in ids:
                changed = db.execute(
                    "UPDATE events SET data = '#' || substr(data, 2) WHERE session_id = ? "
                    "AND seq = 1",
                    (session_id,),
                ).rowcount
                assert changed == 1
        db.close()  # the context manager commits; it does not close
        return
    for session_id in ids:
        (log,) = [p for p in path.rglob("session.jsonl") if p.parent.name == session_id]
        stat = log.stat()
        lines = log.read_bytes().split(b"\n")
        lines[2] = b"#" + lines[2][1:]  # the first batch; a second one follows
        log.write_bytes(b"\n".join(lines))
        os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize("kind", BACKENDS)
async def test_ls_reads_no_events(kind: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    url = store_url(kind, tmp_path)
    store_type, _ = await logstore_type(url)
    if (
        store_type.query_sessions is LogStore.query_sessions
        and store_type.list_summaries is LogStore.list_summaries
    ):
        pytest.skip(
            f"the {kind} store keeps no summaries of its own yet (list_summaries and "
            "query_sessions are LogStore's defaults): listing computes them from the logs"
        )
    if kind == "jsonl":
        pytest.skip(
            "the JSONL index trusts a summary only at the revision it names (the log's size "
            "and times, ctime included): any change to the log, damage too, makes it read "
            "the log again, so no damage can be hidden from it; shown on SQLite"
        )
    ids = [sid(i) for i in range(4)]
    clock = itertools.count(BASE, STEP).__next__
    async with Ledger.open(url, clock=clock) as ledger:
        for session_id in ids:
            session = ledger.create(session_id, title=f"about {session_id}")
            closed_turn(session, 1)
            await ledger.flush(session)
            closed_turn(session, 2)
            await ledger.flush(session)
    listed = run_cli(cli_env, "--store", url, "ls", "--json").json()["sessions"]
    corrupt_logs(url, ids)
    for session_id in ids:
        shown = run_cli(cli_env, "--store", url, "show", session_id)
        assert shown.code == 2, shown  # its events cannot be read
    after = run_cli(cli_env, "--store", url, "ls", "--json")
    assert after.code == 0, after.err
    assert after.json()["sessions"] == listed  # every summary, as before: no event read
    assert all(row["problem"] is None and row["events"] == 42 for row in listed)
    table = run_cli(cli_env, "--store", url, "ls")
    assert sorted(table_ids(table.out)) == ids
    assert "unreadable" not in table.out


# -- mistakes ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
async def test_bad_queries_are_one_line_exit_2_and_change_nothing(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    await fill(url)
    before = store_bytes(url)
    created_cursor = run_cli(
        cli_env, "--store", url, "ls", "--order", "created", "--limit", "2", "--json"
    ).json()["next"]
    cases: list[tuple[str, ...]] = [
        ("ls", "--limit", "0"),
        ("ls", "--limit", "-3"),
        ("ls", "--after", "not-a-cursor"),
        ("ls", "--after", "WzFd"),  # base64 JSON, not a cursor
        ("ls", "--after", created_cursor),  # a cursor of another order
        ("ls", "--order", "created", "--title", "task", "--after", created_cursor),
        ("ls", "--since", "yesterday"),
        ("ls", "--until", "2026-13-45"),
        ("ls", "--meta", "team"),
        ("ls", "--meta", "=red"),
        ("ls", "--meta", "n=1", "--meta", "n=2"),
        ("ls", "--order", "newest"),
        ("search", "apples", "--limit", "0"),
        ("search", "!!"),
        ("search", "apples", "--type", "tool/call"),
        ("prune",),
        ("prune", "--title", "task"),
        ("prune", "--older-than", "soon"),
        ("prune", "--older-than", "30d", "--keep-last", "-1"),
        ("prune", "--older-than", "30d", "--meta", "team"),
        ("prune", "--older-than", "30d", "--yes", "--meta", "team"),
    ]
    for args in cases:
        result = run_cli(cli_env, "--store", url, *args)
        assert_one_line_error(result, "BAD_QUERY")
        assert "Traceback" not in result.err, args
    not_int = run_cli(cli_env, "--store", url, "ls", "--limit", "ten")
    assert_one_line_error(not_int, "USAGE")
    assert not_int.err.endswith("(see 'sessionledger ls --help')\n")
    missing = run_cli(cli_env, "--store", url, "search", "apples", "--session", "nope")
    assert_one_line_error(missing, "SESSION_NOT_FOUND")
    assert_one_line_error(run_cli(cli_env, "--store", url, "reindex", "nope"), "SESSION_NOT_FOUND")
    assert store_bytes(url) == before


def test_every_new_command_has_help(cli_env: dict[str, str]) -> None:
    for name, words in [
        ("ls", ("--limit N", "--after CURSOR", "--title TEXT", "--meta KEY=VALUE", "--order")),
        ("prune", ("--older-than DURATION", "--keep-last N", "--yes", "--json")),
        ("audit", ("--json",)),
        ("search", ("TEXT", "--session ID", "--limit N", "--type TYPE")),
        ("reindex", ("ID",)),
    ]:
        helped = run_cli(cli_env, name, "--help")
        assert helped.code == 0, name
        for word in (*words, "--store URL"):
            assert word in helped.out, (name, word)


# -- prune and audit -------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
async def test_prune_shows_the_plan_and_deletes_only_with_yes(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    await fill(url)
    async with Ledger.open(url) as ledger:  # the real clock: not old
        closed_turn(ledger.create("fresh", title="today"), 1)
    before = store_bytes(url)
    old = ACTIVITY_ORDER

    plan = run_cli(cli_env, "--store", url, "prune", "--older-than", "30d")
    assert plan.code == 0, plan.err
    lines = plan.out.splitlines()
    assert lines[0] == f"prune plan for {url} (last activity older than 30d): 25 sessions"
    assert table_ids(plan.out) == old
    assert lines[-1] == "nothing deleted: add --yes to delete these 25 sessions"
    assert lines[-2].startswith("total: ")
    as_json = run_cli(cli_env, "--store", url, "prune", "--older-than", "30d", "--json").json()
    assert as_json["executed"] is False
    assert as_json["deleted"] == []
    assert [row["id"] for row in as_json["sessions"]] == old
    assert as_json["criteria"]["olderThan"] == 30 * 86_400_000
    kept = run_cli(
        cli_env, "--store", url, "prune", "--keep-last", "20", "--meta", "team=red", "--json"
    ).json()
    red = [i for i in ACTIVITY_ORDER if int(i[1:]) % 2]
    assert [row["id"] for row in kept["sessions"]] == red[20:]
    nothing = run_cli(cli_env, "--store", url, "prune", "--older-than", "3650d")
    assert nothing.out.startswith(f"nothing to prune in {url}: no session matches")
    assert store_bytes(url) == before  # byte for byte: a plan writes nothing

    _, keeps_audit = await logstore_type(url)
    executed = run_cli(
        cli_env, "--store", url, "prune", "--older-than", "30d", "--title", "urgent", "--yes"
    )
    urgent = [i for i in old if int(i[1:]) % 5 == 0]
    if not keeps_audit:  # refused: every deletion must be on record
        assert_one_line_error(executed, "CONFIG")
        assert "keeps no audit log" in executed.err
        assert store_bytes(url) == before
        return
    assert executed.code == 0, executed.err
    assert executed.out.splitlines()[0].startswith(f"deleted 5 sessions from {url} (")
    assert table_ids(executed.out) == urgent
    listed = run_cli(cli_env, "--store", url, "ls", "--json").json()["sessions"]
    assert sorted(row["id"] for row in listed) == sorted({*old, "fresh"} - set(urgent))
    records = run_cli(cli_env, "--store", url, "audit", "--json").json()
    assert [record["phase"] for record in records] == ["begin", "end"]
    assert records[0]["id"] == records[1]["id"]
    assert records[1]["deleted"] == urgent
    audit = run_cli(cli_env, "--store", url, "audit")
    assert "older than 30d, title holding 'urgent'" in audit.out
    assert "5 deleted of 5" in audit.out
    assert audit.out.split()[-1] == "done"


#: Fills ``memory:m`` and runs the command line in this process once per argument
#: (a memory store lives as long as its process); each output ends with ``rc N``.
MEMORY_SESSION = """
import asyncio, itertools, sys
from sessionledger import Ledger
from sessionledger.cli.__main__ import main
from sessionledger.runtime._ledger import open_store
from sessionledger.testing.builders import closed_turn

async def fill():
    clock = itertools.count(1_000_000, 1000).__next__  # one order: no two times alike
    async with Ledger.open("memory:m", clock=clock) as ledger:
        for i in range(5):
            closed_turn(ledger.create(f"s{i}", title=f"task {i}"), 1)

async def killed_prune():  # what a prune killed after its first record leaves
    store = open_store("memory:m")
    await store.log_store.append_audit(
        {"action": "prune", "id": "k1", "phase": "begin", "time": 0, "host": "h",
         "user": "u", "pid": 1, "criteria": {"olderThan": 3600000}, "sessions": ["s9"]}
    )

asyncio.run(fill())
for line in sys.argv[1:]:
    if line == "kill":
        asyncio.run(killed_prune())
        continue
    print("rc", main(["--store", "memory:m", *line.split()]), flush=True)
"""


def test_an_executed_prune_is_in_the_audit_log_and_an_interrupted_one_says_so(
    cli_env: dict[str, str],
) -> None:
    script = [sys.executable, "-c", MEMORY_SESSION]
    done = run_cli(
        cli_env,
        "prune --keep-last 2 --yes",
        "audit --json",
        "kill",
        "audit",
        "ls --json",
        "prune --keep-last 2 --yes --json",
        command=script,
    )
    assert done.code == 0, done.err
    outputs = done.out.split("rc 0\n")
    assert len(outputs) == 6, done.out
    deleted, records, audit, listed, again, _ = outputs
    first = deleted.splitlines()
    assert first[0].startswith("deleted 3 sessions from memory:m (keeping the 2 most ")
    assert first[0].endswith(" bytes freed")
    assert table_ids(deleted) == ["s2", "s1", "s0"]  # s4 and s3 are the most recent
    assert deleted.count("deleted") == 4  # the first line and each row's outcome
    prune_id = orjson.loads(records)[0]["id"]
    assert first[-1] == f"recorded in the audit log as {prune_id} ('sessionledger audit')"
    rows = audit.splitlines()
    assert rows[0] == "2 audit entries in memory:m"
    assert rows[2].split()[-1] == "done"
    assert "3 deleted of 3" in rows[2]
    assert rows[3].split()[-1] == "interrupted"
    assert "1 planned" in rows[3]
    assert "last activity older than 1h" in rows[3]
    assert [row["id"] for row in orjson.loads(listed)["sessions"]] == ["s4", "s3"]
    assert orjson.loads(again)["executed"] is True
    assert orjson.loads(again)["sessions"] == []


# -- search and reindex ----------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
async def test_search_finds_messages_newest_first(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    await fill(url)
    before = store_bytes(url)
    hits = run_cli(cli_env, "--store", url, "search", "Apples", "--limit", "50", "--json").json()
    apples = [sid(i) for i in range(COUNT) if i % 3 == 0]
    assert sorted({hit["sessionId"] for hit in hits}) == apples
    assert len(hits) == len(apples) + 1  # s03's second question too
    assert [hit["time"] for hit in hits] == sorted((hit["time"] for hit in hits), reverse=True)
    assert hits[0]["sessionId"] == sid(3)
    assert hits[0]["snippet"] == "one more about apples"
    assert {hit["type"] for hit in hits} == {"user/message"}
    assert set(hits[0]) == {"sessionId", "seq", "type", "time", "snippet"}
    both = run_cli(cli_env, "--store", url, "search", "question apples 9", "--json").json()
    assert [(hit["sessionId"], hit["snippet"]) for hit in both] == [
        (sid(9), "question 9 about apples")
    ]
    one = run_cli(cli_env, "--store", url, "search", "apples", "--session", sid(3), "--json")
    assert [hit["sessionId"] for hit in one.json()] == [sid(3), sid(3)]
    assert len(run_cli(cli_env, "--store", url, "search", "about", "--json").json()) == 20
    assert (
        len(run_cli(cli_env, "--store", url, "search", "about", "--limit", "3", "--json").json())
        == 3
    )
    typed = run_cli(
        cli_env, "--store", url, "search", "apples", "--type", "assistant/message", "--json"
    )
    assert typed.json() == []
    table = run_cli(cli_env, "--store", url, "search", "apples")
    lines = table.out.splitlines()
    assert lines[0] == f"10 hits for apples in {url}, newest first"
    assert lines[1].split() == ["session", "seq", "type", "time", "snippet"]
    assert lines[2].split()[0] == sid(3)
    assert lines[2].rstrip().endswith("one more about apples")
    none = run_cli(cli_env, "--store", url, "search", "bananas")
    assert (none.code, none.out) == (0, f"no message in {url} holds bananas\n")
    assert store_bytes(url) == before


@pytest.mark.parametrize("kind", BACKENDS)
async def test_reindex_rebuilds_and_names_unreadable_logs(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    clock = itertools.count(BASE, STEP).__next__
    async with Ledger.open(url, clock=clock) as ledger:
        for session_id in ("a", "b", "c"):
            session = ledger.create(session_id)
            closed_turn(session, 1, prompt=f"about {session_id}")
            await ledger.flush(session)
            closed_turn(session, 2)
            await ledger.flush(session)
    every = run_cli(cli_env, "--store", url, "reindex")
    assert (every.code, every.out) == (0, f"reindexed 3 sessions in {url}\n")
    one = run_cli(cli_env, "--store", url, "reindex", "b", "--json")
    assert (one.code, one.json()) == (0, {"reindexed": 1, "unreadable": []})
    listed = run_cli(cli_env, "--store", url, "ls", "--json").json()["sessions"]
    assert [row["events"] for row in listed] == [42, 42, 42]
    assert [
        hit["sessionId"]
        for hit in run_cli(cli_env, "--store", url, "search", "about b", "--json").json()
    ] == ["b"]
    corrupt_logs(url, ["b"])
    broken = run_cli(cli_env, "--store", url, "reindex")
    assert broken.code == 1, broken.err
    lines = broken.out.splitlines()
    assert lines[0] == f"reindexed 2 sessions in {url}"
    assert lines[1].startswith("✗ b: unreadable: ")
    assert "'sessionledger verify ID' says why" in lines[2]
    as_json = run_cli(cli_env, "--store", url, "reindex", "--json")
    assert as_json.code == 1
    assert as_json.json()["reindexed"] == 2
    assert [item["id"] for item in as_json.json()["unreadable"]] == ["b"]


async def test_a_sqlite_url_with_options_names_the_file_before_them(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    # "?upgrade=1" is how an older store is upgraded (docs/listing.md): the command must
    # find the file before the options, not refuse "no store at …?upgrade=1".
    url = store_url("sqlite", tmp_path)
    await fill(url)
    for options in ("?upgrade=1", "?synchronous=NORMAL"):
        listed = run_cli(cli_env, "--store", url + options, "ls", "--limit", "3", "--json")
        assert listed.code == 0, listed
        assert [row["id"] for row in listed.json()["sessions"]] == ACTIVITY_ORDER[:3]
        rebuilt = run_cli(cli_env, "--store", url + options, "reindex")
        assert rebuilt.code == 0, rebuilt
    missing = f"sqlite:{tmp_path / 'none.db'}?upgrade=1"
    looked = run_cli(cli_env, "--store", missing, "ls")
    assert (looked.code, looked.out.startswith("no sessions in ")) == (0, True), looked
    searched = run_cli(cli_env, "--store", missing, "search", "word")
    assert searched.code == 0, searched
    assert not (tmp_path / "none.db").exists()  # looking created nothing


async def test_the_listing_commands_on_postgresql(pg_url: str, cli_env: dict[str, str]) -> None:
    """The same commands on the one store with both a listing index and a text index
    in another process's database: pages, filters, search, prune with its audit, reindex."""
    from sessionledger_postgres.testing import drop_schema, with_options

    schema = f"cli_{os.getpid()}_{datetime.datetime.now().microsecond}"
    url = with_options(pg_url, schema=schema)
    try:
        await fill(url)
        found = pages(cli_env, "--store", url, "ls", "--limit", "10")
        assert list(itertools.chain(*found)) == ACTIVITY_ORDER
        red = run_cli(cli_env, "--store", url, "ls", "--meta", "team=red", "--json").json()
        assert [row["id"] for row in red["sessions"]] == [
            id for id in ACTIVITY_ORDER if int(id[1:]) % 2
        ]
        hits = run_cli(cli_env, "--store", url, "search", "apples", "--limit", "3", "--json")
        assert [hit["sessionId"] for hit in hits.json()] == [sid(3), sid(24), sid(21)]
        plan = run_cli(cli_env, "--store", url, "prune", "--keep-last", "20")
        assert plan.code == 0, plan
        assert "nothing deleted" in plan.out
        done = run_cli(cli_env, "--store", url, "prune", "--keep-last", "20", "--yes", "--json")
        assert sorted(done.json()["deleted"]) == sorted(ACTIVITY_ORDER[20:])
        audit = run_cli(cli_env, "--store", url, "audit", "--json").json()
        assert [record["phase"] for record in audit] == ["begin", "end"]
        left = run_cli(cli_env, "--store", url, "ls", "--json").json()
        assert [row["id"] for row in left["sessions"]] == ACTIVITY_ORDER[:20]
        rebuilt = run_cli(cli_env, "--store", url, "reindex")
        assert rebuilt.code == 0, rebuilt
        bad = run_cli(cli_env, "--store", url, "ls", "--after", "garbage")
        assert_one_line_error(bad, "BAD_QUERY")
    finally:
        await drop_schema(pg_url, schema)
