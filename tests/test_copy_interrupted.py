"""``sessionledger copy`` killed (SIGKILL) or interrupted (Ctrl-C) part-way, then the
documented rerun, ``copy --skip-existing`` (docs/durability.md, "copying sessions").

The source holds a session of more than 2,500 events (three batches of the copy) and a
small one whose last turn was cut off. A real ``python -m sessionledger copy`` runs into
a JSONL, SQLite or PostgreSQL destination and is stopped at a failpoint: killed there, or
sent SIGINT there (``SESSIONLEDGER_FAILPOINT_ACTION=interrupt``, a Ctrl-C arriving at
that instruction). Each chain stops the command at one point after another, each rerun
being the documented one, then lets the last rerun finish.

The oracle after every stop: whatever the destination shows is complete. Every session
that ``list_snapshots``, ``list_sessions``, ``ls`` or ``verify --all`` names is, read
with ``inspect``, the source session event for event (stored bytes) with its summary's
event count, and ``verify`` finds it sound; a session not listed is not found by
``inspect`` either. After the last rerun the destination holds every source session
exactly once, identical, and the rerun reported them copied and verified.

Also here: a value nested 10,000 deep (and a header nested deeper than ``==`` recurses)
is copied and verified, JSONL to SQLite and back, where the comparison once recursed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sessionledger import Ledger, SessionEvent, SessionHeader
from sessionledger._errors import ReadBackMismatchError, SessionNotFoundError
from sessionledger._failpoints import ACTION_VARIABLE, ENVIRONMENT_VARIABLE
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.runtime._opening import open_store
from sessionledger.storage import _publishing as publishing
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.testing.contract.base import header_for, make_log, same_events
from sessionledger_postgres.testing import drop_schema, with_options

#: The big session's size: more than two of copy's 1,000-event batches.
BIG_EVENTS = 2_500
KILL, CTRL_C = signal.SIGKILL, signal.SIGINT
FAILPOINT_LINE = re.compile(rb"FAILPOINT (\S+) (\d+)\n")

#: Per destination, the points a chain stops the command at, in order, and how; each
#: comment names the state the stop leaves (as the code is now). Every chain ends with
#: a session still to copy, so the last rerun has work to do.
CHAINS: dict[str, list[tuple[str, signal.Signals]]] = {
    "jsonl": [
        ("jsonl.publish.after-temp-create", CTRL_C),  # "big": its publication runs to the end
        ("jsonl.publish.mid-write", KILL),  # half of "small" in the temp file
        ("core.publish.verified", KILL),  # "small" durable in the temp file, read back
    ],
    "sqlite": [
        ("sqlite.write.after-session-row", CTRL_C),  # "big": its publication runs to the end
        ("sqlite.write.after-session-row", KILL),  # "small": killed mid-transaction, rolled back
        ("core.publish.verified", KILL),  # "small" read back inside its transaction
    ],
    "postgresql": [
        ("postgresql.publish.after-batch", KILL),  # "big": its first batch inserted
        ("core.publish.verified", KILL),  # "big" read back inside its transaction
        ("core.publish.verified", CTRL_C),  # "big" cancelled at its COMMIT
    ],
}


# -- the source ------------------------------------------------------------------------


async def fill_source(url: str) -> None:
    async with Ledger.open(url) as ledger:
        big = ledger.create("big", cwd="/srv/app", title="long")
        turn = 0
        while big.seq < BIG_EVENTS:
            turn += 1
            closed_turn(big, turn)
            if turn % 25 == 0:
                await ledger.flush(big)
        small = ledger.create("small", cwd="/srv/app", title="cut mid-tool")
        closed_turn(small, 1)
        open_turn_with_pending_call(small, 2)


async def views(store: SessionPersistence) -> dict[str, list[bytes]]:
    """Each listed session as ``inspect`` shows it: its header, then each event, as
    stored bytes; every listed id once."""
    listed = [info.header.id for info in await store.list_snapshots()]
    assert len(listed) == len(set(listed)), listed
    shown = {}
    for session_id in listed:
        stored = await store.inspect(session_id)
        shown[session_id] = [
            jsoncodec.dumps(stored.header.to_json()),
            *(jsoncodec.dumps(event.to_json()) for event in stored.events),
        ]
    return shown


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, list[bytes]]]:
    """The source store's URL, and what a copy of it must hold."""
    url = f"sqlite:{tmp_path_factory.mktemp('copy-source') / 'source.db'}"

    async def build() -> dict[str, list[bytes]]:
        await fill_source(url)
        store = open_store(url)
        try:
            return await views(store)
        finally:
            await store.close()

    expected = asyncio.run(build())
    assert list(expected) == ["big", "small"]
    assert len(expected["big"]) > BIG_EVENTS  # (and the header)
    return url, expected


