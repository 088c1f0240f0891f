"""Blocking file-system helpers of the JSONL store; the store runs them in worker threads.

They work on paths and descriptors and know nothing about sessions, except
``translate_os_error``, the one place an ``OSError`` becomes a ``LedgerError``.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import secrets
from typing import Final

from sessionledger._failpoints import failpoint, failpoint_armed
from sessionledger.errors import ConfigError
from sessionledger.files import DIR_MODE, FILE_MODE, fsync_dir, make_private_dirs

__all__ = [
    "DIR_MODE",
    "HardLinkUnsupportedError",
    "FILE_MODE",
    "OPEN_FLAGS",
    "exists",
    "first_line",
    "fsync_dir",
    "last_line_start",
    "lock_exclusive",
    "make_dirs",
    "publish",
    "read_head",
    "remove_matching",
    "subdirectories",
    "translate_os_error",
    "truncate",
    "unlink_quietly",
    "write_all",
]

logger = logging.getLogger("sessionledger")

OPEN_FLAGS: Final = os.O_CLOEXEC
_HEAD_CHUNK: Final = 8192
_TAIL_CHUNK: Final = 64 * 1024
_NO_HARD_LINKS: Final = frozenset((errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP))


def translate_os_error(error: OSError, session_id: str | None) -> BaseException:
    """Map an OSError to the ``LedgerError`` a user can act on (a path that is not a
    directory, missing permissions), or return it unchanged: disk full and I/O errors
    stay ``OSError``, and the failed operation may be retried as it is."""
    where = error.filename or "the jsonl store"
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        return ConfigError(
            f"{where!s}: {reason}; the jsonl store needs a directory tree there",
            session_id=session_id,
        )
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ConfigError(f"{where!s}: {reason}", session_id=session_id)
    if error.errno == errno.ENAMETOOLONG:
        return ConfigError(f"{where!s}: path too long for this file system", session_id=session_id)
    return error


def exists(path: str) -> bool:
    """Tell whether *path* exists; errors other than "absent" propagate."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def subdirectories(path: str) -> list[str]:
    """Return the paths of the directories (or links to them) inside *path*."""
    try:
        with os.scandir(path) as entries:
            return [entry.path for entry in entries if entry.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def read_head(path: str) -> tuple[os.stat_result, bytes | None] | None:
    """Return the status and first line of the file at *path*; None if there is no file."""
    try:
        fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return os.fstat(fd), first_line(fd)
    finally:
        os.close(fd)


def first_line(fd: int) -> bytes | None:
    """Return the first line of an open file without its newline (None: there is none).

    Reads in small chunks, so a header costs one small read however long the log is.
    """
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, _HEAD_CHUNK, offset)
        if not chunk:
            return None
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[:end])
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def last_line_start(fd: int, size: int) -> int:
    """Return the offset where the last line of a file of *size* bytes starts; the file
    must end with a newline. Reads backwards in growing windows (a line can be long)."""
    end = size - 1  # the final newline
    span = _TAIL_CHUNK
    while True:
        begin = max(0, end - span)
        newline = os.pread(fd, end - begin, begin).rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        if begin == 0:
            return 0
        span *= 2


def write_all(fd: int, data: bytes, *, point: str | None = None) -> None:
    """Write all of *data*, however many calls the kernel needs.

    *point* names a failpoint hit before the write; when it is the one that blocks, half
    of *data* is written first, so a kill there leaves a torn record on disk exactly as a
    crash in the middle of a large write does.
    """
    view = memoryview(data)
    if point is not None:
        if len(view) > 1 and failpoint_armed(point):
            view = view[os.write(fd, view[: len(view) // 2]) :]
        failpoint(point)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def make_dirs(directory: str, *, fsync: bool) -> None:
    """Create *directory* and its missing parents with mode 0700 (see ``sessionledger.files``)."""
    make_private_dirs(directory, fsync=fsync)


class HardLinkUnsupportedError(OSError):
    """The file system refuses hard links, which ``publish`` needs."""


def lock_exclusive(path: str) -> int | None:
    """Take an exclusive ``flock`` on the file *path* (created 0600 if missing) without
    waiting; return its descriptor, or None when another descriptor holds it.

    A lock on a file that was unlinked meanwhile (a concurrent delete) protects nothing,
    so the lock is retaken until it is held on the file that *path* names; if *path*
    keeps vanishing, ``FileNotFoundError`` is raised.
    """
    for _ in range(3):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | OPEN_FLAGS, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            current: os.stat_result | None = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(os.fstat(fd), current):
            return fd
        os.close(fd)
    raise FileNotFoundError(errno.ENOENT, "the lock file keeps vanishing", path)


def publish(path: str, content: bytes, *, fsync: bool) -> None:
    """Create the file *path* holding *content* (mode 0600), all at once or not at all.

    The bytes go to a fresh temp file beside it, which is made durable and then
    hard-linked to *path*: ``link`` never replaces, so an existing file raises
    ``FileExistsError`` and is left untouched (``HardLinkUnsupportedError`` where the
    file system has no hard links). With *fsync* the directory entry is made
    durable before returning. Temp files from earlier interrupted calls are removed
    first; the caller must hold the directory's lock.
    """
    directory, name = os.path.split(path)
    remove_matching(directory, f"{name}.", ".tmp")
    temp = f"{path}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | OPEN_FLAGS, FILE_MODE)
    try:
        try:
            failpoint("jsonl.publish.after-temp-create")
            write_all(fd, content, point="jsonl.publish.mid-write")
            failpoint("jsonl.publish.after-temp-write")
            if fsync:
                os.fsync(fd)
            failpoint("jsonl.publish.after-temp-fsync")
        finally:
            os.close(fd)
        try:
            os.link(temp, path)
        except OSError as error:
            if error.errno in _NO_HARD_LINKS:
                raise HardLinkUnsupportedError(error.errno, error.strerror, directory) from error
            raise
        failpoint("jsonl.publish.after-link")
    finally:
        unlink_quietly(temp)
    if fsync:
        fsync_dir(directory)
    failpoint("jsonl.publish.after-dir-fsync")


def truncate(path: str, size: int, *, fsync: bool) -> None:
    """Cut the file *path* to *size* bytes, durably with *fsync*."""
    fd = os.open(path, os.O_WRONLY | OPEN_FLAGS)
    try:
        os.ftruncate(fd, size)
        failpoint("jsonl.truncate.after-truncate")
        if fsync:
            os.fsync(fd)
        failpoint("jsonl.truncate.after-fsync")
    finally:
        os.close(fd)


def remove_matching(directory: str, prefix: str, suffix: str) -> None:
    """Remove the files of *directory* named ``prefix…suffix`` (best effort)."""
    for name in os.listdir(directory):
        if name.startswith(prefix) and name.endswith(suffix):
            unlink_quietly(os.path.join(directory, name))


def unlink_quietly(path: str) -> None:
    """Remove *path*; a failure is only logged (used for leftovers, never for data)."""
    try:
        os.unlink(path)
    except OSError:
        logger.debug("could not remove %s", path, exc_info=True)
