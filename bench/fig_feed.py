"""Figure 14: the live feed (``store.follow``), read from another process.

On each backend (``memory:`` in-process; ``jsonl:``, ``sqlite:`` and PostgreSQL with the
follower in a separate process, which is the point of the feature):

- ``p95``: flush-to-follower latency. The writer flushes one small batch at a time
  (``BATCH_EVENTS`` user messages), sleeping a random 0-20 ms between flushes, and notes
  ``time.time()`` as each ``flush`` returns; the follower notes ``time.time()`` as each
  event reaches it; the latency of a batch is the arrival of its first event minus the
  return of its flush (negative when the follower saw the batch before the writer's
  ``flush`` returned). Target (issue 43): p95 ≤ 100 ms on JSONL and SQLite, ≤ 50 ms on
  PostgreSQL (which wakes the feed by LISTEN/NOTIFY; the others poll the revision).
  The ratio column is the p95 in ms (median of the runs' p95s, spread their min-max;
  in ms, as figure 12 gives MiB, so that a few ms do not print as "0.00x"); the absolute
  column gives p50 and p95, and every batch's percentiles pooled.
- ``p95-long``: the same on a session that already holds workload (a) at its large size
  (``Settings.events``), the follower joining at its end (as ``sessionledger tail``
  does): one run of ``long_flushes`` batches, same targets. A follower's read costs what
  the backend charges for a long log: this row shows whether that grows with the log.
- ``writer``: the writer's durable throughput on workload (a), a flush every 10 events,
  with ``FOLLOWERS`` follower processes on the same session ÷ with none, interleaved run
  by run (``measure``). Target ≥ 0.9x. On ``memory:`` the followers are tasks on the
  writer's own loop (a memory store is private to its process).
- ``idle``: the CPU an idle follower costs (a session nobody writes to): CPU seconds per
  wall second, from ``resource.getrusage`` in the follower's process. Context only.

The follower processes are this module run as a script: ``python -m bench.fig_feed
follow URL SESSION AFTER LAST`` (follows from seq AFTER + 1; prints ``ready`` once that
arrived, then, once seq LAST has, the arrival time of every seq and the CPU seconds it
used since ``ready``, as JSON) and ``python -m bench.fig_feed idle URL SESSION SECONDS``
(prints ``ready``, then ``{"cpu", "wall"}`` after SECONDS). PostgreSQL is a throwaway
durable server, as for ``bench/bench_postgres.py`` (or ``$SESSIONLEDGER_PG_URL``); its
rows say ``skipped`` when none can start.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import random
import resource
import select
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import Figure, Section, Settings, format_rate, measure, paired

__all__ = ["run"]

ROOT: Final = Path(__file__).resolve().parents[1]
#: Events per flushed batch in the latency runs (user messages, ~40 bytes of text each).
BATCH_EVENTS: Final = 2
#: The writer's random pause between flushes in the latency runs, in seconds.
MAX_PAUSE: Final = 0.020
#: Events per flush in the writer-throughput runs.
WRITER_FLUSH_EVERY: Final = 10
#: Latency targets per backend (issue 43), in seconds; None: context only.
LATENCY_GOALS: Final[dict[str, float | None]] = {
    "memory": None,
    "jsonl": 0.100,
    "sqlite": 0.100,
    "postgres": 0.050,
}
WRITER_GOAL: Final = 0.9
LABELS: Final = {
    "memory": "`memory:`",
    "jsonl": "`jsonl:`",
    "sqlite": "`sqlite:`",
    "postgres": "`postgresql:`",
}
#: How long a child may take to start following before the run is abandoned.
READY_TIMEOUT: Final = 60.0


# -- the store of each backend --------------------------------------------------------------


def _plugins(url: str) -> list[object]:
    """The backend plugin serving *url* (entry points are not loaded: no invariants)."""
    scheme = url.partition(":")[0]
    if scheme == "jsonl":
        import sessionledger_jsonl.plugin

        return [sessionledger_jsonl.plugin]
    if scheme == "sqlite":
        import sessionledger_sqlite.plugin

        return [sessionledger_sqlite.plugin]
    if scheme in ("postgresql", "postgres"):
        import sessionledger_postgres.plugin

        return [sessionledger_postgres.plugin]
    return []


def _open_ledger(url: str) -> Any:
    from sessionledger import Ledger

    return Ledger.open(url, plugins=_plugins(url), load_entrypoints=False)


def _open_store(url: str) -> Any:
    from sessionledger import open_store

    return open_store(url, plugins=_plugins(url), load_entrypoints=False)


# -- the follower processes ----------------------------------------------------------------


async def _child_follow(url: str, session_id: str, after: int, last: int) -> None:
    store = _open_store(url)
    arrived: dict[int, float] = {}
    cpu = 0.0
    try:
        feed = store.follow(session_id, after=after)
        async for event in feed:
            arrived[event.seq] = time.time()
            if event.seq == after + 1:
                print("ready", flush=True)
                cpu = _cpu_seconds()
            if event.seq >= last:
                break
        cpu = _cpu_seconds() - cpu
        await feed.aclose()
    finally:
        await store.close()
    print(json.dumps({"arrived": arrived, "cpu": cpu}), flush=True)


async def _child_idle(url: str, session_id: str, seconds: float) -> None:
    store = _open_store(url)
    started = asyncio.Event()

    async def follow() -> None:
        async for event in store.follow(session_id):
            if event.seq == 0:
                started.set()

    task = asyncio.create_task(follow())
    try:
        await asyncio.wait_for(started.wait(), READY_TIMEOUT)
        print("ready", flush=True)
        cpu, wall = _cpu_seconds(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall = _cpu_seconds() - cpu, time.monotonic() - wall
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()
    print(json.dumps({"cpu": cpu, "wall": wall}), flush=True)


def _cpu_seconds() -> float:
    """User + system CPU of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(argv: list[str]) -> None:
    mode, url, session_id, *amounts = argv
    if mode == "follow":
        after, last = amounts
        asyncio.run(_child_follow(url, session_id, int(after), int(last)))
    elif mode == "idle":
        (seconds,) = amounts
        asyncio.run(_child_idle(url, session_id, float(seconds)))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def _spawn(mode: str, url: str, session_id: str, *amounts: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.fig_feed", mode, url, session_id, *map(str, amounts)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _wait_ready(children: list[subprocess.Popen[str]]) -> None:
    """Return once every child printed ``ready`` (it follows the session and has had the
    first event it waits for)."""
    deadline = time.monotonic() + READY_TIMEOUT
    for child in children:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = child.stdout.readline().strip() if ready else ""
        if line != "ready":
            child.kill()
            _, err = child.communicate()
            raise RuntimeError(f"a follower did not start ({line!r}): {err.strip()[-2000:]}")


def _result(child: subprocess.Popen[str], timeout: float = 120) -> Any:
    """Wait for *child* to end; return the JSON it printed last."""
    out, err = child.communicate(timeout=timeout)
    if child.returncode != 0:
        raise RuntimeError(f"a follower failed ({child.returncode}): {err.strip()[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


@contextlib.contextmanager
def _reaped(children: list[subprocess.Popen[str]]) -> Iterator[None]:
    """Kill whichever of *children* still runs on the way out."""
    try:
        yield
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                child.communicate(timeout=30)


# -- the in-process follower of ``memory:`` -------------------------------------------------


async def _task_follow(
    ledger: Any, session_id: str, last: int, arrived: dict[int, float], after: int = -1
) -> None:
    feed = ledger.follow(session_id, after=after)
    async for event in feed:
        arrived[event.seq] = time.time()
        if event.seq >= last:
            break
    await feed.aclose()


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("an in-process follower did not start")
        await asyncio.sleep(0.001)


# -- the three measurements ----------------------------------------------------------------

_ids = itertools.count()


def _session_id(kind: str) -> str:
    return f"feed-{kind}-{os.getpid()}-{next(_ids)}-{uuid.uuid4().hex[:6]}"


async def _latency_run(
    ledger: Any,
    url: str,
    flushes: int,
    seed: int,
    prefix: list[Any] | None = None,
) -> list[float]:
    """One latency run: *flushes* batches; return each batch's latency in seconds. With a
    *prefix* (workload ops), the session holds it first (written untimed) and the follower
    joins at its end, as ``sessionledger tail`` does."""
    from bench.stores import append_ops
    from sessionledger import APPEND, USER_MESSAGE, user_message

    session_id = _session_id("latency")
    session = ledger.create(session_id)
    prefix = prefix or []
    for start in range(0, len(prefix), 1_000):
        append_ops(session, prefix[start : start + 1_000])
        await ledger.flush(session)
    text = "the first message"
    after = session.append(USER_MESSAGE, user_message(text), surface_op=APPEND).seq - 1
    await ledger.flush(session)
    last = after + 1 + flushes * BATCH_EVENTS
    children: list[subprocess.Popen[str]] = []
    arrived: dict[int, float] = {}
    task: asyncio.Task[None] | None = None
    with _reaped(children):
        try:
            if url == "memory:":
                task = asyncio.create_task(_task_follow(ledger, session_id, last, arrived, after))
                await _until(lambda: after + 1 in arrived)
            else:
                children.append(_spawn("follow", url, session_id, after, last))
                _wait_ready(children)
            rng = random.Random(seed)
            flushed: dict[int, float] = {}
            for index in range(flushes):
                await asyncio.sleep(rng.uniform(0, MAX_PAUSE))
                first = None
                for member in range(BATCH_EVENTS):
                    text = f"message {index}.{member}: what does the file declare?"
                    event = session.append(USER_MESSAGE, user_message(text), surface_op=APPEND)
                    first = event.seq if first is None else first
                await ledger.flush(session)
                flushed[first] = time.time()  # type: ignore[index]
            if task is not None:
                await asyncio.wait_for(task, 120)
            else:
                arrived = {int(seq): at for seq, at in _result(children[0])["arrived"].items()}
        finally:
            if task is not None and not task.done():
                task.cancel()
    return [arrived[seq] - at for seq, at in flushed.items()]


async def _writer_run(ledger: Any, url: str, ops: list[Any], followers: int) -> dict[str, float]:
    """One writer run on a fresh session: seconds to append and flush ``ops[1:]`` with
    *followers* following it (started, and caught up on ``ops[0]``, untimed), the CPU
    seconds of the writer's process meanwhile and (follower processes only) the CPU
    seconds the followers spent to follow the run, catching up after it included."""
    from bench.stores import append_ops

    session_id = _session_id("writer")
    session = ledger.create(session_id)
    append_ops(session, ops[:1])
    await ledger.flush(session)
    last = len(ops) - 1
    children: list[subprocess.Popen[str]] = []
    tasks: list[asyncio.Task[None]] = []
    arrivals: list[dict[int, float]] = [{} for _ in range(followers)]
    append = session.append
    with _reaped(children):
        try:
            if url == "memory:":
                tasks = [
                    asyncio.create_task(_task_follow(ledger, session_id, last, arrived))
                    for arrived in arrivals
                ]
                await _until(lambda: all(0 in arrived for arrived in arrivals))
            else:
                children.extend(
                    _spawn("follow", url, session_id, -1, last) for _ in range(followers)
                )
                _wait_ready(children)
            cpu, start = _cpu_seconds(), time.perf_counter()
            for index, op in enumerate(ops[1:], 1):
                append(op.type, op.data, surface_op=op.surface_op, source_event_seqs=op.sources)
                if index % WRITER_FLUSH_EVERY == 0:
                    await ledger.flush(session)
            await ledger.flush(session)
            marks = {"seconds": time.perf_counter() - start, "cpu": _cpu_seconds() - cpu}
            # Untimed: every follower must have had every event.
            if tasks:
                await asyncio.wait_for(asyncio.gather(*tasks), 120)
            else:
                results = [_result(child) for child in children]
                arrivals = [{int(seq): 0.0 for seq in result["arrived"]} for result in results]
                marks["followers_cpu"] = sum(result["cpu"] for result in results)
        finally:
            for task in tasks:
                task.cancel()
    for arrived in arrivals:
        if len(arrived) != len(ops) or max(arrived) != last:
            raise RuntimeError(f"a follower missed events: {len(arrived)} of {len(ops)}")
    return marks


async def _idle_run(ledger: Any, url: str, seconds: float) -> dict[str, float]:
    """CPU seconds and wall seconds of a follower of a session nobody writes to."""
    from sessionledger import APPEND, USER_MESSAGE, user_message

    session_id = _session_id("idle")
    session = ledger.create(session_id)
    session.append(USER_MESSAGE, user_message("the only message"), surface_op=APPEND)
    await ledger.flush(session)
    if url != "memory:":
        children = [_spawn("idle", url, session_id, seconds)]
        with _reaped(children):
            _wait_ready(children)
            result: dict[str, float] = _result(children[0], timeout=seconds + 120)
            return result
    arrived: dict[int, float] = {}
    task = asyncio.create_task(_task_follow(ledger, session_id, 1, arrived))
    try:
        await _until(lambda: 0 in arrived)
        cpu, wall = _cpu_seconds(), time.monotonic()
        await asyncio.sleep(seconds)
        return {"cpu": _cpu_seconds() - cpu, "wall": time.monotonic() - wall}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- one backend ---------------------------------------------------------------------------


def _percentile(values: list[float], share: float) -> float:
    """The *share* quantile of *values* (nearest rank: a value that occurred)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _sizes(settings: Settings) -> dict[str, Any]:
    # "long": the events a long session holds before the follower joins (figures 3 and
    # 5's large workload (a)); "long_flushes": the batches then written.
    if settings.quick:
        return {
            "flushes": 15,
            "long": settings.events,
            "long_flushes": 10,
            "events": 200,
            "followers": 3,
            "idle": 1.0,
        }
    return {
        "flushes": 200,
        "long": settings.events,
        "long_flushes": 50,
        "events": 2_000,
        "followers": 10,
        "idle": 5.0,
    }


def _backend(kind: str, url: str, settings: Settings) -> dict[str, Any]:
    """Run the measurements on one backend; return their raw results."""
    from bench.workloads import agent_session
    from sessionledger.storage._logstore import LogStore

    sizes = _sizes(settings)
    ops = agent_session(sizes["events"])
    prefix = agent_session(sizes["long"])
    out: dict[str, Any] = {
        "url_scheme": url.partition(":")[0],
        **sizes,
        "ops": len(ops),
        "long_events": len(prefix),
    }
    with asyncio.Runner() as runner:
        ledger = runner.run(_awaited(_open_ledger(url)))
        try:
            out["latency_runs"] = [
                runner.run(_latency_run(ledger, url, sizes["flushes"], seed))
                for seed in range(settings.repeats)
            ]
            out["long_run"] = runner.run(
                _latency_run(ledger, url, sizes["long_flushes"], settings.repeats, prefix)
            )
            contenders: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
                "alone": lambda: _writer_run(ledger, url, ops, 0),
                "followed": lambda: _writer_run(ledger, url, ops, sizes["followers"]),
            }
            out["writer"] = measure(contenders, settings.repeats, runner=runner)  # type: ignore[arg-type]
            out["idle"] = runner.run(_idle_run(ledger, url, sizes["idle"]))
            log_store = ledger._persistence.log_store
            out["poll_seconds"] = log_store.poll_seconds
            # A store with change notification (PostgreSQL's LISTEN) does not poll.
            out["notified"] = type(log_store).wait_for_change is not LogStore.wait_for_change
        finally:
            runner.run(ledger.close())
    return out


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _latency_figure(
    key: str, title: str, runs: list[list[float]], goal: float | None, note: str
) -> Figure:
    """A latency figure: the runs' median p95 in ms (spread: their min-max)."""
    every = list(itertools.chain(*runs))
    p50s = [statistics.median(run) for run in runs]
    p95s = [_percentile(run, 0.95) for run in runs]
    return Figure(
        key,
        title,
        f"≤ {goal * 1e3:.0f} ms" if goal is not None else "context",
        ("le", goal * 1e3) if goal is not None else None,
        statistics.median(p95s) * 1e3,
        min(p95s) * 1e3,
        max(p95s) * 1e3,
        absolute=f"p50 {statistics.median(p50s) * 1e3:.1f} ms, p95 "
        f"{statistics.median(p95s) * 1e3:.1f} ms (all {len(every)} batches: p50 "
        f"{statistics.median(every) * 1e3:.1f} ms, p95 {_percentile(every, 0.95) * 1e3:.1f} ms, "
        f"max {max(every) * 1e3:.1f} ms)",
        note=note,
    )


def _figures(kind: str, raw: dict[str, Any]) -> list[Figure]:
    where = "in the writer's process" if kind == "memory" else "in another process"
    label = LABELS[kind]
    goal = LATENCY_GOALS[kind]
    pause = f"0-{MAX_PAUSE * 1e3:.0f} ms apart; the ratio column is ms"
    runs = raw["latency_runs"]
    latency = _latency_figure(
        f"14-feed-p95-{kind}",
        f"live feed: flush-to-follower latency p95, {label}, follower {where}",
        runs,
        goal,
        f"{len(runs)} runs of {raw['flushes']} flushes of {BATCH_EVENTS} events on a new "
        f"session, {pause} (median of the runs' p95)",
    )
    long = _latency_figure(
        f"14-feed-p95-long-{kind}",
        f"live feed: flush-to-follower latency p95 on a session already holding "
        f"{raw['long_events']:,} events, {label}, follower {where} (joining at its end)",
        [raw["long_run"]],
        goal,
        f"one run of {raw['long_flushes']} flushes of {BATCH_EVENTS} events, {pause}; the "
        "session's first events are workload (a)",
    )
    alone, followed = _seconds(raw, "alone"), _seconds(raw, "followed")
    ratio, low, high = paired(alone, followed)
    events = raw["ops"] - 1
    who = "tasks on the writer's loop" if kind == "memory" else "processes"
    spent = _followers_load(raw)
    writer = Figure(
        f"14-feed-writer-{kind}",
        f"live feed: writer throughput with {raw['followers']} followers ({who}) ÷ with none, "
        f"{label}",
        f"≥ {WRITER_GOAL}x",
        ("ge", WRITER_GOAL),
        ratio,
        low,
        high,
        absolute=f"alone {format_rate(events, alone)}; followed {format_rate(events, followed)}"
        + (f"; the followers used {spent:.2f} CPU-s per second of writing" if spent else ""),
        note=f"workload (a), {events:,} events, a flush every {WRITER_FLUSH_EVERY}; "
        f"{len(alone)} paired runs",
    )
    idle = raw["idle"]
    share = idle["cpu"] / idle["wall"]
    idle_figure = Figure(
        f"14-feed-idle-{kind}",
        f"live feed: CPU of an idle follower ({where}), {label}",
        "context",
        None,
        share,
        absolute=f"{idle['cpu'] * 1e3:.0f} ms CPU in {idle['wall']:.1f} s "
        f"({share * 100:.2f} % of a core); "
        + (
            "woken by notification (a revision read at least once a second)"
            if raw["notified"]
            else f"a revision read every {raw['poll_seconds'] * 1e3:g} ms"
        ),
        note="the ratio column is CPU seconds per wall second (getrusage of the follower's process)",
    )
    return [latency, long, writer, idle_figure]


def _seconds(raw: dict[str, Any], contender: str) -> list[float]:
    return [marks["seconds"] for marks in raw["writer"][contender]]


def _followers_load(raw: dict[str, Any]) -> float | None:
    """The followers' CPU seconds per second of writing (median), when they are processes."""
    followed = raw["writer"]["followed"]
    if not followed or "followers_cpu" not in followed[0]:
        return None
    return float(statistics.median(marks["followers_cpu"] / marks["seconds"] for marks in followed))


def _detail_row(kind: str, raw: dict[str, Any]) -> str:
    every = list(itertools.chain(*raw["latency_runs"]))
    events = raw["ops"] - 1
    negative = sum(value < 0 for value in every)
    writer_cpu = {
        contender: statistics.median(
            marks["cpu"] / marks["seconds"] for marks in raw["writer"][contender]
        )
        for contender in ("alone", "followed")
    }
    spent = _followers_load(raw)
    long = raw["long_run"]
    return (
        f"| {LABELS[kind]} | {len(every)} | {statistics.median(every) * 1e3:.1f} | "
        f"{_percentile(every, 0.95) * 1e3:.1f} | {_percentile(every, 0.99) * 1e3:.1f} | "
        f"{max(every) * 1e3:.1f} | {negative} | {statistics.median(long) * 1e3:.1f} / "
        f"{_percentile(long, 0.95) * 1e3:.1f} | "
        f"{events / statistics.median(_seconds(raw, 'alone')):,.0f} | "
        f"{events / statistics.median(_seconds(raw, 'followed')):,.0f} | "
        f"{writer_cpu['alone']:.2f} / {writer_cpu['followed']:.2f} | "
        f"{'-' if spent is None else f'{spent:.2f}'} | "
        f"{raw['idle']['cpu'] / raw['idle']['wall'] * 100:.2f} % |"
    )


# -- PostgreSQL ----------------------------------------------------------------------------


@contextlib.contextmanager
def _postgres() -> Iterator[str]:
    """Yield a store URL on a throwaway durable server (or ``$SESSIONLEDGER_PG_URL``), in
    a schema of its own, dropped afterwards; ``LookupError`` says why there is none."""
    try:
        from sessionledger_postgres.testing import (
            ServerUnavailable,
            ThrowawayServer,
            drop_schema,
            pg_url,
            with_options,
        )
    except ImportError as error:
        raise LookupError(f"sessionledger-postgres is not installed ({error})") from error
    server = ThrowawayServer(durable=True)
    try:
        try:
            base = pg_url(server)
        except ServerUnavailable as error:
            raise LookupError(f"no PostgreSQL server could be started: {error}") from error
        schema = f"feed_{uuid.uuid4().hex[:8]}"
        try:
            yield with_options(base, schema=schema, pool_max_size=2)
        finally:
            asyncio.run(drop_schema(base, schema))
    finally:
        server.stop()


# -- the group -----------------------------------------------------------------------------


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figure 14 on every backend."""
    from bench.stores import scratch

    raws: dict[str, dict[str, Any]] = {}
    figures: list[Figure] = []
    skipped = ""
    with scratch() as base:
        for kind, url in (
            ("memory", "memory:"),
            ("jsonl", f"jsonl:{base / 'jsonl'}"),
            ("sqlite", f"sqlite:{base / 'feed.db'}"),
        ):
            raws[kind] = _backend(kind, url, settings)
            figures += _figures(kind, raws[kind])
    try:
        with _postgres() as url:
            raws["postgres"] = _backend("postgres", url, settings)
            figures += _figures("postgres", raws["postgres"])
    except LookupError as error:
        skipped = f"skipped: {error}"
        figures += [
            Figure(f"14-feed-{what}-postgres", title, target, None, None, note=skipped)
            for what, title, target in (
                ("p95", "live feed: flush-to-follower latency p95, PostgreSQL", "≤ 50 ms"),
                ("p95-long", "live feed: latency p95 on a long session, PostgreSQL", "≤ 50 ms"),
                ("writer", "live feed: writer throughput followed ÷ alone, PostgreSQL", "≥ 0.9x"),
                ("idle", "live feed: CPU of an idle follower, PostgreSQL", "context"),
            )
        ]
    lines = [
        "Flush-to-follower latency in ms over every batch of every run (negative: the "
        "follower had the batch before the writer's `flush` returned), and p50 / p95 on "
        "the long session; writer throughput "
        "in events/s (median); CPU seconds per wall second of writing, of the writer's "
        "process and of all follower processes together (their catching up after the "
        "writer finished included; on this machine's "
        f"{os.cpu_count()} cores); CPU of an idle follower in % of one core.",
        "",
        "| backend | batches | p50 | p95 | p99 | max | negative | long session p50 / p95 | "
        "writer alone | writer followed | writer CPU-s per s, alone / followed | "
        "followers' CPU-s per s of writing | idle follower CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_detail_row(kind, raw) for kind, raw in raws.items()]
    if skipped:
        lines += ["", f"PostgreSQL: {skipped}"]
    data = {
        kind: {key: value for key, value in raw.items() if key not in ("latency_runs", "long_run")}
        | {
            "latency_ms": [[round(value * 1e3, 2) for value in run] for run in raw["latency_runs"]],
            "long_latency_ms": [round(value * 1e3, 2) for value in raw["long_run"]],
        }
        for kind, raw in raws.items()
    }
    return figures, [Section("Figure 14 detail: the live feed", "\n".join(lines), data)]


if __name__ == "__main__":
    _child(sys.argv[1:])
