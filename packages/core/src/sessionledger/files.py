"""File-system helpers the file-based backends share: private directories, durable entries.

Stores keep their files to their owner (directories ``0700``, files ``0600``), whatever the
process umask; and on POSIX a new directory entry is durable only once its parent
directory is fsynced.
"""

from __future__ import annotations

import errno
import os
from typing import Final

__all__ = ["DIR_MODE", "FILE_MODE", "fsync_dir", "make_private_dirs"]

#: Mode of every directory a store creates.
DIR_MODE: Final = 0o700
#: Mode of every file a store creates.
FILE_MODE: Final = 0o600


def fsync_dir(path: str) -> None:
    """Make the entries of directory *path* durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_private_dirs(directory: str, *, fsync: bool = False) -> None:
    """Create *directory* and every missing parent with mode ``0700`` exactly, whatever
    the umask (``os.makedirs`` gives only the last one its mode; the parents would get
    the umask's, ``0777`` under umask 0). With *fsync*, each new entry is made durable
    (fsync of its parent) before anything is created inside it. A directory created
    meanwhile by another writer is fine; a file in the way raises ``NotADirectoryError``."""
    missing: list[str] = []
    current = directory
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(path):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", path) from None
            continue
        os.chmod(path, DIR_MODE)  # the umask may have taken bits away from it
        if fsync:
            fsync_dir(os.path.dirname(path))
