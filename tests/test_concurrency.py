"""Several processes on one store: no errors, no losses, and a typed loser on one session.

- 4 processes x 1,000 appends (one durable write each) to one new store, each on its own
  session: every child succeeds and every event is stored once, byte-identical.
- Two processes racing on one session, round after round, each appending the event that
  continues the log they both read: exactly one wins; the other gets
  ``SessionExistsError`` (the first write of a new id), ``SeqMismatchError`` or
  ``SessionLockedError``, and the stored log holds the winner's event only, never both,
  never a torn or interleaved record.
"""

from __future__ import annotations

import importlib.util
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.runtime._opening import open_store

HERE = Path(__file__).resolve().parent
CHILD_PATH = HERE / "concurrency_child.py"
TIMEOUT = 300.0


def _load_child() -> Any:
    spec = importlib.util.spec_from_file_location("concurrency_child", CHILD_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHILD = _load_child()


def child_env() -> dict[str, str]:
    env = dict(os.environ, SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD="1")
    env.pop("SESSIONLEDGER_FAILPOINT", None)
    return env


def url_for(kind: str, tmp_path: Path) -> str:
    return f"jsonl:{tmp_path / 'jsonl'}" if kind == "jsonl" else f"sqlite:{tmp_path / 'shared.db'}"


def plugins(url: str) -> list[object]:
    return CHILD.plugins_for(url)  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_four_processes_append_a_thousand_events_each_without_errors_or_losses(
    kind: str, tmp_path: Path
) -> None:
    url = url_for(kind, tmp_path)
    workers, count = 4, 1_000
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD_PATH), "append", url, f"w{index}", str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for index in range(workers)
    ]
    try:
        for child in children:  # all start on a store none of them created
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [child.communicate(timeout=TIMEOUT) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == f"ok {count}", err
    store = open_store(url, plugins=plugins(url), load_entrypoints=False)
    try:
        listed = sorted(info.header.id for info in await store.list_snapshots())
        assert listed == [f"w{index}" for index in range(workers)]
        for index in range(workers):
            stored = (await store.inspect(f"w{index}")).events
            expected = [CHILD.event(seq, f"w{index}") for seq in range(count)]
            assert [jsoncodec.dumps(e.to_json()) for e in stored] == [
                jsoncodec.dumps(e) for e in expected
            ]
    finally:
        await store.close()


class Racer:
    """One racing child, driven line by line with a timeout on every read."""

    def __init__(self, url: str, session_id: str, name: str, rounds: int) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD_PATH), "race", url, session_id, name, str(rounds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        self.buffer = b""

    def line(self) -> str:
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + 60
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(stdout.fileno(), 4096) if ready else b""
            if not chunk:
                if self.process.poll() is None:
                    self.process.kill()
                stderr = self.process.stderr.read() if self.process.stderr else b""
                self.close()
                pytest.fail(f"racer {self.name} stopped: {stderr.decode(errors='replace')}")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=60)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def stored_marks(kind: str, tmp_path: Path, url: str) -> list[str]:
    """Who wrote each stored event, read straight from storage (JSONL: every line parses)."""
    if kind == "jsonl":
        (path,) = (tmp_path / "jsonl").glob("*/*/session.jsonl")
        data = path.read_bytes()
        assert data.endswith(b"\n")
        records = [orjson.loads(line) for line in data.split(b"\n")[1:-1]]
        return [record["data"]["writer"] for record in records if "commit" not in record]
    import sqlite3

    db = sqlite3.connect(f"file:{url.partition(':')[2]}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT seq, data FROM events WHERE session_id = 'raced' ORDER BY seq")
        found = list(rows)
    finally:
        db.close()
    assert [seq for seq, _ in found] == list(range(len(found)))
    return [orjson.loads(data)["writer"] for _, data in found]


LOSING_ERRORS = {"SessionExistsError", "SeqMismatchError", "SessionLockedError"}


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
@pytest.mark.parametrize("rounds", [pytest.param(40, id="40-rounds")])
def test_two_writers_on_one_session_one_wins_the_other_gets_a_typed_error(
    kind: str, rounds: int, tmp_path: Path
) -> None:
    url = url_for(kind, tmp_path)
    racers = [Racer(url, "raced", name, rounds) for name in ("left", "right")]
    winners: list[str] = []
    try:
        for number in range(rounds):
            ready = [racer.line().split() for racer in racers]
            assert [fields[:2] for fields in ready] == [["READY", str(number)]] * 2
            assert ready[0][2] == ready[1][2] == str(number)  # both continue the same log
            for racer in racers:
                racer.go()
            outcomes = [racer.line().split() for racer in racers]
            won = [
                racer.name
                for racer, fields in zip(racers, outcomes, strict=True)
                if fields[0] == "WIN"
            ]
            lost = [fields[2] for fields in outcomes if fields[0] == "LOSE"]
            assert len(won) == 1, outcomes
            assert len(lost) == 1, outcomes
            assert lost[0] in LOSING_ERRORS, outcomes
            if number == 0:  # the first write of a new id: the log exists, or is being made
                assert lost[0] in ("SessionExistsError", "SessionLockedError"), outcomes
            winners.extend(won)
            assert stored_marks(kind, tmp_path, url) == winners  # the winner's event only
            if number + 1 < rounds:
                for racer in racers:
                    racer.go()  # next round
        for racer in racers:
            assert racer.process.wait(timeout=60) == 0
    finally:
        for racer in racers:
            racer.close()
