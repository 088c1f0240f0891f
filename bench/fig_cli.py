"""Figure 9: ``sessionledger show`` on a long, chunk-heavy session, the real command.

Workload (a) (100k events, ~95 % of them ``assistant/chunk``) is stored once in a SQLite
store (the command line's default backend). Each contender runs ``python -m
sessionledger --store sqlite:… show ID …`` in a fresh process:

- ``json``: ``show ID --json`` (the floor: read the log, write one envelope per line);
- ``table``: ``show ID`` (chunk runs collapsed into one row each);
- ``chunks``: ``show ID --chunks`` (one row per event);
- ``chunks-tty``: ``show ID --chunks`` on a pseudo-terminal of ``TTY_COLUMNS`` columns
  (the layout fitted to the width, styles on), its output read and counted.

The first three write to ``/dev/null`` (not a terminal). A figure is a contender's wall
time ÷ that of ``show --json`` in the same repetition, and its peak RSS ÷ that of ``show
--json`` (``os.wait4``: the child's own ``ru_maxrss``). Each command is started by the small
``bench.launcher`` process, which measures both: started from the benchmark process
itself, its ``ru_maxrss`` would be the benchmark's own peak. Process start-up and imports
are part of every contender, as they are of every real use.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import Figure, Section, Settings, format_bytes, measure, paired, spread
from bench.stores import SESSION_ID, scratch, write_session
from bench.workloads import agent_session, delta_share

__all__ = ["run"]

#: Width of the pseudo-terminal of the ``chunks-tty`` contender.
TTY_COLUMNS = 120
#: Where ``python -m bench.launcher`` runs from (the checkout holding ``bench``).
_ROOT = Path(__file__).resolve().parents[1]

MODES: dict[str, tuple[str, ...]] = {
    "json": ("--json",),
    "table": (),
    "chunks": ("--chunks",),
    "chunks-tty": ("--chunks",),
}


def _env() -> dict[str, str]:
    """The environment of every child: no variable that changes rich's idea of the output."""
    env = dict(os.environ)
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TERM"):
        env.pop(name, None)
    return env


def _launched(command: list[str], **popen: Any) -> dict[str, Any]:
    """Run *command* through ``bench.launcher`` (with *popen*'s streams and environment);
    return its own wall time and peak RSS."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result.json"
        launcher = [sys.executable, "-m", "bench.launcher", str(result), "--", *command]
        subprocess.run(launcher, check=True, cwd=_ROOT, **popen)
        figures: dict[str, Any] = json.loads(result.read_text())
    if figures["returncode"] != 0:
        raise RuntimeError(f"{command!r} exited with {figures['returncode']}")
    return {"seconds": figures["seconds"], "rss": figures["rss"]}


def _piped(command: list[str]) -> dict[str, Any]:
    return _launched(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=_env())


def _on_terminal(command: list[str]) -> dict[str, Any]:
    import fcntl
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, TTY_COLUMNS, 0, 0))
    received = [0]

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal has gone
                return
            if not data:
                return
            received[0] += len(data)

    env = {**_env(), "TERM": "xterm-256color", "COLUMNS": str(TTY_COLUMNS)}
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        result = _launched(command, stdin=subprocess.DEVNULL, stdout=slave, env=env)
    finally:
        os.close(slave)
        reader.join(timeout=60)
        os.close(master)
    return {**result, "bytes": received[0]}


def _command(url: str, mode: str) -> list[str]:
    return [sys.executable, "-m", "sessionledger", "--store", url, "show", SESSION_ID, *MODES[mode]]


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figure 9."""
    ops = agent_session(settings.events)
    share = delta_share(ops)
    with scratch() as base:
        path = base / "cli.db"
        asyncio.run(write_session("sqlite", path, ops, settings.flush_every))
        del ops
        url = f"sqlite:{path}"
        contenders: dict[str, Any] = {mode: _contender(url, mode) for mode in MODES}
        results = measure(contenders, settings.repeats)
    return _report(results, settings.events, share)


def _contender(url: str, mode: str) -> Callable[[], dict[str, Any]]:
    command = _command(url, mode)
    if mode.endswith("-tty"):
        return lambda: _on_terminal(command)
    return lambda: _piped(command)


def _median(samples: list[dict[str, Any]], key: str) -> float:
    return spread([sample[key] for sample in samples])[0]


def _report(
    results: dict[str, list[dict[str, Any]]], events: int, share: float
) -> tuple[list[Figure], list[Section]]:
    floor_time = [sample["seconds"] for sample in results["json"]]
    floor_rss = [float(sample["rss"]) for sample in results["json"]]
    about = f"workload (a), {events:,}+ events ({share:.0%} chunks), SQLite store"
    figures = []
    for mode, what in (
        ("table", "`show ID`"),
        ("chunks", "`show ID --chunks`"),
        ("chunks-tty", f"`show ID --chunks` on a {TTY_COLUMNS}-column pseudo-terminal"),
    ):
        seconds = [sample["seconds"] for sample in results[mode]]
        ratio, low, high = paired(seconds, floor_time)
        figures.append(
            Figure(
                f"9-{mode}",
                f"{what} ÷ `show ID --json`, wall time of the real command",
                "≤ 3x",
                ("le", 3.0),
                ratio,
                low,
                high,
                f"{spread(seconds)[0]:.2f} s; --json {spread(floor_time)[0]:.2f} s",
                f"{about}; a fresh process each, start-up included",
            )
        )
    rss = [float(sample["rss"]) for sample in results["chunks"]]
    ratio, low, high = paired(rss, floor_rss)
    figures.append(
        Figure(
            "9-rss",
            "peak RSS of `show ID --chunks` ÷ of `show ID --json`",
            "≤ 1.2x",
            ("le", 1.2),
            ratio,
            low,
            high,
            f"{format_bytes(spread(rss)[0])}; --json {format_bytes(spread(floor_rss)[0])}",
            f"{about}; os.wait4 ru_maxrss of the child, started by a small launcher",
        )
    )
    lines = [
        "| command | wall time, median (min-max) | ÷ --json | peak RSS, median |",
        "|---|---|---|---|",
    ]
    for mode, samples in results.items():
        median, low, high = spread([sample["seconds"] for sample in samples])
        ratio = paired([sample["seconds"] for sample in samples], floor_time)[0]
        command = " ".join(("show ID", *MODES[mode]))
        where = f" (pty, {TTY_COLUMNS} columns)" if mode.endswith("-tty") else ""
        lines.append(
            f"| `{command}`{where} | {median:.2f} s ({low:.2f}-{high:.2f}) | "
            f"{ratio:.2f}x | {format_bytes(_median(samples, 'rss'))} |"
        )
    data = dict(results)
    return figures, [Section("Figure 9 detail: `sessionledger show`", "\n".join(lines), data)]
