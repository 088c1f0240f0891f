"""Core hot paths next to their raw floors, measured side by side in one run.

- append: ``Session.append("assistant/chunk", …)`` on a ledger session vs the raw floor
  ``list.append(orjson.loads(orjson.dumps(data)))`` on the same payloads (target ≥ 0.5x).
- derive: ``derive_messages()`` right after one append, on a 1k-event and a 100k-event
  session with the same 1,000-message surface (the rest chunks); cost ratio ≤ 1.3.

Run: ``python bench/bench_core.py`` (or ``nox -s bench``). Prints a table; asserts nothing.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from sessionledger import Ledger, Session, assistant_message, user_message

WORDS = [
    "The",
    " file",
    " declares",
    " a",
    " package",
    " named",
    " demo",
    ",",
    " version",
    " 1",
    ".",
    "0",
]


def chunk_payloads(count: int) -> list[dict[str, Any]]:
    """Token-sized text deltas, as a provider streams them."""
    return [
        {
            "turn": 1,
            "step": 1,
            "chunk": {"type": "text-delta", "index": 0, "text": WORDS[index % len(WORDS)]},
        }
        for index in range(count)
    ]


def best_of(repeats: int, run: Callable[[], float]) -> tuple[float, float, float]:
    """Return (median, min, max) of *repeats* timings (seconds)."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        samples.append(run())
    return statistics.median(samples), min(samples), max(samples)


def bench_append(count: int = 100_000, repeats: int = 7) -> dict[str, Any]:
    payloads = chunk_payloads(count)

    def raw() -> float:
        sink: list[Any] = []
        loads, dumps, push = orjson.loads, orjson.dumps, sink.append
        start = time.perf_counter()
        for data in payloads:
            push(loads(dumps(data)))
        return time.perf_counter() - start

    def ours() -> float:
        ledger = Ledger(load_entrypoints=False)
        session = ledger.create("bench")
        append = session.append
        start = time.perf_counter()
        for data in payloads:
            append("assistant/chunk", data)
        return time.perf_counter() - start

    def detached() -> float:
        session = Session.create("bench")
        append = session.append
        start = time.perf_counter()
        for data in payloads:
            append("assistant/chunk", data)
        return time.perf_counter() - start

    results = {}
    # interleave the contenders so machine noise hits them alike
    raw_t, ours_t, detached_t = [], [], []
    for _ in range(repeats):
        raw_t.append(best_of(1, raw)[0])
        ours_t.append(best_of(1, ours)[0])
        detached_t.append(best_of(1, detached)[0])
    results["raw_floor_events_per_s"] = count / statistics.median(raw_t)
    results["ledger_append_events_per_s"] = count / statistics.median(ours_t)
    results["detached_append_events_per_s"] = count / statistics.median(detached_t)
    results["ledger_ratio"] = statistics.median(raw_t) / statistics.median(ours_t)
    results["detached_ratio"] = statistics.median(raw_t) / statistics.median(detached_t)
    return results


def build_session(total_events: int, messages: int = 1_000) -> Session:
    """A session whose surface holds *messages* messages and whose log has *total_events*."""
    session = Session.create("derive")
    chunks_per_message = max(0, (total_events - messages) // messages)
    payload = chunk_payloads(1)[0]
    for index in range(messages):
        for _ in range(chunks_per_message):
            session.append("assistant/chunk", payload)
        if index % 2 == 0:
            session.append("user/message", user_message(f"question {index}"), surface_op="append")
        else:
            session.append(
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": assistant_message(f"answer {index}", provider="p", model="m"),
                },
                surface_op="append",
            )
    while session.seq < total_events:
        session.append("assistant/chunk", payload)
    return session


def bench_derive(repeats: int = 200) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, size in (("1k", 1_000), ("100k", 100_000)):
        session = build_session(size)
        session.derive_messages()
        samples = []
        for index in range(repeats):
            session.append("user/message", user_message(f"more {index}"), surface_op="append")
            start = time.perf_counter()
            session.derive_messages()
            samples.append(time.perf_counter() - start)
        out[f"derive_after_append_{label}_us"] = statistics.median(samples) * 1e6
        out[f"events_{label}"] = session.seq
    out["derive_ratio_100k_over_1k"] = (
        out["derive_after_append_100k_us"] / out["derive_after_append_1k_us"]
    )
    return out


def main() -> None:
    append = bench_append()
    derive = bench_derive()
    print("## core hot paths (one run, side by side)")
    print(
        f"raw floor loads(dumps(data)) + list.append : {append['raw_floor_events_per_s']:>12,.0f} events/s"
    )
    print(
        f"Session.append via Ledger (no plugins)     : {append['ledger_append_events_per_s']:>12,.0f} events/s  ratio {append['ledger_ratio']:.2f}x  (target >= 0.5x)"
    )
    print(
        f"Session.append detached                    : {append['detached_append_events_per_s']:>12,.0f} events/s  ratio {append['detached_ratio']:.2f}x"
    )
    print(
        f"derive_messages after one append, 1k log   : {derive['derive_after_append_1k_us']:>10.1f} us"
    )
    print(
        f"derive_messages after one append, 100k log : {derive['derive_after_append_100k_us']:>10.1f} us"
    )
    print(
        f"derive cost ratio 100k / 1k                : {derive['derive_ratio_100k_over_1k']:>10.2f}   (target <= 1.3)"
    )


if __name__ == "__main__":
    main()
