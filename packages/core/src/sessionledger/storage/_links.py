"""One name for each file a store keeps: other ways to reach it are refused.

Who may write a session is decided by a lock in a file found *by name* beside the store's
files (``sessionledger.storage._claims``). A second name for one of those files would let a second
writer reach it without meeting that lock, and a write through it lands outside the store.
So a store refuses, with a ``ConfigError`` naming the path, a symbolic link where its own
file is expected, a file with more than one hard link, and a mount point inside the store
(a file or directory bound there from elsewhere). The directories *above* a store are the
user's: their links are followed, once, when the store is built (``pinned``), so the store
stays in the directory it was opened in even if such a link is later pointed elsewhere.
Rules: docs/durability.md, "Files and directories".
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable

from sessionledger._errors import ConfigError
from sessionledger.storage._files import open_private_file

_MOUNTINFO = "/proc/self/mountinfo"
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def single_name_refusal(path: str, status: os.stat_result) -> ConfigError | None:
    """The refusal of the store file *path* whose own status (not followed) is *status*,
    or None when it is a regular file with one name."""
    if stat.S_ISLNK(status.st_mode):
        return ConfigError(
            f"{path!r} is a symbolic link; a store never follows a link where its own file "
            "is expected (open the store by the file's real path, or replace the link by "
            "the file)"
        )
    if not stat.S_ISREG(status.st_mode):
        return ConfigError(f"{path!r} is not a regular file; a store keeps a file there")
    if status.st_nlink != 1:
        return ConfigError(
            f"{path!r} has {status.st_nlink} names (hard links); another name would let a "
            "second writer reach the store's file without its lock, so the store refuses "
            "it (remove the other names, or copy the file)"
        )
    return None


def own_status(path: str) -> os.stat_result | None:
    """Return the status of the store file *path*, None when it does not exist; raise
    ``ConfigError`` when it is a link, has other names or is not a regular file."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as error:  # a parent that is a file, a directory it may not search
        raise ConfigError(f"cannot use {path!r}: {error.strerror}") from error
    refusal = single_name_refusal(path, status)
    if refusal is not None:
        raise refusal
    return status


def check_one_name(fd: int, path: str) -> os.stat_result:
    """Return the status of the open store file *fd* (*path* names it in a refusal);
    raise ``ConfigError`` when the file has another name."""
    status = os.fstat(fd)
    refusal = single_name_refusal(path, status)
    if refusal is not None:
        raise refusal
    return status


def open_own_file(path: str, flags: int) -> int:
    """Open (creating it ``0600``) the store file *path* and return the descriptor;
    ``ConfigError`` when it is a symbolic link or has another name."""
    try:
        fd = open_private_file(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            own_status(path)  # says which: the link itself
        raise
    try:
        check_one_name(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as octal escapes."""
    return _OCTAL_ESCAPE.sub(lambda escape: chr(int(escape.group(1), 8)), field)


def mount_points() -> frozenset[str]:
    """Every mount point this process sees (empty where the kernel does not say)."""
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="surrogateescape") as found:
            lines = found.read().splitlines()
    except OSError:
        return frozenset()
    return frozenset(_unescape(line.split(" ", 5)[4]) for line in lines if line.count(" ") >= 5)


def refuse_mount_points(
    paths: Iterable[str], *, within: str | None = None, mounts: frozenset[str] | None = None
) -> None:
    """Raise ``ConfigError`` when one of *paths*, or anything strictly inside the
    directory *within*, is a mount point: a file reached there by another mount has
    other names the store cannot see (mount the store's directory instead)."""
    found = mount_points() if mounts is None else mounts
    names = set(paths)
    inside = None if within is None else within.rstrip("/") + "/"
    for point in sorted(found):
        if point in names or (inside is not None and point.startswith(inside)):
            raise ConfigError(
                f"{point!r} is a mount point inside the store; a file or directory bound "
                "there from elsewhere has other names the store's lock cannot see (mount "
                "the store's whole directory instead)"
            )


def pinned(path: str, *, resolve_last: bool = False) -> str:
    """Return the absolute *path* with the links of its existing parent directories
    resolved: the directory a store is opened in stays the one it uses. The last
    component is kept as it is (a link there is refused, not followed) unless
    *resolve_last* (a store's root directory, which may be a link); a missing part is
    kept too (it is created as real directories)."""
    path = os.path.abspath(path)
    if resolve_last and os.path.isdir(path):
        return os.path.realpath(path)
    head, tail = os.path.split(path)
    if not tail:
        return path  # the file system's root
    missing: list[str] = [tail]
    while head != os.path.dirname(head) and not os.path.isdir(head):
        head, name = os.path.split(head)
        missing.append(name)
    return os.path.join(os.path.realpath(head), *reversed(missing))
