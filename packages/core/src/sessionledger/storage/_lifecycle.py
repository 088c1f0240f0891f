"""A ledger's life: the one event loop it serves, and a closing that cancellation cannot
turn into a no-op (docs/durability.md, "closing" and "one event loop per ledger").
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, final

from sessionledger._errors import ConfigError, LedgerLoopError
from sessionledger.storage._cancellation import shielded_task


def cancelled_under_caller(task: asyncio.Task[Any]) -> bool:
    """Tell whether *task*, which the current task awaited, was cancelled (its loop
    shutting down cancels every task) while the current task was not: the work is then
    started again rather than reported as a cancellation nobody asked this caller for."""
    caller = asyncio.current_task()
    return (
        task.cancelled() and task.cancelling() > 0 and (caller is None or caller.cancelling() == 0)
    )


@final
class LoopBinding:
    """The event loop a ledger serves: the first one it is used on.

    Its store's connections, locks and write-behind timers belong to that loop, so a call
    from any other loop is refused with ``ConfigError`` before it touches them.
    """

    __slots__ = ("_binding", "loop")

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._binding = threading.Lock()  # first uses from two threads bind one loop

    def bind(self) -> asyncio.AbstractEventLoop:
        """Return the loop served, binding the running one if none is served yet."""
        loop = self.loop
        if loop is None:
            with self._binding:
                if self.loop is None:
                    try:
                        self.loop = asyncio.get_running_loop()
                    except RuntimeError:
                        raise LedgerLoopError(
                            "this ledger serves no event loop yet and none is running here"
                        ) from None
                loop = self.loop
        return loop

    def serve(self) -> None:
        """Bind to the running loop on first use; refuse any other loop."""
        running = asyncio.get_running_loop()
        if (self.loop or self.bind()) is not running:
            raise ConfigError(
                "this ledger serves the event loop it was first used on, where its store's "
                "connections and write-behind timers live, not this one: call it on that "
                "loop (from another thread: asyncio.run_coroutine_threadsafe), or open a "
                "new Ledger inside each asyncio.run"
            )

    def serve_append(self) -> None:
        """Refuse a synchronous append from outside the loop served, once one is served:
        from another loop, or from a thread where none runs."""
        loop = self.loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            raise ConfigError(
                "append was called outside the event loop this ledger serves, where its "
                "write-behind timers live: nothing was appended; append on that loop (from "
                'another thread: sessionledger.runtime._hopping; docs/durability.md, "one event loop '
                'per ledger")'
            )

    def serve_if_running(self) -> None:
        """``serve`` when a loop runs (a synchronous call may come before any loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self.serve()

    def elsewhere(self) -> bool:
        """Tell whether this binding serves a loop, and the running one is another."""
        return self.loop is not None and self.loop is not asyncio.get_running_loop()


def _settled(task: asyncio.Task[None]) -> None:
    # A closing whose callers were all cancelled reports its failure to the next call.
    if not task.cancelled():
        task.exception()


@final
class Closing:
    """Run a closing to completion once, shared by every caller.

    A cancelled caller does not stop the work; concurrent callers wait for the same run; a
    call after a run that was itself cancelled (its loop shutting down) or that failed
    starts *work* again, which takes up what is left. After a run succeeded, ``done``.
    """

    __slots__ = ("_task", "done")

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self.done = False

    async def __call__(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        while True:
            task = self._task
            if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
                task = self._task = shielded_task(self._run(work))  # callers: shielded
                task.add_done_callback(_settled)
            try:
                await asyncio.shield(task)
                return
            except asyncio.CancelledError:
                if not cancelled_under_caller(task):
                    raise

    async def _run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        await work()
        self.done = True


def count_events(count: int) -> str:
    """``1 committed event`` / ``N committed events``."""
    return "1 committed event" if count == 1 else f"{count} committed events"


def note_unwritten(
    error: BaseException, failures: Sequence[tuple[str, int, BaseException]], fate: str
) -> None:
    """Add to *error* a note for each ``(session id, pending events, failure)`` that could
    not be written, saying *fate* (what happens to those events) and each other cause."""
    for session_id, pending, failure in failures:
        cause = "" if failure is error else f" ({type(failure).__name__}: {failure})"
        error.add_note(f"session {session_id!r}: {count_events(pending)} {fate}{cause}")
