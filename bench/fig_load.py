"""Figures 5 and 6: cold load, and stored bytes.

5. ``await Ledger(...).resume(id)`` on a fresh ledger and backend (read, parse, unpack
   rows, validate envelopes and message shapes, rebuild the surface, crash-repair scan)
   of workload (a), next to the raw parse of the same stored data: memory: ``orjson.loads``
   of each stored record; jsonl: read the file, split lines, ``orjson.loads`` each; sqlite:
   ``SELECT`` the rows and ``orjson.loads`` their JSON columns. Packing makes the stored
   form ~25x fewer records than events, so the raw parse of the same file is cheap; the
   second floor parses the same events stored unpacked (plain JSONL / one row per event),
   which is what a store without packing would have to read. The library decodes a cold
   load with the cyclic garbage collector paused (it would otherwise spend most of the
   time traversing the new, all-surviving objects), so the raw floors parse under the
   same regime: a hand-written loader as careful as ours.
6. Stored bytes of workload (a) ÷ the plain JSONL of the same events.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiosqlite
import orjson

from bench.harness import (
    Figure,
    Section,
    Settings,
    format_bytes,
    format_rate,
    format_seconds,
    gc_paused,
    measure,
    paired,
)
from bench.stores import (
    RAW_INSERT,
    RAW_SELECT,
    SESSION_ID,
    Kind,
    batches,
    disk_size,
    envelopes,
    open_backend,
    open_raw_sqlite,
    plain_jsonl,
    raw_row,
    scratch,
    write_session,
)
from bench.workloads import Op, agent_session
from sessionledger import Ledger
from sessionledger.storage._memory import MemoryStore

__all__ = ["run"]


class _Stores:
    """One workload stored every way the figures read it."""

    def __init__(self, root: Path, ops: list[Op], flush_every: int) -> None:
        self.root = root
        self.ops = ops
        self.count = len(ops)
        self.flush_every = flush_every
        self.memory: MemoryStore = {}
        self.jsonl = root / "jsonl"
        self.sqlite = root / "ledger.db"
        self.plain = root / "plain.jsonl"
        self.plain_sqlite = root / "plain.db"

    async def build(self) -> None:
        ops, every = self.ops, self.flush_every
        await write_session("memory", self.root, ops, every, store=self.memory)
        await write_session("jsonl", self.jsonl, ops, every)
        await write_session("sqlite", self.sqlite, ops, every)
        items = envelopes(ops)
        header = orjson.dumps({"type": "session", "version": 1, "id": SESSION_ID}) + b"\n"
        self.plain.write_bytes(header + plain_jsonl(items))
        db = await open_raw_sqlite(self.plain_sqlite)
        for batch in batches(items, every, None):
            await db.executemany(RAW_INSERT, [raw_row(SESSION_ID, item) for item in batch])
            await db.commit()
        await db.close()
        # A cold load happens in a process that does not hold the workload's objects;
        # keeping them alive would only make every collection in the timed runs slower.
        self.count = len(ops)
        self.ops = []

    def jsonl_file(self) -> Path:
        (found,) = self.jsonl.rglob("session.jsonl")
        return found


async def _ours(kind: Kind, stores: _Stores) -> float:
    where = {"memory": stores.root, "jsonl": stores.jsonl, "sqlite": stores.sqlite}[kind]
    persistence = open_backend(kind, where, store=stores.memory)
    await persistence.list()  # open the connection untimed
    ledger = Ledger(persistence, load_entrypoints=False)
    start = time.perf_counter()
    session = await ledger.resume(SESSION_ID)
    elapsed = time.perf_counter() - start
    # A cold resume appends a `session/end-seed` marker once (docs/reading.md), so the first
    # (warm-up) load stores one more event than the workload has.
    if session.seq < stores.count:
        raise AssertionError(f"{kind}: loaded {session.seq} events, stored {stores.count}")
    await ledger.close()
    return elapsed


def _raw_records(records: list[bytes]) -> float:
    loads = orjson.loads
    start = time.perf_counter()
    with gc_paused():
        parsed = [loads(record) for record in records]
    elapsed = time.perf_counter() - start
    del parsed
    return elapsed


def _raw_file(path: Path) -> float:
    loads = orjson.loads
    start = time.perf_counter()
    with open(path, "rb") as file:
        data = file.read()
    with gc_paused():
        lines = data.split(b"\n")
        parsed = [loads(line) for line in lines if line]
    elapsed = time.perf_counter() - start
    del parsed
    return elapsed


async def _raw_sqlite(path: Path) -> float:
    # Used on the backend's own database too: its events table has the same columns.
    async with aiosqlite.connect(path) as db:
        await db.execute_fetchall("SELECT 1")  # connected untimed
        loads = orjson.loads
        start = time.perf_counter()
        rows = await db.execute_fetchall(RAW_SELECT, (SESSION_ID,))
        with gc_paused():
            parsed = [
                (
                    loads(row[3]),
                    None if row[4] is None else loads(row[4]),
                    None if row[5] is None else loads(row[5]),
                )
                for row in rows
            ]
        elapsed = time.perf_counter() - start
    del parsed
    return elapsed


def load_figures(
    settings: Settings, runner: asyncio.Runner, stores: _Stores
) -> tuple[list[Figure], Section]:
    """Figure 5: cold load + validate + surface ÷ raw parse, per backend."""
    n = stores.count
    memory_records = stores.memory[SESSION_ID].records
    jsonl_file = stores.jsonl_file()
    plan: dict[str, tuple[Any, Any, Any, str]] = {
        "memory": (
            lambda: _ours("memory", stores),
            lambda: _raw_records(memory_records),
            None,
            f"{len(memory_records):,} stored records",
        ),
        "jsonl": (
            lambda: _ours("jsonl", stores),
            lambda: _raw_file(jsonl_file),
            lambda: _raw_file(stores.plain),
            f"{len(memory_records):,} lines packed vs {n:,} plain",
        ),
        "sqlite": (
            lambda: _ours("sqlite", stores),
            lambda: _raw_sqlite(stores.sqlite),
            lambda: _raw_sqlite(stores.plain_sqlite),
            "packed rows vs one row per event",
        ),
    }
    figures = []
    lines = [
        "| backend | ours (cold `resume`) | raw parse, same data | ours ÷ raw | "
        "raw parse, unpacked events | ours ÷ unpacked |",
        "|---|---|---|---|---|---|",
    ]
    for kind, (ours_run, raw_run, plain_run, shape) in plan.items():
        contenders = {"ours": ours_run, "raw": raw_run}
        if plain_run is not None:
            contenders["plain"] = plain_run
        results = measure(contenders, settings.repeats, runner=runner)
        ours, raw = results["ours"], results["raw"]
        ratio, low, high = paired(ours, raw)
        note = f"{n:,} events ({shape})"
        plain_cells = "-", "-"
        if plain_run is not None:
            p_ratio, p_low, p_high = paired(ours, results["plain"])
            note += f"; ÷ raw parse of the same events unpacked: {p_ratio:.2f}x ({p_low:.2f}-{p_high:.2f})"
            plain_cells = (
                format_seconds(results["plain"]),
                f"{p_ratio:.2f}x ({p_low:.2f}-{p_high:.2f})",
            )
        figures.append(
            Figure(
                f"5-{kind}",
                f"cold load + validate + surface, `{kind}:` ÷ raw parse of the same stored data",
                "≤ 2.5x",
                ("le", 2.5),
                ratio,
                low,
                high,
                f"ours {format_seconds(ours)} ({format_rate(n, ours)}); raw {format_seconds(raw)}",
                note,
            )
        )
        lines.append(
            f"| `{kind}:` | {format_seconds(ours)} | {format_seconds(raw)} | {ratio:.2f}x "
            f"({low:.2f}-{high:.2f}) | {plain_cells[0]} | {plain_cells[1]} |"
        )
    return figures, Section(
        f"Figure 5 detail: cold load of {n:,} events of workload (a)", "\n".join(lines)
    )


def size_figures(all_stores: list[_Stores]) -> tuple[list[Figure], Section]:
    """Figure 6: stored bytes ÷ plain JSONL, for each stored size of workload (a)."""
    figures = []
    lines = [
        "| events | plain JSONL | JSONL packed | ÷ plain | SQLite | ÷ plain | "
        "SQLite, one row per event | ÷ plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stores in all_stores:
        n = stores.count
        plain = disk_size(stores.plain)
        jsonl = disk_size(stores.jsonl_file())
        sqlite = disk_size(stores.sqlite)
        unpacked = disk_size(stores.plain_sqlite)
        label = f"{n // 1000}k" if n >= 1000 else str(n)
        for key, name, size, target, bound in (
            ("jsonl", "JSONL packed", jsonl, "≤ 0.40", 0.40),
            ("sqlite", "SQLite", sqlite, "≤ 0.5", 0.5),
        ):
            figures.append(
                Figure(
                    f"6-{key}-{label}",
                    f"stored bytes ÷ plain JSONL, {name}, workload (a) {label}",
                    target,
                    ("le", bound),
                    size / plain,
                    None,
                    None,
                    f"{format_bytes(size)} vs plain {format_bytes(plain)}",
                    f"{n:,} events; deterministic, so no spread",
                )
            )
        lines.append(
            f"| {n:,} | {format_bytes(plain)} | {format_bytes(jsonl)} | {jsonl / plain:.3f} | "
            f"{format_bytes(sqlite)} | {sqlite / plain:.3f} | {format_bytes(unpacked)} | "
            f"{unpacked / plain:.3f} |"
        )
    return figures, Section(
        "Figure 6 detail: stored bytes of workload (a) (SQLite: file plus any WAL after close)",
        "\n".join(lines),
    )


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figures 5 and 6."""
    with scratch() as root, asyncio.Runner() as runner:
        all_stores = []
        for size in (settings.small_events, settings.events):
            folder = root / f"w{size}"
            folder.mkdir()
            stores = _Stores(folder, agent_session(size), settings.flush_every)
            runner.run(stores.build())
            all_stores.append(stores)
        figures, load_section = load_figures(settings, runner, all_stores[-1])
        size_list, size_section = size_figures(all_stores)
    return [*figures, *size_list], [load_section, size_section]
