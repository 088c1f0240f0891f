"""Run one command and report its own wall time and peak RSS, from a small process.

``python -m bench.launcher RESULT -- COMMAND...`` starts COMMAND with this process's
standard streams and environment, reaps it with ``os.wait4`` and writes
``{"seconds", "rss", "returncode"}`` as JSON to the file RESULT.

Why a launcher: on Linux a child's ``ru_maxrss`` keeps the high-water mark of the memory
it was forked from, so a command started straight from a large benchmark process reports
the benchmark's peak, not its own. Started from here, it inherits only this small
process's. Only the standard library is imported, to keep it small.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    """Run the command after ``--`` in *argv*; write its figures to the file before it."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m bench.launcher RESULT -- COMMAND...", file=sys.stderr)
        return 2
    result, command = argv[0], argv[2:]
    start = time.perf_counter()
    process = subprocess.Popen(command)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    figures = {
        "seconds": seconds,
        "rss": usage.ru_maxrss * 1024,  # Linux: KiB
        "returncode": process.returncode,
    }
    with open(result, "w") as file:
        json.dump(figures, file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
