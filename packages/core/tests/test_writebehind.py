"""Write-behind controller: fixed window, one write at a time, shared barrier."""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
from collections import deque
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger._errors import ConfigError, NotLiveError
from sessionledger.model._events import SessionEvent
from sessionledger.storage._writebehind import Tally, WriteBehind

# -- test doubles for the two seams: the clock and the sink ---------------------------------


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A scheduler whose time moves only through `advance`, firing due callbacks in order."""

    def __init__(self) -> None:
        self.now = 0  # microseconds, so repeated advances do not drift
        self._order = 0
        self._queue: list[tuple[int, int, _Handle, Callable[[], None]]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Handle:
        handle = _Handle()
        self._order += 1
        heapq.heappush(self._queue, (self.now + round(delay * 1e6), self._order, handle, callback))
        return handle

    def advance(self, seconds: float) -> None:
        target = self.now + round(seconds * 1e6)
        while self._queue and self._queue[0][0] <= target:
            due, _, handle, callback = heapq.heappop(self._queue)
            self.now = due
            if not handle.cancelled:
                callback()
        self.now = target

    @property
    def armed(self) -> int:
        return sum(not handle.cancelled for _, _, handle, _ in self._queue)


class SinkError(Exception):
    pass


class FakeSink:
    """Record every batch; optionally hold each call until released, or fail the next calls."""

    def __init__(self, *, hold: bool = False, fail: int = 0) -> None:
        self.hold = hold
        self.fail = fail
        self.attempts: list[list[int]] = []
        self.written: list[list[int]] = []
        self.written_sizes: list[list[int]] = []
        self.running = self.most_running = 0
        self._gates: deque[asyncio.Future[bool]] = deque()

    async def __call__(self, batch: list[SessionEvent], sizes: list[int]) -> None:
        assert len(sizes) == len(batch)
        self.attempts.append([event.seq for event in batch])
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            fail = False
            if self.hold:
                gate = asyncio.get_running_loop().create_future()
                self._gates.append(gate)
                fail = await gate
            if not fail and self.fail > 0:
                self.fail -= 1
                fail = True
            if fail:
                raise SinkError(f"write of {len(batch)} failed")
            self.written.append([event.seq for event in batch])
            self.written_sizes.append(list(sizes))
        finally:
            self.running -= 1

    @property
    def waiting(self) -> int:
        return len(self._gates)

    def release(self, *, fail: bool = False) -> None:
        self._gates.popleft().set_result(fail)

    @property
    def flat(self) -> list[int]:
        return [seq for batch in self.written for seq in batch]


def event(seq: int) -> SessionEvent:
    return SessionEvent("test/event", seq, 1_700_000_000_000 + seq, {"n": seq})


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def make(sink: FakeSink, clock: ManualClock, **kwargs: object) -> WriteBehind:
    return WriteBehind(sink, scheduler=clock, label="s-1", **kwargs)  # type: ignore[arg-type]


# -- the window ------------------------------------------------------------------------------


async def test_window_is_fixed_from_the_first_event_and_not_reset() -> None:
    clock, sink = ManualClock(), FakeSink()
    wb = make(sink, clock)
    wb.admit(event(0))
    clock.advance(0.15)
    wb.admit(event(1))
    clock.advance(0.049)
    await settle()
    assert sink.attempts == []
    assert wb.pending == 2
    clock.advance(0.001)
    await settle()
    assert sink.written == [[0, 1]]
    assert wb.idle
    assert wb.pending == 0


async def test_many_events_inside_one_window_make_exactly_one_batch() -> None:
    clock, sink = ManualClock(), FakeSink()
    wb = make(sink, clock)
    for seq in range(20):
        wb.admit(event(seq))
        clock.advance(0.01)
        await settle()
    assert sink.attempts == [list(range(20))]  # fired at 200 ms, after the 20th admit


async def test_events_admitted_during_a_write_wait_for_their_own_window() -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    wb = make(sink, clock)
    wb.admit(event(0))
    clock.advance(0.2)
    await settle()
    wb.admit(event(1))
    assert wb.pending == 2  # the in-flight batch is not durable yet
    clock.advance(0.05)
    sink.hold = False
    sink.release()
    await settle()
    assert sink.written == [[0]]
    clock.advance(0.149)
    await settle()
    assert sink.written == [[0]]
    clock.advance(0.001)
    await settle()
    assert sink.written == [[0], [1]]
    assert wb.idle


async def test_one_write_at_a_time_and_an_over_budget_tail_follows_at_once() -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    wb = make(sink, clock)
    wb.admit(event(0))
    clock.advance(0.2)
    wb.admit(event(1))
    clock.advance(0.2)
    await settle()
    assert sink.attempts == [[0]]
    sink.release()
    await settle()
    assert sink.attempts == [[0], [1]]  # no new window: the follow-up's had expired
    sink.release()
    await settle()
    assert sink.written == [[0], [1]]
    assert wb.idle
    assert clock.armed == 0


# -- batches capped by bytes -----------------------------------------------------------------


async def test_a_backlog_over_the_cap_is_written_in_batches_that_fit() -> None:
    clock, sink = ManualClock(), FakeSink()
    tally = Tally()
    wb = make(sink, clock, max_batch_bytes=10, tally=tally)
    for seq, size in enumerate([4, 4, 4, 12, 1, 9, 1]):
        wb.admit(event(seq), size)
    assert (wb.pending, wb.pending_bytes) == (7, 35)
    assert (tally.events, tally.bytes) == (7, 35)
    await wb.flush()
    # greedy: as many as fit; an event over the cap goes alone
    assert sink.written == [[0, 1], [2], [3], [4, 5], [6]]
    assert sink.written_sizes == [[4, 4], [4], [12], [1, 9], [1]]
    assert (wb.pending, wb.pending_bytes, tally.events, tally.bytes) == (0, 0, 0, 0)
    assert wb.idle


async def test_the_rest_of_a_split_backlog_follows_without_a_new_window() -> None:
    clock, sink = ManualClock(), FakeSink()
    wb = make(sink, clock, max_batch_bytes=2)
    for seq in range(5):
        wb.admit(event(seq), 1)
    clock.advance(0.2)
    await settle()
    assert sink.written == [[0, 1], [2, 3], [4]]
    assert wb.idle
    assert clock.armed == 0


async def test_a_failed_batch_of_a_split_backlog_keeps_only_what_is_not_durable() -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    tally = Tally()
    wb = make(sink, clock, max_batch_bytes=3, tally=tally)
    for seq in range(7):
        wb.admit(event(seq), 1)
    flush = asyncio.create_task(wb.flush())
    await settle()
    sink.release()  # [0, 1, 2] lands
    await settle()
    sink.release(fail=True)  # [3, 4, 5] fails: the flush raises, those stay pending
    with pytest.raises(SinkError):
        await flush
    assert sink.written == [[0, 1, 2]]
    assert (wb.pending, wb.pending_bytes, tally.events, tally.bytes) == (4, 4, 4, 4)
    wb.admit(event(7), 2)
    assert (tally.events, tally.bytes) == (5, 6)
    sink.hold = False
    await wb.flush()
    assert sink.written == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert sink.flat == list(range(8))
    assert (wb.pending, wb.pending_bytes, tally.events, tally.bytes) == (0, 0, 0, 0)


async def test_cancel_takes_what_is_pending_out_of_the_tally() -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    tally = Tally()
    wb = make(sink, clock, tally=tally)
    wb.admit(event(0), 3)
    clock.advance(0.2)
    await settle()  # [0] is in flight
    wb.admit(event(1), 4)
    other = make(FakeSink(), clock, tally=tally)
    other.admit(event(0), 5)
    assert (tally.events, tally.bytes) == (3, 12)
    wb.cancel()
    assert (tally.events, tally.bytes) == (1, 5)  # only the other controller's
    sink.release()  # the write in flight lands: the tally no longer hears of it
    await settle()
    assert (tally.events, tally.bytes) == (1, 5)
    assert wb.pending == 1


async def test_default_scheduler_uses_the_running_loop() -> None:
    sink = FakeSink()
    wb = WriteBehind(sink, delay=0)
    wb.admit(event(0))
    for _ in range(100):
        if sink.written:
            break
        await asyncio.sleep(0)
    assert sink.written == [[0]]


@pytest.mark.parametrize("delay", [-0.1, float("nan"), float("inf"), True, "0.2"])
def test_bad_delay_is_a_config_error(delay: object) -> None:
    with pytest.raises(ConfigError):
        WriteBehind(FakeSink(), delay=delay)  # type: ignore[arg-type]


# -- the flush barrier -----------------------------------------------------------------------


async def test_flush_on_an_empty_controller_resolves_without_writing() -> None:
    clock, sink = ManualClock(), FakeSink()
    wb = make(sink, clock)
    await wb.flush()
    wb.admit(event(0))  # after the barrier: its own window, not stranded
    assert sink.attempts == []
    assert clock.armed == 1
    clock.advance(0.2)
    await settle()
    assert sink.written == [[0]]


async def test_concurrent_flushes_share_one_barrier_that_drains_later_events() -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    wb = make(sink, clock)
    wb.admit(event(0))
    first = asyncio.create_task(wb.flush())
    second = asyncio.create_task(wb.flush())
    await settle()
    assert sink.attempts == [[0]]
    assert clock.armed == 0  # the flush cancelled the window
    wb.admit(event(1))
    assert clock.armed == 0  # the barrier drains it, no timer
    sink.hold = False
    sink.release()
    await asyncio.gather(first, second)
    assert sink.written == [[0], [1]]
    assert wb.idle
    assert clock.armed == 0
    wb.admit(event(2))  # after the barrier cleared: a window of its own
    assert clock.armed == 1


async def test_cancelling_one_flush_caller_does_not_cancel_the_barrier() -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    wb = make(sink, clock)
    wb.admit(event(0))
    doomed = asyncio.create_task(wb.flush())
    other = asyncio.create_task(wb.flush())
    await settle()
    doomed.cancel()
    await settle()
    assert doomed.cancelled()
    sink.release()
    await other
    assert sink.written == [[0]]
    assert wb.idle


async def test_flush_waits_for_a_failing_background_write_then_rewrites_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    wb = make(sink, clock)
    wb.admit(event(0))
    clock.advance(0.2)
    await settle()
    flushes = [asyncio.create_task(wb.flush()) for _ in range(2)]
    await settle()
    sink.hold = False
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        sink.release(fail=True)
        await asyncio.gather(*flushes)
    assert sink.attempts == [[0], [0]]
    assert sink.written == [[0]]
    assert len(caplog.records) == 1
    assert wb.idle


@pytest.mark.parametrize("started", [False, True])
async def test_a_cancelled_background_write_keeps_its_events(started: bool) -> None:
    # asyncio.run() cancels leftover tasks on exit; the batch must not vanish with them.
    clock, sink = ManualClock(), FakeSink(hold=True)
    wb = make(sink, clock)
    wb.admit(event(0))
    others = asyncio.all_tasks()
    clock.advance(0.2)
    [write] = asyncio.all_tasks() - others
    if started:
        await settle()
        assert sink.waiting == 1
    write.cancel()
    await settle()
    assert wb.pending == 1
    sink.hold = False
    wb.admit(event(1))  # resumes automatic writing, as after a failure
    clock.advance(0.2)
    await settle()
    assert sink.written == [[0, 1]]
    assert wb.idle


# -- failures --------------------------------------------------------------------------------


async def test_background_failure_is_logged_once_retained_and_paused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, sink = ManualClock(), FakeSink(fail=1)
    wb = make(sink, clock)
    wb.admit(event(0))
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        clock.advance(0.2)
        await settle()
        clock.advance(1.0)
        await settle()
    [record] = caplog.records
    assert record.name == "sessionledger"
    assert record.levelno == logging.WARNING
    assert "'s-1'" in record.getMessage()
    assert "retained" in record.getMessage()
    assert sink.attempts == [[0]]  # no automatic retry while paused
    assert not wb.idle
    assert wb.pending == 1
    wb.admit(event(1))  # resumes with a fresh window
    clock.advance(0.199)
    await settle()
    assert sink.attempts == [[0]]
    clock.advance(0.001)
    await settle()
    assert sink.written == [[0, 1]]
    assert wb.idle


async def test_flush_failure_raises_to_the_caller_and_is_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, sink = ManualClock(), FakeSink(fail=1)
    wb = make(sink, clock)
    wb.admit(event(0))
    with caplog.at_level(logging.WARNING, logger="sessionledger"), pytest.raises(SinkError):
        await wb.flush()
    assert caplog.records == []
    assert not wb.idle
    assert clock.armed == 0  # paused
    wb.admit(event(1))
    clock.advance(0.2)
    await settle()
    assert sink.attempts == [[0], [0, 1]]
    assert sink.written == [[0, 1]]


async def test_a_failed_batch_goes_back_in_front_of_newer_events() -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    wb = make(sink, clock)
    wb.admit(event(0))
    wb.admit(event(1))
    clock.advance(0.2)
    await settle()
    wb.admit(event(2))
    sink.release(fail=True)
    await settle()
    sink.hold = False
    await wb.flush()
    assert sink.written == [[0, 1, 2]]


async def test_every_flush_caller_gets_the_error_and_a_second_flush_writes_all() -> None:
    clock, sink = ManualClock(), FakeSink(fail=1)
    wb = make(sink, clock)
    for seq in range(10_000):
        wb.admit(event(seq))
    results = await asyncio.gather(wb.flush(), wb.flush(), return_exceptions=True)
    assert [type(result) for result in results] == [SinkError, SinkError]
    await wb.flush()
    assert [len(batch) for batch in sink.attempts] == [10_000, 10_000]
    assert sink.flat == list(range(10_000))


# -- closing ---------------------------------------------------------------------------------


async def test_aclose_flushes_then_refuses_events() -> None:
    clock, sink = ManualClock(), FakeSink()
    wb = make(sink, clock)
    wb.admit(event(0))
    await wb.aclose()
    assert sink.written == [[0]]
    assert wb.closed
    with pytest.raises(NotLiveError):
        wb.admit(event(1))
    await wb.aclose()  # idempotent
    assert sink.written == [[0]]


async def test_aclose_failure_keeps_events_and_a_second_aclose_retries() -> None:
    clock, sink = ManualClock(), FakeSink(fail=1)
    wb = make(sink, clock)
    wb.admit(event(0))
    with pytest.raises(SinkError):
        await wb.aclose()
    assert wb.pending == 1
    assert clock.armed == 0
    await wb.aclose()
    assert sink.written == [[0]]
    assert wb.idle


async def test_cancel_stops_the_window_without_writing() -> None:
    clock, sink = ManualClock(), FakeSink()
    wb = make(sink, clock)
    wb.admit(event(0))
    wb.cancel()
    assert clock.armed == 0
    clock.advance(1.0)
    await settle()
    assert sink.attempts == []
    assert wb.pending == 1
    assert clock.armed == 0
    with pytest.raises(NotLiveError):
        wb.admit(event(1))


async def test_cancel_lets_the_write_in_flight_finish_but_starts_no_follow_up() -> None:
    clock, sink = ManualClock(), FakeSink(hold=True)
    wb = make(sink, clock)
    wb.admit(event(0))
    clock.advance(0.2)
    wb.admit(event(1))
    clock.advance(0.2)  # the follow-up window is over while [0] is in flight
    await settle()
    wb.cancel()
    sink.release()
    await settle()
    assert sink.written == [[0]]
    assert wb.pending == 1


# -- random schedules ------------------------------------------------------------------------

_OPS = st.one_of(
    st.tuples(st.just("admit"), st.integers(1, 3)),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 50, 149, 199, 200, 300])),
    st.tuples(st.just("release"), st.booleans()),
    st.tuples(st.just("hold"), st.booleans()),
    st.tuples(st.just("fail"), st.integers(1, 2)),
    st.tuples(st.just("flush"), st.just(0)),
    st.tuples(st.just("drop_waiter"), st.just(0)),
    st.tuples(st.just("settle"), st.just(0)),
)


def size_of(seq: int) -> int:
    """The size a schedule admits event *seq* with: mostly small, every seventh large."""
    return 9 if seq % 7 == 6 else seq % 3 + 1


async def _run_schedule(hold: bool, ops: list[tuple[str, object]], cap: int | None) -> None:
    clock, sink = ManualClock(), FakeSink(hold=hold)
    tally = Tally()
    wb = make(sink, clock, max_batch_bytes=cap, tally=tally)
    admitted: list[int] = []
    flushes: list[asyncio.Task[None]] = []
    short_flushes: list[int] = []  # a flush that succeeded before its events were durable

    def check() -> None:
        assert admitted[: len(sink.flat)] == sink.flat  # in order, no duplicates
        assert wb.pending == len(admitted) - len(sink.flat)
        unwritten = sum(size_of(seq) for seq in admitted[len(sink.flat) :])
        assert wb.pending_bytes == unwritten
        assert (tally.events, tally.bytes) == (wb.pending, unwritten)
        assert sink.most_running <= 1  # one write at a time
        assert short_flushes == []
        for seqs, sizes in zip(sink.written, sink.written_sizes, strict=True):
            assert sizes == [size_of(seq) for seq in seqs]
            # each batch within the cap, or one event alone
            assert cap is None or sum(sizes) <= cap or len(sizes) == 1

    def on_flushed(task: asyncio.Task[None], before: int) -> None:
        if not task.cancelled() and task.exception() is None and len(sink.flat) < before:
            short_flushes.append(before)

    for op, arg in ops:
        if op == "admit":
            for _ in range(int(arg)):  # type: ignore[call-overload]
                admitted.append(len(admitted))
                wb.admit(event(admitted[-1]), size_of(admitted[-1]))
        elif op == "advance":
            clock.advance(int(arg) / 1000)  # type: ignore[call-overload]
        elif op == "release" and sink.waiting:
            sink.release(fail=bool(arg))
        elif op == "hold":
            sink.hold = bool(arg)
        elif op == "fail":
            sink.fail = int(arg)  # type: ignore[call-overload]
        elif op == "flush":
            task = asyncio.create_task(wb.flush())
            task.add_done_callback(functools.partial(on_flushed, before=len(admitted)))
            flushes.append(task)
        elif op == "drop_waiter" and flushes:
            flushes[-1].cancel()
        await settle()
        check()

    sink.hold, sink.fail = False, 0
    while sink.waiting:
        sink.release()
    await asyncio.gather(*flushes, return_exceptions=True)
    await asyncio.wait_for(wb.flush(), timeout=5)
    check()
    assert sink.flat == admitted
    assert wb.idle
    assert wb.pending == 0
    assert clock.armed == 0


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.lists(_OPS, max_size=40), st.sampled_from([None, 1, 4, 10]))
def test_random_schedules_write_every_event_once_in_order(
    hold: bool, ops: list[tuple[str, object]], cap: int | None
) -> None:
    """Every schedule of events, windows, holds, failures and flushes, with batches capped
    by bytes or not: each event is written once, in order, each batch within the cap,
    and the counts of what is pending are exact throughout."""
    asyncio.run(_run_schedule(hold, ops, cap))
