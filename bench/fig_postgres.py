"""PostgreSQL durable throughput with 1 and N writers, through ``bench/bench_postgres.py``.

That script belongs to the PostgreSQL backend; it starts a throwaway server (or uses
``$SESSIONLEDGER_PG_URL``), measures ``Ledger`` → Postgres with a flush every 200 events
next to raw asyncpg floors, and skips itself (one ``skipped`` line, exit 0) when no server
can start. This module runs it as a child process and lifts its ratios into the table;
its full output goes into the report verbatim.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bench.harness import Figure, Section, Settings

__all__ = ["run"]

SCRIPT = Path(__file__).with_name("bench_postgres.py")
_LEDGER_LINE = re.compile(
    r"^(?P<label>\d+ writers?(?: \([a-z]+\))?)[ \t]+Ledger -> Postgres[ \t]*:[ \t]*(?P<rate>[\d,]+) "
    r"events/s[ \t]+ratio to the best floor (?P<ratio>[\d.]+)x",
    re.MULTILINE,
)


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run the PostgreSQL benchmark script and report what it printed."""
    if not SCRIPT.exists():
        return [
            Figure(
                "pg",
                "PostgreSQL durable throughput",
                "≥ 0.6x",
                None,
                None,
                note="bench/bench_postgres.py does not exist yet",
            )
        ], []
    writers = 8 if not settings.quick else 2
    command = [
        sys.executable,
        str(SCRIPT),
        "--events",
        str(settings.postgres_events),
        "--repeats",
        str(settings.postgres_repeats),
        "--writers",
        str(writers),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1500, check=False)
    except subprocess.TimeoutExpired as error:
        output = f"timed out after {error.timeout} s"
        return [
            Figure("pg", "PostgreSQL durable throughput", "≥ 0.6x", None, None, note=output)
        ], []
    output = (done.stdout + ("\n" + done.stderr if done.returncode else "")).strip()
    body = f"`{' '.join(['python', 'bench/bench_postgres.py', *command[2:]])}` printed:\n\n```\n{output}\n```"
    section = Section("PostgreSQL detail (bench/bench_postgres.py)", body)
    if done.returncode != 0 or "skipped" in done.stdout:
        reason = "skipped: no server" if "skipped" in done.stdout else f"failed ({done.returncode})"
        return [Figure("pg", "PostgreSQL durable throughput", "≥ 0.6x", None, None, note=reason)], [
            section
        ]
    figures = []
    for match in _LEDGER_LINE.finditer(done.stdout):
        label = match["label"].strip()
        figures.append(
            Figure(
                f"pg-{label.split()[0]}w",
                f"PostgreSQL durable throughput, flush every 200, {label} ÷ best raw asyncpg floor",
                "≥ 0.6x",
                ("ge", 0.6),
                float(match["ratio"]),
                None,
                None,
                f"ours {match['rate']} events/s",
                f"{settings.postgres_events:,} events per writer, median of "
                f"{settings.postgres_repeats}; spread not reported by the script",
            )
        )
    return figures, [section]
