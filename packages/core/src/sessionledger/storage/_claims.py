"""Writer claims for stores kept in local files: one lock file, a byte each.

What a claim is for: docs/durability.md, "one writer per session".

A claim is an open-file-description lock (``F_OFD_SETLK``) on one byte of a store's lock
file, at an offset derived from the session id. Every claim of one store object shares
one descriptor, so a process can hold thousands of sessions live; another store object,
in this process or another, conflicts with it; and the kernel drops it when the process
dies, even by SIGKILL, so a dead holder never needs a timeout to be waited out. A child
the process forks shares that descriptor's open file description, and with it the locks,
so every child closes its copies at once (without unlocking: that would unlock the
parent's): a worker that outlives a killed writer keeps nothing alive. An ``exec`` never
inherits the descriptor (``O_CLOEXEC``). Beside
the lock file a directory keeps one small note per claim naming its holder (host, pid,
since): a refusal can then say who holds the session. A note is advice for messages,
never trusted for the lock itself. The JSONL and SQLite stores use this.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import hashlib
import os
import socket
import struct
import threading
import weakref
from collections.abc import Callable
from typing import Final

import orjson

from sessionledger._errors import SessionLockedError
from sessionledger.storage._files import DIR_MODE, FILE_MODE
from sessionledger.storage._links import open_own_file

_NO_FOLLOW: Final = os.O_NOFOLLOW | os.O_CLOEXEC


def claim_offset(session_id: str) -> int:
    """The byte of a lock file that stands for *session_id* (a positive 62-bit offset)."""
    digest = hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


def _lock_byte(fd: int, offset: int, kind: int) -> bool:
    request = struct.pack("hhqqi", kind, os.SEEK_SET, offset, 1, 0)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


#: Every ``Claims`` of this process, for the fork handler below.
_EVERY: weakref.WeakSet[Claims] = weakref.WeakSet()


def _drop_inherited_claims() -> None:
    """Run in each forked child: close its copies of the claim descriptors."""
    for claims in list(_EVERY):
        claims._drop_inherited()


os.register_at_fork(after_in_child=_drop_inherited_claims)


class Claims:
    """The writer claims of one store object.

    *lock_path* is the lock file (created ``0600`` on the first claim), *notes_path* the
    directory of holder notes (created ``0700``); neither may be a symbolic link, and a
    lock file with another name is refused (``ConfigError``, docs/durability.md).
    *prepare* runs before the first claim (a store creates its directory there).
    Every method works on files, so a store calls them in a worker thread, never on the
    event loop (docs/backends.md, "no blocking call on the event loop"); one lock keeps
    calls from several threads from sharing a descriptor that one of them closes.
    """

    def __init__(
        self, lock_path: str, notes_path: str, *, prepare: Callable[[], None] | None = None
    ) -> None:
        self._lock_path = lock_path
        self._notes_path = notes_path
        self._prepare = prepare
        self._fd: int | None = None
        self._closer: weakref.finalize[[int], Claims] | None = None
        self._held: set[str] = set()
        self._guard = threading.RLock()
        _EVERY.add(self)

    def holds(self, session_id: str) -> bool:
        """Tell whether this store object holds *session_id*."""
        return session_id in self._held

    def claim(self, session_id: str) -> None:
        """Take *session_id*'s claim at once, or raise ``SessionLockedError`` naming the
        holder as its note has it."""
        with self._guard:
            self._claim(session_id)

    def _claim(self, session_id: str) -> None:
        if session_id in self._held:
            return
        fd = self._descriptor()
        if not _lock_byte(fd, claim_offset(session_id), fcntl.F_WRLCK):
            raise SessionLockedError(
                f"another writer holds the session ({self._holder(session_id)}); it is "
                "released when that writer releases or closes it, or its process ends",
                session_id=session_id,
            )
        self._held.add(session_id)
        with contextlib.suppress(OSError):  # a note is advice: its failure changes nothing
            self._write_note(session_id)

    def release(self, session_id: str) -> None:
        """Let go of *session_id*'s claim, if held; the descriptor closes with the last."""
        with self._guard:
            self._release(session_id)

    def _release(self, session_id: str) -> None:
        if session_id not in self._held:
            return
        self._held.discard(session_id)
        with contextlib.suppress(OSError):
            self._remove_note(session_id)
        if self._fd is not None:
            _lock_byte(self._fd, claim_offset(session_id), fcntl.F_UNLCK)
            if not self._held:
                self._close_descriptor()

    def release_all(self) -> None:
        """Let go of every claim this store object holds."""
        with self._guard:
            for session_id in list(self._held):
                self._release(session_id)

    def _descriptor(self) -> int:
        if self._fd is None:
            if self._prepare is not None:
                self._prepare()
            fd = open_own_file(self._lock_path, os.O_RDWR)
            self._fd = fd
            # A store dropped without close lets go of its claims when it is collected,
            # as a process that ends does.
            self._closer = weakref.finalize(self, os.close, fd)
        return self._fd

    def _drop_inherited(self) -> None:
        # In a forked child: this copy of the descriptor shares the parent's locks, so it
        # is closed, never unlocked, and the child holds nothing.
        if self._closer is not None:
            self._closer.detach()
            self._closer = None
        fd, self._fd = self._fd, None
        self._held.clear()
        self._guard = threading.RLock()  # another thread may have held it at the fork
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _close_descriptor(self) -> None:
        if self._closer is not None:
            self._closer()  # closes the descriptor, once
            self._closer = None
        self._fd = None

    # -- holder notes -------------------------------------------------------------------

    def _notes(self, *, create: bool) -> int:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self._notes_path, DIR_MODE)
                os.chmod(self._notes_path, DIR_MODE)
        return os.open(self._notes_path, os.O_RDONLY | os.O_DIRECTORY | _NO_FOLLOW)

    @staticmethod
    def _note_name(session_id: str) -> str:
        return f"{claim_offset(session_id):016x}.json"

    def _write_note(self, session_id: str) -> None:
        note = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        directory = self._notes(create=True)
        name = self._note_name(session_id)
        try:
            # A new file every time: a name left there (a hard link to a file elsewhere
            # too) is removed, never written through.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{name}.tmp", dir_fd=directory)
            fd = os.open(
                f"{name}.tmp",
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW,
                FILE_MODE,
                dir_fd=directory,
            )
            try:
                os.write(fd, orjson.dumps(note))
            finally:
                os.close(fd)
            os.replace(f"{name}.tmp", name, src_dir_fd=directory, dst_dir_fd=directory)
        except OSError:
            with contextlib.suppress(OSError):  # a full disk: leave no half-written note
                os.unlink(f"{name}.tmp", dir_fd=directory)
            raise
        finally:
            os.close(directory)

    def _remove_note(self, session_id: str) -> None:
        directory = self._notes(create=False)
        try:
            os.unlink(self._note_name(session_id), dir_fd=directory)
        finally:
            os.close(directory)

    def _holder(self, session_id: str) -> str:
        """Who the note says holds *session_id*, or that it does not say."""
        try:
            directory = self._notes(create=False)
            try:
                fd = os.open(
                    self._note_name(session_id), os.O_RDONLY | _NO_FOLLOW, dir_fd=directory
                )
            finally:
                os.close(directory)
            try:
                note = orjson.loads(os.read(fd, 4096))
            finally:
                os.close(fd)
            host, since = str(note["host"])[:80], str(note["since"])[:40]
            return f"pid {int(note['pid'])} on {host}, since {since}"
        except (OSError, ValueError, KeyError, TypeError):
            return "holder unknown"
