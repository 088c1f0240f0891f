"""Timing, statistics, the result model and the report.

Rules every figure follows:
- contenders of one figure run interleaved, repetition by repetition, with the order
  rotated each time, so a noisy neighbour hits them alike;
- one untimed warm-up run of each contender first; ``gc.collect()`` before every run;
- a figure's ratio is the median of the per-repetition ratios (each taken between runs
  that were adjacent in time); the spread is their min-max;
- setup (building stores, opening connections, generating payloads) is never timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import gc
import importlib.metadata
import inspect
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "Figure",
    "Section",
    "Settings",
    "format_rate",
    "machine",
    "measure",
    "paired",
    "spread",
]

#: A contender: one timed run, returning seconds (or named marks in seconds).
Contender = Callable[[], "float | dict[str, float] | Awaitable[float | dict[str, float]]"]


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes and repetitions for one run of the suite (``quick`` shrinks everything)."""

    quick: bool = False
    repeats: int = 5
    events: int = 100_000  # workload (a), large
    small_events: int = 10_000  # workload (a), small
    flush_every: int = 200
    per_append_events: int = 400  # figure 4: one fsync per event
    chat_messages: int = 600
    chat_marks: tuple[int, ...] = (100, 300, 600)
    derive_samples: int = 300
    derive_large: int = 100_000  # figure 2: the long log (the short one has 1k events)
    scaling_sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    postgres_events: int = 10_000
    postgres_repeats: int = 3
    listing_sizes: tuple[int, int] = (1_000, 100_000)  # figure 11: a small and a large store
    prune_sessions: int = 10_000  # figure 11: how many sessions one prune deletes

    @classmethod
    def for_run(cls, quick: bool, repeats: int | None = None) -> Settings:
        """Return the full settings, or the quick ones (smaller sizes, 3 repetitions)."""
        if not quick:
            return cls(repeats=repeats or 5)
        return cls(
            quick=True,
            repeats=repeats or 3,
            events=10_000,
            small_events=2_000,
            per_append_events=60,
            chat_messages=120,
            chat_marks=(40, 120),
            derive_samples=100,
            derive_large=20_000,
            scaling_sizes=(1_000, 10_000),
            postgres_events=2_000,
            postgres_repeats=1,
            listing_sizes=(500, 10_000),
            prune_sessions=1_000,
        )


@dataclasses.dataclass
class Figure:
    """One row of the results table."""

    key: str
    title: str
    target: str
    #: ("ge", x): the ratio should be >= x; ("le", x): <= x; None: context only.
    goal: tuple[Literal["ge", "le"], float] | None
    ratio: float | None
    low: float | None = None
    high: float | None = None
    absolute: str = ""
    note: str = ""

    @property
    def met(self) -> bool | None:
        """Tell whether the median ratio meets the target (None without a target)."""
        if self.goal is None or self.ratio is None:
            return None
        kind, bound = self.goal
        return self.ratio >= bound if kind == "ge" else self.ratio <= bound

    def to_json(self) -> dict[str, Any]:
        """Return the figure as plain JSON (for ``results.json``)."""
        out = dataclasses.asdict(self)
        out["met"] = self.met
        return out


@dataclasses.dataclass
class Section:
    """A detail table or text block printed under the main table."""

    title: str
    body: str
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


# -- timing ------------------------------------------------------------------------------


def _run_one(contender: Contender, runner: asyncio.Runner | None) -> Any:
    gc.collect()
    outcome = contender()
    if inspect.isawaitable(outcome):
        if runner is None:
            raise RuntimeError("an async contender needs a runner")
        outcome = runner.run(_awaited(outcome))
    return outcome


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def measure(
    contenders: dict[str, Contender],
    repeats: int,
    *,
    runner: asyncio.Runner | None = None,
    warmup: bool = True,
) -> dict[str, list[Any]]:
    """Run each contender *repeats* times, interleaved with rotating order; return the
    results per contender in repetition order (after one untimed warm-up of each)."""
    names = list(contenders)
    if warmup:
        for name in names:
            _run_one(contenders[name], runner)
    results: dict[str, list[Any]] = {name: [] for name in names}
    for repetition in range(repeats):
        shift = repetition % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(_run_one(contenders[name], runner))
    return results


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block without the cyclic collector (as the library's cold load does)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def timed(function: Callable[[], object]) -> float:
    """Return the seconds one call of *function* takes."""
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def paired(
    numerators: Sequence[float], denominators: Sequence[float]
) -> tuple[float, float, float]:
    """Return (median, min, max) of the per-repetition ratios numerator / denominator."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Return (median, min, max) of *values*."""
    return statistics.median(values), min(values), max(values)


def format_rate(events: int, seconds: Sequence[float]) -> str:
    """Describe a throughput: median events/s and µs per event, with the min-max range."""
    median, low, high = spread(seconds)
    return (
        f"{events / median:,.0f} ev/s ({median / events * 1e6:.2f} µs/ev; "
        f"{low / events * 1e6:.2f}-{high / events * 1e6:.2f})"
    )


def format_seconds(seconds: Sequence[float]) -> str:
    """Describe durations: median with the min-max range, in a readable unit."""
    median, low, high = spread(seconds)
    if median >= 1:
        return f"{median:.2f} s ({low:.2f}-{high:.2f})"
    if median >= 1e-3:
        return f"{median * 1e3:.1f} ms ({low * 1e3:.1f}-{high * 1e3:.1f})"
    return f"{median * 1e6:.1f} µs ({low * 1e6:.1f}-{high * 1e6:.1f})"


def format_bytes(size: float) -> str:
    """Describe a size in bytes with a binary unit."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


# -- the machine -------------------------------------------------------------------------


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return format_bytes(int(line.split()[1]) * 1024)
    except OSError:
        pass
    return "unknown"


def _git(*args: str) -> str | None:
    root = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


PACKAGES = (
    "sessionledger",
    "sessionledger-jsonl",
    "sessionledger-sqlite",
    "sessionledger-invariants",
    "sessionledger-postgres",
    "orjson",
    "pluggy",
    "aiosqlite",
    "asyncpg",
    "openai-agents",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
)


def machine() -> dict[str, Any]:
    """Describe where and with what this run happens."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory": _memory_total(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "sqlite": sqlite3.sqlite_version,
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "packages": {name: _version(name) for name in PACKAGES},
        # Which form of snapshot's fast path ran (README, "the compiled accelerator").
        "accelerated": importlib.import_module("sessionledger._accelerator").ACCELERATED,
        "command": " ".join(
            ["python", "-m", "bench.run", *sys.argv[1:]]
            if sys.argv and sys.argv[0].endswith(("run.py", "-c"))
            else ["python", *sys.argv]
        ),
    }
