"""Figures 1 and 2: the append hot path and ``derive_messages`` after one append.

1. ``Session.append`` of workload (a) through a ``Ledger`` (no store, so nothing but the
   append pipeline: snapshot, checks, surface plan, hooks, commit) next to the raw floor
   ``list.append(orjson.loads(orjson.dumps(data)))`` on the same payloads; without and
   with the invariants plugin, and the two against each other.
2. ``derive_messages()`` right after one append, on a 1k-event and a 100k-event log with
   the same 1,000-message surface (the rest chunks); the goal is a cost ratio ≤ 1.3.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import orjson

from bench.harness import Figure, Settings, format_rate, format_seconds, measure, paired
from bench.workloads import Op, agent_session
from sessionledger import Ledger, Session, assistant_message, user_message
from sessionledger_invariants import InvariantsPlugin

__all__ = ["run"]


def _raw(ops: list[Op]) -> float:
    sink: list[Any] = []
    loads, dumps, push = orjson.loads, orjson.dumps, sink.append
    start = time.perf_counter()
    for op in ops:
        push(loads(dumps(op.data)))
    return time.perf_counter() - start


def _ledger(ops: list[Op], plugins: list[object]) -> float:
    ledger = Ledger(plugins=plugins, load_entrypoints=False)
    session = ledger.create("bench")
    append = session.append
    start = time.perf_counter()
    for op in ops:
        append(op.type, op.data, surface_op=op.surface_op, source_event_seqs=op.sources)
    return time.perf_counter() - start


def append_figures(settings: Settings) -> list[Figure]:
    """Figure 1: append ÷ raw floor, without and with invariants; invariants on ÷ off."""
    ops = agent_session(settings.events)
    n = len(ops)
    results = measure(
        {
            "raw": lambda: _raw(ops),
            "ledger": lambda: _ledger(ops, []),
            "invariants": lambda: _ledger(ops, [InvariantsPlugin()]),
        },
        settings.repeats,
    )
    raw, plain, checked = results["raw"], results["ledger"], results["invariants"]
    floor = f"raw {format_rate(n, raw)}"
    figures = []
    for key, title, samples in (
        ("1a", "append hot path ÷ raw `loads(dumps(data))` + `list.append`", plain),
        ("1b", "append hot path with invariants ÷ the same raw floor", checked),
    ):
        ratio, low, high = paired(raw, samples)
        figures.append(
            Figure(
                key,
                title,
                "≥ 0.5x",
                ("ge", 0.5),
                ratio,
                low,
                high,
                f"ours {format_rate(n, samples)}; {floor}",
                f"workload (a), {n:,} events, Ledger without a store",
            )
        )
    ratio, low, high = paired(plain, checked)
    figures.append(
        Figure(
            "1c",
            "append throughput, invariants on ÷ off",
            "≥ 0.7x",
            ("ge", 0.7),
            ratio,
            low,
            high,
            f"on {format_rate(n, checked)}; off {format_rate(n, plain)}",
            f"workload (a), {n:,} events",
        )
    )
    return figures


# -- figure 2 ----------------------------------------------------------------------------

_CHUNK = {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": " tok"}}


def build_session(total_events: int, messages: int = 1_000) -> Session:
    """Return a detached session with *messages* surface messages and *total_events*
    events, the rest chunks spread evenly between the messages."""
    session = Session.create("derive")
    per_message = max(0, (total_events - messages) // messages)
    append = session.append
    for index in range(messages):
        for _ in range(per_message):
            append("assistant/chunk", _CHUNK)
        if index % 2 == 0:
            append(
                "user/message",
                user_message(f"question {index}", id=f"q{index}"),
                surface_op="append",
            )
        else:
            message = assistant_message(f"answer {index}", provider="p", model="m", id=f"a{index}")
            append(
                "assistant/message", {"turn": 1, "step": 1, "message": message}, surface_op="append"
            )
    while session.seq < total_events:
        append("assistant/chunk", _CHUNK)
    return session


def _derive_after_append(total_events: int, samples: int) -> float:
    session = build_session(total_events)
    session.derive_messages()
    durations = []
    # Surface messages appended here grow both sessions alike; the ids stay unique.
    for index in range(samples):
        session.append(
            "user/message", user_message("more", id=f"more-{index}"), surface_op="append"
        )
        start = time.perf_counter()
        session.derive_messages()
        durations.append(time.perf_counter() - start)
    return statistics.median(durations)


def derive_figure(settings: Settings) -> Figure:
    """Figure 2: ``derive_messages`` after one append, 100k-event ÷ 1k-event log."""
    large = settings.derive_large
    results = measure(
        {
            "small": lambda: _derive_after_append(1_000, settings.derive_samples),
            "large": lambda: _derive_after_append(large, settings.derive_samples),
        },
        settings.repeats,
        warmup=False,
    )
    ratio, low, high = paired(results["large"], results["small"])
    return Figure(
        "2",
        f"`derive_messages` after one append, {large // 1000}k-event ÷ 1k-event log",
        "≤ 1.3",
        ("le", 1.3),
        ratio,
        low,
        high,
        f"1k log {format_seconds(results['small'])}; {large // 1000}k log "
        f"{format_seconds(results['large'])} per call",
        f"surface of 1,000 messages (+ those appended while sampling); median of "
        f"{settings.derive_samples} calls per repetition",
    )


def run(settings: Settings) -> tuple[list[Figure], list[Any]]:
    """Run figures 1 and 2."""
    return [*append_figures(settings), derive_figure(settings)], []
