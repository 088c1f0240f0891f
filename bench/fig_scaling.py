"""Figure 8: cost per event at 1k / 10k / 100k / 1M events of workload (a).

- append: ``Session.append`` through a ``Ledger`` without a store, per event;
- load: cold ``resume`` from a JSONL store, per event;
- memory: peak RSS of a cold load, in a fresh child process (``resource.getrusage``),
  next to the RSS right before the load and the stored file's size.

Linear growth shows as a flat cost per event: the figure is the per-event cost at the
largest size ÷ at 10k (≈ 1.0 when linear). Sizes up to 100k are repeated; 1M is measured
once (it is the long pole of the suite).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    Contender,
    Figure,
    Section,
    Settings,
    format_bytes,
    gc_paused,
    measure,
    spread,
)
from bench.stores import SESSION_ID, append_ops, scratch, write_session
from bench.workloads import Op, agent_session
from sessionledger import Ledger
from sessionledger_jsonl import JsonlPersistence

__all__ = ["run"]

_CHILD_FLAG = "--load-child"


def _append(ops: list[Op]) -> float:
    ledger = Ledger(load_entrypoints=False)
    session = ledger.create("scaling")
    start = time.perf_counter()
    append_ops(session, ops)
    return time.perf_counter() - start


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


def _child_load(root: str) -> None:
    """In a fresh process: report RSS before, peak RSS after, and the load time."""
    import resource

    def rss_now() -> int:
        with open("/proc/self/statm") as file:
            return int(file.read().split()[1]) * resource.getpagesize()

    before = rss_now()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    seconds = asyncio.run(_load(Path(root)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {"rss_before": before, "peak_before": peak_before, "peak": peak, "seconds": seconds}
        )
    )


def _peak_rss(root: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.fig_scaling", _CHILD_FLAG, str(root)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=1800,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figure 8."""
    rows: dict[int, dict[str, Any]] = {}
    with scratch() as base, asyncio.Runner() as runner:
        for size in settings.scaling_sizes:
            ops = agent_session(size)
            root = base / f"jsonl-{size}"
            runner.run(write_session("jsonl", root, ops, settings.flush_every))
            repeats = 1 if size >= 1_000_000 else settings.repeats
            contenders: dict[str, Contender] = {
                "append": lambda ops=ops: _append(ops),  # type: ignore[misc]
                "append-nogc": lambda ops=ops: _append_without_gc(ops),  # type: ignore[misc]
                "load": lambda root=root: _load(root),  # type: ignore[misc]
            }
            results = measure(
                contenders,
                repeats,
                runner=runner,
                warmup=size < 1_000_000,
            )
            (stored,) = root.rglob("session.jsonl")
            row: dict[str, Any] = {
                "events": len(ops),
                "repeats": repeats,
                "append_us": [value / len(ops) * 1e6 for value in results["append"]],
                "append_nogc_us": [value / len(ops) * 1e6 for value in results["append-nogc"]],
                "load_us": [value / len(ops) * 1e6 for value in results["load"]],
                "bytes": stored.stat().st_size,
            }
            if size == max(settings.scaling_sizes) or size == 100_000:
                row["memory"] = _peak_rss(root)
            rows[size] = row
            del ops
    return _report(rows)


def _cell(values: list[float]) -> str:
    median, low, high = spread(values)
    return f"{median:.2f} ({low:.2f}-{high:.2f})" if len(values) > 1 else f"{median:.2f} (once)"


def _report(rows: dict[int, dict[str, Any]]) -> tuple[list[Figure], list[Section]]:
    sizes = sorted(rows)
    top = sizes[-1]
    # The cost per event steps up once the heap outgrows the CPU caches (between 10k and
    # 100k events here); linearity is judged above that, the step is shown beside it.
    base = sizes[-2] if len(sizes) > 2 else sizes[0]
    small = 10_000 if 10_000 in rows else sizes[0]
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
                "largest size is measured once",
            )
        )
    lines = [
        "| events | append µs/event | append, collector off | cold load µs/event | "
        "JSONL bytes | RSS before load | peak RSS of the cold load | peak - before, per event |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        row = rows[size]
        memory = row.get("memory")
        if memory:
            grown = memory["peak"] - memory["rss_before"]
            mem_cells = (
                f"{format_bytes(memory['rss_before'])} | {format_bytes(memory['peak'])} | "
                f"{grown / row['events']:,.0f} B"
            )
        else:
            mem_cells = "- | - | -"
        lines.append(
            f"| {row['events']:,} | {_cell(row['append_us'])} | {_cell(row['append_nogc_us'])} | "
            f"{_cell(row['load_us'])} | "
            f"{format_bytes(row['bytes'])} | {mem_cells} |"
        )
    top_memory = rows[top].get("memory")
    if top_memory:
        figures.append(
            Figure(
                "8-rss",
                f"peak RSS of a cold load of {rows[top]['events']:,} events (context)",
                "context",
                None,
                None,
                absolute=f"peak {format_bytes(top_memory['peak'])}; before the load "
                f"{format_bytes(top_memory['rss_before'])}; file "
                f"{format_bytes(rows[top]['bytes'])}",
                note="fresh child process, resource.getrusage",
            )
        )
    data = {str(size): row for size, row in rows.items()}
    return figures, [Section("Figure 8 detail: scaling", "\n".join(lines), data)]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == _CHILD_FLAG:
        _child_load(sys.argv[2])
