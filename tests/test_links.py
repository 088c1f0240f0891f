"""Every other name for a store's files: one store for ownership, or a typed refusal.

docs/durability.md ("one writer per session", "files and directories"). A session's one
writer is decided by a lock in a file found by name beside the store's files, so a second
name for one of those files (a symbolic link, a hard link, a relative path, another
mount) must either lead to the same lock (the second writer sees ``LOCKED``) or be
refused with a ``ConfigError`` naming it; and nothing outside the store may change.

- Two processes: a holder keeps a session live with an open turn on the real path; this
  process tries to resume it through another name. The oracle is exact: refused with the
  expected code, the store unchanged, and the holder's next flush and close succeed, so a
  fresh reader reads every event the holder made durable, exactly.
- Every file a store opens, on JSONL and SQLite, with a symbolic and a hard link planted
  at its name and pointing outside the store: writers are refused (or, for a file that is
  only advice or rebuilt, go on without using it), reads are handled as documented, and
  the bytes outside the store are the same before and after.
- Mounts: a file or directory bound into a store from elsewhere (private mount namespace,
  skipped where the kernel allows none), and the CLI's default store.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessionledger import ConfigError, Ledger, LedgerError, SessionLockedError, open_store
from sessionledger.storage._claims import claim_offset
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger_jsonl import JsonlPersistence
from sessionledger_sqlite import SqlitePersistence

HERE = Path(__file__).parent
HOLDER = HERE / "ownership_child.py"
SESSION = "owned"


class Holder:
    """A child process holding SESSION live, its second turn open after a tool call."""

    def __init__(self, url: str, expected: Path) -> None:
        self.expected = expected
        self.process = subprocess.Popen(
            [sys.executable, str(HOLDER), url, SESSION, str(expected)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._line() == f"HELD {self.process.pid}"

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line:
            _, err = self.process.communicate(timeout=60)
            pytest.fail(f"holder exited ({self.process.returncode}): {err}")
        return line

    def events(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.expected.read_bytes().splitlines()]

    def finish(self) -> int:
        """Close the open turn, flush, close the ledger; return how many events it made."""
        assert self.process.stdin is not None
        self.process.stdin.write("finish\n")
        self.process.stdin.flush()
        line = self._line()
        assert line.startswith("CLOSED "), line
        _, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err
        return int(line.split()[1])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=60)


def tree_bytes(top: Path) -> dict[str, bytes | str | None]:
    """Every path under *top* (links not followed): its bytes, its link target, or None
    for a directory."""
    found: dict[str, bytes | str | None] = {}
    for path in sorted(top.rglob("*")):
        name = str(path.relative_to(top))
        if path.is_symlink():
            found[name] = os.readlink(path)
        elif path.is_dir():
            found[name] = None
        else:
            found[name] = path.read_bytes()
    return found


def as_json(events: Any) -> list[dict[str, Any]]:
    return [orjson.loads(orjson.dumps(event.to_json())) for event in events]


# -- two processes, one session, another name --------------------------------------------

#: (backend, how the second process names the store) -> the code its resume must get.
ALIASES = {
    ("sqlite", "symbolic link to the database"): "CONFIG",
    ("sqlite", "hard link to the database"): "CONFIG",
    ("sqlite", "relative path"): "LOCKED",
    ("sqlite", "symbolic link to its directory"): "LOCKED",
    ("jsonl", "symbolic link to the root"): "LOCKED",
    ("jsonl", "relative path"): "LOCKED",
    ("jsonl", "hard link to the log in another root"): "CONFIG",
}


def _alias(backend: str, how: str, tmp_path: Path) -> tuple[str, str]:
    """The holder's URL and, once the holder has written, the other name's URL."""
    store = tmp_path / "store"
    if backend == "sqlite":
        store.mkdir()
        real = store / "ledger.db"
        return f"sqlite:{real}", {
            "symbolic link to the database": f"sqlite:{store / 'current.db'}",
            "hard link to the database": f"sqlite:{store / 'other.db'}",
            "relative path": "sqlite:store/ledger.db",
            "symbolic link to its directory": f"sqlite:{tmp_path / 'alias' / 'ledger.db'}",
        }[how]
    return f"jsonl:{store}", {
        "symbolic link to the root": f"jsonl:{tmp_path / 'alias'}",
        "relative path": "jsonl:./store",
        "hard link to the log in another root": f"jsonl:{tmp_path / 'other'}",
    }[how]


def _plant_alias(backend: str, how: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    if how == "symbolic link to the database":
        (store / "current.db").symlink_to("ledger.db")
    elif how == "hard link to the database":
        os.link(store / "ledger.db", store / "other.db")
    elif how in ("symbolic link to its directory", "symbolic link to the root"):
        (tmp_path / "alias").symlink_to(store)
    elif how == "hard link to the log in another root":
        session_dir = tmp_path / "other" / "--srv-owner--" / SESSION
        session_dir.mkdir(parents=True)
        os.link(store / "--srv-owner--" / SESSION / "session.jsonl", session_dir / "session.jsonl")


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # relative paths start here
    return tmp_path


@pytest.mark.parametrize(("backend", "how"), list(ALIASES))
async def test_a_second_process_through_another_name_is_refused_and_the_holder_loses_nothing(
    backend: str, how: str, in_tmp: Path
) -> None:
    tmp_path = in_tmp
    real_url, alias_url = _alias(backend, how, tmp_path)
    holder = Holder(real_url, tmp_path / "expected.jsonl")
    try:
        durable = holder.events()
        _plant_alias(backend, how, tmp_path)
        before = tree_bytes(tmp_path / "store")
        ledger = Ledger.open(alias_url)
        try:
            with pytest.raises((SessionLockedError, ConfigError)) as refused:
                await ledger.resume(SESSION)
        finally:
            await ledger.close()
        assert refused.value.code == ALIASES[backend, how], refused.value
        if isinstance(refused.value, ConfigError):  # the refusal names the other name
            assert alias_url.partition(":")[2].lstrip("./") in str(refused.value)
        after = tree_bytes(tmp_path / "store")
        # The refused side changed no byte of the store (SQLite's readers may leave the
        # shared-memory index they keep beside a WAL database).
        for name in set(before) | set(after):
            if not name.endswith(("-shm", "-wal")) and ".owners" not in name:
                assert after.get(name) == before.get(name), name
        count = holder.finish()  # the holder's next flush and its close succeed
        assert count > len(durable)
    finally:
        holder.stop()
    if how == "hard link to the database":
        (tmp_path / "store" / "other.db").unlink()  # the remedy the refusal names
    store = open_store(real_url)
    try:
        read = await store.read_from(SESSION, 0)
    finally:
        await store.close()
    assert as_json(read) == holder.events()
    assert holder.events()[: len(durable)] == durable


# -- every file a store opens, with a link planted at its name ----------------------------

VICTIM = "victim"
SYMBOLIC, HARD = "symbolic link", "hard link"
OUTSIDE_BYTES = b"a file outside the store\n"


def _note(owners: str) -> str:
    """The holder note of VICTIM in the notes directory *owners* (``sessionledger.storage._claims``)."""
    return f"{owners}/{claim_offset(VICTIM):016x}.json"


#: Where each file lives, relative to the store's directory (SQLite: the database's).
SQLITE_FILES = {
    "database": "ledger.db",
    "write-ahead log": "ledger.db-wal",
    "shared-memory index": "ledger.db-shm",
    "rollback journal": "ledger.db-journal",
    "lock file": "ledger.db.locks",
    "holder notes": "ledger.db.owners",
    "holder note": _note("ledger.db.owners"),
    "holder note's temp file": _note("ledger.db.owners") + ".tmp",
}
JSONL_FILES = {
    "project directory": "--srv-app--",
    "session directory": f"--srv-app--/{VICTIM}",
    "log": f"--srv-app--/{VICTIM}/session.jsonl",
    "new session's temp file": "--srv-app--/newcomer/session.jsonl.0123456789ab.tmp",
    "lock file": ".locks",
    "holder notes": ".owners",
    "holder note": _note(".owners"),
    "holder note's temp file": _note(".owners") + ".tmp",
    "summary index": "index.jsonl",
    "audit log": "audit.jsonl",
}
DIRECTORIES = {"holder notes", "project directory", "session directory"}
REFUSED_EVERYWHERE = {"inspect": "CONFIG", "resume": "CONFIG", "new session": "CONFIG"}
UNUSABLE = {**REFUSED_EVERYWHERE, "prune": "CONFIG"}
WRITERS_REFUSED = {"resume": "CONFIG", "new session": "CONFIG"}

#: (backend, file, link) -> the code each operation gets that does not succeed. A read
#: never needs the lock file; holder notes are advice (never written through a link);
#: a temp file or an index entry is made anew (the name there is replaced, not written);
#: a link among the JSONL root's entries stops every search for a session's directory.
EXPECTED: dict[tuple[str, str, str], dict[str, str]] = {
    **{
        ("sqlite", name, link): UNUSABLE
        for name in list(SQLITE_FILES)[:4]
        for link in (SYMBOLIC, HARD)
    },
    **{("sqlite", "lock file", link): WRITERS_REFUSED for link in (SYMBOLIC, HARD)},
    ("sqlite", "holder notes", SYMBOLIC): {},
    **{
        ("sqlite", name, link): {}
        for name in ("holder note", "holder note's temp file")
        for link in (SYMBOLIC, HARD)
    },
    ("jsonl", "project directory", SYMBOLIC): REFUSED_EVERYWHERE,
    ("jsonl", "session directory", SYMBOLIC): {"inspect": "CONFIG", "resume": "CONFIG"},
    ("jsonl", "log", SYMBOLIC): {"inspect": "CONFIG", "resume": "CONFIG"},
    ("jsonl", "log", HARD): {"resume": "CONFIG"},  # reading through a hard link is fine
    **{("jsonl", "new session's temp file", link): {} for link in (SYMBOLIC, HARD)},
    **{("jsonl", "lock file", link): WRITERS_REFUSED for link in (SYMBOLIC, HARD)},
    ("jsonl", "holder notes", SYMBOLIC): {},
    **{
        ("jsonl", name, link): {}
        for name in ("holder note", "holder note's temp file")
        for link in (SYMBOLIC, HARD)
    },
    ("jsonl", "summary index", SYMBOLIC): REFUSED_EVERYWHERE,
    ("jsonl", "summary index", HARD): {},
    ("jsonl", "audit log", SYMBOLIC): UNUSABLE,
    ("jsonl", "audit log", HARD): {"prune": "CONFIG"},
}


def _store(backend: str, directory: Path) -> SessionPersistence:
    if backend == "sqlite":
        return SqlitePersistence(directory / "ledger.db")
    return JsonlPersistence(directory)


async def _stored_victim(backend: str, directory: Path) -> None:
    """VICTIM stored with a closed turn and a second one left open after a tool call
    (so a resume writes closers), and once claimed (so notes and a lock file exist)."""
    ledger = Ledger(persistence=_store(backend, directory), load_entrypoints=False)
    async with ledger:
        session = ledger.create(VICTIM, cwd="/srv/app")
        closed_turn(session, 1)
        open_turn_with_pending_call(session, 2)
        await ledger.flush(session)


def _plant(path: Path, link: str, outside: Path) -> None:
    """Put a *link* at *path* to a file or directory outside the store: what *path*
    held (if anything) moves there, or is reached there too."""
    target = outside / path.name
    if link == SYMBOLIC:
        if path.exists():
            path.rename(target)
        else:
            target.write_bytes(OUTSIDE_BYTES)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.symlink_to(target)
    elif path.exists():
        os.link(path, target)
    else:
        target.write_bytes(OUTSIDE_BYTES)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.link(target, path)


async def _outcome(operation: Any) -> tuple[str, str]:
    try:
        await operation
    except LedgerError as error:
        return error.code, str(error)
    return "ok", ""


async def _operations(backend: str, directory: Path) -> dict[str, tuple[str, str]]:
    """What a reader, a writer resuming VICTIM, a writer of a new session and a prune
    (which records itself in the audit log) get."""
    outcomes = {}
    reader = _store(backend, directory)
    outcomes["inspect"] = await _outcome(reader.inspect(VICTIM))
    await reader.close()
    ledger = Ledger(persistence=_store(backend, directory), load_entrypoints=False)
    outcomes["resume"] = await _outcome(ledger.resume(VICTIM))
    session = ledger.create("newcomer", cwd="/srv/app")
    session.append("turn/start", {"turn": 1})
    outcomes["new session"] = await _outcome(ledger.flush(session))
    outcomes["prune"] = await _outcome(ledger.prune(keep_last=100, dry_run=False))
    with contextlib.suppress(LedgerError):  # a flush that failed fails again here
        await ledger.close()
    assert ledger.persistence is not None
    await ledger.persistence.close()
    return outcomes


@pytest.mark.parametrize(("backend", "name", "link"), list(EXPECTED))
async def test_a_link_at_any_file_a_store_opens_is_refused_or_never_written_through(
    backend: str, name: str, link: str, tmp_path: Path
) -> None:
    store, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    await _stored_victim(backend, store)
    planted = store / (SQLITE_FILES if backend == "sqlite" else JSONL_FILES)[name]
    _plant(planted, link, outside)
    before = tree_bytes(outside)
    outcomes = await _operations(backend, store)
    expected = EXPECTED[backend, name, link]
    assert {op: code for op, (code, _) in outcomes.items()} == {
        op: expected.get(op, "ok") for op in outcomes
    }
    for code, message in outcomes.values():
        if code == "CONFIG":  # the refusal names the path where the link stands
            assert str(planted) in message, message
    assert tree_bytes(outside) == before  # nothing outside the store written, cut or removed
    assert sorted(path.name for path in tmp_path.iterdir()) == ["outside", "store"]


async def test_an_interrupted_publish_leaves_a_second_name_its_next_writer_removes(
    tmp_path: Path,
) -> None:
    """A crash between publishing a log (``link``) and removing its temp file leaves the
    temp file as the log's second name; it is the store's own, so the next writer of the
    session removes it instead of refusing the log."""
    store = tmp_path / "store"
    await _stored_victim("jsonl", store)
    session_dir = store / "--srv-app--" / VICTIM
    os.link(session_dir / "session.jsonl", session_dir / "session.jsonl.0123456789ab.tmp")
    reader = JsonlPersistence(store)
    stored = len(await reader.read_from(VICTIM, 0))
    await reader.close()
    async with Ledger(persistence=JsonlPersistence(store), load_entrypoints=False) as ledger:
        resumed = await ledger.resume(VICTIM)
    assert sorted(path.name for path in session_dir.iterdir()) == ["session.jsonl"]
    assert (session_dir / "session.jsonl").stat().st_nlink == 1
    reader = JsonlPersistence(store)
    assert len(await reader.read_from(VICTIM, 0)) == len(resumed.events) > stored  # closers
    await reader.close()


@pytest.mark.parametrize("backend", ["sqlite", "jsonl"])
async def test_a_link_made_after_the_store_opened_is_refused_at_the_next_claim(
    backend: str, tmp_path: Path
) -> None:
    """A store that has already read (and so opened) its files: a second name made
    afterwards is refused when a writer next claims a session through either name."""
    store, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    await _stored_victim(backend, store)
    persistence = _store(backend, store)
    await persistence.inspect(VICTIM)  # the files are open from here on
    planted = store / (
        "ledger.db" if backend == "sqlite" else f"--srv-app--/{VICTIM}/session.jsonl"
    )
    os.link(planted, outside / planted.name)
    before = tree_bytes(outside)
    ledger = Ledger(persistence=persistence, load_entrypoints=False)
    with pytest.raises(ConfigError, match="hard links") as refused:
        await ledger.resume(VICTIM)
    assert str(planted) in str(refused.value)
    await ledger.close()
    assert tree_bytes(outside) == before


async def test_a_database_replaced_while_the_store_has_it_open_is_refused_at_the_next_claim(
    tmp_path: Path,
) -> None:
    """The name now leads to another file than the one the store's connection has: a
    claim through it would lock for one file and write the other."""
    store = tmp_path / "store"
    await _stored_victim("sqlite", store)
    await _stored_victim("sqlite", tmp_path / "other")
    persistence = SqlitePersistence(store / "ledger.db")
    await persistence.inspect(VICTIM)
    (tmp_path / "other" / "ledger.db").rename(store / "ledger.db")
    ledger = Ledger(persistence=persistence, load_entrypoints=False)
    with pytest.raises(ConfigError, match="no longer the database file"):
        await ledger.resume(VICTIM)
    await ledger.close()


@pytest.mark.parametrize("backend", ["sqlite", "jsonl"])
async def test_a_dangling_link_among_the_parents_to_create_is_never_followed(
    backend: str, tmp_path: Path
) -> None:
    """Parents the store creates for itself are real directories; a dangling link where
    one is to be made is refused, and nothing appears where it points."""
    (tmp_path / "dangling").symlink_to(tmp_path / "elsewhere")
    location = tmp_path / "dangling" / "deeper"
    ledger = Ledger(persistence=_store(backend, location), load_entrypoints=False)
    session = ledger.create("newcomer", cwd="/srv/app")
    session.append("turn/start", {"turn": 1})
    with pytest.raises(ConfigError):
        await ledger.flush(session)
    with contextlib.suppress(LedgerError):
        await ledger.close()
    assert ledger.persistence is not None
    await ledger.persistence.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["dangling"]


# -- the command line's default store ------------------------------------------------------


@pytest.mark.parametrize("link", [SYMBOLIC, HARD])
async def test_the_default_store_through_a_link_is_refused_by_every_command(
    link: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    await _stored_victim("sqlite", outside)
    default = tmp_path / "xdg" / "sessionledger" / "ledger.db"
    default.parent.mkdir(parents=True, mode=0o700)
    if link == SYMBOLIC:
        default.symlink_to(outside / "ledger.db")
    else:
        os.link(outside / "ledger.db", default)
    before = tree_bytes(outside)
    env = {key: value for key, value in os.environ.items() if key != "SESSIONLEDGER_STORE"}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    for command in (["ls"], ["repair", VICTIM]):  # a reader, then a writer
        done = subprocess.run(
            [sys.executable, "-m", "sessionledger", *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "CONFIG" in done.stderr, done.stderr
        assert str(default) in done.stderr, done.stderr
    assert tree_bytes(outside) == before


# -- mounts ------------------------------------------------------------------------------


def _in_private_mounts() -> list[str] | None:
    """How to run a child in a private mount namespace, or None without ``unshare``."""
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("mount") is None:
        return None
    command = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        command.insert(1, "--map-root-user")
    return command


def test_a_file_bound_into_a_store_is_refused_and_a_bound_store_is_one_store(
    tmp_path: Path,
) -> None:
    prefix = _in_private_mounts()
    if prefix is None:
        pytest.skip("needs unshare(1) and mount(8) to bind files in a private namespace")
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here ({probe.stderr.strip()})")
    done = subprocess.run(
        [*prefix, sys.executable, str(HERE / "links_mount_child.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout) == {
        "sqlite file": {"inspect": "CONFIG", "resume": "CONFIG"},
        "sqlite file unchanged": True,
        "sqlite directory": {"holder resume": "ok", "other resume": "LOCKED"},
        "jsonl session directory": {"inspect": "ok", "resume": "CONFIG"},
        "jsonl log unchanged": True,
        "jsonl root": {"holder resume": "ok", "other resume": "LOCKED"},
    }
