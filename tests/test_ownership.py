"""One writer per session (docs/durability.md), with real processes, on every backend that
has files or a server: SQLite, JSONL and PostgreSQL.

The oracle is exact: what the holder made durable is read back event for event, the
refused side changed nothing (same revision), and a dead holder's session is resumed at
once and repaired with exactly the closers of its open turn.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger import Ledger, SessionLockedError
from sessionledger.testing.builders import closed_turn
from sessionledger_postgres.testing import drop_schema, with_options

CHILD = Path(__file__).with_name("ownership_child.py")
SESSION = "owned"


@pytest.fixture(params=["sqlite", "jsonl", "postgresql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A store URL of each kind, empty."""
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'ledger.db'}"
    elif request.param == "jsonl":
        yield f"jsonl:{tmp_path / 'sessions'}"
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"own_{uuid.uuid4().hex[:12]}"
        yield with_options(base, schema=schema, pool_max_size=2)
        await drop_schema(base, schema)


class Holder:
    """The child process holding the session live."""

    def __init__(self, url: str, expected: Path) -> None:
        self.expected = expected
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), url, SESSION, str(expected)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self._line()
        assert line == f"HELD {self.process.pid}", line

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line:
            _, err = self.process.communicate(timeout=60)
            pytest.fail(f"holder exited ({self.process.returncode}): {err}")
        return line

    def events(self) -> list[dict[str, Any]]:
        """What the holder made durable, as it wrote it down."""
        return [orjson.loads(line) for line in self.expected.read_bytes().splitlines()]

    def finish(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write("finish\n")
        self.process.stdin.flush()
        line = self._line()
        assert line.startswith("CLOSED "), line
        assert self.process.wait(timeout=60) == 0
        return int(line.split()[1])

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        assert self.process.returncode == -signal.SIGKILL

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def holder(store_url: str, tmp_path: Path) -> Iterator[Holder]:
    started = Holder(store_url, tmp_path / "expected.jsonl")
    try:
        yield started
    finally:
        started.stop()


async def revision(ledger: Ledger) -> str:
    assert ledger.persistence is not None
    infos = await ledger.persistence.list_snapshots()
    return next(info.revision for info in infos if info.header.id == SESSION)


def as_json(events: Any) -> list[dict[str, Any]]:
    """Events as plain JSON values, as the holder wrote them down."""
    return [orjson.loads(orjson.dumps(event.to_json())) for event in events]


async def test_a_session_live_in_another_process_is_refused_and_its_turn_ends_normally(
    store_url: str, holder: Holder
) -> None:
    durable = holder.events()
    async with Ledger.open(store_url) as ledger:
        before = await revision(ledger)
        with pytest.raises(SessionLockedError) as refused:
            await ledger.resume(SESSION)
        assert refused.value.code == "LOCKED"
        assert f"pid {holder.process.pid} on " in str(refused.value)
        # Reading is never blocked, and the refusal wrote nothing: no closers appended
        # into the holder's open turn.
        view = await ledger.inspect(SESSION)
        assert as_json(view.events[: len(durable)]) == durable
        assert [info.header.id async for info in ledger.list_sessions()] == [SESSION]
        assert await revision(ledger) == before
    count = holder.finish()  # the holder's next flush and its close still succeed
    complete = holder.events()
    assert len(complete) == count
    async with Ledger.open(store_url) as ledger:
        resumed = await ledger.resume(SESSION)
        # Every event the holder wrote, and no repair: its turn had ended normally.
        assert as_json(resumed.events[:count]) == complete
        assert [event.type for event in resumed.events[count:]] == ["session/end-seed"]


async def test_a_killed_holder_is_replaced_at_once_and_its_open_turn_repaired(
    store_url: str, holder: Holder
) -> None:
    durable = holder.events()
    holder.kill()
    async with Ledger.open(store_url) as ledger:
        resumed = await ledger.resume(SESSION)  # no timeout to wait out
        assert as_json(resumed.events[: len(durable)]) == durable
        closers = resumed.events[len(durable) :]
        assert [event.type for event in closers] == [
            "tool/result",
            "step/end",
            "turn/end",
            "session/end-seed",
        ]
        assert closers[0].data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        assert closers[2].data["reason"] == {"kind": "interrupted"}


async def test_two_ledgers_in_one_process_hold_a_session_one_at_a_time(store_url: str) -> None:
    async with Ledger.open(store_url) as first, Ledger.open(store_url) as second:
        session = first.create(SESSION, cwd="/srv/owner")
        closed_turn(session, 1)
        await first.flush(session)
        with pytest.raises(SessionLockedError):
            await second.resume(SESSION)
        stored = as_json(session.events)
        assert as_json((await second.inspect(SESSION)).events)[: len(stored)] == stored
        await first.release(session)
        taken = await second.resume(SESSION)
        closed_turn(taken, 2)
        await second.flush(taken)
        with pytest.raises(SessionLockedError):
            await first.resume(SESSION)
        expected = as_json(taken.events)
    async with Ledger.open(store_url) as ledger:
        assert as_json((await ledger.resume(SESSION)).events)[: len(expected)] == expected
