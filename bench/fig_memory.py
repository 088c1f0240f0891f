"""Figure 12: memory per event of a live session, and peak RSS of a cold load, at 10k /
100k / 1M events of workload (a).

- resident: a fresh child process appends workload (a) to a ``Session`` through a
  ``Ledger`` without a store, then drops the workload's own objects; what ``tracemalloc``
  still counts is what the session holds (its events, the texts it keeps, its surface
  and derived views), divided by the number of events;
- peak RSS: a fresh child process resumes the session from a JSONL store (its
  ``VmHWM``), next to its RSS right before the load;
- a full collection: in that process, ``gc.collect()`` with the resumed session live
  against the same once it is gone (best of three each): what a large session costs
  every full collection of the process that holds it.

Each size is one child process per measurement (the numbers are deterministic up to the
allocator, so they are not repeated).
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.harness import Figure, Section, Settings, format_bytes
from bench.stores import SESSION_ID, append_ops, scratch, write_session
from bench.workloads import agent_session

__all__ = ["run"]

_RESIDENT = "--resident-child"
_LOAD = "--load-child"

#: Targets (docs: bench/ANALYSIS.md, figure 12).
RESIDENT_GOAL = 150.0  # bytes per event of a chunk-heavy live session
PEAK_GOAL = 300 * 1024 * 1024  # peak RSS of a cold load of 1M events


def _resident_child(size: int) -> None:
    """Report the bytes a live session of *size* events keeps, per event."""
    import tracemalloc

    from sessionledger import Ledger

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ops = agent_session(size)
    ledger = Ledger(load_entrypoints=False)
    session = ledger.create("memory")
    append_ops(session, ops)
    events = session.seq
    del ops
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(json.dumps({"events": events, "bytes": kept}))


def _load_child(root: str) -> None:
    """Report the RSS before and the peak RSS of one cold load from a JSONL store."""
    import resource

    from sessionledger import Ledger
    from sessionledger_jsonl import JsonlPersistence

    def rss_now() -> int:
        with open("/proc/self/statm") as file:
            return int(file.read().split()[1]) * resource.getpagesize()

    async def load() -> tuple[int, float]:
        persistence = JsonlPersistence(Path(root))
        await persistence.list()
        ledger = Ledger(persistence, load_entrypoints=False)
        session = await ledger.resume(SESSION_ID)
        events = session.seq
        live = _full_collection()
        await ledger.close()
        return events, live

    before = rss_now()
    events, live = asyncio.run(load())
    peak = _peak_rss()
    idle = _full_collection()
    print(
        json.dumps(
            {
                "events": events,
                "rss_before": before,
                "peak": peak,
                "collect_live_s": live,
                "collect_idle_s": idle,
            }
        )
    )


def _full_collection() -> float:
    """The best of three full collections, in seconds."""
    import time

    times = []
    for _ in range(3):
        start = time.perf_counter()
        gc.collect()
        times.append(time.perf_counter() - start)
    return min(times)


def _peak_rss() -> int:
    """This process's peak RSS (``VmHWM``). Not ``getrusage``: on Linux its ``ru_maxrss``
    keeps the high-water mark of the process that forked this one, so a child of a
    large benchmark process would report the parent's size."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.fig_memory", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=1800,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _sizes(settings: Settings) -> list[int]:
    return [size for size in settings.scaling_sizes if size >= 10_000] or [
        max(settings.scaling_sizes)
    ]


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figure 12."""
    rows: dict[int, dict[str, Any]] = {}
    with scratch() as base, asyncio.Runner() as runner:
        for size in _sizes(settings):
            root = base / f"jsonl-{size}"
            runner.run(write_session("jsonl", root, agent_session(size), settings.flush_every))
            (stored,) = root.rglob("session.jsonl")
            rows[size] = {
                "resident": _child(_RESIDENT, str(size)),
                "load": _child(_LOAD, str(root)),
                "file_bytes": stored.stat().st_size,
            }
    return _report(rows)


def _report(rows: dict[int, dict[str, Any]]) -> tuple[list[Figure], list[Section]]:
    top = max(rows)
    resident = rows[top]["resident"]
    per_event = resident["bytes"] / resident["events"]
    load = rows[top]["load"]
    figures = [
        Figure(
            "12-resident",
            f"memory a live session keeps per event, workload (a), {resident['events']:,} events",
            f"≤ {RESIDENT_GOAL:.0f} B/event",
            ("le", RESIDENT_GOAL),
            per_event,
            absolute=f"{format_bytes(resident['bytes'])} for {resident['events']:,} events",
            note="tracemalloc in a fresh process, after the workload's own objects are gone; "
            "the ratio column is bytes per event",
        ),
        Figure(
            "12-rss",
            f"peak RSS of a cold load of {load['events']:,} events (JSONL), MiB",
            f"≤ {PEAK_GOAL / 2**20:.0f} MiB",
            ("le", PEAK_GOAL / 2**20),
            load["peak"] / 2**20,
            absolute=f"peak {format_bytes(load['peak'])}; before the load "
            f"{format_bytes(load['rss_before'])}; file {format_bytes(rows[top]['file_bytes'])}",
            note="fresh child process, VmHWM; the ratio column is MiB",
        ),
    ]
    lines = [
        "| events | kept by a live session | per event | JSONL file | RSS before the load | "
        "peak RSS of the cold load | (peak - before) per event | full collection, session "
        "live / gone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size in sorted(rows):
        row = rows[size]
        kept, load = row["resident"], row["load"]
        grown = load["peak"] - load["rss_before"]
        lines.append(
            f"| {kept['events']:,} | {format_bytes(kept['bytes'])} | "
            f"{kept['bytes'] / kept['events']:,.0f} B | {format_bytes(row['file_bytes'])} | "
            f"{format_bytes(load['rss_before'])} | {format_bytes(load['peak'])} | "
            f"{grown / load['events']:,.0f} B | {_collection(load)} |"
        )
    lines.append(
        "\nA full collection: `gc.collect()` in the process of the cold load, with the "
        "resumed session live and once it is gone (best of three each)."
    )
    data = {str(size): row for size, row in rows.items()}
    return figures, [Section("Figure 12 detail: memory", "\n".join(lines), data)]


def _collection(load: dict[str, Any]) -> str:
    if "collect_live_s" not in load:  # a report re-rendered from an older run
        return "-"
    return f"{load['collect_live_s'] * 1e3:.1f} ms / {load['collect_idle_s'] * 1e3:.1f} ms"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == _RESIDENT:
        _resident_child(int(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == _LOAD:
        _load_child(sys.argv[2])
