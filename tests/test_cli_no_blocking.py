"""Every command of the command line makes no blocking call on its event loop.

The persistence contract kit checks the backends' async methods (docs/backends.md, "no
blocking call on the event loop"); the commands add their own async paths around them
(opening the store, reading an import file, copying between stores). Each command runs
here in this process, on SQLite and JSONL, with BlockBuster watching the library; the
setup (argument parsing, finding the backend) runs before the loop starts, where blocking
is allowed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sessionledger import Ledger
from sessionledger.cli.__main__ import main
from sessionledger.testing.blocking import no_blocking_calls
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call

#: Each command once, in an order that leaves something for the next to work on.
COMMANDS: list[tuple[str, ...]] = [
    ("demo",),
    ("ls",),
    ("show", "closed"),
    ("messages", "closed"),
    ("transcript", "closed"),
    ("stats", "closed"),
    ("catalog",),
    ("verify",),
    ("search", "hello"),
    ("repair", "crashed"),
    ("import", "{history}", "--format", "openai", "--id", "imported"),
    ("copy", "--from", "{url}", "--to", "{copy}"),
    ("reindex",),
    ("delete", "closed"),
    ("prune", "--keep-last", "1"),
    ("prune", "--keep-last", "1", "--yes"),
    ("audit",),
]


WATCHED = ["sessionledger_sqlite", "sessionledger_jsonl"]
#: ``demo`` runs its second turn in a child process through asyncio's own subprocess API,
#: which forks, reads the child's exec-error pipe and checks its pipes (``fstat``) on the
#: loop itself: asyncio's doing, not a file the library touches.
SUBPROCESS = [
    ("asyncio/base_events.py", "subprocess_exec"),
    ("asyncio/base_subprocess.py", "_connect_pipes"),
]


async def fill(url: str) -> None:
    """A closed session and one a crash left with a tool call open."""
    async with Ledger.open(url) as ledger:
        closed = ledger.create("closed", cwd="/srv/project")
        closed_turn(closed, 1)
        crashed = ledger.create("crashed", cwd="/srv/project")
        closed_turn(crashed, 1)
        open_turn_with_pending_call(crashed, 2)


@pytest.fixture(params=["sqlite", "jsonl"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    name = {"sqlite": "ledger.db", "jsonl": "ledger"}[request.param]
    return f"{request.param}:{tmp_path / name}"


def test_every_command_keeps_its_event_loop_free(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(fill(store_url))
    history = tmp_path / "history.json"
    history.write_text(json.dumps([{"role": "user", "content": "hello"}]))
    scheme = store_url.partition(":")[0]
    values = {"history": str(history), "url": store_url, "copy": f"{scheme}:{tmp_path / 'c'}"}
    for command in COMMANDS:
        argv = [part.format(**values) for part in command]
        if command[0] != "copy":
            argv[1:1] = ["--store", store_url]
        with no_blocking_calls(WATCHED, may_block_in=SUBPROCESS):
            status = main(argv)
        assert status == 0, (argv, capsys.readouterr().err)
