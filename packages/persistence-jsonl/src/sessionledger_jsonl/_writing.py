"""Writing JSONL logs: publishing, appending, repairing and deleting, under a ``flock``.

Durability (SPEC §12): a session appears on disk atomically (temp file, fsync,
``os.link``, fsync of the directory); an append is one ``write`` plus ``fsync`` and is
cut back to the previous size when either fails, so a retry never duplicates a seq.
Cross-process safety: the first write (or repair) by a store takes an exclusive
``flock`` on the session's ``lock`` file and keeps it until release, delete or close;
readers never lock. Everything here is blocking; the store runs it in worker threads.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass

from sessionledger._failpoints import failpoint
from sessionledger.errors import (
    ConfigError,
    LedgerError,
    SessionLockedError,
    SessionNotFoundError,
)
from sessionledger.logstore import Batch, Repair
from sessionledger_jsonl import _files
from sessionledger_jsonl._directories import SessionDirectories, revision_at
from sessionledger_jsonl._format import (
    LOCK_NAME,
    LOG_NAME,
    encode_records,
    header_line,
    seq_after_line,
)

__all__ = ["Writers"]


@dataclass(slots=True)
class _Writer:
    """What a store knows about a session whose lock it holds.

    ``size`` is the length of the log as this store last left it; ``next_seq`` the seq
    the next batch must start with (None: read it from the last line first); ``dirty``
    marks a failed write whose rollback failed too, so the next write cuts back first.
    """

    directory: str
    lock_fd: int
    size: int
    next_seq: int | None = None
    dirty: bool = False

    @property
    def path(self) -> str:
        return os.path.join(self.directory, LOG_NAME)


class Writers:
    """The sessions one store writes, each with its lock held."""

    def __init__(self, directories: SessionDirectories, *, fsync: bool) -> None:
        self._directories = directories
        self._fsync = fsync
        self._held: dict[str, _Writer] = {}

    # -- the primitives -------------------------------------------------------------------

    def create(self, batch: Batch) -> bool:
        """Publish a new log holding the header and *batch*; False if one exists."""
        header = batch.header
        session_id = header.id
        if self._directories.find(session_id) is not None:
            return False
        directory = self._directories.home(header)
        path = os.path.join(directory, LOG_NAME)
        content = header_line(header, secrets.token_hex(8)) + encode_records(batch.records)
        _files.make_dirs(directory, fsync=self._fsync)
        failpoint("jsonl.materialize.after-mkdir")
        try:
            lock_fd = self._take_lock(session_id, directory)
        except SessionLockedError:
            if _files.exists(path):
                return False  # another writer published it and holds it
            raise
        try:
            _files.publish(path, content, fsync=self._fsync)
        except FileExistsError:
            os.close(lock_fd)
            return False
        except _files.HardLinkUnsupportedError as error:
            os.close(lock_fd)
            raise ConfigError(
                f"the file system under {directory!r} cannot make hard links, which the "
                "jsonl store needs to publish a log without overwriting one",
                session_id=session_id,
            ) from error
        except BaseException:
            os.close(lock_fd)
            raise
        self._directories.remember(session_id, directory)
        self._held[session_id] = _Writer(directory, lock_fd, len(content), batch.end_seq)
        return True

    def append(self, batch: Batch) -> bool:
        """Append *batch* to a published log; False if the log does not end at its first
        seq (changed behind this store, or cut)."""
        return self._append(self._acquire(batch.header.id), batch)

    def repair(self, repair: Repair) -> bool:
        """Cut the log at ``repair.cut_at`` and append the closers, if the log is still at
        ``repair.revision``; False (nothing changed) otherwise."""
        writer = self._acquire(repair.header.id)
        if revision_at(writer.path) != repair.revision:
            return False
        if repair.cut_at is not None:
            failpoint("jsonl.truncate.before")
            _files.truncate(writer.path, repair.cut_at, fsync=self._fsync)
            writer.size = repair.cut_at
            writer.next_seq = None
            writer.dirty = False
            failpoint("jsonl.repair.after-cut")
        return repair.closers is None or self._append(writer, repair.closers)

    def delete(self, session_id: str) -> bool:
        """Remove the session's directory; False when it has none."""
        directory = self._directories.find(session_id)
        if directory is None:
            self.release(session_id)
            return False
        writer = self._held.get(session_id)
        if writer is not None and writer.directory == directory:
            lock_fd = writer.lock_fd
            del self._held[session_id]
        else:
            self.release(session_id)
            lock_fd = self._take_lock(session_id, directory)
        try:
            # Readers stop seeing the session at this unlink; the rest is cleanup.
            os.unlink(os.path.join(directory, LOG_NAME))
            failpoint("jsonl.delete.after-unlink")
            shutil.rmtree(directory, ignore_errors=True)
            if self._fsync:
                _files.fsync_dir(os.path.dirname(directory))
        finally:
            os.close(lock_fd)
            self._directories.forget(session_id)
        return True

    def release(self, session_id: str) -> None:
        """Close the session's lock descriptor, if this store holds it."""
        writer = self._held.pop(session_id, None)
        if writer is not None:
            os.close(writer.lock_fd)

    def release_all(self) -> None:
        """Close every lock descriptor this store holds."""
        for session_id in list(self._held):
            self.release(session_id)

    # -- appending ------------------------------------------------------------------------

    def _append(self, writer: _Writer, batch: Batch) -> bool:
        body = encode_records(batch.records)
        fd = os.open(writer.path, os.O_RDWR | os.O_APPEND | _files.OPEN_FLAGS)
        try:
            if not self._is_as_left(writer, fd):
                return False
            if writer.next_seq is None:
                writer.next_seq = _stored_next_seq(fd, writer.size)
            if writer.next_seq != batch.first_seq:
                return False
            failpoint("jsonl.append.before-write")
            try:
                _files.write_all(fd, body, point="jsonl.append.mid-write")
                failpoint("jsonl.append.after-write")
                if self._fsync:
                    os.fsync(fd)
                failpoint("jsonl.append.after-fsync")
            except OSError as error:
                self._roll_back(writer, fd, error)
                raise
        finally:
            os.close(fd)
        writer.size += len(body)
        writer.next_seq = batch.end_seq
        return True

    def _roll_back(self, writer: _Writer, fd: int, error: OSError) -> None:
        """Cut a failed append back, so a retry of the batch cannot duplicate its seqs."""
        failpoint("jsonl.append.before-rollback")
        try:
            os.ftruncate(fd, writer.size)
            if self._fsync:
                os.fsync(fd)
        except OSError as rollback:
            writer.dirty = True
            error.add_note(
                f"rolling {writer.path!r} back to {writer.size} bytes failed too "
                f"({rollback}); the next write retries the rollback first"
            )

    def _is_as_left(self, writer: _Writer, fd: int) -> bool:
        """Tell whether the log is as this store left it (after retrying a rollback)."""
        size = os.fstat(fd).st_size
        if size == writer.size:
            return True
        if writer.dirty and size > writer.size:
            os.ftruncate(fd, writer.size)
            if self._fsync:
                os.fsync(fd)
            writer.dirty = False
            return True
        return False

    # -- locks ----------------------------------------------------------------------------

    def _acquire(self, session_id: str) -> _Writer:
        """Return the write state of a stored session, locking it first if needed."""
        writer = self._held.get(session_id)
        if writer is not None:
            return writer
        directory = self._directories.find(session_id)
        if directory is None:
            raise SessionNotFoundError("the session has no stored log", session_id=session_id)
        lock_fd = self._take_lock(session_id, directory)
        try:
            size = os.stat(os.path.join(directory, LOG_NAME)).st_size
        except FileNotFoundError as error:
            os.close(lock_fd)
            raise SessionNotFoundError(
                "the session was deleted meanwhile", session_id=session_id
            ) from error
        writer = self._held[session_id] = _Writer(directory, lock_fd, size)
        return writer

    def _take_lock(self, session_id: str, directory: str) -> int:
        """Take the session's exclusive lock without waiting; return its descriptor."""
        lock_path = os.path.join(directory, LOCK_NAME)
        try:
            fd = _files.lock_exclusive(lock_path)
        except FileNotFoundError as error:
            raise SessionNotFoundError(
                "the session was deleted while being locked", session_id=session_id
            ) from error
        if fd is None:
            raise SessionLockedError(
                f"another writer holds {lock_path!r} (a live session in another process or "
                "store object); close it there first",
                session_id=session_id,
            )
        failpoint("jsonl.lock.after-acquire")
        return fd


def _stored_next_seq(fd: int, size: int) -> int | None:
    """Read the seq that follows the last line of the log (0 after a bare header), or
    None when the log does not end with a complete, readable record."""
    if size == 0 or os.pread(fd, 1, size - 1) != b"\n":
        return None
    start = _files.last_line_start(fd, size)
    if start == 0:
        return 0  # the header is the last line
    try:
        return seq_after_line(os.pread(fd, size - 1 - start, start))
    except (LedgerError, TypeError, ValueError, KeyError, IndexError):
        return None
