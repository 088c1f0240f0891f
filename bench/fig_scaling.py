"""Figure 8: cost per event at 1k / 10k / 100k / 1M events of workload (a).

- append: ``Session.append`` through a ``Ledger`` without a store, per event;
- load: cold ``resume`` from a JSONL store, per event, next to the raw parse of the same
  file (read it, split its lines, ``orjson.loads`` each, with the collector paused as the
  library pauses it).

Linear growth shows as a flat cost per event: the figures are the per-event cost at the
largest size ÷ at 100k and ÷ at 10k (≈ 1.0 when linear; with the collector on, the 10k
one says whether the collector's work grows with the log). Sizes up to 100k are
repeated; 1M three times, without a warm-up (it is the long pole of the suite). The 10k
one is a ratio of two sizes, so it is timed side by side: each repetition at the largest
size also appends the 10k workload several times over, and the figure is the median of
the paired ratios (the sizes' own medians are timed minutes apart, and on a shared machine
the two can land in different phases of its load). Memory (resident per event, peak RSS of
a cold load) is figure 12.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson

from bench.harness import (
    Contender,
    Figure,
    Section,
    Settings,
    format_bytes,
    gc_paused,
    measure,
    paired,
    spread,
)
from bench.stores import SESSION_ID, append_ops, scratch, write_session
from bench.workloads import Op, agent_session
from sessionledger import Ledger
from sessionledger_jsonl import JsonlPersistence

__all__ = ["run"]


def _append(ops: list[Op]) -> float:
    ledger = Ledger(load_entrypoints=False)
    session = ledger.create("scaling")
    start = time.perf_counter()
    append_ops(session, ops)
    return time.perf_counter() - start


#: How many load and raw-parse pairs are timed at the largest size (its appends: 3).
LOAD_PAIRS = 9

#: How many times the small workload is appended per paired sample (about as long as a
#: tenth of one append at the largest size: long enough to smooth a single hiccup).
SMALL_TIMES = 20


def _append_small(ops: list[Op]) -> float:
    """The small workload appended ``SMALL_TIMES`` times, each on a fresh session: the
    seconds one append of it takes, on average."""
    return sum(_append(ops) for _ in range(SMALL_TIMES)) / SMALL_TIMES


def _append_without_gc(ops: list[Op]) -> float:
    """The same, with the cyclic collector off: the library's own cost per event."""
    with gc_paused():
        return _append(ops)


async def _load(root: Path) -> float:
    persistence = JsonlPersistence(root)
    await persistence.list()
    ledger = Ledger(persistence, load_entrypoints=False)
    start = time.perf_counter()
    await ledger.resume(SESSION_ID)
    elapsed = time.perf_counter() - start
    await ledger.close()
    return elapsed


def _raw_parse(path: Path) -> float:
    """The floor: read the stored file, split it into lines and parse each."""
    with gc_paused():
        start = time.perf_counter()
        records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        elapsed = time.perf_counter() - start
    del records
    return elapsed


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figure 8."""
    rows: dict[int, dict[str, Any]] = {}
    sizes = sorted(settings.scaling_sizes)
    small = _small_size(sizes)
    small_ops = agent_session(small)
    with scratch() as base, asyncio.Runner() as runner:
        for size in sizes:
            ops = agent_session(size)
            root = base / f"jsonl-{size}"
            runner.run(write_session("jsonl", root, ops, settings.flush_every))
            repeats = min(3, settings.repeats) if size >= 1_000_000 else settings.repeats
            (stored,) = root.rglob("session.jsonl")
            contenders: dict[str, Contender] = {
                "append": lambda ops=ops: _append(ops),  # type: ignore[misc]
                "append-nogc": lambda ops=ops: _append_without_gc(ops),  # type: ignore[misc]
            }
            if size == sizes[-1] and size != small:
                contenders["append-small"] = lambda: _append_small(small_ops)
            results = measure(contenders, repeats, runner=runner, warmup=size < 1_000_000)
            # A load takes a second where an append of the same size takes several: it is
            # paired with the raw parse more often, so that one noisy second on a shared
            # 2-core machine does not decide the ratio.
            loads: dict[str, Contender] = {
                "load": lambda root=root: _load(root),  # type: ignore[misc]
                "raw": lambda stored=stored: _raw_parse(stored),  # type: ignore[misc]
            }
            load_repeats = max(repeats, LOAD_PAIRS) if size >= 1_000_000 else repeats
            results |= measure(loads, load_repeats, runner=runner, warmup=size < 1_000_000)
            row: dict[str, Any] = {
                "events": len(ops),
                "repeats": repeats,
                "append_us": [value / len(ops) * 1e6 for value in results["append"]],
                "append_nogc_us": [value / len(ops) * 1e6 for value in results["append-nogc"]],
                "load_us": [value / len(ops) * 1e6 for value in results["load"]],
                "raw_us": [value / len(ops) * 1e6 for value in results["raw"]],
                "load_raw": list(paired(results["load"], results["raw"])),
                "bytes": stored.stat().st_size,
            }
            if "append-small" in results:
                row["append_small_us"] = [
                    value / len(small_ops) * 1e6 for value in results["append-small"]
                ]
            rows[size] = row
            del ops
    return _report(rows)


def _small_size(sizes: list[int]) -> int:
    """The size the collector's figure divides by: 10k, or the smallest measured."""
    return 10_000 if 10_000 in sizes else sizes[0]


