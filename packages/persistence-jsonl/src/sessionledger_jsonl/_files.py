"""Every file-system call of the JSONL store, through one object: ``FileSystem``.

All names are opened relative to a directory descriptor and never through a symbolic
link (``O_NOFOLLOW``, ``follow_symlinks=False``), so nothing is ever read, created,
written, cut or removed outside the store root (docs/durability.md, "files and
directories"). What the store creates gets its private mode explicitly (directories
``0700``, files ``0600``), whatever the umask.
The store takes a ``FileSystem`` at construction: tests hand it one that records every
call (the power-loss harness) or fails chosen ones. Everything here blocks; the store
runs it in worker threads. ``translate_os_error`` is the one place an ``OSError`` becomes
a ``LedgerError``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from typing import Final

from sessionledger._errors import ConfigError, ResourceLimitError
from sessionledger._failpoints import failpoint, failpoint_armed
from sessionledger.storage._files import DIR_MODE, FILE_MODE, missing_directories, open_private_file
from sessionledger.storage._links import mount_points, single_name_refusal

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "FileSystem",
    "HardLinkUnsupportedError",
    "SharedFileRefusedError",
    "translate_os_error",
]

logger = logging.getLogger("sessionledger")

_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_NOFOLLOW | os.O_CLOEXEC
_HEAD_CHUNK: Final = 8192
_TAIL_CHUNK: Final = 64 * 1024
_NO_HARD_LINKS: Final = frozenset((errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP))
_EXHAUSTED: Final = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG))


class HardLinkUnsupportedError(OSError):
    """The file system refuses hard links, which publishing a log needs."""


class SymlinkRefusedError(OSError):
    """A symbolic link stands where the store expects a directory or a file."""


class SharedFileRefusedError(OSError):
    """A file the store writes has another name (a hard link), so a write would land
    outside the store too; ``strerror`` says so (docs/durability.md)."""


def translate_os_error(error: OSError, session_id: str | None) -> BaseException:
    """Map an OSError to the ``LedgerError`` a user can act on, or return it unchanged:
    I/O errors stay ``OSError``, and the failed operation may be retried as it is."""
    where = error.filename or "the jsonl store"
    reason = error.strerror or str(error)
    if isinstance(error, SharedFileRefusedError):
        return ConfigError(reason, session_id=session_id)
    if isinstance(error, SymlinkRefusedError) or error.errno == errno.ELOOP:
        return ConfigError(
            f"{where!s} is a symbolic link; the jsonl store never follows links inside "
            "its root (replace it with a real directory or file)",
            session_id=session_id,
        )
    if error.errno in _EXHAUSTED:
        return ResourceLimitError(
            f"{where!s}: {reason}", errno=error.errno, session_id=session_id, path=str(where)
        )
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


class FileSystem:
    """The calls the JSONL store makes, each relative to a directory descriptor.

    Subclass it to watch or fail calls: the store calls nothing else (and ``os`` only
    through it). Mutating calls are ``mkdir``, ``create``, ``write``, ``truncate``,
    ``fsync``, ``link``, ``rename``, ``unlink`` and ``rmdir``.
    """

    # -- directories ------------------------------------------------------------------

    def open_root(self, path: str) -> int:
        """Open the store root (the path the user gave may go through links)."""
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def open_dir(self, name: str, dir_fd: int) -> int:
        """Open the directory *name* inside *dir_fd*, refusing a symbolic link."""
        try:
            return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
        except OSError as error:
            raise self._refined(error, name, dir_fd) from None

    def mkdir(self, name: str, dir_fd: int) -> None:
        """Create the directory *name* (mode ``0700`` whatever the umask)."""
        os.mkdir(name, DIR_MODE, dir_fd=dir_fd)
        fd = self.open_dir(name, dir_fd)
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) != DIR_MODE:
                os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)

    def entries(self, dir_fd: int) -> list[tuple[str, str]]:
        """Return ``(name, kind)`` for each entry: ``"dir"``, ``"file"``, ``"link"`` (a
        symbolic link, never followed) or ``"other"``."""
        with os.scandir(dir_fd) as found:
            return [(entry.name, _kind_of(entry)) for entry in found]

    def kind(self, name: str, dir_fd: int) -> str | None:
        """Return ``"dir"``, ``"file"``, ``"link"`` or ``"other"`` for *name*, or None."""
        try:
            status = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        mode = status.st_mode
        if stat.S_ISLNK(mode):
            return "link"
        return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"

    # -- files ------------------------------------------------------------------------

    def open_file(self, name: str, dir_fd: int, flags: int = os.O_RDONLY) -> int:
        """Open the existing file *name*, refusing a symbolic link."""
        try:
            return os.open(name, flags | _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as error:
            raise self._refined(error, name, dir_fd) from None

    def create(self, name: str, dir_fd: int, *, exclusive: bool = True) -> int:
        """Create (or, not *exclusive*, open or create) *name* for writing, mode ``0600``."""
        flags = os.O_RDWR | (os.O_EXCL if exclusive else 0)
        try:
            return open_private_file(name, flags, dir_fd=dir_fd)
        except OSError as error:
            raise self._refined(error, name, dir_fd) from None

    def write(self, fd: int, data: bytes, *, point: str | None = None) -> None:
        """Write all of *data* at the end of the file (*fd* is opened ``O_APPEND`` or new).

        *point* names a failpoint hit before the write; when it is the one that blocks,
        half of *data* is written first, so a kill there leaves a torn record on disk
        exactly as a crash in the middle of a large write does.
        """
        view = memoryview(data)
        if point is not None:
            if len(view) > 1 and failpoint_armed(point):
                view = view[os.write(fd, view[: len(view) // 2]) :]
            failpoint(point)
        while view:
            view = view[os.write(fd, view) :]

    def truncate(self, fd: int, size: int) -> None:
        """Cut the file to *size* bytes."""
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        """Make a file's data, or a directory's entries, durable."""
        os.fsync(fd)

    def link(self, source: str, target: str, dir_fd: int) -> None:
        """Give the file *source* the name *target* too; never replaces an existing one."""
        try:
            os.link(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except OSError as error:
            if error.errno in _NO_HARD_LINKS:
                raise HardLinkUnsupportedError(error.errno, error.strerror, target) from error
            raise

    def rename(self, source: str, target: str, dir_fd: int) -> None:
        """Give the file *source* the name *target*, replacing what *target* names (a link
        there is replaced, never followed): the atomic rewrite of a store-wide file."""
        os.rename(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def unlink(self, name: str, dir_fd: int) -> None:
        """Remove the name *name* (a link is removed, never followed)."""
        os.unlink(name, dir_fd=dir_fd)

    def rmdir(self, name: str, dir_fd: int) -> None:
        """Remove the empty directory *name*."""
        os.rmdir(name, dir_fd=dir_fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def lock_exclusive(self, fd: int) -> None:
        """Wait for, then hold, the file's exclusive ``flock`` until *fd* is closed."""
        fcntl.flock(fd, fcntl.LOCK_EX)

    def status(self, fd: int) -> os.stat_result:
        return os.fstat(fd)

    def check_one_name(self, fd: int, name: str, dir_fd: int) -> None:
        """Raise ``SharedFileRefusedError`` when the open file *name* (inside *dir_fd*)
        has another name: a write to it would land outside the store too."""
        path = self.path(name, dir_fd)
        refusal = single_name_refusal(path, self.status(fd))
        if refusal is not None:
            raise SharedFileRefusedError(errno.EMLINK, str(refusal), path)

    def mount_points(self) -> frozenset[str]:
        """Every mount point this process sees (``sessionledger.storage._links``)."""
        return mount_points()

    def read_all(self, fd: int) -> bytes:
        """Read the file from its start to its end, wherever the end is by then.

        Asking for the current size and one byte more usually reads the whole file at
        once: a large log is then neither read in pieces nor joined (a copy of it all).
        A file that grew meanwhile is read on to its new end."""
        chunks = []
        offset = 0
        size = os.fstat(fd).st_size
        while chunk := os.pread(fd, min(max(size + 1 - offset, 1 << 16), 1 << 30), offset):
            chunks.append(chunk)
            offset += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_at(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def _refined(self, error: OSError, name: str, dir_fd: int) -> OSError:
        """Name the path in an error, and say so when a symbolic link was refused."""
        if error.errno in (errno.ELOOP, errno.ENOTDIR) and self.kind(name, dir_fd) == "link":
            return SymlinkRefusedError(
                errno.ELOOP, "symbolic link refused", self.path(name, dir_fd)
            )
        if error.filename is None:
            error.filename = self.path(name, dir_fd)
        return error

    def path(self, name: str, dir_fd: int) -> str:
        """A readable path for *name* inside *dir_fd*, for messages."""
        try:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        except OSError:
            return name

    # -- helpers built on the calls above ---------------------------------------------

    def first_line(self, fd: int) -> bytes | None:
        """Return the first line without its newline (None: there is none), reading in
        small chunks so a header costs one small read however long the log is."""
        chunks: list[bytes] = []
        offset = 0
        while True:
            chunk = self.read_at(fd, _HEAD_CHUNK, offset)
            if not chunk:
                return None
            end = chunk.find(b"\n")
            if end >= 0:
                chunks.append(chunk[:end])
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)

    def open_appending(self, name: str, dir_fd: int) -> tuple[int, bool]:
        """Open *name* to append (``O_APPEND``: concurrent writers' lines never overlap),
        creating it (``0600``) when missing; return the descriptor and whether this call
        created the file (its directory entry then still needs an fsync)."""
        flags = os.O_RDWR | os.O_APPEND
        try:
            return self.open_file(name, dir_fd, flags), False
        except FileNotFoundError:
            pass
        created = True
        try:
            self.close(self.create(name, dir_fd))
        except FileExistsError:
            created = False  # another writer made it meanwhile
        return self.open_file(name, dir_fd, flags), created

    def append_line(
        self, name: str, dir_fd: int, line: bytes, *, fsync: bool, point: str | None = None
    ) -> bool:
        """Append one newline-ended *line* to *name* (created when missing) in one write,
        after a newline of its own when the file ends in a torn line, so a line is never
        merged with one a crashed writer left; with *fsync*, durably. Return whether this
        call created the file (its directory entry then still needs an fsync). The summary
        index and the audit log both keep their records this way."""
        fd, created = self.open_appending(name, dir_fd)
        try:
            self.check_one_name(fd, name, dir_fd)
            # Appenders take turns: a concurrent line that crosses a page boundary becomes
            # visible in two steps, and the torn-line check below must not see it half
            # written (it would add an empty line). Readers never need the lock.
            self.lock_exclusive(fd)
            size = self.size(fd)
            if size and self.read_at(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            self.write(fd, line, point=point)
            if fsync:
                self.fsync(fd)
        finally:
            self.close(fd)
        return created

    def last_line_start(self, fd: int, size: int) -> int:
        """Return where the last line of a file of *size* bytes starts; the file must end
        with a newline. Reads backwards in growing windows (a line can be long)."""
        end = size - 1  # the final newline
        span = _TAIL_CHUNK
        while True:
            begin = max(0, end - span)
            newline = self.read_at(fd, end - begin, begin).rfind(b"\n")
            if newline >= 0:
                return begin + newline + 1
            if begin == 0:
                return 0
            span *= 2

    def make_dirs(self, root: str, parts: tuple[str, ...], *, fsync: bool) -> int:
        """Open ``root/parts...``, creating what is missing (``0700``), and return the last
        one's descriptor. With *fsync*, each directory's entry is made durable (its parent
        fsynced) also when it already existed: an earlier call that failed may have made
        it without making it durable, and a retry must not count on it."""
        self.make_root(root, fsync=fsync)
        fd = self.open_root(root)
        try:
            for name in parts:
                try:
                    child = self.open_dir(name, fd)
                except FileNotFoundError:
                    with contextlib.suppress(FileExistsError):
                        self.mkdir(name, fd)
                        failpoint("jsonl.mkdir.before-fsync")
                    child = self.open_dir(name, fd)
                try:
                    if fsync:
                        self.fsync(fd)  # the entry of *name*
                except BaseException:
                    self.close(child)
                    raise
                self.close(fd)
                fd = child
        except BaseException:
            self.close(fd)
            raise
        return fd

    def make_root(self, root: str, *, fsync: bool) -> None:
        """Create the store root and its missing parents (``0700``), each entry made
        durable (with *fsync*) before anything is created inside it."""
        # Above the root, the user's links are followed (os.path.isdir).
        for path in missing_directories(root):
            parent_fd = self.open_root(os.path.dirname(path))
            try:
                name = os.path.basename(path)
                try:
                    self.mkdir(name, parent_fd)
                    failpoint("jsonl.mkdir.before-fsync")
                except FileExistsError:
                    self.close(self.open_dir(name, parent_fd))  # made meanwhile, or a link
                if fsync:
                    self.fsync(parent_fd)
            finally:
                self.close(parent_fd)

    def sync_ancestors(self, root: str) -> None:
        """fsync the store root and every directory above it, so the root's own entry
        (and its parents', where the store created them) is durable. Directories above
        the root that cannot be opened are left alone."""
        path = root
        while True:
            try:
                fd = self.open_root(path)
            except (PermissionError, FileNotFoundError):
                if path != root:
                    return
                raise
            try:
                self.fsync(fd)
            finally:
                self.close(fd)
            parent = os.path.dirname(path)
            if parent == path:
                return
            path = parent


def _kind_of(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "link"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"
