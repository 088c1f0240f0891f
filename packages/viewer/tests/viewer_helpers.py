"""What the viewer's tests share: a store with the sessions worth looking at, the viewer
started as a user starts it (``sessionledger view`` in a process of its own), and HTTP."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sessionledger import Ledger, Session, user_message
from sessionledger.testing.builders import closed_turn, compact

#: Text a model or a tool could return, meant to run or to mislead in a page.
HOSTILE = (
    '<script>alert("pwned")</script> <img src=x onerror=alert(1)> '
    '<a href="javascript:alert(2)">click</a> "quotes" & ampersands \x1b[31m\x07'
)


#: One line far longer than any page shows in a row (its event's page shows it whole).
HUGE = "y" * 300_000 + " HUGE-END"


@dataclasses.dataclass
class Fetched:
    status: int
    headers: dict[str, str]
    body: str


def fetch(url: str, host: str | None = None) -> Fetched:
    """GET *url* (with *host* as its Host header when given), errors included."""
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Fetched(
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                response.read().decode(),
            )
    except urllib.error.HTTPError as error:
        return Fetched(
            error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()
        )


def store_url(kind: str, root: Path) -> str:
    return f"sqlite:{root / 'ledger.db'}" if kind == "sqlite" else f"jsonl:{root / 'logs'}"


async def fill(url: str) -> dict[str, Session]:
    """Sessions to look at: a compacted one (a replaced range, provenance of every kind),
    a fork of it (lineage), and one whose every message is hostile."""
    async with Ledger.open(url) as ledger:
        main = ledger.create("main", title="a compacted session")
        turn = closed_turn(main, 1, prompt="read the report", answer="the report says three things")
        closed_turn(main, 2, prompt="and the numbers?", answer="they grew every quarter")
        compact(main, "summary: a report was read and its numbers grew")
        closed_turn(main, 3, prompt="thanks", answer="glad to help")
        # Two requests: the second changes the model.
        config = {"provider": "mock", "model": "mock-model"}
        for number, reason, model in ((4, "initial", "mock-model"), (5, "change", "mock-model-2")):
            main.append("turn/start", {"turn": number})
            header = {"config": {**config, "model": model}, "system": "be brief"}
            main.append("request/header", {"reason": reason, "header": header})
            main.append("turn/end", {"turn": number, "reason": {"kind": "completed"}})
        await ledger.flush(main)
        child = await ledger.fork("main", turn[-1].seq, child_id="child")
        await ledger.flush(child)
        hostile = ledger.create("hostile", title=HOSTILE)
        hostile.append("turn/start", {"turn": 1})
        hostile.append("user/message", user_message(HOSTILE), surface_op="append")
        hostile.append("user/message", user_message(HUGE), surface_op="append")
        await ledger.flush(hostile)
        return {"main": main, "child": child, "hostile": hostile}


def snapshot(root: Path) -> dict[str, str]:
    """Every file under *root* and a hash of its bytes (and each directory, by name).

    SQLite's readers of a WAL database need its shared-memory index (``-shm``, whose
    bytes they update) and a WAL file, which they create empty when there is none
    (``sessionledger ls`` does the same): those two are left out while the WAL is empty.
    """
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if key.endswith("-shm") or (key.endswith("-wal") and not path.stat().st_size):
            continue
        found[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@dataclasses.dataclass
class Running:
    process: subprocess.Popen[str]
    url: str

    @property
    def base(self) -> str:
        return self.url.split("/", 3)[0] + "//" + self.url.split("/", 3)[2]


@contextmanager
def viewer(env: dict[str, str], url: str, *args: str) -> Iterator[Running]:
    """``sessionledger view --no-browser`` on *url*, until the block ends (by SIGINT)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sessionledger", "view", "--store", url, "--no-browser", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        if not first.startswith("http://"):
            process.kill()
            raise AssertionError(f"no URL first: {first!r}; {process.communicate()[1]}")
        yield Running(process, first)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def viewer_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SESSIONLEDGER_STORE", None)
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), PYTHONIOENCODING="utf-8")
    return env
