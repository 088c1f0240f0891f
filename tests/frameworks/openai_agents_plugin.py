"""Run the OpenAI Agents SDK's own session tests with its stores swapped for ours.

Loaded with ``-p openai_agents_plugin`` into a pytest run of the SDK's unpacked source
distribution (``nox -s frameworks``): ``SQLiteSession`` (as ``agents.SQLiteSession`` and
``agents.memory.SQLiteSession``) and the tests' ``SimpleListSession`` become a
``LedgerSession`` over a ledger on the backend ``SESSIONLEDGER_FRAMEWORK_BACKEND`` names.
Every assertion is the SDK's; ``SKIPPED`` (tests of the SDK store's own internals) and
``XFAILED`` (known defects, each with the issue item that fixes it) are the only changes.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from typing import Any, cast

import pytest
from agents.items import TResponseInputItem
from ledger_pool import LedgerPool, backend, fresh_pool, mark

from sessionledger import Session, thaw
from sessionledger_openai_agents import LedgerSession

#: Tests of the SDK store's own internals (its SQL, its worker threads, its file locks,
#: its closed state): they have no counterpart in a ledger. Test id -> reason.
_T = "tests/memory/test_session.py::"
_L = "tests/memory/test_session_limit.py::"
_WORKERS = "SQLiteSession's per-thread sqlite3 connections (_connections), none in a ledger"
_CORRUPT = "writes corrupt rows into SQLiteSession's own SQL table through its connection"
_ROLLBACK = "breaks SQLiteSession's SQL (drops its tables) to check its transaction rollback"
SKIPPED: dict[str, str] = {
    _T + "test_sqlite_session_close_closes_worker_thread_connections": _WORKERS,
    _T + "test_sqlite_session_reaps_connections_from_exited_worker_threads": _WORKERS,
    _T + "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _WORKERS,
    _T + "test_sqlite_session_keeps_connections_of_live_worker_threads": _WORKERS,
    _T + "test_sqlite_session_closed_rejects_empty_add_items": (
        "SQLiteSession.close() closes its own connection; here the store is the ledger's, "
        "closed by its owner, and the SDK's Session protocol has no close"
    ),
    _T + "test_sqlite_session_pop_item_skips_corrupt_most_recent": _CORRUPT,
    _T + "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _CORRUPT,
    _T + "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _CORRUPT,
    _T + "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _CORRUPT,
    _T + "test_sqlite_session_file_lock_is_shared_across_instances": (
        "SQLiteSession's class-level per-file lock table (_file_locks, _file_lock_counts)"
    ),
    _T + "test_sqlite_session_failed_add_items_releases_write_lock": _ROLLBACK,
    _T + "test_sqlite_session_failed_clear_session_rolls_back": _ROLLBACK,
    _T + "test_sqlite_session_failed_pop_item_releases_write_lock": _ROLLBACK,
    _T + "test_sqlite_session_rollback_failure_evicts_connection": (
        "SQLiteSession's connection quarantine after a failed rollback (_connections_lock)"
    ),
    _T + "test_sqlite_session_close_retries_quarantined_connection": (
        "SQLiteSession's connection quarantine after a failed rollback (_connections_lock)"
    ),
    **{
        _T + f"test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome"
        f"[{operation}]": (
            "injects a sqlite3 connection into SQLiteSession (_get_connection, _connections)"
        )
        for operation in ("add", "pop", "clear")
    },
}

#: Tests whose calls come from several event loops: ``Runner.run_sync`` runs each call in
#: a new loop, the concurrency test runs five threads with a loop each. Their ledgers live
#: on a loop of their own (a ``LedgerThread``), the configuration the adapter's README
#: prescribes for calls from several loops; every other test's ledger serves its own loop.
_SEVERAL_LOOPS = ("[run_sync]", "test_sqlite_session_concurrent_access")
#: Known defects of ours: test id -> reason. A key ending in ``@backend`` applies to that
#: backend only.
XFAILED: dict[str, str] = {}

#: Closes each test's ledgers as part of the test (a hook there).
pytest_plugins = ["ledger_pool"]


class _Current:
    pool: LedgerPool | None = None


def _current_pool() -> LedgerPool:
    if _Current.pool is None:
        raise RuntimeError("a framework store was built outside a test")
    return _Current.pool


class PooledSQLiteSession(LedgerSession):
    """``SQLiteSession(session_id, db_path, ...)`` as a ``LedgerSession``: sessions built
    on the same ``db_path`` share a ledger, ``:memory:`` gets a private one."""

    def __init__(
        self,
        session_id: str,
        db_path: object = ":memory:",
        create_tables: bool = True,
        session_settings: Any = None,
    ) -> None:
        del create_tables  # a ledger has no tables to create
        super().__init__(
            session_id, _current_pool().ledger(db_path), session_settings=session_settings
        )

    async def _live(self) -> Session:
        # Every method reaches the live session here, on the ledger's loop.
        _current_pool().used_on(self.ledger, asyncio.get_running_loop())
        return await super()._live()

    def close(self) -> None:
        """Nothing to release here: the pool closes the ledger when the test ends."""


class PooledListSession(PooledSQLiteSession):
    """The SDK tests' ``SimpleListSession(session_id, history)`` as a ``LedgerSession``."""

    def __init__(
        self, session_id: str = "test", history: list[TResponseInputItem] | None = None
    ) -> None:
        super().__init__(session_id)
        self._history = list(history) if history else []
        self._ignore_ids_for_matching = False

    async def _live(self) -> Session:
        live = await super()._live()
        if self._history:
            seed, self._history = self._history, []
            await self._add_items(seed)
        return live

    @property
    def saved_items(self) -> list[TResponseInputItem]:
        """What the SDK tests inspect synchronously: the items on the surface."""
        live = self.ledger.get(self.session_id)
        if live is None:
            return list(self._history)
        return [cast(TResponseInputItem, thaw(item)) for item in self._surface_items(live)]


def pytest_configure(config: pytest.Config) -> None:
    del config
    backend()  # refuse an unknown backend before collecting anything
    for module in ("agents", "agents.memory"):
        importlib.import_module(module).SQLiteSession = PooledSQLiteSession  # type: ignore[attr-defined]
    sys.path.insert(0, ".")
    simple = importlib.import_module("tests.utils.simple_session")
    simple.SimpleListSession = PooledListSession  # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark(items, SKIPPED, XFAILED)


@pytest.fixture(autouse=True)
def ledger_pool(request: pytest.FixtureRequest) -> Iterator[LedgerPool]:
    """A fresh pool of ledgers for each test, all closed when it ends."""
    for pool in fresh_pool(request.node):
        pool.threaded = any(marker in request.node.nodeid for marker in _SEVERAL_LOOPS)
        _Current.pool = pool
        yield pool
    _Current.pool = None
