"""``sessionledger.runtime._hopping``: a call handed to the loop a ledger serves, from other loops and
threads (docs/durability.md, "calls from other loops and threads"): its outcome is what the
caller sees, a cancelled caller either withdrew it before it started or waited for its end,
and a loop that is not running is refused at once, never waited on forever."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from sessionledger import ConfigError, Ledger, LedgerLoopError, NotLiveError
from sessionledger.runtime._hopping import LedgerThread, on_ledger_loop, wait_on_ledger_loop

FAST = 5.0  # seconds: a refusal or a stop is reported well within this


@pytest.fixture
def ledger_thread(tmp_path: Path) -> LedgerThread:
    with LedgerThread(f"jsonl:{tmp_path / 'sessions'}") as running:
        yield running  # type: ignore[misc]


def test_the_outcome_comes_back_result_and_error(ledger_thread: LedgerThread) -> None:
    ledger = ledger_thread.ledger

    async def on_its_loop() -> bool:
        return asyncio.get_running_loop() is ledger_thread.loop

    async def refused() -> None:
        raise NotLiveError("refused there")

    assert asyncio.run(on_ledger_loop(ledger, on_its_loop)) is True
    assert wait_on_ledger_loop(ledger, on_its_loop) is True
    with pytest.raises(NotLiveError, match="refused there"):
        asyncio.run(on_ledger_loop(ledger, refused))
    with pytest.raises(NotLiveError, match="refused there"):
        wait_on_ledger_loop(ledger, refused)


def test_an_unbound_ledger_binds_the_callers_loop() -> None:
    ledger = Ledger()

    async def main() -> None:
        assert await on_ledger_loop(ledger, _ran) == "ran"
        assert ledger.serving_loop() is asyncio.get_running_loop()
        await ledger.close()

    async def _ran() -> str:
        return "ran"

    asyncio.run(main())


def test_a_caller_cancelled_before_the_call_started_withdraws_it(
    ledger_thread: LedgerThread,
) -> None:
    ran = threading.Event()

    async def work() -> None:
        ran.set()

    async def caller() -> None:
        # The ledger's loop is busy for a moment: the call cannot have started yet.
        ledger_thread.loop.call_soon_threadsafe(time.sleep, 0.3)
        task = asyncio.create_task(on_ledger_loop(ledger_thread.ledger, work))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(caller())
    wait_on_ledger_loop(ledger_thread.ledger, _nothing)  # queued after the withdrawn call
    assert not ran.is_set()  # it never ran, not even later


async def _nothing() -> None:
    return None


def test_a_caller_cancelled_after_the_call_started_waits_for_its_end(
    ledger_thread: LedgerThread,
) -> None:
    started = threading.Event()
    ended = threading.Event()

    async def work() -> None:
        started.set()
        await asyncio.sleep(0.3)
        ended.set()

    async def caller() -> None:
        task = asyncio.create_task(on_ledger_loop(ledger_thread.ledger, work))
        await asyncio.to_thread(started.wait, FAST)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ended.is_set()  # the caller saw the cancel only after the call ended whole

    asyncio.run(caller())


def test_a_loop_that_is_not_running_is_refused_at_once(tmp_path: Path) -> None:
    ledger = asyncio.run(_opened(f"jsonl:{tmp_path / 'gone'}"))  # its loop has ended

    started = time.monotonic()
    with pytest.raises(LedgerLoopError) as raised:
        asyncio.run(on_ledger_loop(ledger, _nothing))
    assert raised.value.code == "LOOP_NOT_RUNNING"
    assert isinstance(raised.value, ConfigError)
    with pytest.raises(LedgerLoopError, match="not running"):
        wait_on_ledger_loop(ledger, _nothing)
    assert time.monotonic() - started < FAST
    with pytest.raises(LedgerLoopError, match="no event loop yet"):
        wait_on_ledger_loop(Ledger(), _nothing)  # serves none, and none runs here


async def _opened(url: str) -> Ledger:
    return await Ledger.open(url)


@pytest.mark.parametrize("caller", ["async", "sync"])
def test_a_loop_that_stops_during_the_call_is_reported_not_waited_on(
    tmp_path: Path, caller: str
) -> None:
    running = LedgerThread(f"jsonl:{tmp_path / caller}")
    started = threading.Event()

    async def never_ends() -> None:
        started.set()
        await asyncio.Event().wait()

    def stop_once_started() -> None:
        started.wait(FAST)
        running.loop.call_soon_threadsafe(running.loop.stop)

    stopper = threading.Thread(target=stop_once_started)
    stopper.start()
    began = time.monotonic()

    raised: list[BaseException] = []

    def call() -> None:
        try:
            if caller == "async":
                asyncio.run(on_ledger_loop(running.ledger, never_ends))
            else:
                wait_on_ledger_loop(running.ledger, never_ends)
        except BaseException as error:
            raised.append(error)

    waiter = threading.Thread(target=call, daemon=True)  # a hang fails the test, not the run
    waiter.start()
    waiter.join(FAST)
    assert not waiter.is_alive(), "the caller waits on a loop that stopped"
    assert time.monotonic() - began < FAST
    [error] = raised
    assert isinstance(error, LedgerLoopError)
    assert "may have ended part-way" in str(error)
    stopper.join()
    for task in asyncio.all_tasks(running.loop):  # tidy up the stopped loop here
        task.cancel()
    running.loop.run_until_complete(running.ledger.close())
    running.loop.close()


def test_a_sync_call_on_the_ledgers_own_loop_is_refused() -> None:
    async def main() -> None:
        async with Ledger() as ledger:
            with pytest.raises(LedgerLoopError) as raised:
                wait_on_ledger_loop(ledger, _nothing)
            assert raised.value.code == "LOOP_WOULD_BLOCK"

    asyncio.run(main())


def test_first_uses_from_many_loops_at_once_bind_one() -> None:
    ledger = Ledger()
    barrier = threading.Barrier(4)
    loops: list[asyncio.AbstractEventLoop] = []

    async def use() -> None:
        barrier.wait()
        loops.append(ledger.serving_loop())

    threads = [threading.Thread(target=asyncio.run, args=(use(),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(FAST)
    assert len(loops) == 4
    assert len(set(map(id, loops))) == 1


def _message(text: str) -> dict[str, object]:
    return {
        "id": text,
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
def test_append_and_flush_from_outside_the_ledgers_loop_are_refused_whole(
    tmp_path: Path, store: str
) -> None:
    url = f"{store}:{tmp_path / store}"
    with LedgerThread(url, write_delay_ms=5) as running:
        session = running.call(lambda: running.ledger.resume_or_create("s"))

        async def on_its_loop(text: str) -> None:
            session.append("user/message", _message(text), surface_op="append")
            await running.ledger.flush(session)

        running.call(lambda: on_its_loop("one"))
        length = session.seq

        async def from_another_loop() -> None:
            with pytest.raises(ConfigError, match="outside the event loop"):
                session.append("user/message", _message("two"), surface_op="append")
            with pytest.raises(ConfigError, match="first used on"):
                await running.ledger.flush(session)
            await asyncio.sleep(0.05)  # no write-behind timer was armed here

        asyncio.run(from_another_loop())
        with pytest.raises(ConfigError, match="outside the event loop"):  # no loop here
            session.append("user/message", _message("three"), surface_op="append")
        assert session.seq == length  # nothing was committed
        assert running.ledger.backlog(session).events == 0
        running.call(lambda: on_its_loop("four"))  # its own loop still appends and flushes
    with LedgerThread(url) as again:
        stored = again.call(lambda: again.ledger.inspect("s"))
        log = stored.event_log()
        assert [e.data["id"] for e in log if e.type == "user/message"] == ["one", "four"]
