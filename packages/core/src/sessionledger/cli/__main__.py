"""Entry point of the ``sessionledger`` command (console script and ``python -m``).

The one place where errors become exit codes. Any ``LedgerError`` (unknown scheme,
missing session, corrupt store), any ``CommandError`` of the command line itself (bad
arguments, a failed demo) and any ``OSError`` (an unreadable path, a full disk) is
printed as one line ``error: CODE: message`` on stderr with exit status 2, never as a
traceback. Commands return 0, or 1 when they ran and found problems (``verify``, a
failed ``copy`` check).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

from sessionledger.errors import LedgerError

__all__ = ["EXIT_USER_ERROR", "main"]

#: Exit status for user mistakes and unusable stores (docs/errors.md, "on the command line").
EXIT_USER_ERROR: Final = 2

#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED: Final = 130


def _fail(code: str, message: str) -> int:
    # One line, whatever the message holds: newlines would read as several errors.
    text = " ".join(f"error: {code}: {message}".split())
    print(text, file=sys.stderr, flush=True)
    return EXIT_USER_ERROR


def _run(argv: Sequence[str] | None) -> int:
    try:
        from sessionledger.cli import app
        from sessionledger.cli.plugins import load_plugins
        from sessionledger.cli.stores import resolve_store_url
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] == "rich":
            return _fail(
                "CONFIG",
                "the command line needs the cli extra: pip install 'sessionledger[cli]'",
            )
        raise
    try:
        args = app.parse(argv)
        command = app.command_function(args.command)
        args.store_url = resolve_store_url(args.store) if args.command != "copy" else None
        args.plugins = load_plugins(args.plugin_specs)
        return asyncio.run(command(args))
    except app.CommandError as error:
        return _fail(error.code, str(error))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv* (default ``sys.argv[1:]``); return the exit status."""
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    try:
        return _run(argv)
    except LedgerError as error:
        return _fail(error.code, str(error))
    except OSError as error:
        if isinstance(error, BrokenPipeError):
            # The reader went away (``| head``): stop quietly, like other Unix tools.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
        return _fail("IO", str(error))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
