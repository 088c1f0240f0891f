"""Append throughput with and without ``InvariantsPlugin`` (figure 1c of the suite).

Kept runnable on its own (``python bench/bench_invariants.py [--quick]``); the figure
lives in ``bench/fig_hotpath.py`` (figures 1a-1c, 2) and ``python -m bench.run`` runs it
with everything else. Prints a table; asserts nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.run import main

    sys.exit(main(["--only", "hotpath", *sys.argv[1:]]))
