"""One ``LedgerSession`` used from many threads, each with its own event loop (the SDK's own
``test_sqlite_session_concurrent_access``), on every backend: every ``add_items`` that
returned is read back exactly once and in its thread's order, none raises, none hangs; a
ledger whose loop is gone refuses at once with ``LedgerLoopError``
(docs/durability.md, "calls from other loops and threads")."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sessionledger import Ledger, LedgerLoopError
from sessionledger.runtime._hopping import LedgerThread
from sessionledger_openai_agents import LedgerSession

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


def _text(thread: int, call: int) -> str:
    return f"thread {thread} call {call}"


async def _worker(session: LedgerSession, thread: int, returned: list[str]) -> None:
    for call in range(CALLS):
        item: Any = {"role": "user", "content": _text(thread, call)}
        await session.add_items([item])
        returned.append(_text(thread, call))  # acknowledged: it must be read back
        await session.get_items()


def _run_threads(session: LedgerSession) -> tuple[list[list[str]], list[BaseException]]:
    returned: list[list[str]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []

    def run(thread: int) -> None:
        try:
            asyncio.run(_worker(session, thread, returned[thread]))
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


def _check(read: list[Any], returned: list[list[str]]) -> None:
    texts = [item["content"] for item in read]
    assert sorted(texts) == sorted(text for done in returned for text in done)
    assert len(texts) == THREADS * CALLS  # every call returned, each read back once
    for done in returned:  # each thread's items in its own order
        assert [text for text in texts if text in done] == done


def test_threads_with_their_own_loops_share_a_ledger_thread(url: str) -> None:
    with LedgerThread(url) as ledger_thread:
        session = LedgerSession("shared", ledger_thread.ledger, title="Five threads")
        returned, errors = _run_threads(session)
        assert errors == []
        _check(asyncio.run(session.get_items()), returned)
    if not url.startswith("memory:"):  # durable: a new ledger reads the same
        with LedgerThread(url) as again:
            _check(again.call(LedgerSession("shared", again.ledger).get_items), returned)


async def test_threads_hand_their_calls_to_the_main_threads_loop(url: str) -> None:
    async with Ledger.open(url) as ledger:
        session = LedgerSession("shared", ledger)
        await session.get_items()  # the ledger serves this loop
        returned, errors = await asyncio.to_thread(_run_threads, session)
        assert errors == []
        _check(await session.get_items(), returned)


# Closing an SQLite ledger after its loop ended: aiosqlite's worker thread may report
# that loop closed while it lets go of the connection.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_ledger_whose_loop_is_gone_is_refused_at_once(url: str) -> None:
    async def first() -> tuple[Ledger, LedgerSession]:
        ledger = await Ledger.open(url)
        session = LedgerSession("gone", ledger)
        await session.add_items([{"role": "user", "content": "first"}])
        return ledger, session

    ledger, session = asyncio.run(first())  # that loop is closed now
    for call in (
        lambda: session.add_items([{"role": "user", "content": "second"}]),
        session.get_items,
        session.pop_item,
        session.clear_session,
        session.session,
    ):
        started = time.monotonic()
        with pytest.raises(LedgerLoopError) as raised:
            asyncio.run(call())  # type: ignore[arg-type]
        assert raised.value.code == "LOOP_NOT_RUNNING"
        assert time.monotonic() - started < 5
    asyncio.run(ledger.close())  # lets go at once: nothing was left unwritten
    if not url.startswith("memory:"):  # the refused calls appended nothing
        with LedgerThread(url) as again:
            items = again.call(LedgerSession("gone", again.ledger).get_items)
            assert items == [{"role": "user", "content": "first"}]


async def test_the_title_and_meta_reach_the_listing(tmp_path: Path) -> None:
    async with Ledger.open(f"sqlite:{tmp_path / 'titles.db'}") as ledger:
        session = LedgerSession("titled", ledger, title="Trip planning", meta={"user": "ann"})
        await session.add_items([{"role": "user", "content": "hi"}])
        page = await ledger.list_sessions()
        [listed] = page.sessions
        assert listed.header.title == "Trip planning"
        assert listed.header.meta == {"adapter": "sessionledger-openai-agents", "user": "ann"}


def _batches(texts: list[str]) -> list[int]:
    """The attempts whose batch is stored, in order; each batch must be stored whole."""
    pairs = [texts[i : i + 2] for i in range(0, len(texts), 2)]
    assert all(pair == [f"{pair[0][:-1]}a", f"{pair[0][:-1]}b"] for pair in pairs)
    return [int(pair[0][:-1]) for pair in pairs]


def test_a_cancelled_caller_on_another_loop_sees_the_call_settled(url: str) -> None:
    """Callers on another loop cancelled at staggered moments: each batch is stored whole
    or not at all, every call that returned is stored, and a caller that saw
    ``CancelledError`` saw it only once its batch had landed or never would."""
    with LedgerThread(url) as ledger_thread:
        session = LedgerSession("cancelled", ledger_thread.ledger)
        returned: list[int] = []
        stored_when_cancelled: dict[int, bool] = {}

        def stored_now() -> list[int]:
            return _batches([item["content"] for item in ledger_thread.call(session.get_items)])

        async def attempt(n: int) -> None:
            batch: Any = [
                {"role": "user", "content": f"{n}a"},
                {"role": "user", "content": f"{n}b"},
            ]
            task = asyncio.create_task(session.add_items(batch))
            await asyncio.sleep(n * 0.002)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                stored_when_cancelled[n] = n in stored_now()
            else:
                returned.append(n)

        for n in range(12):
            asyncio.run(attempt(n))
        time.sleep(0.1)  # anything still running on the ledger's loop lands meanwhile
        stored = stored_now()
    assert stored == sorted(set(stored))  # each batch once, in order
    assert set(returned) <= set(stored)
    for n, was_stored in stored_when_cancelled.items():
        assert (n in stored) == was_stored, n
