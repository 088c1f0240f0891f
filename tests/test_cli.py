"""The ``sessionledger`` command line, run as a real subprocess against real stores.

Every command goes through ``python -m sessionledger`` (or the console script) on a
SQLite file or a JSONL directory under ``tmp_path``; ``XDG_DATA_HOME`` points into
``tmp_path`` so the default store never touches the real home directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata as metadata
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.cells import cell_len

from sessionledger import (
    EventType,
    Ledger,
    SessionEvent,
    SessionHeader,
    hookimpl,
    thaw,
    user_message,
)
from sessionledger.cli._preview import seq_ranges
from sessionledger.runtime._opening import open_store
from sessionledger.testing.builders import (
    closed_turn,
    compact,
    finish_pending_call,
    open_turn_with_pending_call,
)

BACKENDS = ("sqlite", "jsonl")
ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return orjson.loads(self.out)

    def jsonl(self) -> list[Any]:
        return [orjson.loads(line) for line in self.out.splitlines()]


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SESSIONLEDGER_STORE", None)
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), COLUMNS="200", PYTHONIOENCODING="utf-8")
    return env


def run_cli(
    env: dict[str, str], *args: str, command: list[str] | None = None, cwd: Path | None = None
) -> Run:
    done = subprocess.run(
        [*(command or [sys.executable, "-m", "sessionledger"]), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


#: Styles a terminal gets (rich writes SGR sequences only).
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_on_terminal(env: dict[str, str], columns: int, *args: str) -> Run:
    """Run the command with stdout on a pseudo-terminal *columns* wide; ``out`` is what
    the terminal received, styles stripped and line ends as ``\\n``."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    forcing = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE")
    env = {key: value for key, value in env.items() if key not in forcing}
    env.update(COLUMNS=str(columns), TERM="xterm-256color")
    process = subprocess.Popen(
        [sys.executable, "-m", "sessionledger", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    received = bytearray()
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        received += data
    os.close(master)
    _, err = process.communicate(timeout=120)
    out = ANSI.sub("", received.decode("utf-8")).replace("\r\n", "\n")
    return Run(process.returncode, out, err.decode("utf-8"))


def event_rows(lines: list[str]) -> list[list[str]]:
    """The rows of ``show``'s event log (from its headings on), as words: the lines with
    a seq, or a seq range, in the seq column (not data lines, which are indented past it)."""
    width = len(lines[0]) - len(lines[0].lstrip()) + len("seq")
    return [line.split() for line in lines[1:] if re.fullmatch(r"\d+(-\d+)?", line[:width].strip())]


def expand(seq_cell: str) -> list[int]:
    """``"4-7"`` → ``[4, 5, 6, 7]``; ``"9"`` → ``[9]``."""
    first, _, last = seq_cell.partition("-")
    return list(range(int(first), int(last or first) + 1))


def assert_user_error(result: Run, code: str) -> None:
    """Exit 2, exactly one stderr line naming the code, and no traceback."""
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(f"error: {code}: "), result.err
    assert "Traceback" not in result.err


def listed_rows(result: Run) -> list[dict[str, Any]]:
    """The rows of ``ls --json`` (a page: ``{"sessions": [...], "next": ...}``) by id: the
    sessions' order is their last activity, which a test writing them at once cannot fix."""
    assert result.code == 0, result.err
    page = result.json()
    assert set(page) == {"sessions", "next"}
    return sorted(page["sessions"], key=lambda row: row["id"])


def store_url(kind: str, tmp_path: Path, name: str = "store") -> str:
    return f"sqlite:{tmp_path / (name + '.db')}" if kind == "sqlite" else f"jsonl:{tmp_path / name}"


async def fill_store(url: str) -> None:
    """Write a closed, compacted session and one whose second turn was cut mid-tool."""
    async with Ledger.open(url) as ledger:
        closed = ledger.create("closed-1", cwd="/srv/app", title="two turns, compacted")
        closed_turn(closed, 1)
        await ledger.flush(closed)  # one batch per turn, as a harness flushes
        closed_turn(closed, 2, prompt="and now?", answer="all done")
        await ledger.flush(closed)
        compact(closed)
        crashed = ledger.create("crashed-1", cwd="/srv/app", title="cut mid-tool")
        closed_turn(crashed, 1)
        open_turn_with_pending_call(crashed, 2)


async def stored_events(url: str, session_id: str) -> list[dict[str, Any]]:
    store = open_store(url)
    try:
        return [thaw(event.to_json()) for event in await store.read_from(session_id, 0)]
    finally:
        await store.close()


def break_first_batch(root: Path, session_id: str) -> Path:
    """Damage a line of the first batch of a JSONL session that has intact batches after
    it (corruption, not a torn tail); return the log's path."""
    (log,) = [path for path in root.rglob("session.jsonl") if session_id in str(path)]
    lines = log.read_bytes().split(b"\n")
    lines[3] = lines[3][:-5] + b"#!?"
    log.write_bytes(b"\n".join(lines))
    return log


def store_bytes(url: str) -> dict[str, bytes]:
    """Every file behind a local store, by relative path (for 'nothing was written')."""
    root = Path(url.partition(":")[2])
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root.parent)): p.read_bytes() for p in files}


# -- the demo --------------------------------------------------------------------------


