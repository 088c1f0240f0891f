"""Per-session write-behind: batch committed events into durable writes (docs/durability.md).

One `WriteBehind` serves one live session. ``admit`` is synchronous and O(1), so the producer
(``Session.append`` through ``ledger_committed``) never waits for storage. A fixed window opens
at the first pending event and is not reset by later ones; when it expires the whole pending list
goes to the sink as one batch, or, when it holds more than the store can take at once, as
consecutive batches that each fit (``max_batch_bytes``). At most one write runs at a time.
``flush`` is the barrier: it drains until empty and shares one drain among concurrent callers.

Nothing is ever dropped, duplicated or reordered: a failed batch goes back in front of newer
events, and automatic writing pauses until the next ``admit``, ``flush`` or ``aclose``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Protocol, final

from sessionledger._errors import ConfigError, NotLiveError
from sessionledger._failpoints import failpoint
from sessionledger.model._events import SessionEvent
from sessionledger.storage._cancellation import shielded_task
from sessionledger.storage._lifecycle import cancelled_under_caller
from sessionledger.storage._limits import batch_end

#: A sink writes one batch durably and returns only after it is durable, or raises. It is
#: given the batch's events and the size ``admit`` was given for each.
Sink = Callable[[list[SessionEvent], list[int]], Awaitable[None]]


@final
class Tally:
    """What several controllers hold between them (a ledger's sessions): events admitted
    and not yet durable, and the sum of their sizes. Each controller keeps it up to date
    as events are admitted and written, until it is cancelled."""

    __slots__ = ("bytes", "events")

    def __init__(self) -> None:
        self.events = 0
        self.bytes = 0


class TimerHandle(Protocol):
    """Cancel a timer armed by a `Scheduler`; cancelling twice or after it fired is harmless."""

    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Run a callback once after ``delay`` seconds: the clock seam of the write-behind window.

    The default uses the running asyncio loop's ``call_later``; tests pass a manual clock.
    """

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class _LoopScheduler:
    # Looks the loop up at arm time, so a controller can be built outside a running loop.
    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback)


def _consume_outcome(task: asyncio.Task[None]) -> None:
    # Every barrier caller gets the error; this only keeps asyncio from warning when all of
    # them were cancelled before it arrived.
    if not task.cancelled():
        task.exception()


