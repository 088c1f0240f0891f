"""Figure 11: listing, search and prune over many sessions (SQLite, the default store).

Two SQLite stores are built untimed, of ``listing_sizes`` sessions (1k and 100k), each
session one closed turn: a ``user/message`` and an ``assistant/message`` of a few words
drawn from a fixed vocabulary, plus one rare word per session. Then, side by side:

- ``11-page``: one page of 50 (``list_sessions(limit=50)``, the first page and a page from
  a cursor in the middle) on the large store ÷ the same on the small one. Paging reads
  an index, so it must not grow with the number of sessions.
- ``11-full``: listing every session (``async for``), time per session on the large store ÷
  on the small one: flat.
- ``11-search``: ``search`` of a word one session holds, large ÷ small store; the time of a
  word every 50th session holds (the FTS index returns all of its matches before the
  newest 20 are kept) is given for context.
- ``11-prune``: ``prune(keep_last=…, dry_run=False)`` deleting ``prune_sessions`` sessions of
  a store twice that size, per session ÷ deleting the same sessions one by one with
  ``delete`` on a copy of the store: the plan, the audit records and the revision checks
  are the price of a prune that announces itself.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import Figure, Section, Settings, paired, spread
from bench.stores import scratch
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._vocabulary import assistant_message, user_message
from sessionledger.storage._listing import make_query
from sessionledger_sqlite import SqlitePersistence

__all__ = ["run"]

_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
]
#: One session in this many holds the common word of the search figure.
COMMON_EVERY = 50


def _session_events(index: int, start: int) -> list[dict[str, Any]]:
    words = " ".join(_WORDS[(index * 7 + k) % len(_WORDS)] for k in range(6))
    common = " common" if index % COMMON_EVERY == 0 else ""
    prompt = f"please look at {words} rare{index}{common}"
    reply = assistant_message(f"done with {words}", provider="bench", model="m")
    items = [
        ("turn/start", {"turn": 1}, None),
        ("user/message", user_message(prompt), "append"),
        ("assistant/message", {"turn": 1, "step": 1, "message": reply}, "append"),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}, None),
    ]
    return [
        {
            "type": kind,
            "seq": seq,
            "time": start + seq,
            "data": data,
            **({"surfaceOp": op} if op else {}),
        }
        for seq, (kind, data, op) in enumerate(items)
    ]


async def _build(path: Path, count: int) -> None:
    """Store *count* sessions, untimed and without fsyncs."""
    backend = SqlitePersistence(path, synchronous="NORMAL")
    try:
        for index in range(count):
            start = 1_700_000_000_000 + index * 1_000
            session_id = f"session-{index:07d}"
            await backend.create(
                SessionHeader(id=session_id, created_at=start, title=f"task {index}")
            )
            await backend.append(
                session_id, [SessionEvent.from_json(item) for item in _session_events(index, start)]
            )
            await backend.release(session_id)  # a writer that is done with it
    finally:
        await backend.close()


def _timed(make: Callable[[], Awaitable[Any]], runner: asyncio.Runner) -> float:
    start = time.perf_counter()
    runner.run(make())
    return time.perf_counter() - start


async def _middle_cursor(path: Path, count: int) -> str | None:
    """The cursor of the page that starts half way through the store."""
    backend = SqlitePersistence(path)
    try:
        page = await backend.list_sessions(make_query(limit=max(1, count // 2)))
        return page.next
    finally:
        await backend.close()


async def _paged(path: Path, cursor: str | None, rounds: int, count: int) -> None:
    backend = SqlitePersistence(path)
    try:
        for _ in range(rounds):
            await backend.list_sessions(make_query(limit=50))
            page = await backend.list_sessions(make_query(limit=50, after=cursor))
            assert len(page.sessions) == min(50, count - count // 2)
    finally:
        await backend.close()


async def _listed(path: Path, count: int) -> None:
    backend = SqlitePersistence(path)
    try:
        page = await backend.list_sessions(make_query())
        assert len(page.sessions) == count
    finally:
        await backend.close()


async def _searched(path: Path, text: str, rounds: int, expect: int) -> None:
    backend = SqlitePersistence(path)
    try:
        for _ in range(rounds):
            hits = await backend.search(text)
            assert len(hits) == expect, (text, len(hits))
    finally:
        await backend.close()


async def _pruned(path: Path, keep: int, expect: int) -> None:
    backend = SqlitePersistence(path)
    try:
        plan = await backend.prune(keep_last=keep, dry_run=False)
        assert len(plan.deleted) == expect
    finally:
        await backend.close()


async def _deleted(path: Path, ids: list[str]) -> None:
    backend = SqlitePersistence(path)
    try:
        for session_id in ids:
            await backend.delete(session_id)
    finally:
        await backend.close()


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figure 11."""
    small, large = settings.listing_sizes
    prune = settings.prune_sessions
    rounds = 10
    with scratch() as base, asyncio.Runner() as runner:
        paths = {small: base / "small.db", large: base / "large.db"}
        build: dict[str, float] = {}
        for count, path in paths.items():
            build[str(count)] = _timed(lambda path=path, count=count: _build(path, count), runner)
        cursors = {count: runner.run(_middle_cursor(path, count)) for count, path in paths.items()}
        samples: dict[str, list[float]] = {
            key: []
            for key in ("page-s", "page-l", "full-s", "full-l", "rare-s", "rare-l", "common-l")
        }
        for repetition in range(settings.repeats + 1):
            row = {
                "page-s": lambda: _paged(paths[small], cursors[small], rounds, small),
                "page-l": lambda: _paged(paths[large], cursors[large], rounds, large),
                "full-s": lambda: _listed(paths[small], small),
                "full-l": lambda: _listed(paths[large], large),
                "rare-s": lambda: _searched(paths[small], f"rare{small // 2}", rounds, 1),
                "rare-l": lambda: _searched(paths[large], f"rare{large // 2}", rounds, 1),
                "common-l": lambda: _searched(
                    paths[large], "common", rounds, min(20, (large - 1) // COMMON_EVERY + 1)
                ),
            }
            names = list(row)
            shift = repetition % len(names)
            for name in names[shift:] + names[:shift]:
                seconds = _timed(row[name], runner)
                if repetition:  # the first round warms the caches up
                    samples[name].append(seconds)
        # Prune: a store of twice the sessions to delete, copied for each contender.
        source = base / "prune.db"
        build["prune"] = _timed(lambda: _build(source, 2 * prune), runner)
        ids = [f"session-{index:07d}" for index in range(prune)]  # the oldest: what goes
        prune_s: list[float] = []
        delete_s: list[float] = []
        for repetition in range(max(1, settings.repeats // 2)):
            for name in ("prune", "delete") if repetition % 2 == 0 else ("delete", "prune"):
                copy = base / f"{name}-{repetition}.db"
                shutil.copyfile(source, copy)
                if name == "prune":
                    prune_s.append(_timed(lambda copy=copy: _pruned(copy, prune, prune), runner))
                else:
                    delete_s.append(_timed(lambda copy=copy: _deleted(copy, ids), runner))
                copy.unlink()
    return _report(samples, prune_s, delete_s, build, small, large, prune, rounds)


def _report(
    samples: dict[str, list[float]],
    prune_s: list[float],
    delete_s: list[float],
    build: dict[str, float],
    small: int,
    large: int,
    prune: int,
    rounds: int,
) -> tuple[list[Figure], list[Section]]:
    about = f"SQLite, {small:,} vs {large:,} sessions of 4 events"
    figures = []
    ratio, low, high = paired(samples["page-l"], samples["page-s"])
    per_call = 2 * rounds
    figures.append(
        Figure(
            "11-page",
            f"one page of 50 on {large:,} sessions ÷ on {small:,}",
            "≤ 2x",
            ("le", 2.0),
            ratio,
            low,
            high,
            f"{spread(samples['page-l'])[0] / per_call * 1e3:.2f} ms vs "
            f"{spread(samples['page-s'])[0] / per_call * 1e3:.2f} ms per page",
            f"{about}; the first page and one from a cursor half way, {rounds} rounds",
        )
    )
    per_l = [value / large for value in samples["full-l"]]
    per_s = [value / small for value in samples["full-s"]]
    ratio, low, high = paired(per_l, per_s)
    figures.append(
        Figure(
            "11-full",
            f"full listing, time per session, {large:,} ÷ {small:,} sessions",
            "≤ 1.5x",
            ("le", 1.5),
            ratio,
            low,
            high,
            f"{spread(per_l)[0] * 1e6:.1f} µs vs {spread(per_s)[0] * 1e6:.1f} µs per session; "
            f"{spread(samples['full-l'])[0]:.2f} s for {large:,}",
            about,
        )
    )
    ratio, low, high = paired(samples["rare-l"], samples["rare-s"])
    figures.append(
        Figure(
            "11-search",
            f"search of a word one session holds, {2 * large:,} ÷ {2 * small:,} messages",
            "≤ 3x",
            ("le", 3.0),
            ratio,
            low,
            high,
            f"{spread(samples['rare-l'])[0] / rounds * 1e3:.2f} ms vs "
            f"{spread(samples['rare-s'])[0] / rounds * 1e3:.2f} ms; a word in every "
            f"{COMMON_EVERY}th session ({large // COMMON_EVERY:,} hits, newest 20 kept): "
            f"{spread(samples['common-l'])[0] / rounds * 1e3:.1f} ms",
            f"{about}; FTS5 index",
        )
    )
    ratio, low, high = paired(prune_s, delete_s)
    figures.append(
        Figure(
            "11-prune",
            f"prune of {prune:,} sessions ÷ deleting them one by one",
            "≤ 1.5x",
            ("le", 1.5),
            ratio,
            low,
            high,
            f"{spread(prune_s)[0]:.2f} s ({spread(prune_s)[0] / prune * 1e3:.2f} ms per "
            f"session); delete {spread(delete_s)[0]:.2f} s",
            f"a store of {2 * prune:,} sessions, keep_last={prune:,}; plan, audit records and "
            "revision checks included",
        )
    )
    lines = [
        "| measure | median (min-max) |",
        "|---|---|",
    ]
    for name, values in samples.items():
        median, low, high = spread(values)
        lines.append(f"| {name} | {median * 1e3:.1f} ms ({low * 1e3:.1f}-{high * 1e3:.1f}) |")
    for name, values in (("prune", prune_s), ("delete", delete_s)):
        median, low, high = spread(values)
        lines.append(f"| {name} {prune:,} | {median:.2f} s ({low:.2f}-{high:.2f}) |")
    lines.append(f"| building the stores (untimed in the figures) | {build} s |")
    data = {"samples": samples, "prune": prune_s, "delete": delete_s, "build": build}
    return figures, [Section("Figure 11 detail: listing, search, prune", "\n".join(lines), data)]