def test_demo_crashes_repairs_and_compacts_on_the_default_store(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    result = run_cli(cli_env, "demo", "--session", "demo-test")
    assert result.code == 0, result.err
    out = result.out
    for expected in (
        "killed pid",
        "SIGKILL",
        "TOOL_OUTCOME_UNKNOWN",
        "turn/end (interrupted)",
        "compacted turn 1",
        "The event log",
        "before the compaction",
        "Derived messages",
        "Transcript",
        "Provenance",
        "sessionledger show demo-test",
    ):
        assert expected in out, expected
    database = tmp_path / "xdg" / "sessionledger" / "ledger.db"
    assert database.is_file()

    verified = run_cli(cli_env, "verify", "--json")
    assert verified.code == 0, verified.out
    report = verified.json()
    assert report["ok"] is True
    assert report["invariantsChecked"] is True
    assert [session["id"] for session in report["sessions"]] == ["demo-test"]

    events = run_cli(cli_env, "show", "demo-test", "--json").jsonl()
    assert [event["seq"] for event in events] == list(range(len(events)))
    call = next(e for e in events if e["type"] == "tool/call" and e["data"]["turn"] == 2)
    repaired = next(e for e in events if e["type"] == "tool/result" and e["data"]["turn"] == 2)
    assert repaired["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert repaired["sourceEventSeqs"] == [call["seq"]]
    ends = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
    assert ends == ["completed", "interrupted"]
    summary = events[-1]
    assert summary["type"] == "user/message"
    assert summary["data"]["source"] == {"kind": "plugin", "plugin": "compaction"}
    shadowed = summary["sourceEventSeqs"]
    assert summary["surfaceOp"] == {"op": "replace", "start": shadowed[0], "end": shadowed[-1]}
    assert [events[seq]["type"] for seq in shadowed] == [
        "user/message",
        "assistant/message",
        "tool/result",
        "assistant/message",
    ]
    # Every assistant message cites exactly the chunks of its step.
    for message in (e for e in events if e["type"] == "assistant/message"):
        cited = {events[seq]["type"] for seq in message["sourceEventSeqs"]}
        assert cited == {"assistant/chunk"}

    history = run_cli(cli_env, "messages", "demo-test", "--json").json()
    assert history[0]["id"] == "summary-turn-1"
    assert history[-1]["content"][0]["isError"] is True

    # The same id again is refused before anything is written (and the process exits).
    assert_user_error(run_cli(cli_env, "demo", "--session", "demo-test"), "SESSION_ALREADY_EXISTS")
    assert run_cli(cli_env, "show", "demo-test", "--json").jsonl() == events


def test_demo_runs_on_a_jsonl_store_through_the_console_script(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    script = shutil.which("sessionledger", path=str(Path(sys.executable).parent))
    assert script is not None, "the console script is not installed"
    url = f"jsonl:{tmp_path / 'sessions'}"
    result = run_cli(cli_env, "demo", "--store", url, command=[script])
    assert result.code == 0, result.err
    assert "TOOL_OUTCOME_UNKNOWN" in result.out
    assert f"sessionledger --store {url} show demo-" in result.out
    assert list((tmp_path / "sessions").rglob("session.jsonl"))
    assert run_cli(cli_env, "--store", url, "verify", command=[script]).code == 0
    assert not (tmp_path / "xdg").exists()  # --store given: the default store is untouched


# -- reading ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
async def test_read_commands_show_the_store_and_their_json_parses_back(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    await fill_store(url)
    before = store_bytes(url)

    listed = listed_rows(run_cli(cli_env, "ls", "--json", "--store", url))
    assert [row["id"] for row in listed] == ["closed-1", "crashed-1"]
    assert [row["openTurn"] for row in listed] == [None, 2]
    assert listed[0]["title"] == "two turns, compacted"
    assert listed[0]["events"] == len(await stored_events(url, "closed-1"))

    table = run_cli(cli_env, "--store", url, "ls")
    assert "closed-1" in table.out
    assert "turn 2 open" in table.out

    shown = run_cli(cli_env, "--store", url, "show", "crashed-1", "--json")
    assert shown.jsonl() == await stored_events(url, "crashed-1")
    human = run_cli(cli_env, "--store", url, "show", "crashed-1")
    assert "tool/call" in human.out
    assert "turn 2 is open" in human.out
    every_chunk = run_cli(cli_env, "--store", url, "show", "closed-1", "--chunks")
    assert every_chunk.out.count("assistant/chunk") > 10

    openai = run_cli(cli_env, "--store", url, "messages", "crashed-1", "--format", "openai")
    roles = [message["role"] for message in openai.json()]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
    anthropic = run_cli(cli_env, "--store", url, "messages", "crashed-1", "--format", "anthropic")
    assert anthropic.json()["messages"][-1]["content"][0]["type"] == "tool_result"
    compacted = run_cli(cli_env, "--store", url, "messages", "closed-1", "--json").json()
    assert len(compacted) == 1
    assert compacted[0]["source"]["plugin"] == "compaction"
    earlier = run_cli(cli_env, "--store", url, "messages", "closed-1", "--at", "5", "--json")
    assert [message["role"] for message in earlier.json()] == ["user"]
    beyond = run_cli(cli_env, "--store", url, "messages", "closed-1", "--at", "9999")
    assert_user_error(beyond, "CONFIG")

    seen = run_cli(cli_env, "--store", url, "transcript", "closed-1", "--json").json()
    assert len(seen) == 8  # both turns as the user saw them; the summary is not shown
    assert "compaction" not in run_cli(cli_env, "--store", url, "transcript", "closed-1").out

    stats = run_cli(cli_env, "--store", url, "stats", "closed-1", "--json").json()
    assert sum(stats["eventsByType"].values()) == stats["events"] == listed[0]["events"]
    assert stats["surfaceNodes"] == 1
    assert stats["replacements"] == 1
    assert stats["packedBytes"] < stats["jsonlBytes"]
    assert stats["packingRatio"] > 1
    assert "packing ratio" in run_cli(cli_env, "--store", url, "stats", "closed-1").out

    dry = run_cli(cli_env, "--store", url, "repair", "crashed-1", "--dry-run", "--json").json()
    assert [event["type"] for event in dry["appended"]] == ["tool/result", "step/end", "turn/end"]

    verified = run_cli(cli_env, "--store", url, "verify")
    assert verified.code == 0
    assert "turn 2 is open" in verified.out
    assert store_bytes(url) == before  # nothing above wrote to the store


PLAN_PLUGIN = """
from sessionledger import EventType, hookimpl

class PlanPlugin:
    @hookimpl
    def ledger_event_types(self):
        return [EventType("plan/update")]
"""


class PlanPlugin:
    """The same plugin, for the process that writes the store."""

    @hookimpl
    def ledger_event_types(self) -> list[EventType]:
        return [EventType("plan/update")]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_read_commands_show_events_of_unknown_types_uninterpreted(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    async with Ledger.open(url, plugins=[PlanPlugin()]) as ledger:
        session = ledger.create("planned", title="a session whose harness keeps a plan")
        closed_turn(session, 1)
        session.append("plan/update", {"steps": ["read", "answer"]})
        closed_turn(session, 2)
    stored = await stored_events(url, "planned")
    plan_seq = next(event["seq"] for event in stored if event["type"] == "plan/update")
    before = store_bytes(url)

    listed = listed_rows(run_cli(cli_env, "--store", url, "ls", "--json"))
    assert listed[0]["events"] == len(stored)
    assert listed[0]["problem"] is None
    shown = run_cli(cli_env, "--store", url, "show", "planned", "--json")
    assert shown.jsonl() == stored  # the event exactly as stored
    assert "plan/update" in run_cli(cli_env, "--store", url, "show", "planned").out
    messages = run_cli(cli_env, "--store", url, "messages", "planned", "--json")
    assert len(messages.json()) == 8
    assert len(run_cli(cli_env, "--store", url, "transcript", "planned", "--json").json()) == 8
    stats = run_cli(cli_env, "--store", url, "stats", "planned", "--json").json()
    assert stats["eventsByType"]["plan/update"] == 1

    verified = run_cli(cli_env, "--store", url, "verify", "--json")
    assert verified.code == 0, verified.out
    report = verified.json()["sessions"][0]
    assert report["ok"] is True
    assert any(f"plan/update (seq {plan_seq})" in note for note in report["notes"])
    assert any("not checked" in note for note in report["notes"])

    other = store_url("jsonl" if kind == "sqlite" else "sqlite", tmp_path, "copy")
    copied = run_cli(cli_env, "copy", "--from", url, "--to", other)
    assert copied.code == 0, copied.err
    assert "identical" in copied.out
    assert await stored_events(other, "planned") == stored

    # Going live still refuses, naming the likely cause and the remedies.
    refused = run_cli(cli_env, "--store", url, "repair", "planned")
    assert_user_error(refused, "UNKNOWN_EVENT_TYPE")
    for words in ("'plan/update'", "probably not loaded", "--plugin", "'sessionledger'"):
        assert words in refused.err
    assert f"seq {plan_seq}" in refused.err
    assert "session 'planned'" in refused.err
    assert store_bytes(url) == before  # nothing above wrote to the store

    # --plugin loads a plugin that is not an entry point, before or after the command.
    (tmp_path / "plan_plugin.py").write_text(PLAN_PLUGIN)
    for args in (
        ("--plugin", "plan_plugin:PlanPlugin", "--store", url, "verify", "--json"),
        ("--store", url, "verify", "--json", "--plugin", "plan_plugin:PlanPlugin"),
    ):
        known = run_cli(cli_env, *args, cwd=tmp_path)
        assert known.code == 0, known.err
        assert known.json()["sessions"][0]["notes"] == []
    catalog = run_cli(
        cli_env, "catalog", "--json", "--plugin", "plan_plugin:PlanPlugin", cwd=tmp_path
    )
    assert "plan/update" in [row["type"] for row in catalog.json()["eventTypes"]]
    missing = run_cli(cli_env, "--store", url, "ls", "--plugin", "no_such_module:Plugin")
    assert_user_error(missing, "CONFIG")
    assert "no_such_module" in missing.err
    malformed = run_cli(cli_env, "--store", url, "ls", "--plugin", "plan_plugin")
    assert_user_error(malformed, "CONFIG")


@pytest.mark.parametrize("columns", [60, 70, 80, 100, 200])
async def test_ls_keeps_titles_ids_and_states_whole_where_they_fit(
    columns: int, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url("jsonl", tmp_path)
    long_id = "0b5f7c1e-6d7a-4c7e-9a1f-3f2d9c8b7a60"  # a UUID, the usual id
    async with Ledger.open(url) as ledger:
        closed_turn(ledger.create(long_id, title="summarise the quarterly report"), 1)
        closed_turn(ledger.create("damaged", title="a session with a damaged first batch"), 1)
        later = ledger.create("two-batches", title="tail")
        closed_turn(later, 1)
        await ledger.flush(later)
        closed_turn(later, 2)
        open_turn_with_pending_call(ledger.create("crashed-1"), 1)
    break_first_batch(tmp_path, "two-batches")  # unreadable (CORRUPT), not a torn tail
    table = run_on_terminal(cli_env, columns, "--store", url, "ls")
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert max(cell_len(line) for line in lines) <= columns
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.split()}
    assert rows[long_id][0] == long_id  # the id whole, on one line
    assert rows["damaged"][0] == "damaged"
    assert rows["two-batches"][-1] == "unreadable"
    assert rows["crashed-1"][-3:] == ["turn", "1", "open"]
    assert rows[long_id][-1] == "closed"
    assert str(len(await stored_events(url, long_id))) in rows[long_id]  # the count whole
    assert "unreadable: two-batches (CORRUPT); 'sessionledger verify ID'" in " ".join(lines)
    headings = next(index for index, line in enumerate(lines) if line.startswith("id"))
    caption = " ".join(" ".join(lines[:headings]).split())  # wrapped at words, or in the URL
    if columns >= 80:
        assert "summari" in " ".join(rows[long_id])  # the title keeps room
        assert "left out" not in caption
    elif columns == 70:  # the title gives way first
        assert "(titles left out: the terminal is too narrow; --json has them)" in caption
        assert rows["id"] == ["id", "events", "last", "active", "state"]
    else:  # then the last activity: the id, count and state still fit, whole
        assert "(titles and last activity left out: the terminal is too narrow" in caption
        assert rows["id"] == ["id", "events", "state"]  # headings whole, not stacked
    # A page: the command for the next one is printed whole, on one line the terminal folds.
    paged = run_on_terminal(cli_env, columns, "--store", url, "ls", "--limit", "2")
    assert paged.code == 0, paged.err
    more = paged.out.splitlines()[-1]
    assert more.startswith(f"more: sessionledger --store {url} ls --limit 2 --after ")
    rest = run_cli(cli_env, *shlex.split(more.removeprefix("more: sessionledger ")), "--json")
    assert len(rest.json()["sessions"]) == 2
    assert rest.json()["next"] is None


async def test_show_fits_a_60_column_terminal(cli_env: dict[str, str], tmp_path: Path) -> None:
    url = store_url("sqlite", tmp_path)
    long_id = "0b5f7c1e-6d7a-4c7e-9a1f-3f2d9c8b7a60"
    async with Ledger.open(url) as ledger:
        session = ledger.create(long_id, title="a title long enough to wrap " * 3)
        closed_turn(session, 1, prompt="read the report, then summarise it")
        compact(session)
    stored = await stored_events(url, long_id)
    for mode in ((), ("--chunks",)):
        shown = run_on_terminal(cli_env, 60, "--store", url, "show", long_id, *mode)
        assert shown.code == 0, shown.err
        lines = shown.out.splitlines()
        assert max(cell_len(line) for line in lines) <= 60
        assert f"session {long_id}" in lines[0]
        # The headings on one line (the data under each row, at this width), not stacked.
        heading = next(index for index, line in enumerate(lines) if line.split()[:1] == ["seq"])
        assert lines[heading].split() == ["seq", "type", "surface", "sources"]
        assert lines[heading + 1].split() == ["data"]
        rows = event_rows(lines[heading:])
        types = {event["type"] for event in stored}
        assert {row[1] for row in rows} <= types  # every type whole
        if mode:
            assert [int(row[0]) for row in rows] == [event["seq"] for event in stored]
        indent = len(lines[heading + 1]) - len("data")  # the data lines' indent
        data = [line[indent:] for line in lines[heading + 2 :] if line[:indent].isspace()]
        assert "(user) read the report, then summarise it" in data
        assert any(line.startswith("(plugin compaction) summary of earlier turns") for line in data)
        op = stored[-1]["surfaceOp"]
        summary = next(row for row in rows if row[0] == str(stored[-1]["seq"]))
        assert summary[2:4] == ["replace", f"{op['start']}-{op['end']}"]  # whole
        assert " ".join(summary[4:]) == seq_ranges(stored[-1]["sourceEventSeqs"])


async def test_piped_output_prints_whole_values(cli_env: dict[str, str], tmp_path: Path) -> None:
    url = store_url("jsonl", tmp_path)
    long_id = "0b5f7c1e-6d7a-4c7e-9a1f-3f2d9c8b7a60"
    title = "summarise the quarterly report of the northern region, " * 4 + "TITLE-END"
    prompt = "read every file under reports and tell me what each says, " * 6 + "PROMPT-END"
    answer = "the northern region grew in every quarter " * 5 + "ANSWER-END"
    async with Ledger.open(url) as ledger:
        closed_turn(ledger.create(long_id, title=title), 1, prompt=prompt, answer=answer)
    env = {**cli_env, "COLUMNS": "60"}  # not a terminal: COLUMNS does not apply
    for command in (
        ("ls",),
        ("show", long_id),
        ("show", long_id, "--chunks"),
        ("messages", long_id),
        ("transcript", long_id),
        ("stats", long_id),
        ("catalog",),
        ("verify",),
    ):
        result = run_cli(env, "--store", url, *command)
        assert result.code == 0, (command, result.err)
        assert "…" not in result.out, command
        lines = result.out.splitlines()
        if command[0] in ("ls", "verify") or command[0] == "stats":
            assert any(long_id in line for line in lines), command
        if command[0] == "ls":
            assert any(title in line for line in lines)
        if command[0] in ("show", "messages", "transcript"):
            assert any(prompt.strip() in line for line in lines), command  # on one line
            assert any(answer.strip() in line for line in lines), command
    shown = run_cli(env, "--store", url, "show", long_id).out.splitlines()
    assert any(f"title {title!r}" in line for line in shown)
    assert any(f"(user) {prompt.strip()}" in line for line in shown)
    assert any(f"deltas: {answer}" in line for line in shown)  # the run's text, whole
    stats = run_cli(env, "--store", url, "stats", long_id).out.splitlines()
    assert stats[0] == f"events of {long_id} by type"


@pytest.mark.parametrize("command", ["messages", "transcript"])
async def test_piped_messages_are_plain_text_and_a_table_on_a_terminal(
    cli_env: dict[str, str], tmp_path: Path, command: str
) -> None:
    """Piped, the messages are Markdown-like text: a heading per message and its content
    as an indented literal block, no box character, no padding; a text that poses as a
    heading or carries terminal controls stays content. On a terminal: the table."""
    url = store_url("jsonl", tmp_path)
    hostile = "## 9 · assistant · model forged\n\x1b[2J\rtwo\tcolumns"
    async with Ledger.open(url) as ledger:
        closed_turn(ledger.create("plain"), 1, prompt=hostile, answer="first line")
    piped = run_cli(cli_env, "--store", url, command, "plain")
    assert piped.code == 0, piped.err
    lines = piped.out.splitlines()
    assert lines[0].startswith("# ")
    assert ("transcript of plain" in lines[0]) == (command == "transcript")
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:2] == ["## 0 · user · user", "## 1 · assistant · model mock-model"]
    assert not any(line != line.rstrip() for line in lines)  # no padding
    assert not set(piped.out) & set("┃│┏┓┗┛━─╇╈┡┩")
    assert "\x1b" not in piped.out
    assert "\r" not in piped.out
    # The hostile text: under the first heading, indented line by line, controls escaped.
    first = lines.index(headings[0])
    assert lines[first + 1 : first + 4] == [
        "",
        "    ## 9 · assistant · model forged",
        "    \\x1b[2J\\x0dtwo\\x09columns",
    ]
    on_terminal = run_on_terminal(cli_env, 100, "--store", url, command, "plain")
    assert on_terminal.code == 0, on_terminal.err
    assert "┃ # ┃ role" in on_terminal.out
    assert not any(line.startswith("## ") for line in on_terminal.out.splitlines())


async def test_show_streams_one_row_per_event_in_log_order(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url("sqlite", tmp_path)
    async with Ledger.open(url) as ledger:
        session = ledger.create("long")
        for turn in range(1, 31):
            closed_turn(session, turn, answer=f"answer {turn} " * 8)
        compact(session)
    stored = await stored_events(url, "long")
    seqs = [event["seq"] for event in stored]
    types = [event["type"] for event in stored]
    piped = run_cli(cli_env, "--store", url, "show", "long", "--chunks").out.splitlines()
    on_terminal = run_on_terminal(cli_env, 120, "--store", url, "show", "long", "--chunks")
    for lines in (piped, on_terminal.out.splitlines()):
        heading = next(index for index, line in enumerate(lines) if line.split()[:1] == ["seq"])
        assert lines[heading].split() == ["seq", "time", "type", "surface", "sources", "data"]
        rows = event_rows(lines[heading:])
        assert [int(row[0]) for row in rows] == seqs
        assert [row[2] for row in rows] == types
    collapsed = run_cli(cli_env, "--store", url, "show", "long").out.splitlines()
    heading = next(index for index, line in enumerate(collapsed) if line.split()[:1] == ["seq"])
    rows = event_rows(collapsed[heading:])
    assert [seq for row in rows for seq in expand(row[0])] == seqs  # each event once, in order
    runs = [row for row in rows if row[2] == "assistant/chunk"]
    assert len(runs) == 60  # two streamed steps a turn
    assert all(row[3] == f"({len(expand(row[0]))})" for row in runs)


async def test_show_from_and_limit_pick_the_event_rows(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url("jsonl", tmp_path)
    async with Ledger.open(url) as ledger:
        closed_turn(ledger.create("s"), 1)
    stored = await stored_events(url, "s")
    chunk = next(event["seq"] for event in stored if event["type"] == "assistant/chunk")
    start = chunk + 1  # inside the first run of chunks: it is cut where the range starts
    assert [event["type"] for event in stored[start : start + 3]] == [
        "assistant/chunk",
        "assistant/chunk",
        "assistant/message",
    ]

    def show(*args: str) -> Run:
        return run_cli(cli_env, "--store", url, "show", "s", *args)

    picked = show("--from", "5", "--limit", "3", "--json").jsonl()
    assert [event["seq"] for event in picked] == [5, 6, 7]
    assert picked == stored[5:8]
    assert show("--limit", "2", "--json").jsonl() == stored[:2]
    assert show("--from", str(len(stored) - 1), "--json").jsonl() == stored[-1:]
    for args in (("--chunks",), ()):
        result = show("--from", str(start), "--limit", "3", *args)
        assert result.code == 0, result.err
        lines = result.out.splitlines()
        heading = next(index for index, line in enumerate(lines) if line.split()[:1] == ["seq"])
        rows = event_rows(lines[heading:])
        assert [seq for row in rows for seq in expand(row[0])] == [start, start + 1, start + 2]
        if not args:  # what is left of the run is one row, then the message it made
            assert [row[0] for row in rows] == [f"{start}-{start + 1}", str(start + 2)]
            assert rows[0][2:4] == ["assistant/chunk", "(2)"]
        assert f"3 of {len(stored)} events shown (seq {start}-{start + 2})" in result.out
    beyond = show("--from", "9999")
    assert beyond.code == 0, beyond.err
    assert f"0 of {len(stored)} events shown (none from seq 9999)" in beyond.out
    assert show("--from", "9999", "--json").out == ""
    for bad in (
        ("--limit", "abc"),
        ("--limit", "-1"),
        ("--limit=-1",),
        ("--limit", "1.5"),
        ("--from", "x"),
        ("--from=-2",),
        ("--from", "5", "--limit", "abc", "--json"),
    ):
        result = show(*bad)
        assert_user_error(result, "USAGE")
        assert "non-negative integer" in result.err


def test_a_command_started_without_stdout_ends_quietly(cli_env: dict[str, str]) -> None:
    # Started with its standard output closed (`>&-`), Python gives it no sys.stdout.
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" >&-', sys.executable, "-m", "sessionledger", "catalog"],
        check=False,
        env=cli_env,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_catalog_lists_core_types_plugins_and_schemes(cli_env: dict[str, str]) -> None:
    catalog = run_cli(cli_env, "catalog", "--json").json()
    types = {row["type"]: row for row in catalog["eventTypes"]}
    assert types["turn/start"]["plugin"] == "sessionledger"
    assert types["user/message"]["surface"] is True
    assert types["tool/result"]["validated"] is True
    assert {"memory", "sqlite", "jsonl"} <= set(catalog["storeSchemes"])
    human = run_cli(cli_env, "catalog")
    assert "assistant/chunk" in human.out
    assert "sqlite:" in human.out
    assert not (Path(cli_env["XDG_DATA_HOME"]) / "sessionledger").exists()


# -- checking and repairing ------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
async def test_repair_commits_the_closers_once(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    await fill_store(url)
    repaired = run_cli(cli_env, "--store", url, "repair", "crashed-1")
    assert repaired.code == 0
    assert "appended 3 closing events" in repaired.out
    assert "TOOL_OUTCOME_UNKNOWN" in repaired.out
    events = await stored_events(url, "crashed-1")
    assert events[-1]["data"]["reason"] == {"kind": "interrupted"}
    again = run_cli(cli_env, "--store", url, "repair", "crashed-1", "--json").json()
    assert again["appended"] == []
    assert "nothing to repair" in run_cli(cli_env, "--store", url, "repair", "crashed-1").out


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_paused_session_is_shown_as_paused_and_repair_leaves_it_open(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    # docs/reading.md, "Pausing is not crashing": a paused call is not a crash to repair.
    url = store_url(kind, tmp_path)
    async with Ledger.open(url) as ledger:
        paused = ledger.create("paused-1")
        closed_turn(paused, 1)
        open_turn_with_pending_call(paused, 2, call_id="ask")
        pause = {"turn": 2, "step": 1, "callId": "ask", "reason": {"kind": "approval"}}
        paused.append("tool/paused", pause)
    before = await stored_events(url, "paused-1")
    show = run_cli(cli_env, "--store", url, "show", "paused-1")
    assert "ask waits for approval" in show.out
    assert "turn 2 is paused: 1 call ('ask') waits on purpose" in " ".join(show.out.split())
    verify = run_cli(cli_env, "--store", url, "verify", "paused-1")
    assert verify.code == 0, verify.out + verify.err
    assert "turn 2 is paused" in " ".join(verify.out.split())
    for extra in (("--dry-run",), ()):
        repaired = run_cli(cli_env, "--store", url, "repair", "paused-1", *extra)
        assert repaired.code == 0, repaired.err
        assert "nothing to repair (no torn tail, no turn to close)" in repaired.out
        answer = run_cli(cli_env, "--store", url, "repair", "paused-1", "--json", *extra).json()
        assert (answer["appended"], answer["paused"]) == ([], ["ask"])
    assert await stored_events(url, "paused-1") == before


async def test_verify_fails_on_a_damaged_jsonl_line(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url("jsonl", tmp_path)
    await fill_store(url)
    break_first_batch(tmp_path, "closed-1")

    result = run_cli(cli_env, "--store", url, "verify")
    assert result.code == 1
    assert "✗ closed-1" in result.out
    assert "CORRUPT" in result.out
    assert "✓ crashed-1" in result.out
    report = run_cli(cli_env, "--store", url, "verify", "--json").json()
    assert report["ok"] is False
    broken = {session["id"]: session for session in report["sessions"]}["closed-1"]
    assert broken["problems"][0]["rule"] == "CORRUPT"
    # Reading a corrupt log is a user-facing error: one line, exit 2.
    assert_user_error(run_cli(cli_env, "--store", url, "show", "closed-1"), "CORRUPT")
    # ls still lists every session and says which one is unreadable.
    listed = listed_rows(run_cli(cli_env, "--store", url, "ls", "--json"))
    assert [row["problem"] is not None for row in listed] == [True, False]


async def test_a_commit_record_stating_a_seq_past_64_bits_is_corrupt_not_a_traceback(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    # A commit record's checksum covers its batch's lines, not its own numbers: one that
    # states a first seq of 2**63 is intact, and wrong. show and verify say CORRUPT, as
    # the pure-Python path does (never a traceback; test_split.py compares the two).
    url = store_url("jsonl", tmp_path)
    await fill_store(url)
    (log,) = [path for path in tmp_path.rglob("session.jsonl") if "closed-1" in str(path)]
    lines = log.read_bytes().split(b"\n")
    second = [at for at, line in enumerate(lines) if line.startswith(b'{"commit"')][1]
    lines[second] = re.sub(rb'"first":\d+', b'"first":%d' % 2**63, lines[second])
    log.write_bytes(b"\n".join(lines))
    assert_user_error(run_cli(cli_env, "--store", url, "show", "closed-1"), "CORRUPT")
    verified = run_cli(cli_env, "--store", url, "verify")
    assert verified.code == 1, verified
    assert "✗ closed-1" in verified.out
    assert "CORRUPT" in verified.out
    assert "Traceback" not in verified.err


async def test_repair_salvage_moves_the_damage_aside_and_says_exactly_what(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url("jsonl", tmp_path)
    await fill_store(url)
    log = break_first_batch(tmp_path, "closed-1")
    broken_log = log.read_bytes()
    damaged = store_bytes(url)
    # Never automatic: a plain repair refuses, and a dry run only tells.
    assert_user_error(run_cli(cli_env, "--store", url, "repair", "closed-1"), "CORRUPT")
    plan = run_cli(cli_env, "--store", url, "repair", "--salvage", "--dry-run", "closed-1")
    assert plan.code == 0, plan
    assert "would move 3 batches" in plan.out
    assert store_bytes(url) == damaged
    done = run_cli(cli_env, "--store", url, "repair", "--salvage", "closed-1", "--json").json()
    assert done["keptEvents"] == 0  # the damage is in the first batch
    assert done["movedBatches"] == 3
    assert done["movedBytes"] > 0
    moved = Path(done["quarantine"])
    assert moved.parent == log.parent
    assert moved.name.startswith("session.jsonl.quarantine-")
    # The quarantine holds the cut bytes exactly: everything after the header line.
    assert moved.read_bytes() == broken_log.split(b"\n", 1)[1]
    assert (
        "nothing to salvage"
        in run_cli(cli_env, "--store", url, "repair", "--salvage", "closed-1").out
    )
    assert run_cli(cli_env, "--store", url, "verify", "closed-1").code == 0


async def test_a_torn_tail_is_noted_by_verify_and_repair_dry_run_shows_exactly_what_repair_does(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url("jsonl", tmp_path)
    logs: dict[str, tuple[Path, bytes]] = {}
    async with Ledger.open(url) as ledger:
        for session_id in ("torn-1", "torn-2"):  # the same, seen as text and as JSON
            session = ledger.create(session_id)
            closed_turn(session, 1)
            await ledger.flush(session)
            open_turn_with_pending_call(session, 2)  # seq 21-28, the tool running
            await ledger.flush(session)
            finish_pending_call(session, 2)  # seq 29-31
            await ledger.flush(session)
    for session_id in ("torn-1", "torn-2"):
        (log,) = [path for path in tmp_path.rglob("session.jsonl") if session_id in str(path)]
        # A crash while the last batch was written: its commit record is cut off.
        logs[session_id] = (log, log.read_bytes()[:-20])
        log.write_bytes(logs[session_id][1])

    def intact_end(data: bytes) -> int:
        """Where the torn batch starts: right after the second commit record's line."""
        lines = data.split(b"\n")
        second = [i for i, line in enumerate(lines) if line.startswith(b'{"commit"')][1]
        return sum(len(line) + 1 for line in lines[: second + 1])

    log, torn = logs["torn-1"]
    intact = intact_end(torn)
    what = "starting at batch 3 (from line 23): 1 batch, 4 records, seqs 29-31"

    verified = run_cli(cli_env, "--store", url, "verify", "torn-1")
    assert verified.code == 0, verified
    assert " ".join(verified.out.split()).startswith(
        f"✓ torn-1 29 events ok note: the log ends with a torn tail ({what}) after its last "
        "intact batch, a write cut short; a resume or 'repair' moves it into a quarantine "
        "file ('repair --dry-run' shows what) note: turn 2 is open"
    )

    before = store_bytes(url)
    plan = run_cli(cli_env, "--store", url, "repair", "--dry-run", "torn-1")
    planned = run_cli(cli_env, "--store", url, "repair", "--dry-run", "torn-1", "--json").json()
    assert store_bytes(url) == before  # byte for byte
    flat = " ".join(plan.out.split())
    assert flat.startswith(
        f"torn-1: would move the torn tail ({what}) into a quarantine file beside the log "
        "torn-1: would append 3 closing events (seq 29-31) seq time type"
    )
    assert flat.endswith("run 'sessionledger repair torn-1' to do it")

    done = run_cli(cli_env, "--store", url, "repair", "torn-1")
    (quarantine,) = log.parent.glob("session.jsonl.quarantine-*")
    assert " ".join(done.out.split()).startswith(
        f"torn-1: moved the torn tail ({what}; {len(torn) - intact} bytes) to {quarantine} "
        "torn-1: appended 3 closing events (seq 29-31) seq time type"
    )
    # The quarantine holds exactly the cut bytes; the log keeps the intact prefix and
    # then the very closers the dry run showed.
    assert quarantine.read_bytes() == torn[intact:]
    assert log.read_bytes().startswith(torn[:intact])
    assert [event["type"] for event in planned["appended"]] == [
        "tool/result",
        "step/end",
        "turn/end",
    ]
    assert (await stored_events(url, "torn-1"))[29:] == planned["appended"]
    again = run_cli(cli_env, "--store", url, "verify", "torn-1")
    assert (again.code, "note" in again.out) == (0, False)
    assert "nothing to repair" in run_cli(cli_env, "--store", url, "repair", "torn-1").out

    # The same as JSON: the plan, then what was done, where the quarantine went.
    planned = run_cli(cli_env, "--store", url, "repair", "--dry-run", "torn-2", "--json").json()
    done_json = run_cli(cli_env, "--store", url, "repair", "torn-2", "--json").json()
    tail = {"startsAt": "batch 3 (from line 23)", "batches": 1, "records": 4, "seqs": [29, 31]}
    assert planned["tornTail"] == {**tail, "quarantine": None, "movedBytes": 0}
    log, torn = logs["torn-2"]
    (moved,) = log.parent.glob("session.jsonl.quarantine-*")
    assert moved.read_bytes() == torn[intact_end(torn) :]
    assert done_json["tornTail"] == {
        **tail,
        "quarantine": str(moved),
        "movedBytes": len(torn) - intact_end(torn),
    }
    assert done_json["appended"] == planned["appended"]


async def test_the_default_store_and_its_parents_are_private_whatever_the_umask(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    source = store_url("jsonl", tmp_path, "source")
    await fill_store(source)
    home = tmp_path / "home"
    env = {**cli_env, "HOME": str(home)}
    env.pop("XDG_DATA_HOME")
    target = home / ".local" / "share" / "sessionledger" / "ledger.db"
    # The real command, under umask 000, writing to the default store for the first time.
    result = run_cli(
        env,
        "-c",
        "import os, runpy, sys; os.umask(0); sys.argv = ['sessionledger', *sys.argv[1:]]; "
        "runpy.run_module('sessionledger', run_name='__main__')",
        "copy",
        "--from",
        source,
        "--to",
        f"sqlite:{target}",
        command=[sys.executable],
    )
    assert result.code == 0, result
    for directory in (home, home / ".local", target.parent.parent, target.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", BACKENDS)
async def test_verify_reports_invariant_violations_written_through_a_backend(
    kind: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url(kind, tmp_path)
    await fill_store(url)
    store = open_store(url)
    try:
        await store.create(SessionHeader(id="skips-a-turn", created_at=1_700_000_000_000))
        await store.append(
            "skips-a-turn",
            [
                SessionEvent("turn/start", 0, 1_700_000_000_001, {"turn": 1}),
                SessionEvent(
                    "turn/end", 1, 1_700_000_000_002, {"turn": 1, "reason": {"kind": "completed"}}
                ),
                SessionEvent("turn/start", 2, 1_700_000_000_003, {"turn": 3}),
                SessionEvent("step/end", 3, 1_700_000_000_004, {"turn": 3, "step": 1}),
                SessionEvent(
                    "turn/end", 4, 1_700_000_000_005, {"turn": 3, "reason": {"kind": "completed"}}
                ),
            ],
        )
    finally:
        await store.close()

    only = run_cli(cli_env, "--store", url, "verify", "skips-a-turn")
    assert only.code == 1
    assert "turn-number" in only.out
    report = run_cli(cli_env, "--store", url, "verify", "--all", "--json")
    assert report.code == 1
    sessions = {session["id"]: session for session in report.json()["sessions"]}
    assert sessions["closed-1"]["ok"]
    assert sessions["crashed-1"]["ok"]
    rules = [(problem["seq"], problem["rule"]) for problem in sessions["skips-a-turn"]["problems"]]
    assert (2, "turn-number") in rules
    assert any(seq == 3 for seq, _ in rules)


async def test_the_invariants_are_found_through_their_entry_point(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url("sqlite", tmp_path)
    async with Ledger.open(url) as ledger:
        closed_turn(ledger.create("fine"), 1)
    store = open_store(url)
    try:
        await store.create(SessionHeader(id="skips", created_at=1_700_000_000_000))
        await store.append("skips", [SessionEvent("turn/start", 0, 1_700_000_000_001, {"turn": 2})])
    finally:
        await store.close()
    found = run_cli(cli_env, "--store", url, "verify", "--json")
    assert found.code == 1
    assert found.json()["logChecks"] == ["sessionledger_invariants"]
    # Entry points off: no check is found by name either; the note says what keeps it off.
    off = {**cli_env, "SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD": "1"}
    (tmp_path / "backend.py").write_text("from sessionledger_sqlite import plugin\n")
    sqlite = ("--plugin", "backend:plugin")
    unchecked = run_cli(off, *sqlite, "--store", url, "verify", "skips", cwd=tmp_path)
    assert unchecked.code == 0, unchecked
    assert unchecked.out.splitlines()[0] == (
        "note: invariants not checked; sessionledger-invariants is installed, but "
        "SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD keeps it unloaded"
    )
    # The same module named with --plugin offers the same check.
    named = ("--plugin", "sessionledger_invariants:plugin")
    checked = run_cli(off, *sqlite, *named, "--store", url, "verify", "--json", cwd=tmp_path)
    assert checked.code == 1, checked
    report = checked.json()
    assert report["invariantsChecked"] is True
    assert report["logChecks"] == ["sessionledger_invariants.plugin"]
    problems = {s["id"]: [(p["seq"], p["rule"]) for p in s["problems"]] for s in report["sessions"]}
    assert problems == {"fine": [], "skips": [(0, "turn-number")]}


CHECKS_PLUGIN = """
import collections
from sessionledger import InvariantError, hookimpl

Found = collections.namedtuple("Found", "seq rule message")


def shouts(event):
    return event.type == "user/message" and "!!" in str(event.data)


class NoSecrets:
    @hookimpl
    def ledger_validate(self, event):
        if event.type == "user/message" and "secret" in str(event.data):
            raise InvariantError("no secrets in a user message", rule="no-secrets")


class Checks:
    @hookimpl
    def ledger_offered_validators(self, plugins):
        return [NoSecrets()]

    @hookimpl
    def ledger_check_log(self, events):
        return [Found(e.seq, "no-shouting", "the user shouted") for e in events if shouts(e)]
"""


async def test_a_plugin_offers_its_own_log_check_and_validators(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "shout_checks.py").write_text(CHECKS_PLUGIN)
    url = store_url("sqlite", tmp_path)
    async with Ledger.open(url) as ledger:
        ledger.create("calm").append("user/message", user_message("hi"), surface_op="append")
        ledger.create("loud").append("user/message", user_message("hi!!"), surface_op="append")
    plugin = ("--plugin", "shout_checks:Checks")

    assert run_cli(cli_env, "--store", url, "verify").code == 0
    verified = run_cli(cli_env, *plugin, "--store", url, "verify", "--json", cwd=tmp_path)
    assert verified.code == 1, verified
    report = verified.json()
    assert report["logChecks"] == ["sessionledger_invariants", "shout_checks.Checks"]
    problems = {s["id"]: [(p["seq"], p["rule"]) for p in s["problems"]] for s in report["sessions"]}
    assert problems == {"calm": [], "loud": [(0, "no-shouting")]}
    text = run_cli(cli_env, *plugin, "--store", url, "verify", "loud", cwd=tmp_path)
    assert "seq 0  no-shouting  the user shouted" in text.out

    # import: the check refuses a history before anything is written ...
    history = tmp_path / "history.json"
    history.write_text('[{"role": "user", "content": "hi!!"}]')
    refused = run_cli(
        cli_env, *plugin, "--store", url, "import", "--format", "openai", str(history), cwd=tmp_path
    )
    assert_user_error(refused, "BAD_HISTORY")
    assert "rule 'no-shouting'" in refused.err
    # ... and the validator it offers runs on what import appends (and on nothing else).
    history.write_text('[{"role": "user", "content": "a secret"}]')
    vetoed = run_cli(
        cli_env,
        *plugin,
        "--store",
        url,
        "import",
        "--format",
        "openai",
        str(history),
        "--id",
        "told",
        cwd=tmp_path,
    )
    assert_user_error(vetoed, "INVARIANT")
    assert "no secrets" in vetoed.err
    listed = run_cli(cli_env, "--store", url, "ls", "--json")
    assert sorted(row["id"] for row in listed_rows(listed)) == ["calm", "loud"]
    unchecked = run_cli(
        cli_env, "--store", url, "import", "--format", "openai", str(history), "--id", "told"
    )
    assert unchecked.code == 0, unchecked


# -- moving ----------------------------------------------------------------------------


async def test_copy_round_trips_sqlite_to_jsonl_to_sqlite(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    first = store_url("sqlite", tmp_path, "first")
    middle = store_url("jsonl", tmp_path, "middle")
    last = store_url("sqlite", tmp_path, "last")
    await fill_store(first)

    there = run_cli(cli_env, "copy", "--from", first, "--to", middle)
    assert there.code == 0, there.err
    assert "verified 2 sessions event-for-event" in there.out
    assert "copied" in there.err  # the progress bar goes to stderr
    back = run_cli(cli_env, "copy", "--from", middle, "--to", last, "--json")
    assert back.code == 0
    assert back.json()["copied"] == ["closed-1", "crashed-1"]
    assert back.json()["verified"] is True

    assert await stored_events(last, "closed-1") == await stored_events(first, "closed-1")
    # A copy is the session as a resume sees it: the interrupted turn arrives closed.
    crashed = await stored_events(last, "crashed-1")
    original = await stored_events(first, "crashed-1")
    assert crashed[: len(original)] == original
    assert crashed[-1]["type"] == "turn/end"
    headers = listed_rows(run_cli(cli_env, "--store", last, "ls", "--json"))
    assert headers[0]["title"] == "two turns, compacted"

    clash = run_cli(cli_env, "copy", "--from", first, "--to", last, "closed-1")
    assert_user_error(clash, "SESSION_ALREADY_EXISTS")
    skipped = run_cli(cli_env, "copy", "--from", first, "--to", last, "--skip-existing", "--json")
    assert skipped.code == 0
    assert skipped.json()["skipped"] == ["closed-1", "crashed-1"]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_delete_removes_a_session(kind: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    url = store_url(kind, tmp_path)
    await fill_store(url)
    assert run_cli(cli_env, "--store", url, "delete", "closed-1").code == 0
    assert [row["id"] for row in listed_rows(run_cli(cli_env, "--store", url, "ls", "--json"))] == [
        "crashed-1"
    ]
    assert_user_error(run_cli(cli_env, "--store", url, "delete", "closed-1"), "SESSION_NOT_FOUND")


# -- store selection and user mistakes --------------------------------------------------


async def test_store_comes_from_option_before_or_after_or_the_environment(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    url = store_url("sqlite", tmp_path)
    await fill_store(url)
    before = run_cli(cli_env, "--store", url, "ls", "--json").json()
    after = run_cli(cli_env, "ls", "--json", "--store", url).json()
    from_env = run_cli({**cli_env, "SESSIONLEDGER_STORE": url}, "ls", "--json").json()
    assert before == after == from_env
    assert len(before["sessions"]) == 2
    assert before["next"] is None
    empty = run_cli(cli_env, "ls")  # the default store does not exist yet: nothing to list
    assert empty.code == 0
    assert "no sessions" in empty.out
    assert not (tmp_path / "xdg" / "sessionledger").exists()


def test_user_mistakes_are_one_line_and_exit_2(cli_env: dict[str, str], tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database\n" * 100)
    existing = store_url("jsonl", tmp_path, "empty")
    (tmp_path / "empty").mkdir()
    cases = [
        (("--store", "nope:somewhere", "ls"), "CONFIG"),
        (("--store", existing, "show", "no-such-session"), "SESSION_NOT_FOUND"),
        (("--store", existing, "verify", "no-such-session"), "SESSION_NOT_FOUND"),
        (("--store", f"sqlite:{garbage}", "ls"), "FOREIGN_STORE"),
        (("--store", f"sqlite:{tmp_path / 'missing.db'}", "show", "x"), "CONFIG"),
        (("--store", "memory:demo", "demo"), "CONFIG"),
        ((), "USAGE"),
        (("show",), "USAGE"),
        (("ls", "--bogus"), "USAGE"),
    ]
    for args, code in cases:
        assert_user_error(run_cli(cli_env, *args), code)
    assert not (tmp_path / "missing.db").exists()


# -- installs: what runs with the core alone, and what to install ----------------------

#: Runs the command as if only the core distribution were installed. A fresh virtual
#: environment would be the most faithful but needs a package index and takes long, so
#: instead the siblings' distributions are hidden from ``importlib.metadata`` (where
#: pluggy finds entry points, and ``--version`` versions) and their modules made
#: unimportable (``sys.modules[name] = None`` makes ``import name`` raise
#: ``ModuleNotFoundError``, as for a module that is not installed). Then ``main`` runs.
ONLY_CORE = """
import importlib.metadata as metadata
import sys

def visible(name):  # every sibling distribution (backends, invariants, adapters) hidden
    return not (name or "").lower().replace("_", "-").startswith("sessionledger-")

every, one = metadata.distributions, metadata.distribution
for dist in every():
    if not visible(dist.metadata["Name"]):
        sys.modules[dist.metadata["Name"].lower().replace("-", "_")] = None

def distributions(**kwargs):
    return [dist for dist in every(**kwargs) if visible(dist.metadata["Name"])]

def distribution(name):
    if not visible(name):
        raise metadata.PackageNotFoundError(name)
    return one(name)

metadata.distributions = distributions
metadata.distribution = distribution
metadata.version = lambda name: distribution(name).version
from sessionledger.cli.__main__ import main
sys.argv[0] = "sessionledger"
sys.exit(main())
"""


def without(modules: str) -> list[str]:
    """A command line that runs ``main`` with *modules* (comma-separated) unimportable."""
    hide = "; ".join(f"sys.modules[{name!r}] = None" for name in modules.split(","))
    code = f"import sys; {hide}; from sessionledger.cli.__main__ import main; sys.exit(main())"
    return [sys.executable, "-c", code]


def install_line(scheme: str, distribution: str, folder: str) -> str:
    return (
        f"error: CONFIG: no backend serves {scheme}: URLs (registered schemes: memory:); "
        f"install {distribution} (from a checkout: pip install ./packages/{folder})"
    )


def test_rich_is_a_dependency_of_the_core_not_of_an_extra() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "packages" / "core" / "pyproject.toml").read_text())["project"]
    assert "rich>=13" in project["dependencies"]
    assert not any(req.startswith("rich") for req in project["optional-dependencies"]["cli"])


def test_with_only_the_core_every_command_runs_or_names_what_to_install(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    only_core = [sys.executable, "-c", ONLY_CORE]
    sqlite = install_line("sqlite", "sessionledger-sqlite", "persistence-sqlite")
    target = tmp_path / "copy.db"
    for args in [
        ("ls",),  # the default store is sqlite:
        ("demo",),
        ("show", "x"),
        ("messages", "x"),
        ("transcript", "x"),
        ("verify",),
        ("repair", "x"),
        ("stats", "x"),
        ("delete", "x"),
        ("copy", "--from", "memory:a", "--to", f"sqlite:{target}"),
        ("prune", "--older-than", "30d"),
        ("audit",),
        ("search", "x"),
        ("reindex",),
    ]:
        result = run_cli(cli_env, *args, command=only_core)
        assert_user_error(result, "CONFIG")
        assert result.err == sqlite + "\n", args
    for url, line in [
        (f"jsonl:{tmp_path}", install_line("jsonl", "sessionledger-jsonl", "persistence-jsonl")),
        (
            "postgresql://me@localhost/ledger",
            install_line("postgresql", "sessionledger-postgres", "persistence-postgres"),
        ),
    ]:
        result = run_cli(cli_env, "--store", url, "ls", command=only_core)
        assert (result.code, result.err) == (2, line + "\n")
    # What needs no backend works.
    listed = run_cli(cli_env, "--store", "memory:x", "ls", command=only_core)
    assert (listed.code, listed.out, listed.err) == (0, "no sessions in memory:x\n", "")
    catalog = run_cli(cli_env, "catalog", "--json", command=only_core)
    assert catalog.code == 0
    assert catalog.json()["storeSchemes"] == ["memory"]
    verified = run_cli(cli_env, "--store", "memory:x", "verify", command=only_core)
    assert verified.code == 0
    assert verified.out.splitlines() == [
        "note: invariants not checked; install sessionledger-invariants "
        "(from a checkout: pip install ./packages/invariants)",
        "verified 0 sessions: 0 ok",
    ]
    version = run_cli(cli_env, "--version", command=only_core)
    assert (version.code, version.out) == (
        0,
        f"sessionledger {metadata.version('sessionledger')}\n",
    )
    assert not target.exists()
    assert not (tmp_path / "xdg").exists()


async def test_a_jsonl_url_without_the_backend_is_an_error_whether_or_not_it_exists(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    line = install_line("jsonl", "sessionledger-jsonl", "persistence-jsonl") + "\n"
    existing = store_url("jsonl", tmp_path)
    await fill_store(existing)
    for url in (f"jsonl:{tmp_path / 'missing'}", existing):
        result = run_cli(cli_env, "--store", url, "ls", command=[sys.executable, "-c", ONLY_CORE])
        assert (result.code, result.out, result.err) == (2, "", line), url
    # Installed but switched off: the message says so instead of asking for an install.
    switched_off = run_cli(
        {**cli_env, "SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD": "1"}, "--store", existing, "ls"
    )
    assert_user_error(switched_off, "CONFIG")
    assert switched_off.err.endswith(
        "; sessionledger-jsonl is installed, but SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD keeps "
        "it unloaded\n"
    )
    # With the backend, a directory that does not exist is a store with no sessions.
    missing = run_cli(cli_env, "--store", f"jsonl:{tmp_path / 'missing'}", "ls")
    assert (missing.code, missing.out.split()[:2]) == (0, ["no", "sessions"])
    assert not (tmp_path / "missing").exists()


def test_a_missing_module_is_one_line_naming_what_to_install(cli_env: dict[str, str]) -> None:
    core = "(from a checkout: pip install ./packages/core)"
    memory = ("--store", "memory:a")
    for args in [
        (*memory, "ls"),
        ("catalog",),
        (*memory, "demo"),
        (*memory, "verify"),
        ("copy", "--from", "memory:a", "--to", "memory:b"),
    ]:
        result = run_cli(cli_env, *args, command=without("rich"))
        assert_user_error(result, "CONFIG")
        assert result.err.startswith("error: CONFIG: no module named 'rich' (imported by ")
        assert result.err.endswith(
            f", a dependency of sessionledger: install rich, or reinstall sessionledger {core}\n"
        )
        assert "sessionledger[cli]" not in result.err
    # An entry point whose module needs a missing module: named, with its distribution.
    broken = run_cli(cli_env, "catalog", command=without("asyncpg"))
    assert broken.err == (
        "error: CONFIG: no module named 'asyncpg' (imported by sessionledger_postgres.store), "
        "a dependency of sessionledger-postgres: install asyncpg, or reinstall "
        "sessionledger-postgres (from a checkout: pip install ./packages/persistence-postgres)\n"
    )
    assert broken.code == 2


# -- the parser: version, usage errors, copy's stores ----------------------------------


def test_version_names_the_installed_distributions(cli_env: dict[str, str]) -> None:
    siblings = sorted(
        {
            (name, dist.version)
            for dist in metadata.distributions()
            if (name := (dist.metadata["Name"] or "").lower().replace("_", "-")).startswith(
                "sessionledger-"
            )
        }
    )
    assert ("sessionledger-sqlite", metadata.version("sessionledger-sqlite")) in siblings
    result = run_cli(cli_env, "--version")
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [
        f"sessionledger {metadata.version('sessionledger')}",
        *(f"  {name} {version}" for name, version in siblings),
    ]


#: Each command with the arguments it needs, so that only the mistake added is wrong.
COMMAND_ARGS: dict[str, tuple[str, ...]] = {
    "demo": (),
    "ls": (),
    "show": ("x",),
    "messages": ("x",),
    "transcript": ("x",),
    "verify": (),
    "repair": ("x",),
    "copy": ("--from", "memory:a", "--to", "memory:b"),
    "catalog": (),
    "stats": ("x",),
    "delete": ("x",),
    "import": ("x.json", "--format", "openai"),
    "prune": (),
    "audit": (),
    "search": ("x",),
    "reindex": (),
    "view": (),
    "export": ("x", "--format", "sts"),
    "tail": (),
}


def test_a_usage_error_points_to_the_help_of_its_command(cli_env: dict[str, str]) -> None:
    from sessionledger.cli._app import COMMANDS

    assert set(COMMAND_ARGS) == set(COMMANDS)
    for name, needed in COMMAND_ARGS.items():
        see = f"(see 'sessionledger {name} --help')"
        for args in [(name, *needed, "--bogus"), ("--bogus", name, *needed)]:
            result = run_cli(cli_env, *args)
            assert_user_error(result, "USAGE")
            assert result.err == f"error: USAGE: unrecognized arguments: --bogus {see}\n", args
        if needed:  # leaving out what it needs
            result = run_cli(cli_env, name)
            assert_user_error(result, "USAGE")
            assert result.err.endswith(f" {see}\n"), name
    extra = run_cli(cli_env, "delete", "a", "b")
    assert (
        extra.err == "error: USAGE: unrecognized arguments: b (see 'sessionledger delete --help')\n"
    )
    for args in [(), ("nope",)]:
        assert run_cli(cli_env, *args).err.endswith(" (see 'sessionledger --help')\n")


def test_copy_takes_from_and_to_and_refuses_store(cli_env: dict[str, str], tmp_path: Path) -> None:
    helped = run_cli(cli_env, "copy", "--help")
    assert helped.code == 0
    assert "--from URL" in helped.out
    assert "--store" not in helped.out
    assert "--store URL" in run_cli(cli_env, "ls", "--help").out
    refused = (
        "error: USAGE: copy takes no --store: it reads --from URL and writes --to URL "
        "(see 'sessionledger copy --help')\n"
    )
    target = tmp_path / "target.db"
    copy = ("copy", "--from", "memory:a", "--to", f"sqlite:{target}")
    for args in [
        (*copy, "--store", "memory:c"),
        (*copy, "--store=memory:c"),
        ("--store", "memory:c", *copy),
    ]:
        result = run_cli(cli_env, *args)
        assert (result.code, result.out, result.err) == (2, "", refused), args
    assert not target.exists()


async def test_counts_of_one_read_in_the_singular(cli_env: dict[str, str], tmp_path: Path) -> None:
    url = store_url("jsonl", tmp_path)
    async with Ledger.open(url) as ledger:
        one = ledger.create("one", title="one message")
        one.append("turn/start", {"turn": 1})
        one.append("user/message", user_message("hi"), surface_op="append")
        ledger.create("tiny").append("turn/start", {"turn": 1})
    outputs = {
        args: run_cli(cli_env, "--store", url, *args).out
        for args in [
            ("messages", "one"),
            ("transcript", "one"),
            ("verify",),
            ("stats", "tiny"),
            ("show", "one"),
            ("repair", "--dry-run", "one"),
        ]
    }
    assert outputs["messages", "one"].startswith("# 1 message the model sees after seq 2 of one\n")
    assert outputs["transcript", "one"].startswith("# transcript of one (1 message)\n")
    verified = outputs["verify",].splitlines()
    assert verified[0] == "✓ one  2 events  ok"
    assert verified[2] == "✓ tiny  1 event  ok"
    assert verified[3].endswith("a resume or 'repair' appends 1 closing event")
    assert "with chunk runs packed into rows: 69 bytes in 1 record" in outputs["stats", "tiny"]
    assert "'sessionledger repair one' closes it (1 event)." in outputs["show", "one"]
    assert outputs["repair", "--dry-run", "one"].startswith("one: would append 1 closing event")
    nouns = "events|messages|records|sessions|batches|chunks|characters|deltas|nodes|replacements"
    for args, out in outputs.items():
        assert re.findall(rf"(?<![\d.,-])1 (?:closing )?(?:{nouns})\b", out) == [], args


# -- Ctrl-C ----------------------------------------------------------------------------

#: A plugin that makes start-up or the command slow: with SLOW_AT=import its import
#: sleeps (plugin loading), with SLOW_AT=run the ``slow:`` store's listing does (the
#: command running); SLOW_MARK says how far it got.
SLOW_PLUGIN = """
import asyncio, os, time
from pathlib import Path

from sessionledger import hookimpl
from sessionledger.storage import SessionPersistence

MARK = Path(os.environ["SLOW_MARK"])
if os.environ["SLOW_AT"] == "import":
    MARK.write_text("importing")
    time.sleep(60)
if os.environ["SLOW_AT"] == "swallow":  # code that catches everything, as some does
    MARK.write_text("importing")
    try:
        time.sleep(60)
    except BaseException:
        pass


class SlowStore(SessionPersistence):  # only what the commands reach first
    def __init__(self):
        pass

    async def _slow(self, *args, **kwargs):
        MARK.write_text("running")
        await asyncio.sleep(60)

    # What each command awaits first.
    list_snapshots = list_sessions = search = prune = audit = reindex = _slow

    async def close(self):
        MARK.write_text("closed")


class Slow:
    @hookimpl
    def ledger_backends(self):
        return {"slow": lambda url, event_types: SlowStore()}
"""

SLOW_ARGS = ("--plugin", "slow_plugin:Slow", "--store", "slow:x")

#: ``python -X importtime`` prints this line once the entry module is imported: from
#: then on the command's own code runs.
ENTRY_IMPORTED = "| sessionledger.cli.__main__"


@contextlib.contextmanager
def sigint_inherited(disposition: Any) -> Iterator[None]:
    """Start children with SIGINT at *disposition* (``SIG_DFL`` or ``SIG_IGN``).

    An ignored SIGINT survives ``exec``: a test run started in the background of a
    non-interactive shell passes it on to every child, which then starts ignoring Ctrl-C
    (and, since the command line respects that, never exits on it)."""
    previous = signal.getsignal(signal.SIGINT)
    # A handler (Python's own) is reset to the default in a child; SIG_IGN is kept.
    signal.signal(
        signal.SIGINT, signal.default_int_handler if disposition == signal.SIG_DFL else disposition
    )
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def start_slow(
    env: dict[str, str],
    tmp_path: Path,
    at: str,
    command: tuple[str, ...] = ("ls",),
    sigint: Any = signal.SIG_DFL,
) -> subprocess.Popen[str]:
    """Start ``sessionledger --store slow:x ls`` (or *command*) with the slow plugin, whose
    import (*at* ``import``) or command (``run``) sleeps a minute, with SIGINT at *sigint*."""
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    (tmp_path / "mark").unlink(missing_ok=True)
    script = shutil.which("sessionledger", path=str(Path(sys.executable).parent))
    assert script is not None
    with sigint_inherited(sigint):
        return subprocess.Popen(
            [sys.executable, "-X", "importtime", script, *SLOW_ARGS, *command],
            cwd=tmp_path,
            env={**env, "SLOW_MARK": str(tmp_path / "mark"), "SLOW_AT": at},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def wait_for_mark(child: subprocess.Popen[str], mark: Path, at: str, lines: list[str]) -> None:
    """Wait until the slow plugin has reached *at* (``import`` or ``run``)."""
    deadline = time.monotonic() + 60
    reached = {"import": "importing", "swallow": "importing", "run": "running"}[at]
    while not (mark.exists() and mark.read_text() == reached):
        assert time.monotonic() < deadline, lines
        assert child.poll() is None, lines
        time.sleep(0.01)


def interrupt(
    env: dict[str, str],
    tmp_path: Path,
    *,
    at: str,
    moment: str,
    delay: float,
    command: tuple[str, ...] = ("ls",),
) -> Run:
    """Run ``sessionledger --store slow:x ls`` (or *command*) with the slow plugin and send
    it SIGINT at *moment*: ``spawn`` (right after starting it), ``entry`` (when its entry module is
    imported), or ``mark`` (when the plugin has reached *at*), then after *delay*."""
    mark = tmp_path / "mark"
    child = start_slow(env, tmp_path, at, command)
    lines: list[str] = []
    entered = threading.Event()

    def drain() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            lines.append(line.rstrip("\n"))
            if ENTRY_IMPORTED in line:
                entered.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if moment == "entry":
            assert entered.wait(60), lines
        elif moment == "mark":
            wait_for_mark(child, mark, at, lines)
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
        code = child.wait(timeout=60)
    finally:
        child.kill()
        child.wait()
    reader.join(timeout=60)
    assert child.stdout is not None
    err = [line for line in lines if not line.startswith("import time:")]
    return Run(code, child.stdout.read(), "".join(f"{line}\n" for line in err))


def test_ctrl_c_at_any_moment_prints_interrupted_and_exits_130(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    # From the moment the entry module is imported: the rest of the imports, parsing,
    # building the plugin set, importing a plugin (it sleeps), then the command running.
    moments = [("import", "entry", delay) for delay in (0, 0.005, 0.02, 0.05, 0.1, 0.2)]
    moments += [("import", "mark", 0), ("run", "mark", 0)]
    for at, moment, delay in moments:
        result = interrupt(cli_env, tmp_path, at=at, moment=moment, delay=delay)
        assert (result.code, result.out, result.err) == (130, "", "interrupted\n"), (
            moment,
            delay,
            result.err,
        )
    # Interrupted while running, the command closed its store on the way out.
    assert (tmp_path / "mark").read_text() == "closed"
    for command in [
        ("prune", "--older-than", "30d"),
        ("prune", "--keep-last", "1", "--yes"),
        ("audit",),
        ("search", "x"),
        ("reindex",),
    ]:
        result = interrupt(cli_env, tmp_path, at="run", moment="mark", delay=0, command=command)
        assert (result.code, result.out, result.err) == (130, "", "interrupted\n"), command
        assert (tmp_path / "mark").read_text() == "closed", command
    # Right after the spawn the signal lands in Python's own start-up, before any file of
    # sessionledger runs: either before Python handles SIGINT at all (killed by it, as
    # the shell reports 130) or, rarely, inside site.py (its traceback is not ours).
    early = interrupt(cli_env, tmp_path, at="import", moment="spawn", delay=0)
    if early.code != -signal.SIGINT:
        assert "sessionledger" not in early.err or early.err == "interrupted\n", early


def test_ctrl_c_ends_the_process_even_under_code_that_catches_everything(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    # The signal can land anywhere before the command runs: an exception raised there
    # can be swallowed (or, in a C extension's import, crash the process).
    result = interrupt(cli_env, tmp_path, at="swallow", moment="mark", delay=0)
    assert (result.code, result.out, result.err) == (130, "", "interrupted\n")


@pytest.mark.parametrize("at", ["import", "run"])
def test_a_command_started_with_sigint_ignored_keeps_ignoring_it(
    cli_env: dict[str, str], tmp_path: Path, at: str
) -> None:
    # As `nohup` or a script's background job starts it: Ctrl-C is not the command's to
    # take, in the plugin import (its own handler) or while the command runs (asyncio's).
    child = start_slow(cli_env, tmp_path, at, sigint=signal.SIG_IGN)
    try:
        wait_for_mark(child, tmp_path / "mark", at, [])
        child.send_signal(signal.SIGINT)
        time.sleep(1)  # a command that took the signal over exits within milliseconds
        assert child.poll() is None
    finally:
        child.kill()
        _, err = child.communicate()
    assert child.returncode == -signal.SIGKILL
    assert "interrupted" not in err