@pytest.fixture
async def destination(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    kind = request.param
    if kind == "memory":
        yield "memory:"
    elif kind == "jsonl":
        yield f"jsonl:{tmp_path / 'copy'}"
    elif kind == "sqlite":
        yield f"sqlite:{tmp_path / 'copy.db'}"
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"copy_{uuid.uuid4().hex[:12]}"
        yield with_options(base, schema=schema, pool_max_size=2)
        await drop_schema(base, schema)


# -- the command -----------------------------------------------------------------------


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("SESSIONLEDGER_STORE", ENVIRONMENT_VARIABLE, ACTION_VARIABLE):
        env.pop(name, None)
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), COLUMNS="200", PYTHONIOENCODING="utf-8")
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionledger", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


#: Runs the command line's entry point once per argument list (JSON), in one process (one
#: start-up for several read commands), and prints each exit status and output as JSON.
READ_COMMANDS = """
import contextlib, io, json, sys
from sessionledger.cli.__main__ import main
results = []
for argv in json.loads(sys.argv[1]):
    written = io.BytesIO()
    out = io.TextIOWrapper(written, encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(out):
        code = main(argv)
    out.flush()
    results.append([code, written.getvalue().decode()])
print(json.dumps(results))
"""


def read_commands(env: dict[str, str], *commands: list[str]) -> list[tuple[int, str]]:
    """Run read-only commands (``ls``, ``verify``) through ``main``; their statuses and
    outputs."""
    done = subprocess.run(
        [sys.executable, "-c", READ_COMMANDS, json.dumps(commands)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [(code, out) for code, out in json.loads(done.stdout)]


def copy_args(source: str, target: str, rerun: bool) -> list[str]:
    args = [sys.executable, "-m", "sessionledger", "copy", "--from", source, "--to", target]
    return [*args, "--skip-existing", "--json"] if rerun else [*args, "--json"]


def stop_copy(env: dict[str, str], args: list[str], point: str, how: signal.Signals) -> str:
    """Run the copy until it reaches *point*, then kill it there or (the point itself
    sent SIGINT) let it end as Ctrl-C ends it; return what it wrote to stderr."""
    armed = {ENVIRONMENT_VARIABLE: point}
    if how == CTRL_C:
        armed[ACTION_VARIABLE] = "interrupt"
    child = subprocess.Popen(
        args, env={**env, **armed}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stderr is not None
    err = b""
    try:
        deadline = time.monotonic() + 90
        while FAILPOINT_LINE.search(err) is None:
            ready, _, _ = select.select([child.stderr], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(child.stderr.fileno(), 1 << 16) if ready else b""
            if not chunk:
                child.kill()
                _, rest = child.communicate(timeout=60)
                raise AssertionError(
                    f"copy never reached {point} (exit {child.returncode}):\n"
                    + (err + rest).decode(errors="replace")
                )
            err += chunk
        if how == KILL:
            child.kill()
            assert child.wait(timeout=60) == -KILL
        else:
            _, rest = child.communicate(timeout=60)
            err += rest
            assert child.returncode == 130, err.decode(errors="replace")
            assert b"interrupted" in err
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    return err.decode(errors="replace")


# -- the oracle --------------------------------------------------------------------------


async def shown_complete(
    env: dict[str, str], url: str, expected: dict[str, list[bytes]]
) -> set[str]:
    """Check that everything the destination shows is complete; return what it shows."""
    store = open_store(url)
    try:
        shown = await views(store)
        for session_id in expected.keys() - shown.keys():
            with pytest.raises(SessionNotFoundError):
                await store.inspect(session_id)
        page = await store.list_sessions()
        listed = {info.header.id: info.summary.events for info in page.sessions}
    finally:
        await store.close()
    for session_id, events in shown.items():
        assert events == expected[session_id], f"{session_id}: shown, and not as copied"
    assert listed == {session_id: len(shown[session_id]) - 1 for session_id in shown}
    (ls, ls_out), (verify, verify_out) = read_commands(
        env, ["--store", url, "ls", "--json"], ["--store", url, "verify", "--all", "--json"]
    )
    if not shown and ls == 0 and verify == 2:
        assert json.loads(ls_out)["sessions"] == []
        return set()  # killed before it made the store: verify finds no store
    assert ls == 0
    rows = {row["id"]: row["events"] for row in json.loads(ls_out)["sessions"]}
    assert rows == listed
    assert verify == 0, verify_out
    checked = json.loads(verify_out)["sessions"]
    assert {row["id"] for row in checked} == shown.keys()
    assert all(row["ok"] for row in checked), checked
    return set(shown)


@pytest.mark.parametrize("destination", sorted(CHAINS), indirect=True)
async def test_a_stopped_copy_leaves_nothing_half_there_and_the_rerun_finishes_it(
    destination: str,
    source: tuple[str, dict[str, list[bytes]]],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    source_url, expected = source
    env = cli_env(tmp_path)
    chain = CHAINS[request.node.callspec.params["destination"]]
    present: set[str] = set()
    for step, (point, how) in enumerate(chain):
        args = copy_args(source_url, destination, rerun=step > 0)
        stop_copy(env, args, point, how)
        now = await shown_complete(env, destination, expected)
        assert present <= now, f"after {point}: {present - now} disappeared"
        present = now

    rerun = subprocess.run(
        copy_args(source_url, destination, rerun=True),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads(rerun.stdout)
    assert report["skipped"] == sorted(present)
    assert report["copied"] == [sid for sid in expected if sid not in present]
    assert report["verified"] is True
    assert report["mismatches"] == []
    assert await shown_complete(env, destination, expected) == set(expected)


@pytest.mark.parametrize("destination", ["memory", "jsonl", "sqlite", "postgresql"], indirect=True)
async def test_every_built_in_store_reads_a_whole_log_back_before_it_publishes_it(
    destination: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publishing, "PUBLISH_BATCH_EVENTS", 5)
    monkeypatch.setattr(publishing, "first_difference", lambda *_: ("made up", 3))
    events = make_log(turns=2)
    store = open_store(destination)
    try:
        with pytest.raises(ReadBackMismatchError) as raised:
            await store.publish(header_for("checked"), events)
        assert raised.value.published is False
        assert await store.list_snapshots() == []
        monkeypatch.undo()
        await store.publish(header_for("checked"), events)  # nothing was left in the way
        assert same_events(events, (await store.inspect("checked")).events)
    finally:
        await store.close()
    if destination.startswith("jsonl:"):  # no staged file left behind either
        root = Path(destination.partition(":")[2])
        assert [path.name for path in root.rglob("*.tmp")] == []


# -- deep values ---------------------------------------------------------------------------


#: Ten times deeper than ``==`` (or ``repr``) can recurse, and than orjson reads or writes
#: (docs/events.md, "JSON values"); the hostile-input suite goes to 100,000.
DEPTH = 10_000


def deep_value(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"k": [value]}
    return value


async def test_a_value_nested_10k_deep_is_copied_and_verified(tmp_path: Path) -> None:
    source = f"jsonl:{tmp_path / 'deep'}"
    store = open_store(source)
    try:
        # The header too: deeper than == on two headers can recurse.
        await store.create(SessionHeader(id="deep", created_at=1, meta={"m": deep_value(1_500)}))
        event = SessionEvent("note/deep", 0, 2, {"v": deep_value(DEPTH // 2)}, ignorable=True)
        await store.append("deep", [event])
        expected = await views(store)
    finally:
        await store.close()
    env = cli_env(tmp_path)
    middle, last = f"sqlite:{tmp_path / 'deep.db'}", f"jsonl:{tmp_path / 'back'}"
    for origin, target in ((source, middle), (middle, last)):
        done = cli(env, "copy", "--from", origin, "--to", target, "--json")
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["verified"] is True
    store = open_store(last)
    try:
        assert await views(store) == expected
    finally:
        await store.close()