@final
class WriteBehind:
    """Buffer one session's committed events and write them in batches through ``sink``.

    ``sink`` receives its own list of events in admission order and must return only when
    they are durable (or raise). ``delay`` is the window in seconds. ``label`` (the session id)
    names the session in log messages. A background write failure is logged once at WARNING
    on ``logger`` (default: the ``sessionledger`` logger); a flush failure raises instead.
    ``max_batch_bytes`` caps the sizes (given to ``admit``) one batch adds up to, except
    that a batch always takes at least one event; *tally* is shared with other
    controllers to count what they all hold.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        delay: float = 0.2,
        scheduler: Scheduler | None = None,
        label: str = "",
        logger: logging.Logger | None = None,
        max_batch_bytes: int | None = None,
        tally: Tally | None = None,
    ) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            raise ConfigError(f"write-behind delay must be a number of seconds, got {delay!r}")
        if not (math.isfinite(delay) and delay >= 0):
            raise ConfigError(f"write-behind delay must be finite and >= 0, got {delay!r}")
        self._sink = sink
        self._delay = float(delay)
        self._scheduler: Scheduler = scheduler if scheduler is not None else _LoopScheduler()
        self._label = label
        self._logger = logger if logger is not None else logging.getLogger("sessionledger")
        self._max_batch_bytes = max_batch_bytes
        self._tally = tally
        self._pending: list[SessionEvent] = []
        self._sizes: list[int] = []  # of each pending event, in the same order
        self._pending_bytes = 0
        self._in_flight: list[SessionEvent] | None = None  # the batch the sink holds now
        self._in_flight_sizes: list[int] = []
        self._in_flight_bytes = 0
        self._timer: TimerHandle | None = None
        self._active: asyncio.Task[None] | None = None  # background write, if any
        self._barrier: asyncio.Task[None] | None = None
        self._deadline_expired = False  # the follow-up window ended during a write
        self._paused = False  # a failure stopped automatic writing
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()  # strong references (asyncio keeps weak)

    @property
    def pending(self) -> int:
        """Count the events admitted and not yet durable, the batch being written included."""
        in_flight = len(self._in_flight) if self._in_flight is not None else 0
        return len(self._pending) + in_flight

    def unwritten(self) -> list[SessionEvent]:
        """Return the events admitted and not yet durable, oldest first (the batch being
        written included): what a caller that gives up on them is handed back."""
        in_flight = self._in_flight if self._in_flight is not None else []
        return [*in_flight, *self._pending]

    @property
    def pending_bytes(self) -> int:
        """Add up the sizes of the events `pending` counts."""
        return self._pending_bytes + self._in_flight_bytes

    @property
    def idle(self) -> bool:
        """Tell whether nothing is pending, no write is in flight and no flush is running."""
        return not self._pending and self._in_flight is None and self._barrier is None

    @property
    def closed(self) -> bool:
        """Tell whether `aclose` or `cancel` was called; a closed controller refuses `admit`."""
        return self._closed

    def admit(self, event: SessionEvent, size: int = 0) -> None:
        """Queue ``event`` for writing; never blocks and never writes by itself.

        Events are immutable, so the reference is kept as is. *size* is what the event
        counts for ``max_batch_bytes`` and ``pending_bytes``. Raises `NotLiveError` after
        `aclose` or `cancel`, since the event could otherwise wait forever.
        """
        if self._closed:
            raise NotLiveError(f"write-behind for {self._name} is closed; event not accepted")
        was_empty = not self._pending
        self._pending.append(event)
        self._sizes.append(size)
        self._pending_bytes += size
        tally = self._tally
        if tally is not None:
            tally.events += 1
            tally.bytes += size
        if self._barrier is not None:
            return  # the running flush drains it
        if self._paused:
            # A new event resumes automatic writing after a failure, with a fresh window.
            self._paused = False
            self._deadline_expired = False
            self._arm()
        elif was_empty:
            self._arm()  # fixed window: only the first pending event opens it

    async def flush(self) -> None:
        """Write everything pending, including events admitted meanwhile; return when durable.

        Concurrent callers share one drain. Cancelling one caller does not stop the drain for
        the others. A background write already in flight is awaited first; if it fails (it is
        logged as a background failure) its batch is written again by the drain. If a drain
        write fails, every caller gets the sink's exception and the events stay pending. A
        drain cancelled under a caller that was not (its loop shutting down) starts again.
        """
        while True:
            barrier = self._barrier
            if barrier is not None and barrier.done():
                barrier = self._barrier = None  # cancelled before it ran (_settle_barrier)
            if barrier is None:
                if not self._pending and self._active is None:
                    return
                barrier = self._start_drain()
            try:
                await asyncio.shield(barrier)
                return
            except asyncio.CancelledError:
                if not cancelled_under_caller(barrier):
                    raise

    def _start_drain(self) -> asyncio.Task[None]:
        self._cancel_timer()
        self._deadline_expired = False
        self._paused = False
        barrier = shielded_task(self._drain())  # flush's callers await it shielded
        self._barrier = barrier
        self._keep(barrier)
        barrier.add_done_callback(_consume_outcome)
        barrier.add_done_callback(self._settle_barrier)
        return barrier

    def _settle_barrier(self, barrier: asyncio.Task[None]) -> None:
        # A drain cancelled before its first step (its loop shutting down) never ran its
        # own handler: the next flush starts a new one instead of awaiting it.
        if self._barrier is barrier:
            self._barrier = None

    async def aclose(self) -> None:
        """Refuse further events, then flush what is pending.

        If the final flush fails the controller stays closed, the events stay pending and the
        error is raised; calling `aclose` (or `flush`) again retries. Closing twice is harmless.
        """
        self._closed = True
        await self.flush()

    def cancel(self) -> None:
        """Stop automatic writing for good without writing, e.g. for an abandoned session.

        Pending events are kept (an explicit `flush` still writes them) and further `admit`
        calls are refused. A write already in flight is not interrupted, so the log is never
        cut mid-batch; no follow-up batch starts after it. The tally no longer counts
        anything of this controller.
        """
        self._closed = True
        self._cancel_timer()
        tally, self._tally = self._tally, None
        if tally is not None:
            tally.events -= self.pending
            tally.bytes -= self.pending_bytes

    # -- internals -----------------------------------------------------------------------

    @property
    def _name(self) -> str:
        return f"session {self._label!r}" if self._label else "an unnamed session"

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _arm(self) -> None:
        self._cancel_timer()
        self._timer = self._scheduler.call_later(self._delay, self._on_deadline)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_deadline(self) -> None:
        self._timer = None
        if self._barrier is not None or not self._pending or self._closed:
            return
        if self._active is not None:
            self._deadline_expired = True  # written as soon as the running write ends
            return
        self._start_background()

    def _take(self) -> list[SessionEvent]:
        # A write takes the whole pending list, so the next admit opens a new window; or
        # as much of it as one batch may hold, and the rest, whose window is over, is
        # written right after it.
        cap = self._max_batch_bytes
        if cap is None or self._pending_bytes <= cap:
            batch, self._pending = self._pending, []
            sizes, self._sizes = self._sizes, []
            taken = self._pending_bytes
        else:
            end = batch_end(self._sizes, 0, cap)
            batch, sizes = self._pending[:end], self._sizes[:end]
            del self._pending[:end], self._sizes[:end]
            taken = sum(sizes)
        self._pending_bytes -= taken
        self._in_flight = batch
        self._in_flight_sizes = sizes
        self._in_flight_bytes = taken
        self._cancel_timer()
        self._deadline_expired = bool(self._pending)
        return batch

    def _put_back(self, batch: list[SessionEvent]) -> None:
        # Failed batch goes in front of newer events; no timer until admit/flush/aclose.
        self._pending = batch + self._pending
        self._sizes = self._in_flight_sizes + self._sizes
        self._pending_bytes += self._in_flight_bytes
        self._in_flight = None
        self._in_flight_sizes = []
        self._in_flight_bytes = 0
        self._cancel_timer()
        self._deadline_expired = False
        self._paused = True

    def _landed(self) -> None:
        # The batch in flight is durable: it leaves the counts.
        batch = self._in_flight
        tally = self._tally
        if tally is not None and batch is not None:
            tally.events -= len(batch)
            tally.bytes -= self._in_flight_bytes
        self._in_flight = None
        self._in_flight_sizes = []
        self._in_flight_bytes = 0

    def _start_background(self) -> None:
        batch = self._take()
        task = shielded_task(self._write_in_background(batch))  # nobody's to cancel
        self._active = task
        self._keep(task)

        def settle_unstarted(done: asyncio.Task[None]) -> None:
            # A task cancelled before its first step never runs its own handlers.
            if self._active is done:
                self._active = None
                if self._in_flight is batch:
                    self._put_back(batch)

        task.add_done_callback(settle_unstarted)

    async def _write(self, batch: list[SessionEvent]) -> None:
        failpoint("core.writebehind.before-write")
        await self._sink(list(batch), list(self._in_flight_sizes))
        failpoint("core.writebehind.after-write")

    async def _write_in_background(self, batch: list[SessionEvent]) -> None:
        try:
            await self._write(batch)
        except Exception as exc:
            self._put_back(batch)
            self._active = None
            self._logger.warning(
                "background write for %s failed; %d event(s) retained until the next event, "
                "flush or close: %r",
                self._name,
                len(batch),
                exc,
                exc_info=exc,
            )
            return
        except BaseException:  # cancelled (e.g. loop shutdown): keep the events, no report
            self._put_back(batch)
            self._active = None
            raise
        self._landed()
        self._active = None
        if self._barrier is None and self._pending and self._deadline_expired and not self._closed:
            self._start_background()  # the follow-up window is already over

    async def _drain(self) -> None:
        try:
            while True:
                active = self._active
                if active is not None:
                    # Its failure is reported by the background path; the batch is pending again.
                    await asyncio.wait((active,))
                    continue
                if not self._pending:
                    # Cleared in the step that saw the empty queue: a later admit opens a window.
                    self._barrier = None
                    self._paused = False
                    return
                batch = self._take()
                try:
                    await self._write(batch)
                except BaseException:
                    self._put_back(batch)
                    raise
                self._landed()
        except BaseException:
            self._barrier = None
            raise
