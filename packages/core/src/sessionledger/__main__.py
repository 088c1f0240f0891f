"""``python -m sessionledger``: the command line (see ``sessionledger.cli``)."""

from __future__ import annotations

import sys

from sessionledger.cli.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
