"""Append throughput of ``assistant/chunk`` events with and without ``InvariantsPlugin``.

Run: ``.venv/bin/python bench/bench_invariants.py [--events N] [--repeats R]``.

Both ledgers are in memory (no store, no entry points), so the measurement is the append
hot path: snapshot, surface plan, validators, commit, observers. Runs of the two
configurations alternate, so machine noise hits both alike; reported are the median
throughput of each configuration, their ratio, and the median of the per-pair ratios
(the steadier figure on a busy machine). Target (issue): with / without >= 0.7.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from sessionledger import Ledger
from sessionledger.session import Session
from sessionledger_invariants import InvariantsPlugin

CHUNK = {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "token"}}


def open_step(ledger: Ledger) -> Session:
    """Return a fresh session inside turn 1, step 1 (where chunks are valid)."""
    session = ledger.create()
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    return session


def appends_per_second(make: Callable[[], Session], events: int) -> float:
    """Time *events* chunk appends on a fresh session; return events per second."""
    session = make()
    append = session.append
    start = time.perf_counter()
    for _ in range(events):
        append("assistant/chunk", CHUNK)
    return events / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000, help="appends per run")
    parser.add_argument("--repeats", type=int, default=41, help="runs per configuration")
    args = parser.parse_args()

    configurations = {
        "without": Ledger(load_entrypoints=False),
        "with": Ledger(plugins=[InvariantsPlugin()], load_entrypoints=False),
    }
    for ledger in configurations.values():  # warm up both paths
        appends_per_second(lambda ledger=ledger: open_step(ledger), 2_000)
    samples: dict[str, list[float]] = {name: [] for name in configurations}
    for _ in range(args.repeats):
        for name, ledger in configurations.items():
            samples[name].append(
                appends_per_second(lambda ledger=ledger: open_step(ledger), args.events)
            )

    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"assistant/chunk appends, {args.events} per run, median of {args.repeats} runs")
    print(f"{'':>24}{'without plugin':>18}{'with plugin':>18}")
    print(f"{'appends/s':>24}{medians['without']:>18,.0f}{medians['with']:>18,.0f}")
    print(f"{'µs per append':>24}{1e6 / medians['without']:>18.2f}{1e6 / medians['with']:>18.2f}")
    ratio = medians["with"] / medians["without"]
    paired = statistics.median(
        with_ / without for with_, without in zip(samples["with"], samples["without"], strict=True)
    )
    verdict = "meets" if paired >= 0.7 else "misses"
    print(f"ratio with / without: {ratio:.2f}x of the medians, {paired:.2f}x median of pairs")
    print(f"target 0.7x: {verdict}")


if __name__ == "__main__":
    main()