def _cell(values: list[float]) -> str:
    median, low, high = spread(values)
    return f"{median:.2f} ({low:.2f}-{high:.2f})" if len(values) > 1 else f"{median:.2f} (once)"


def _report(rows: dict[int, dict[str, Any]]) -> tuple[list[Figure], list[Section]]:
    sizes = sorted(rows)
    top = sizes[-1]
    # The cost per event steps up once the heap outgrows the CPU caches (between 10k and
    # 100k events here); linearity is judged above that, the step is shown beside it.
    base = sizes[-2] if len(sizes) > 2 else sizes[0]
    small = _small_size(sizes)
    figures = []
    for kind, label in (
        ("append", "append"),
        ("append_nogc", "append, collector off"),
        ("load", "cold load (JSONL)"),
    ):
        per_base = spread(rows[base][f"{kind}_us"])[0]
        per_top = spread(rows[top][f"{kind}_us"])[0]
        per_small = spread(rows[small][f"{kind}_us"])[0]
        figures.append(
            Figure(
                f"8-{kind.replace('_', '-')}",
                f"{label}: cost per event, {top:,} ÷ {base:,} events (1.0 = linear)",
                "≤ 1.3 (linear)",
                ("le", 1.3),
                per_top / per_base,
                None,
                None,
                f"{per_top:.2f} µs/ev at {top:,}; {per_base:.2f} at {base:,}; "
                f"{per_small:.2f} at {small:,}",
                f"per-event medians; {top:,} ÷ {small:,}: {per_top / per_small:.2f}; the "
                f"largest size is measured {len(rows[top][f'{kind}_us'])} times",
            )
        )
    # With the collector on, its work per event must not grow with the log either: the
    # two sizes timed side by side (paired), where the run measured them so.
    per_top = spread(rows[top]["append_us"])[0]
    per_small = spread(rows[small]["append_us"])[0]
    beside = rows[top].get("append_small_us")
    if beside:
        ratio, low, high = paired(rows[top]["append_us"], beside)
        absolute = (
            f"{per_top:.2f} µs/ev at {top:,}; {spread(beside)[0]:.2f} at {small:,} beside it "
            f"({per_small:.2f} in its own turn)"
        )
        note = (
            f"median of {len(beside)} paired ratios: each repetition at {top:,} beside "
            f"{SMALL_TIMES} appends of {small:,}; {top:,} ÷ {small:,} of the sizes' own "
            f"medians: {per_top / per_small:.2f}"
        )
    else:
        ratio, low, high = per_top / per_small, None, None
        absolute = f"{per_top:.2f} µs/ev at {top:,}; {per_small:.2f} at {small:,}"
        note = "per-event medians; the largest size is measured 3 times"
    figures.append(
        Figure(
            "8-append-gc",
            f"append with the collector on: cost per event, {top:,} ÷ {small:,} events",
            "≤ 1.2",
            ("le", 1.2),
            ratio,
            low,
            high,
            absolute=absolute,
            note=note,
        )
    )
    ratio, low, high = rows[top]["load_raw"]
    figures.append(
        Figure(
            "8-load-raw",
            f"cold load of {rows[top]['events']:,} events (JSONL) ÷ raw parse of the same file",
            "≤ 1.5x",
            ("le", 1.5),
            ratio,
            low if len(rows[top]["load_us"]) > 1 else None,
            high if len(rows[top]["load_us"]) > 1 else None,
            f"ours {spread(rows[top]['load_us'])[0]:.2f} µs/ev; raw "
            f"{spread(rows[top]['raw_us'])[0]:.2f} µs/ev",
            f"median of {len(rows[top]['load_us'])} paired ratios; raw: read, split lines, "
            "orjson.loads each, collector paused",
        )
    )
    lines = [
        "| events | append µs/event | append, collector off | cold load µs/event | "
        "raw parse µs/event | load ÷ raw | JSONL bytes |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        row = rows[size]
        lines.append(
            f"| {row['events']:,} | {_cell(row['append_us'])} | {_cell(row['append_nogc_us'])} | "
            f"{_cell(row['load_us'])} | {_cell(row['raw_us'])} | {row['load_raw'][0]:.2f}x | "
            f"{format_bytes(row['bytes'])} |"
        )
    data = {str(size): row for size, row in rows.items()}
    return figures, [Section("Figure 8 detail: scaling", "\n".join(lines), data)]
