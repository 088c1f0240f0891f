"""File-system helpers the file-based backends share: private directories, durable entries.

Stores keep their files to their owner (directories ``0700``, files ``0600``), whatever the
process umask; and on POSIX a new directory entry is durable only once its parent
directory is fsynced.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final

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


def open_private_file(path: str, flags: int, *, dir_fd: int | None = None) -> int:
    """Open *path* (relative to *dir_fd* when given), creating it with mode ``0600``, and
    return the descriptor. Never through a symbolic link (``ELOOP``); the mode is exact
    whatever the umask took away, also for a file that already existed."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=dir_fd)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def missing_directories(directory: str) -> list[str]:
    """Return *directory* and each of its parents that does not exist yet, outermost
    first: what must be created, in order, for *directory* to exist."""
    missing: list[str] = []
    current = directory
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return missing[::-1]


def make_private_dirs(directory: str, *, fsync: bool = False) -> None:
    """Create *directory* and every missing parent with mode ``0700`` exactly, whatever
    the umask (``os.makedirs`` gives only the last one its mode; the parents would get
    the umask's, ``0777`` under umask 0). With *fsync*, each new entry is made durable
    (fsync of its parent) before anything is created inside it. A directory created
    meanwhile by another writer is fine; a file in the way raises ``NotADirectoryError``."""
    for path in missing_directories(directory):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(path):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", path) from None
            continue
        os.chmod(path, DIR_MODE)  # the umask may have taken bits away from it
        if fsync:
            fsync_dir(os.path.dirname(path))
