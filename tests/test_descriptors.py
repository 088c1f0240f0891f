"""Many live sessions, few descriptors (docs/durability.md), on the file-based backends.

A writer's claim is a byte lock in one store-wide lock file, so holding 1,000 sessions
live needs no descriptor per session; running out of descriptors is a typed error, and
``close`` names every session it could not write. Each case runs in a child process
whose ``RLIMIT_NOFILE`` is lowered, so the limit cannot leak into other tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger.runtime._opening import open_store

CHILD = """
import asyncio, json, os, resource, sys
from sessionledger import Ledger
from sessionledger.testing.builders import closed_turn

def limit(count: int) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))

async def main() -> None:
    url, wanted, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ledger = Ledger.open(url)
    if url.startswith("sqlite:"):
        await ledger.persistence.list()  # the database is opened (and read) before the limit
    # 0 means: one descriptor more than the process holds now, too few for any write
    limit(wanted or len(os.listdir("/proc/self/fd")))
    sessions = [ledger.create(f"s{index}", cwd="/srv/app") for index in range(count)]
    failures = []
    for session in sessions:
        closed_turn(session, 1)
        try:
            await ledger.flush(session)
        except Exception as error:
            failures.append(f"{type(error).__name__}:{getattr(error, 'code', '')}")
    try:
        await ledger.close()
        closed = "ok"
    except Exception as error:
        closed = f"{type(error).__name__}:{getattr(error, 'code', '')}:{error.__notes__!r}"
    print(json.dumps({"failures": failures, "close": closed,
                      "lengths": [len(s.events) for s in sessions]}))

asyncio.run(main())
"""


@pytest.fixture(params=["jsonl", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "jsonl":
        return f"jsonl:{tmp_path / 'sessions'}"
    return f"sqlite:{tmp_path / 'ledger.db'}"


def run_many(url: str, limit: int, count: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(limit), str(count)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = orjson.loads(done.stdout)
    return result


@pytest.mark.slow
async def test_a_thousand_live_sessions_need_no_descriptor_each(store_url: str) -> None:
    # 1,000 sessions live at once, each holding its claim until close, under a limit of
    # 256 open files.
    result = run_many(store_url, 256, 1_000)
    assert result["failures"] == []
    assert result["close"] == "ok"
    store = open_store(store_url)
    try:
        for index, length in enumerate(result["lengths"]):
            assert len((await store.load(f"s{index}")).events) == length
    finally:
        await store.close()


async def test_running_out_of_descriptors_is_a_typed_error_and_close_names_the_sessions(
    store_url: str,
) -> None:
    result = run_many(store_url, 0, 3)  # too few descriptors for even one claim
    assert result["failures"] == ["ResourceLimitError:RESOURCE_LIMIT"] * 3
    assert result["close"].startswith("ResourceLimitError:RESOURCE_LIMIT:")
    for index in range(3):
        assert f"session 's{index}'" in result["close"]
