"""One ``LedgerChatMessageHistory`` used from many threads, each with its own event loop or
none, on every backend: every add that returned is read back exactly once and in its
thread's order, none raises, none hangs; a ledger whose loop is gone refuses at once with
``LedgerLoopError`` (docs/durability.md, "calls from other loops and threads")."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from sessionledger import Ledger, LedgerLoopError
from sessionledger_langchain import LedgerChatMessageHistory, LedgerThread

THREADS = 5
CALLS = 2
DEADLINE = 30.0  # seconds for every thread to finish; a hang fails the test


@pytest.fixture(params=["memory", "jsonl", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory:loops-{tmp_path.name}"
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'ledger.db'}"
    return f"jsonl:{tmp_path / 'sessions'}"


def _turn(text: str) -> list[BaseMessage]:
    return [HumanMessage(content=text), AIMessage(content=f"echo {text}")]


def _prompts(messages: list[BaseMessage]) -> list[str]:
    return [str(message.content) for message in messages if isinstance(message, HumanMessage)]


def _run_threads(
    history: LedgerChatMessageHistory, with_loops: bool
) -> tuple[list[list[str]], list[BaseException]]:
    returned: list[list[str]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []

    async def on_a_loop(thread: int) -> None:
        for call in range(CALLS):
            text = f"thread {thread} call {call}"
            await history.aadd_messages(_turn(text))
            returned[thread].append(text)  # acknowledged: it must be read back
            await history.aget_messages()

    def without_a_loop(thread: int) -> None:
        for call in range(CALLS):
            text = f"thread {thread} call {call}"
            history.add_messages(_turn(text))
            returned[thread].append(text)
            history.messages  # noqa: B018

    def run(thread: int) -> None:
        try:
            if with_loops:
                asyncio.run(on_a_loop(thread))
            else:
                without_a_loop(thread)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + DEADLINE
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a call never returned"
    return returned, errors


def _check(prompts: list[str], returned: list[list[str]]) -> None:
    assert sorted(prompts) == sorted(text for done in returned for text in done)
    assert len(prompts) == THREADS * CALLS  # every call returned, each read back once
    for done in returned:
        assert [text for text in prompts if text in done] == done


@pytest.mark.parametrize("with_loops", [True, False], ids=["own-loops", "sync"])
def test_threads_share_a_ledger_thread(url: str, with_loops: bool) -> None:
    with LedgerThread(url) as ledger_thread:
        history = ledger_thread.history("shared", title="Five threads")
        returned, errors = _run_threads(history, with_loops)
        assert errors == []
        _check(_prompts(history.messages), returned)
    if not url.startswith("memory:"):
        with LedgerThread(url) as again:
            _check(_prompts(again.history("shared").messages), returned)


async def test_threads_hand_their_calls_to_the_main_threads_loop(url: str) -> None:
    async with Ledger.open(url) as ledger:
        history = LedgerChatMessageHistory("shared", ledger)
        returned, errors = await asyncio.to_thread(_run_threads, history, True)
        assert errors == []
        _check(_prompts(await history.aget_messages()), returned)


# Closing an SQLite ledger after its loop ended: aiosqlite's worker thread may report
# that loop closed while it lets go of the connection.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_ledger_whose_loop_is_gone_is_refused_at_once(url: str) -> None:
    async def first() -> tuple[Ledger, LedgerChatMessageHistory]:
        ledger = await Ledger.open(url)
        history = LedgerChatMessageHistory("gone", ledger)
        await history.aadd_messages(_turn("first"))
        return ledger, history

    ledger, history = asyncio.run(first())  # that loop is closed now
    calls: list[Callable[[], object]] = [
        lambda: asyncio.run(history.aadd_messages(_turn("second"))),
        lambda: asyncio.run(history.aget_messages()),
        lambda: asyncio.run(history.aclear()),
        lambda: history.add_messages(_turn("second")),
        lambda: history.messages,
        history.clear,
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(LedgerLoopError) as raised:
            call()
        assert raised.value.code == "LOOP_NOT_RUNNING"
        assert time.monotonic() - started < 5
    asyncio.run(ledger.close())  # lets go at once: nothing was left unwritten
    if not url.startswith("memory:"):
        with LedgerThread(url) as again:
            assert _prompts(again.history("gone").messages) == ["first"]


async def test_the_title_and_meta_reach_the_listing(tmp_path: Path) -> None:
    async with Ledger.open(f"sqlite:{tmp_path / 'titles.db'}") as ledger:
        history = LedgerChatMessageHistory(
            "titled", ledger, title="Trip planning", meta={"user": "ann"}
        )
        await history.aadd_messages(_turn("hi"))
        [listed] = (await ledger.list_sessions()).sessions
        assert listed.header.title == "Trip planning"
        assert listed.header.meta == {"user": "ann"}
