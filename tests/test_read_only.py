"""Reading never writes (docs/durability.md): SQLite stores are opened read-only, an empty
file stays empty, and stores on read-only media can be read.

The read-only medium is real: a tmpfs remounted read-only inside a private mount
namespace (``unshare``), so nothing leaks to the machine. Where the kernel does not let
this process make one, that test is skipped and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sessionledger import Ledger
from sessionledger.testing.builders import closed_turn

HERE = Path(__file__).parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionledger", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def listing(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*")}


def test_reading_an_empty_file_leaves_it_empty(tmp_path: Path) -> None:
    database = tmp_path / "z.db"
    database.touch()  # : > z.db
    listed = cli("--store", f"sqlite:{database}", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"sessions": [], "next": None}
    assert cli("--store", f"sqlite:{database}", "verify", "--all").returncode == 0
    assert cli("--store", f"sqlite:{database}", "show", "nothing").returncode == 2
    assert listing(tmp_path) == {"z.db": 0}  # no schema, no -wal, no lock file


def test_reading_a_store_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    for url in (f"sqlite:{tmp_path / 'a' / 'b.db'}", f"jsonl:{tmp_path / 'c'}"):
        listed = cli("--store", url, "ls", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"sessions": [], "next": None}
        assert cli("--store", url, "show", "nothing").returncode == 2
    assert listing(tmp_path) == {}


async def test_reading_a_sqlite_store_changes_no_byte_of_its_data(tmp_path: Path) -> None:
    database = tmp_path / "ledger.db"
    async with Ledger.open(f"sqlite:{database}") as ledger:
        session = ledger.create("s", cwd="/srv/ro")
        closed_turn(session, 1)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert set(files) == {"ledger.db", "ledger.db.locks"}  # the writer closed cleanly
    for args in (
        ["ls"],
        ["show", "s"],
        ["verify", "--all"],
        ["stats", "s"],
        ["search", "hello"],
        ["audit"],
    ):
        done = cli("--store", f"sqlite:{database}", *args)
        assert done.returncode == 0, done.stderr
    assert {name: (tmp_path / name).read_bytes() for name in files} == files
    # SQLite's readers of a WAL database keep its shared-memory index beside it (and an
    # empty -wal file); nothing else is created, and no claim is taken.
    added = set(listing(tmp_path)) - {*files, "ledger.db.owners"}
    assert added <= {"ledger.db-wal", "ledger.db-shm"}
    assert listing(tmp_path).get("ledger.db-wal", 0) == 0
    assert list((tmp_path / "ledger.db.owners").iterdir()) == []


def _namespace_command() -> list[str] | None:
    """How to run a child in a private mount namespace, or None without ``unshare``."""
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("mount") is None:
        return None
    command = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        command.insert(1, "--map-root-user")
    return command


def run_on_read_only_media(tmp_path: Path) -> dict[str, Any]:
    prefix = _namespace_command()
    if prefix is None:
        pytest.skip("needs unshare(1) and mount(8) to make a read-only tmpfs")
    probe = subprocess.run(
        [*prefix, "mount", "-t", "tmpfs", "tmpfs", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(
            "this process may not mount a tmpfs in a private mount namespace "
            f"({probe.stderr.strip() or probe.returncode}), so no read-only medium can be made"
        )
    done = subprocess.run(
        [*prefix, sys.executable, str(HERE / "read_only_child.py"), str(tmp_path / "media")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.slow
def test_stores_on_read_only_media_can_be_read(tmp_path: Path) -> None:
    result = run_on_read_only_media(tmp_path)
    assert result["files-after"] == result["files"]
    for name in ("sqlite", "jsonl"):
        runs = result[name]
        for command, done in runs.items():
            assert done["code"] == 0, (name, command, done["err"])
        listed = json.loads(runs["ls"]["out"])["sessions"]
        assert sorted(row["id"] for row in listed) == ["closed", "crashed"]
        shown = [json.loads(line) for line in runs["show"]["out"].splitlines()]
        assert shown[-1]["type"] == "tool/call"  # as stored: no repair was written
        assert "turn 2 is open" in runs["verify"]["out"]
        hits = json.loads(runs["search"]["out"])
        assert sorted({hit["sessionId"] for hit in hits}) == ["closed", "crashed"]
        assert json.loads(runs["audit"]["out"]) == []
    # Transactions still in a -wal file on read-only media: SQLite can read them only
    # through the shared-memory file, which the dead writer left behind, so this reads.
    wal = result["sqlite-wal"]
    assert wal["ls"]["code"] == 0, wal["ls"]["err"]
    assert [row["id"] for row in json.loads(wal["ls"]["out"])["sessions"]] == ["in-wal"]
