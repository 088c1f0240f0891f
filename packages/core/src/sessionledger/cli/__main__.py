"""Entry point of the ``sessionledger`` command (console script and ``python -m``).

The one place where errors become exit codes. Any ``LedgerError`` (unknown scheme,
missing session, corrupt store), any ``CommandError`` of the command line itself (bad
arguments, a failed demo), any ``OSError`` (an unreadable path, a full disk) and any
``ModuleNotFoundError`` (a distribution not installed) is printed as one line
``error: CODE: message`` on stderr with exit status 2, never as a traceback. Commands
return 0, or 1 when they ran and found problems (``verify``, a failed ``copy`` check).

Ctrl-C prints ``interrupted`` and exits 130 whenever it comes, unless the process was
started with SIGINT ignored (``nohup``, a background job of a script): then it stays
ignored, as the convention for such processes is. Until the command starts
(imports, parsing, plugin loading) there is nothing to clean up and the process exits at
once (``os._exit``); while it runs, ``asyncio.run`` cancels it so that its stores are closed first.
Importing this module takes SIGINT over: it is the command's entry point, and the
console script runs code of its own (a regular expression) before it calls ``main``.
The ``sessionledger`` package imports its names lazily and this module almost nothing,
so only Python's own start-up comes before.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before main runs
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from types import FrameType, TracebackType
    from typing import Final, TextIO

#: Exit status for user mistakes and unusable stores (docs/errors.md, "on the command line").
EXIT_USER_ERROR: Final = 2

#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED: Final = 130


def _exit_interrupted(signum: int, frame: FrameType | None) -> None:
    """SIGINT while nothing needs cleaning up: say so and end the process at once.

    Not by raising: the signal lands between any two bytecodes, inside a C extension's
    module initialisation among them (orjson's crashed with SIGSEGV when an exception
    was raised in its ``import``), or under code that catches every exception, which
    would carry on as if Ctrl-C had never come. Nothing is buffered to lose: before the
    command nothing was printed, and after it its output was flushed (``_run``)."""
    os.write(2, b"interrupted\n")
    os._exit(EXIT_INTERRUPTED)


#: Whether the process started with SIGINT ignored: Python then leaves it ignored, and so
#: does the command line, rather than taking over a signal its starter chose to ignore.
_STARTED_IGNORING: Final = signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def _on_sigint(handler: Callable[[int, FrameType | None], object]) -> None:
    if _STARTED_IGNORING:
        return
    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: SIGINT is not ours to take
        return


# Before anything else of the command runs: see the module docstring.
_on_sigint(_exit_interrupted)


def _fail(code: str, message: str) -> int:
    # One line, whatever the message holds: newlines would read as several errors.
    text = " ".join(f"error: {code}: {message}".split())
    print(text, file=sys.stderr, flush=True)
    return EXIT_USER_ERROR


def _flush(stream: TextIO | None) -> None:
    # None when the process started without the descriptor (``>&-``).
    if stream is not None and not stream.closed:
        stream.flush()


def _store_urls(args: argparse.Namespace) -> list[str]:
    """The stores a command works on (``catalog`` needs none)."""
    if args.command == "catalog":
        return []
    if args.command == "copy":
        return [args.source, args.target]
    return [args.store_url]


def _run(argv: Sequence[str] | None) -> int:
    import asyncio

    from sessionledger.cli import _app as app
    from sessionledger.cli._plugins import load_plugins
    from sessionledger.cli._stores import check_backend, resolve_store_url

    try:
        args = app.parse(argv)
        command = app.command_function(args.command)
        args.store_url = resolve_store_url(args.store) if args.command != "copy" else None
        args.plugins = load_plugins(args.plugin_specs)
        for url in _store_urls(args):
            check_backend(url, args.plugins)
        # From here Ctrl-C raises KeyboardInterrupt: asyncio.run cancels the command,
        # which closes its stores on the way out.
        _on_sigint(signal.default_int_handler)
        try:
            return asyncio.run(command(args))
        finally:
            # Still under KeyboardInterrupt: the command's output is out before a
            # Ctrl-C may end the process without flushing it.
            _flush(sys.stdout)
            _on_sigint(_exit_interrupted)
    except app.CommandError as error:
        return _fail(error.code, str(error))


def _importer(traceback: TracebackType | None) -> str | None:
    """Name the module whose code ran the failed import: the innermost frame outside
    the import machinery."""
    name = None
    while traceback is not None:
        frame = traceback.tb_frame
        if not frame.f_code.co_filename.startswith("<frozen"):
            name = frame.f_globals.get("__name__")
        traceback = traceback.tb_next
    return name if isinstance(name, str) else None


def _main(argv: Sequence[str] | None) -> int:
    import logging

    from sessionledger._errors import LedgerError

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
        print("interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv* (default ``sys.argv[1:]``); return the exit status.

    Meant to be the process's entry point: it takes SIGINT over for the process's life.
    """
    _on_sigint(_exit_interrupted)  # again: the caller may have changed it since the import
    try:
        return _main(argv)
    except ModuleNotFoundError as error:
        from sessionledger.cli._missing import missing_module

        if error.name is None:
            return _fail("CONFIG", f"a module is missing: {error}")
        return _fail("CONFIG", missing_module(error.name, _importer(error.__traceback__)))


if __name__ == "__main__":
    sys.exit(main())
