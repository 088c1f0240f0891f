"""Run langchain-core's own chat-history tests with its store swapped for ours.

Loaded with ``-p langchain_plugin`` into a pytest run of langchain-core's unpacked source
distribution (``nox -s frameworks``): ``InMemoryChatMessageHistory`` becomes a
``LedgerChatMessageHistory``, each instance a session of its own in one ledger per test
on the backend ``SESSIONLEDGER_FRAMEWORK_BACKEND`` names. The ledger lives on a
``LedgerThread`` (the tests call the sync methods, also from inside their own event
loop). Every assertion is langchain-core's; ``SKIPPED`` and ``XFAILED`` are the only
changes.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from ledger_pool import LedgerPool, backend, fresh_pool, mark

from sessionledger_langchain import LedgerChatMessageHistory, LedgerThread

#: Tests of langchain-core's own class rather than of a chat history: test id -> reason.
SKIPPED: dict[str, str] = {
    "tests/unit_tests/chat_history/test_chat_history.py::test_chat_history_deprecated"
    "[PooledChatMessageHistory]": (
        "checks the docstring of langchain-core's own InMemoryChatMessageHistory class (its "
        "deprecation notice), not a behaviour of a chat history"
    ),
}

#: Known defects of ours, fixed on sibling branches of issue 39: test id -> reason.
XFAILED: dict[str, str] = {}


#: Closes each test's ledgers as part of the test (a hook there).
pytest_plugins = ["ledger_pool"]


class _Ledgers:
    """The ledger thread of the running test."""

    thread: LedgerThread | None = None

    @classmethod
    def current(cls) -> LedgerThread:
        if cls.thread is None:
            raise RuntimeError("a chat history was built outside a test")
        return cls.thread


class PooledChatMessageHistory(LedgerChatMessageHistory):
    """``InMemoryChatMessageHistory(messages=[...])`` as a new session of the test's
    ledger; equal to another when their messages are (as the pydantic model is)."""

    def __init__(self, messages: Sequence[BaseMessage] = (), **fields: Any) -> None:
        if fields:
            raise TypeError(f"unexpected fields {sorted(fields)}")
        thread = _Ledgers.current()
        super().__init__(f"history-{uuid.uuid4().hex}", thread.ledger, loop=thread.loop)
        if messages:
            self.add_messages(list(messages))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PooledChatMessageHistory):
            return NotImplemented
        return self.messages == other.messages

    __hash__ = None  # type: ignore[assignment]


def pytest_configure(config: pytest.Config) -> None:
    del config
    backend()  # refuse an unknown backend before collecting anything
    module = importlib.import_module("langchain_core.chat_history")
    module.InMemoryChatMessageHistory = PooledChatMessageHistory  # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark(items, SKIPPED, XFAILED)


@pytest.fixture(autouse=True)
def ledger_pool(request: pytest.FixtureRequest) -> Iterator[LedgerPool]:
    """A fresh pool for each test with its ledger thread, opened before the test runs
    (as an application would: opening it inside a coroutine would block that loop)."""
    for pool in fresh_pool(request.node):
        _Ledgers.thread = thread = LedgerThread(pool.url())
        pool.on_close(thread.close)
        yield pool
    _Ledgers.thread = None
