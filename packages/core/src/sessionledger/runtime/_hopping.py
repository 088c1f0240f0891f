"""Reaching the event loop a ledger serves from any loop or thread (docs/durability.md,
"calls from other loops and threads").

A ledger's store, locks and write-behind timers belong to one loop. An adapter called from
another loop (a thread with its own ``asyncio.run``) hands its work to that loop and waits
for it there, so nothing of the ledger is ever touched from two loops. When that loop is not
running, nothing could ever run the work: the call is refused with ``LedgerLoopError``
instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, TypeVar, final

from sessionledger._errors import LedgerLoopError
from sessionledger.runtime._ledger import Ledger

T = TypeVar("T")

#: How often a caller waiting on another loop checks that the loop still runs, in seconds.
_WATCH = 0.05


def _not_running(started: bool) -> LedgerLoopError:
    fate = (
        "the call had started there and may have ended part-way: read the session back"
        if started
        else "nothing of the call ran"
    )
    return LedgerLoopError(
        "the event loop this ledger serves is not running (its asyncio.run ended or it "
        f"was stopped), so it cannot run this call; {fate}. Keep that loop running (e.g. "
        "in a thread of its own) or open a new Ledger on this loop"
    )


@final
class _Handoff(Generic[T]):
    """One call handed to the ledger's loop: it starts there unless its caller withdrew
    it first, and the caller can tell which happened (a lock settles the race)."""

    __slots__ = ("_call", "_lock", "future", "started", "withdrawn")

    def __init__(
        self, ledger_loop: asyncio.AbstractEventLoop, call: Callable[[], Awaitable[T]]
    ) -> None:
        self._call = call
        self._lock = threading.Lock()
        self.started = self.withdrawn = False
        if ledger_loop.is_closed() or not ledger_loop.is_running():
            raise _not_running(started=False)
        coroutine = self._run()
        try:
            self.future = asyncio.run_coroutine_threadsafe(coroutine, ledger_loop)
        except RuntimeError as error:  # closed in between
            coroutine.close()
            raise _not_running(started=False) from error

    async def _run(self) -> T:
        with self._lock:
            if self.withdrawn:
                raise asyncio.CancelledError
            self.started = True
        # Never cancelled from the caller's side: the future is not cancelled by anyone.
        return await self._call()

    def withdraw(self) -> bool:
        """Withdraw the call if it has not started; tell whether it had."""
        with self._lock:
            self.withdrawn = not self.started
            return self.started

    def outcome(self) -> T:
        """The call's result or error; the loop's own shutdown cancelling it is reported as
        ``LOOP_NOT_RUNNING``, not as a cancellation this caller never asked for."""
        if self.future.cancelled():
            raise _not_running(started=self.started)
        return self.future.result()

    def lost(self, ledger_loop: asyncio.AbstractEventLoop) -> bool:
        """Tell whether the ledger's loop stopped with the call unfinished."""
        return not self.future.done() and (ledger_loop.is_closed() or not ledger_loop.is_running())


async def on_ledger_loop(ledger: Ledger, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call()`` on the event loop *ledger* serves and return its outcome.

    On that loop (or on a ledger that serves none yet, which then binds this one) it runs
    here. From another loop it runs there while this caller waits: what it returns or
    raises is what the caller sees. If the caller is cancelled before the ledger's loop
    started the call, the call never runs; once started, it runs to its end, the caller
    waits for that end and then raises ``CancelledError`` (as a cancelled write does on
    its own loop). A ledger loop that is not running, or stops before the call ends,
    raises ``LedgerLoopError`` at once rather than never returning.
    """
    ledger_loop = ledger.serving_loop()
    if ledger_loop is asyncio.get_running_loop():
        return await call()
    handoff = _Handoff(ledger_loop, call)
    ended = asyncio.wrap_future(handoff.future)  # never cancelled: see _Handoff._run
    while True:
        try:
            await asyncio.wait((ended,), timeout=_WATCH)
        except asyncio.CancelledError:
            if handoff.withdraw():  # started: let it end whole, then report the cancel
                await _until_settled(handoff, ended, ledger_loop)
            raise
        if handoff.future.done():
            return handoff.outcome()
        if handoff.lost(ledger_loop):
            handoff.withdraw()
            raise _not_running(started=handoff.started)


async def _until_settled(
    handoff: _Handoff[T], ended: asyncio.Future[T], ledger_loop: asyncio.AbstractEventLoop
) -> None:
    """Wait, whatever cancels the caller meanwhile, for the call to end or its loop to stop."""
    while not (handoff.future.done() or handoff.lost(ledger_loop)):
        with contextlib.suppress(asyncio.CancelledError):  # the caller re-raises it after
            await asyncio.wait((ended,), timeout=_WATCH)


def wait_on_ledger_loop(ledger: Ledger, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call()`` on the event loop *ledger* serves, from synchronous code, and return
    its outcome: that loop must be running in another thread (``LOOP_NOT_RUNNING``
    otherwise, also when it stops before the call ends); from that loop's own thread the
    wait would block the loop it waits on (``LOOP_WOULD_BLOCK``)."""
    ledger_loop = ledger.serving_loop()
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if ledger_loop is running:
        raise LedgerLoopError(
            "a synchronous call on the event loop this ledger serves would block that loop "
            "while waiting on it: use the async methods there",
            code="LOOP_WOULD_BLOCK",
        )
    handoff = _Handoff(ledger_loop, call)
    while not concurrent.futures.wait((handoff.future,), timeout=_WATCH).done:
        if handoff.lost(ledger_loop):
            handoff.withdraw()
            raise _not_running(started=handoff.started)
    return handoff.outcome()


class LedgerThread:
    """A ledger on an event loop of its own, in a daemon thread: for synchronous code, and
    for callers on many loops (threads each with an ``asyncio.run``) sharing one ledger.

    ``LedgerThread(url, **options)`` opens ``Ledger.open(url, **options)`` on that loop;
    ``ledger`` is the ledger, ``call(factory)`` runs ``factory()`` there from synchronous
    code, and ``close()`` (or leaving ``with``) closes the ledger (which flushes it) and
    stops the thread.
    """

    def __init__(self, url: str, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="sessionledger", daemon=True)
        self._thread.start()
        try:
            opened = asyncio.run_coroutine_threadsafe(_opened(url, options), self.loop)
            self.ledger: Ledger = opened.result()
        except BaseException:
            self._stop()
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call()`` on the ledger's loop and return its outcome (``wait_on_ledger_loop``)."""
        return wait_on_ledger_loop(self.ledger, call)

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def close(self) -> None:
        """Close the ledger, then stop its loop; a second call does nothing."""
        if self.loop.is_closed():
            return
        try:
            self.call(self.ledger.close)
        finally:
            self._stop()

    def __enter__(self) -> LedgerThread:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


async def _opened(url: str, options: dict[str, Any]) -> Ledger:
    return await Ledger.open(url, **options)
