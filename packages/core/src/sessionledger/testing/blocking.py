"""Catch a blocking call on the event loop's thread (docs/backends.md, "no blocking call on
the event loop").

A backend's async methods share the loop with everything else the application runs: one
``stat`` of a file on a slow disk, one ``fsync``, one lock file opened on the loop's thread
stalls every other task meanwhile. ``no_blocking_calls`` runs a block under BlockBuster
(PyPI ``blockbuster``), which raises ``BlockingError`` from any such call made, on a thread
that runs an event loop, by code of the packages it watches. The contract kit runs every
clause so; the functions BlockBuster watches by default are joined by the file operations
a store makes (opening, ``fsync``, ``lstat``, ``fstat``, locks, truncation), so every file
operation on the loop is found, not only the few that are slow on a busy laptop.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType

from blockbuster import BlockBuster, BlockBusterFunction

__all__ = ["EXTRA_BLOCKING", "no_blocking_calls", "package_of"]

#: File operations BlockBuster does not watch by default; each blocks on the medium.
EXTRA_BLOCKING = (
    "builtins.open",
    "io.open",
    "os.open",
    "os.fsync",
    "os.fdatasync",
    "os.lstat",
    "os.fstat",
    "os.ftruncate",
    "os.truncate",
    "os.pread",
    "os.pwrite",
    "os.utime",
    "os.chmod",
    "os.fchmod",
    "io.FileIO.read",
    "io.FileIO.readall",
    "io.FileIO.readinto",
    "io.FileIO.write",
    "fcntl.flock",
    "fcntl.lockf",
)


def package_of(thing: object) -> ModuleType:
    """The top-level package that defines *thing*'s type (what to watch for a backend);
    imported already, since the type exists."""
    return sys.modules[type(thing).__module__.partition(".")[0]]


@contextmanager
def no_blocking_calls(
    watched: Iterable[ModuleType | str], *, may_block_in: Iterable[tuple[str, str]] = ()
) -> Iterator[BlockBuster]:
    """Raise ``BlockingError`` from a blocking call made on an event loop's thread by code
    of the *watched* packages (the kit itself, ``sessionledger.testing``, is not watched:
    its tampering is the test's own doing). *may_block_in* names ``(file, function)``
    pairs under which blocking is allowed (a synchronous constructor, say)."""
    modules = ["sessionledger", *watched]
    buster = BlockBuster(modules, excluded_modules=["sessionledger.testing"])
    for name in EXTRA_BLOCKING:
        buster.functions.setdefault(
            name,
            BlockBusterFunction(
                None, name, scanned_modules=modules, excluded_modules=["sessionledger.testing"]
            ),
        )
    # A log record goes where the application's handlers send it (a loop-friendly app
    # uses a QueueHandler): the library only calls ``logging``, it writes no file itself.
    allowed = [("logging/__init__.py", "emit"), *may_block_in]
    for function in buster.functions.values():
        for file, name in allowed:
            function.can_block_in(file, name)
    buster.activate()
    try:
        yield buster
    finally:
        buster.deactivate()
