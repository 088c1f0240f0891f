"""Figure 7: peers on workload (b), a 600-message chat (~0.5 KB per message, no chunks).

All contenders write to a fresh SQLite file in WAL mode with ``synchronous=FULL`` (read back
and printed), on the same machine, in the same run, interleaved:

- ``sessionledger`` SQLite, append + ``await ledger.flush`` per message;
- ``sessionledger`` SQLite, batched: a flush per exchange (user message + reply);
- the floor: raw aiosqlite, the same envelopes as rows of the backend's ``events`` layout,
  ``INSERT`` + ``COMMIT`` per message (figure 4's floor, on this workload);
- ``openai-agents`` ``SQLiteSession.add_items`` per message, and per exchange;
- ``langgraph-checkpoint-sqlite`` ``AsyncSqliteSaver.aput``: one checkpoint per message
  holding the growing message list (LangChain messages, the saver's own serializer), which
  is what a chat graph's checkpointer stores; called directly, so no graph overhead counts;
- for context, a real LangGraph ``StateGraph`` chat (``MessagesState``, one node answering)
  with the same saver: what the graph really writes (more than one checkpoint per message,
  plus pending writes).

Time per message is the cumulative time to each mark (100/300/600) divided by the mark;
file size is measured in a separate untimed pass that writes exactly the mark's messages
and closes the store (SQLite file plus any WAL left).
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.util
import itertools
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.harness import Figure, Section, Settings, format_bytes, measure, paired
from bench.stores import (
    RAW_INSERT,
    SESSION_ID,
    disk_size,
    envelopes,
    open_raw_sqlite,
    raw_row,
    ready_to_write,
    scratch,
)
from bench.workloads import Op, chat_ops, chat_texts
from sessionledger import Ledger
from sessionledger_sqlite import SqlitePersistence

__all__ = ["available", "run"]

Marks = dict[str, float]
Writer = Callable[[Path, Sequence[int]], Awaitable[Marks]]
_counter = itertools.count()


def available() -> str | None:
    """Return why the peers cannot run (a missing package), or None when they can."""
    # Found, not imported: importing them costs seconds and leaves a large heap behind.
    for module in ("agents", "langchain_core", "langgraph.graph", "langgraph.checkpoint.sqlite"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            return f"peers not installed (no module {module!r}); run `nox -s bench`"
    return None


class _Clock:
    """Cumulative time to each mark."""

    def __init__(self, marks: Sequence[int]) -> None:
        self.marks = set(marks)
        self.out: Marks = {}
        self.start = time.perf_counter()

    def tick(self, done: int) -> None:
        if done in self.marks:
            self.out[str(done)] = time.perf_counter() - self.start


# -- sessionledger --------------------------------------------------------------------------


def _sessionledger(ops: list[Op], per: int) -> Writer:
    async def write(path: Path, marks: Sequence[int]) -> Marks:
        persistence = SqlitePersistence(path)
        await ready_to_write(persistence)  # the file, its schema and connection: untimed
        ledger = Ledger(persistence, load_entrypoints=False)
        session = ledger.create("chat")
        append, flush = session.append, ledger.flush
        last = max(marks)
        clock = _Clock(marks)
        for done, op in enumerate(ops[:last], 1):
            append(op.type, op.data, surface_op=op.surface_op)
            if done % per == 0 or done == last:
                await flush(session)
            clock.tick(done)
        await ledger.close()
        return clock.out

    return write


def _raw_floor(ops: list[Op]) -> Writer:
    items = envelopes(ops)

    async def write(path: Path, marks: Sequence[int]) -> Marks:
        db = await open_raw_sqlite(path)  # WAL, synchronous=FULL; created untimed
        try:
            last = max(marks)
            clock = _Clock(marks)
            for done, item in enumerate(items[:last], 1):
                await db.execute(RAW_INSERT, raw_row(SESSION_ID, item))
                await db.commit()
                clock.tick(done)
        finally:
            await db.close()
        return clock.out

    return write


# -- openai-agents ----------------------------------------------------------------------------


def _openai_agents(texts: list[str], per: int) -> Writer:
    items = [
        {"role": "user" if index % 2 == 0 else "assistant", "content": text}
        for index, text in enumerate(texts)
    ]

    async def write(path: Path, marks: Sequence[int]) -> Marks:
        from agents import SQLiteSession

        session = SQLiteSession("chat", str(path))  # creates the schema untimed
        try:
            last = max(marks)
            clock = _Clock(marks)
            for start in range(0, last, per):
                await session.add_items(items[start : min(start + per, last)])
                clock.tick(min(start + per, last))
        finally:
            session.close()
        return clock.out

    return write


# -- LangGraph --------------------------------------------------------------------------------


def _langchain_messages(texts: list[str]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    return [
        HumanMessage(content=text, id=f"m{index}")
        if index % 2 == 0
        else AIMessage(content=text, id=f"m{index}")
        for index, text in enumerate(texts)
    ]


def _langgraph_saver(texts: list[str]) -> Writer:
    messages = _langchain_messages(texts)

    async def write(path: Path, marks: Sequence[int]) -> Marks:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.base.id import uuid6
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            await saver.setup()
            config: Any = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
            checkpoint: Any = empty_checkpoint()
            version: Any = None
            last = max(marks)
            clock = _Clock(marks)
            for done in range(1, last + 1):
                # The state after each message: the whole list so far (add_messages returns
                # a new list each step), a new channel version, a fresh checkpoint id.
                version = saver.get_next_version(version, None)
                checkpoint = {
                    **checkpoint,
                    "id": str(uuid6(clock_seq=done)),
                    "ts": datetime.datetime.now(datetime.UTC).isoformat(),
                    "channel_values": {"messages": messages[:done]},
                    "channel_versions": {"messages": version},
                    "versions_seen": {"model": {"messages": version}},
                    "updated_channels": ["messages"],
                }
                metadata: Any = {"source": "loop", "step": done, "parents": {}}
                config = await saver.aput(config, checkpoint, metadata, {"messages": version})
                clock.tick(done)
        return clock.out

    return write


def _langgraph_graph(texts: list[str]) -> Writer:
    messages = _langchain_messages(texts)

    async def write(path: Path, marks: Sequence[int]) -> Marks:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph

        replies = iter(messages[1::2])

        def model(state: Any) -> dict[str, Any]:
            return {"messages": [next(replies)]}

        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            await saver.setup()
            graph = StateGraph(MessagesState)
            graph.add_node("model", model)
            graph.add_edge(START, "model")
            graph.add_edge("model", END)
            app = graph.compile(checkpointer=saver)
            config: Any = {"configurable": {"thread_id": "chat"}}
            last = max(marks)
            clock = _Clock(marks)
            for done in range(2, last + 1, 2):
                await app.ainvoke({"messages": [messages[done - 2]]}, config)
                clock.tick(done)
        return clock.out

    return write


# -- durability settings, read back -----------------------------------------------------------


async def _pragmas(root: Path) -> dict[str, str]:
    """Read back journal mode and synchronous level each contender's connection uses."""
    from agents import SQLiteSession
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    out = {}
    persistence = SqlitePersistence(root / "pragma-sl.db")
    ledger = Ledger(persistence, load_entrypoints=False)
    # One durable write opens the store's writing connection (a read of a store with no
    # database file opens none).
    session = ledger.create("pragma")
    session.append("turn/start", {"turn": 1})
    await ledger.flush(session)
    db = persistence.log_store.connection  # the store's own connection
    assert db is not None
    mode = (await db.execute_fetchall("PRAGMA journal_mode"))[0][0]  # type: ignore[index]
    level = (await db.execute_fetchall("PRAGMA synchronous"))[0][0]  # type: ignore[index]
    out["sessionledger"] = f"{mode}, synchronous={names[level]}"
    await ledger.close()
    session = SQLiteSession("chat", str(root / "pragma-oa.db"))
    conn: sqlite3.Connection = session._get_connection()
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    level = conn.execute("PRAGMA synchronous").fetchone()[0]
    out["openai-agents"] = f"{mode}, synchronous={names[level]}"
    session.close()
    async with AsyncSqliteSaver.from_conn_string(str(root / "pragma-lg.db")) as saver:
        await saver.setup()
        mode = (await saver.conn.execute_fetchall("PRAGMA journal_mode"))[0][0]  # type: ignore[index]
        level = (await saver.conn.execute_fetchall("PRAGMA synchronous"))[0][0]  # type: ignore[index]
        out["langgraph"] = f"{mode}, synchronous={names[level]}"
    return out


