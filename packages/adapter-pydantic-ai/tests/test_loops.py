"""One ``LedgerHistory`` used from many threads, each with its own event loop, on every
backend: every ``record`` that returned is read back exactly once and in its thread's
order, none raises, none hangs; a ledger whose loop is gone refuses at once with
``LedgerLoopError`` (docs/durability.md, "calls from other loops and threads")."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from sessionledger import Ledger, LedgerLoopError
from sessionledger.runtime._hopping import LedgerThread
from sessionledger_pydantic_ai import LedgerHistory

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


def _turn(text: str) -> list[ModelRequest | ModelResponse]:
    return [
        ModelRequest(parts=[UserPromptPart(content=text)]),
        ModelResponse(parts=[TextPart(content=f"echo {text}")]),
    ]


def _prompts(messages: list[ModelRequest | ModelResponse]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


async def _worker(history: LedgerHistory, thread: int, returned: list[str]) -> None:
    for call in range(CALLS):
        text = f"thread {thread} call {call}"
        await history.record(_turn(text))
        returned.append(text)  # acknowledged: it must be read back
        await history.load()


def _run_threads(history: LedgerHistory) -> tuple[list[list[str]], list[BaseException]]:
    returned: list[list[str]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []

    def run(thread: int) -> None:
        try:
            asyncio.run(_worker(history, thread, returned[thread]))
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


def test_threads_with_their_own_loops_share_a_ledger_thread(url: str) -> None:
    with LedgerThread(url) as ledger_thread:
        history = LedgerHistory("shared", ledger_thread.ledger, title="Five threads")
        returned, errors = _run_threads(history)
        assert errors == []
        _check(_prompts(asyncio.run(history.load())), returned)
    if not url.startswith("memory:"):
        with LedgerThread(url) as again:
            _check(_prompts(again.call(LedgerHistory("shared", again.ledger).load)), returned)


async def test_threads_hand_their_calls_to_the_main_threads_loop(url: str) -> None:
    async with Ledger.open(url) as ledger:
        history = LedgerHistory("shared", ledger)
        await history.load()  # the ledger serves this loop
        returned, errors = await asyncio.to_thread(_run_threads, history)
        assert errors == []
        _check(_prompts(await history.load()), returned)


# Closing an SQLite ledger after its loop ended: aiosqlite's worker thread may report
# that loop closed while it lets go of the connection.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_ledger_whose_loop_is_gone_is_refused_at_once(url: str) -> None:
    async def first() -> tuple[Ledger, LedgerHistory]:
        ledger = await Ledger.open(url)
        history = LedgerHistory("gone", ledger)
        await history.record(_turn("first"))
        return ledger, history

    ledger, history = asyncio.run(first())  # that loop is closed now
    for call in (lambda: history.record(_turn("second")), history.load, history.session):
        started = time.monotonic()
        with pytest.raises(LedgerLoopError) as raised:
            asyncio.run(call())  # type: ignore[arg-type]
        assert raised.value.code == "LOOP_NOT_RUNNING"
        assert time.monotonic() - started < 5
    asyncio.run(ledger.close())  # lets go at once: nothing was left unwritten
    if not url.startswith("memory:"):
        with LedgerThread(url) as again:
            assert _prompts(again.call(LedgerHistory("gone", again.ledger).load)) == ["first"]


async def test_the_title_and_meta_reach_the_listing(tmp_path: Path) -> None:
    async with Ledger.open(f"sqlite:{tmp_path / 'titles.db'}") as ledger:
        history = LedgerHistory("titled", ledger, title="Trip planning", meta={"user": "ann"})
        await history.record(_turn("hi"))
        [listed] = (await ledger.list_sessions()).sessions
        assert listed.header.title == "Trip planning"
        assert listed.header.meta == {"user": "ann"}
