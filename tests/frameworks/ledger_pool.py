"""The ledgers behind a framework's store while its own tests run on ours.

``SESSIONLEDGER_FRAMEWORK_BACKEND`` picks the backend (``memory``, ``jsonl`` or
``sqlite``). Each test gets a fresh pool: one ledger per store path the test names (two
framework stores on one path share one ledger, so what one wrote the other reads, as on
the framework's own file), a private ledger for each in-memory store, and every ledger is
closed when the test ends. The plugins import the hooks below (pytest finds them there).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Callable, Collection, Generator
from pathlib import Path

import pytest

from sessionledger import Ledger
from sessionledger.runtime._hopping import LedgerThread

BACKENDS = ("memory", "jsonl", "sqlite")
POOL = pytest.StashKey["LedgerPool"]()


def backend() -> str:
    chosen = os.environ.get("SESSIONLEDGER_FRAMEWORK_BACKEND", "sqlite")
    if chosen not in BACKENDS:
        raise ValueError(f"SESSIONLEDGER_FRAMEWORK_BACKEND must be one of {BACKENDS}: {chosen}")
    return chosen


class LedgerPool:
    """The ledgers one test opened, by the store path the framework was given."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="sl-framework-")
        self._by_path: dict[str, Ledger] = {}
        self._private: list[Ledger] = []
        self._loops: dict[int, asyncio.AbstractEventLoop] = {}
        self._before_close: list[Callable[[], None]] = []
        self._closed = False
        #: Host each ledger on a loop of its own (a ``LedgerThread``), as an application
        #: whose calls come from several loops must (each ``Runner.run_sync`` is a new one).
        self.threaded = False

    def ledger(self, path: object = None) -> Ledger:
        """The ledger for the framework's store *path* (``None`` or ``:memory:``: a new,
        private one)."""
        key = None if path in (None, ":memory:", "") else str(Path(str(path)).resolve())
        if key is not None and key in self._by_path:
            return self._by_path[key]
        if self.threaded:
            thread = LedgerThread(self.url())
            self.on_close(thread.close)
            ledger = thread.ledger
            if key is not None:
                self._by_path[key] = ledger
            return ledger
        ledger = Ledger.open(self.url())
        if key is None:
            self._private.append(ledger)
        else:
            self._by_path[key] = ledger
        return ledger

    def url(self) -> str:
        """A new store on the chosen backend."""
        name = uuid.uuid4().hex
        chosen = backend()
        if chosen == "memory":
            return f"memory:{name}"
        if chosen == "jsonl":
            return f"jsonl:{Path(self._dir.name) / name}"
        return f"sqlite:{Path(self._dir.name) / name}.db"

    def used_on(self, ledger: Ledger, loop: asyncio.AbstractEventLoop) -> None:
        """Remember the loop *ledger* was first used on, to close it there."""
        self._loops.setdefault(id(ledger), loop)

    def on_close(self, close: Callable[[], None]) -> None:
        """Run *close* first when the pool closes (a plugin's own ledger holder)."""
        self._before_close.append(close)

    def close(self, *, strict: bool) -> None:
        """Close every ledger: on its own loop when that loop can still run, else from a
        fresh one (which lets go of the store, and raises if events were left unwritten).
        *strict*: raise what a closing raised (after a failed test it adds nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            for close in self._before_close:
                close()
            for ledger in [*self._by_path.values(), *self._private]:
                if self.threaded:
                    break  # closed with their threads above
                loop = self._loops.get(id(ledger))
                try:
                    if loop is not None and not loop.is_closed() and not loop.is_running():
                        loop.run_until_complete(ledger.close())
                    else:
                        asyncio.run(ledger.close())
                except Exception:
                    if strict:
                        raise
        finally:
            self._dir.cleanup()


def mark(
    items: list[pytest.Item],
    skipped: dict[str, str],
    xfailed: dict[str, str],
    hanging: Collection[str] = (),
) -> None:
    """Skip or xfail (strictly) the listed tests; those also in *hanging* are not run (a
    hung thread would stop the whole run). A key ending in ``@BACKEND`` applies to that
    backend only. A listed test of a collected file that was not collected is an error:
    the lists must follow the framework's tests when its pin moves."""
    chosen = backend()
    seen: set[str] = set()
    for item in items:
        for key in (item.nodeid, f"{item.nodeid}@{chosen}"):
            if key in skipped:
                item.add_marker(pytest.mark.skip(reason=skipped[key]))
                seen.add(key)
            if key in xfailed:
                run = key not in hanging
                item.add_marker(pytest.mark.xfail(strict=True, run=run, reason=xfailed[key]))
                seen.add(key)
    files = {item.nodeid.split("::")[0] for item in items}
    missing = [
        key
        for key in [*skipped, *xfailed]
        if key not in seen and key.partition("@")[2] in ("", chosen) and key.split("::")[0] in files
    ]
    if missing:
        raise pytest.UsageError(f"listed tests that were not collected: {missing}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Close the test's ledgers as part of the test: a closing that fails (events left
    unwritten) fails the test that left them."""
    try:
        yield
    except BaseException:
        pool = item.stash.get(POOL, None)
        if pool is not None:
            pool.close(strict=False)
        raise
    pool = item.stash.get(POOL, None)
    if pool is not None:
        pool.close(strict=True)


def fresh_pool(item: pytest.Item) -> Generator[LedgerPool, None, None]:
    """The body of each plugin's autouse fixture: a fresh pool, closed at the latest when
    the test is torn down."""
    pool = item.stash[POOL] = LedgerPool()
    try:
        yield pool
    finally:
        pool.close(strict=False)