# -- the figure -------------------------------------------------------------------------------

_LABELS = {
    "sl": "sessionledger SQLite, flush per message",
    "sl-batch": "sessionledger SQLite, flush per exchange",
    "raw": "raw aiosqlite INSERT + COMMIT per message",
    "oa": "openai-agents SQLiteSession, add_items per message",
    "oa-batch": "openai-agents SQLiteSession, add_items per exchange",
    "lg": "LangGraph AsyncSqliteSaver, a checkpoint per message",
    "lg-graph": "LangGraph StateGraph chat (context: the real graph)",
}


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figure 7 (or report the peers missing)."""
    reason = available()
    if reason is not None:
        return [Figure("7", "peers on workload (b)", "≥ 10x / ≥ 100x", None, None, note=reason)], []
    texts = chat_texts(settings.chat_messages)
    ops = chat_ops(texts)
    marks = settings.chat_marks
    writers: dict[str, Writer] = {
        "sl": _sessionledger(ops, 1),
        "sl-batch": _sessionledger(ops, 2),
        "raw": _raw_floor(ops),
        "oa": _openai_agents(texts, 1),
        "oa-batch": _openai_agents(texts, 2),
        "lg": _langgraph_saver(texts),
        "lg-graph": _langgraph_graph(texts),
    }
    with scratch() as root, asyncio.Runner() as runner:

        def contender(name: str) -> Callable[[], Awaitable[Marks]]:
            return lambda: writers[name](root / f"{name}-{next(_counter)}.db", marks)

        results = measure(
            {name: contender(name) for name in writers}, settings.repeats, runner=runner
        )
        sizes: dict[str, dict[int, int]] = {}
        for name, write in writers.items():
            for mark in marks:
                path = root / f"size-{name}-{mark}.db"
                runner.run(_awaited(write(path, (mark,))))
                sizes.setdefault(name, {})[mark] = disk_size(path)
        pragmas = runner.run(_pragmas(root))
    return _report(results, sizes, pragmas, marks, len(texts), sum(map(len, texts)))


async def _awaited(awaitable: Awaitable[Marks]) -> Marks:
    return await awaitable


def _per_message(results: dict[str, list[Marks]], name: str, mark: int) -> list[float]:
    return [run[str(mark)] / mark for run in results[name]]


def _report(
    results: dict[str, list[Marks]],
    sizes: dict[str, dict[int, int]],
    pragmas: dict[str, str],
    marks: Sequence[int],
    count: int,
    text_bytes: int,
) -> tuple[list[Figure], list[Section]]:
    last = max(marks)
    figures = []
    # LangGraph writes a checkpoint per message either way; openai-agents can batch like
    # sessionledger, so its batched form is compared with sessionledger's. At equal
    # durability, a flush per message is to cost no more than the SDK's add_items and no
    # more than 1.25 times the raw floor's insert + commit.
    pairs = (
        ("sl", "lg", 10.0),
        ("sl-batch", "lg", 10.0),
        ("sl", "oa", 1.0),
        ("sl-batch", "oa-batch", None),
        ("sl", "raw", 0.8),
    )
    for ours, peer, goal in pairs:
        ratio, low, high = paired(
            _per_message(results, peer, last), _per_message(results, ours, last)
        )
        mine = _per_message(results, ours, last)
        theirs = _per_message(results, peer, last)
        figures.append(
            Figure(
                f"7-speed-{peer}-{ours}",
                f"time per message at {last}: {_LABELS[peer]} ÷ {_LABELS[ours]}",
                f"≥ {goal:g}x" if goal else "context",
                ("ge", goal) if goal else None,
                ratio,
                low,
                high,
                f"{_LABELS[ours].split(',')[0]}: {_ms(mine)} ms; peer {_ms(theirs)} ms per message",
                "same messages, same durability (see detail)",
            )
        )
    for peer, goal in (("lg", 100.0), ("oa", None)):
        ratio = sizes[peer][last] / sizes["sl"][last]
        figures.append(
            Figure(
                f"7-size-{peer}",
                f"file size at {last} messages: {_LABELS[peer].split(',')[0]} ÷ sessionledger",
                "≥ 100x" if goal else "context",
                ("ge", goal) if goal else None,
                ratio,
                None,
                None,
                f"{format_bytes(sizes[peer][last])} vs {format_bytes(sizes['sl'][last])}",
                "deterministic sizes, so no spread",
            )
        )
    header = "| contender | " + " | ".join(f"ms/message at {m}" for m in marks)
    header += " | " + " | ".join(f"size at {m}" for m in marks) + " |"
    lines = [header, "|---" * (1 + 2 * len(marks)) + "|"]
    for name, label in _LABELS.items():
        cells = [_ms(_per_message(results, name, mark)) for mark in marks]
        cells += [format_bytes(sizes[name][mark]) for mark in marks]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"{count} messages, {text_bytes / count:.0f} characters of text each on average. "
        "Durability as read back from each contender's connection: "
        + "; ".join(f"{name}: {value}" for name, value in pragmas.items())
        + ". The LangGraph graph row runs the real graph with the same saver and is "
        "context only: per exchange it writes several checkpoints plus pending writes.",
    ]
    data = {
        "ms_per_message": {
            name: {str(m): statistics.median(_per_message(results, name, m)) * 1e3 for m in marks}
            for name in _LABELS
        },
        "bytes": {
            name: {str(m): size for m, size in by_mark.items()} for name, by_mark in sizes.items()
        },
        "pragmas": pragmas,
    }
    return figures, [Section("Figure 7 detail: peers on workload (b)", "\n".join(lines), data)]


def _ms(values: list[float]) -> str:
    return (
        f"{statistics.median(values) * 1e3:.2f} ({min(values) * 1e3:.2f}-{max(values) * 1e3:.2f})"
    )
