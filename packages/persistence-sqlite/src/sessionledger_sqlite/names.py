"""The names of a SQLite store's files, each the store's own (docs/durability.md).

SQLite finds a database's ``-wal``, ``-shm`` and ``-journal`` files by the database's
name, and the store finds its claims in ``<database>.locks`` the same way. A database
reached by a second name (a symbolic or hard link, a file bound there by another mount)
would have a second set of those files: a second writer would miss the first one's lock,
and SQLite itself would keep two write-ahead logs for one database (a reader through a
hard link sees none of the first one's transactions). So the database and each of these
files must be a regular file with one name, not a link and not a mount point; anything
else is refused with ``ConfigError`` before a connection is made, checked again once it
is made (a name switched meanwhile), and at every claim (a link made since).
"""

from __future__ import annotations

import os
from typing import TypeAlias

from sessionledger._errors import ConfigError
from sessionledger.storage._links import own_status, refuse_mount_points

__all__ = ["SIDE_SUFFIXES", "FileIdentity", "check_names", "check_same_file", "file_identity"]

#: SQLite's files beside a database, named after it. The store's lock file
#: (``<database>.locks``) is checked where a claim opens it (``sessionledger.storage._claims``):
#: reading needs no lock.
SIDE_SUFFIXES = ("-wal", "-shm", "-journal")

#: (device, inode): the same file whatever its name.
FileIdentity: TypeAlias = tuple[int, int]


def file_identity(status: os.stat_result) -> FileIdentity:
    """What makes a file the same file, whatever its name: (device, inode)."""
    return status.st_dev, status.st_ino


def check_names(path: str) -> os.stat_result | None:
    """Return the status of the database at *path* (None: no file yet) once it and
    every file beside it is checked to be the store's own; ``ConfigError`` otherwise."""
    status = own_status(path)
    sides = [f"{path}{suffix}" for suffix in SIDE_SUFFIXES]
    for side in sides:
        own_status(side)
    refuse_mount_points([path, *sides, f"{path}.locks"])
    return status


def check_same_file(path: str, opened: FileIdentity | None) -> FileIdentity | None:
    """Check the names of the database at *path* again and that it is still the file
    *opened* (the one a connection was made to, if any); return its identity."""
    status = check_names(path)
    now = None if status is None else file_identity(status)
    if opened is not None and now != opened:
        raise ConfigError(
            f"{path!r} is no longer the database file this store opened (it was replaced, "
            "moved or linked meanwhile); close the store and open it again"
        )
    return now
