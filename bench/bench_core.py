"""Core hot paths next to their raw floors: figures 1 and 2 of the suite.

Kept runnable on its own (``python bench/bench_core.py [--quick]``); the figures live in
``bench/fig_hotpath.py`` and ``python -m bench.run`` runs them with everything else.
Prints a table; asserts nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.run import main

    sys.exit(main(["--only", "hotpath", *sys.argv[1:]]))
