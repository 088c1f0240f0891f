"""Which store a command works on, and opening it for the length of one command."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from sessionledger._errors import ConfigError
from sessionledger.cli._missing import missing_backend
from sessionledger.plugins._manager import AUTOLOAD_SWITCH, autoload_enabled
from sessionledger.runtime._ledger import Ledger
from sessionledger.runtime._opening import open_store
from sessionledger.storage._cancellation import in_thread
from sessionledger.storage._files import make_private_dirs
from sessionledger.storage._persistence import SessionPersistence

#: The environment variable naming the default store URL.
STORE_ENV = "SESSIONLEDGER_STORE"


def default_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """Return the embedded SQLite file used when no store is named.

    ``$XDG_DATA_HOME/sessionledger/ledger.db``, with the XDG default
    ``~/.local/share`` when the variable is unset, empty or not absolute (the XDG
    base-directory rule: relative values are ignored).
    """
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "sessionledger" / "ledger.db"


def default_store_url(environ: Mapping[str, str] | None = None) -> str:
    """Return ``$SESSIONLEDGER_STORE`` when set, else ``sqlite:`` + the default file."""
    env = os.environ if environ is None else environ
    named = env.get(STORE_ENV, "").strip()
    if named:
        return named
    return f"sqlite:{default_store_path(env)}"


def resolve_store_url(option: str | None) -> str:
    """Return the store a command uses: ``--store`` wins over the environment default."""
    if option is not None:
        if not option.strip():
            raise ConfigError("--store needs a URL such as 'sqlite:ledger.db' or 'jsonl:DIR'")
        return option
    return default_store_url()


def check_backend(url: str, plugins: Iterable[object] = ()) -> None:
    """Refuse *url* before a command starts when no backend serves its scheme, naming
    what to install: a read-only command must not report a missing store as empty
    because nothing could have read it."""
    scheme, colon, _ = url.partition(":")
    if not colon or not scheme:
        return  # open_store words a URL without a scheme
    # A ledger without a store only builds its plugin set: nothing to close.
    served = sorted(Ledger(plugins=plugins).plugins.backends())
    if scheme not in served:
        switch = None if autoload_enabled(True) else AUTOLOAD_SWITCH
        raise ConfigError(missing_backend(scheme, served, autoload_switch=switch))


def prepare_for_writing(url: str) -> None:
    """Create the directory of the default SQLite file (``0700``) when *url* is it.

    Only commands that write call this, so the first ``sessionledger demo`` on a fresh
    machine just works while ``ls`` leaves the home directory alone.
    """
    path = default_store_path()
    if url == f"sqlite:{path}":
        make_private_dirs(str(path.parent), fsync=True)  # each missing parent 0700, durably


def _local_path(url: str) -> Path | None:
    """Return the file or directory behind a ``sqlite:``/``jsonl:`` URL (docs/formats.md)."""
    scheme, _, rest = url.partition(":")
    if scheme == "sqlite":
        rest = rest.partition("?")[0]  # options follow the first "?" (?upgrade=1)
    if scheme not in ("sqlite", "jsonl") or not rest or rest == ":memory:":
        return None
    return Path(rest).expanduser()


def store_is_missing(url: str) -> bool:
    """Tell whether *url* names a local SQLite file or JSONL directory that does not exist.

    Read-only commands check this first: opening a SQLite store creates its file, and a
    command that only looks must not leave one behind.
    """
    path = _local_path(url)
    return path is not None and not path.exists()


def _open_store(url: str, must_exist: bool, plugins: tuple[object, ...]) -> SessionPersistence:
    if must_exist and store_is_missing(url):
        raise ConfigError(
            f"there is no store at {url} yet (run 'sessionledger demo' to create one, "
            "or choose another with --store)"
        )
    if not must_exist:
        prepare_for_writing(url)
    return open_store(url, plugins=plugins)


def _open_ledger(url: str, plugins: tuple[object, ...]) -> Ledger:
    prepare_for_writing(url)
    return Ledger.open(url, plugins=plugins)


@asynccontextmanager
async def opened_store(
    url: str, *, must_exist: bool = True, plugins: Iterable[object] = ()
) -> AsyncIterator[SessionPersistence]:
    """Open the backend for *url* (with the event types and schemes of *plugins* besides
    the entry points) for one command and close it afterwards.

    With *must_exist* (every command but ``copy``'s destination), a local store that
    does not exist is a ``ConfigError`` instead of being created: a command that only
    looks must not leave an empty database behind.
    """
    # Looking for the store, finding plugins and building the backend all read files:
    # one worker thread does them, never the event loop (docs/backends.md, "no blocking
    # call on the event loop").
    store = await in_thread(_open_store, url, must_exist, tuple(plugins))
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def opened_ledger(url: str, *, plugins: Iterable[object] = ()) -> AsyncIterator[Ledger]:
    """Open a ``Ledger`` on *url* for one command; its store is closed on the way out even
    when the final flush fails.

    ``Ledger.close()`` stays open after a failed flush so that it can be retried; a command
    that is about to exit has nothing to retry, and an open backend (an aiosqlite worker
    thread) would keep the process from exiting.
    """
    ledger = await in_thread(_open_ledger, url, tuple(plugins))  # files: off the loop
    try:
        yield ledger
        await ledger.close()
    finally:
        if ledger.persistence is not None:
            await ledger.persistence.close()
