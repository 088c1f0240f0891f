"""Writing JSONL logs: publishing, appending, repairing and deleting, under a writer lock.

Durability (docs/durability.md): a session appears on disk atomically (temp file, fsync,
``link``, fsync of the directory, and of every directory above it up to the file
system's root once per store); an append is one ``write`` plus ``fsync`` of a batch framed
by its commit record, cut back to the previous size when either fails, so a retry never
duplicates a seq. Bytes a repair cuts are first copied into a quarantine file beside the
log and made durable. A publish that is retried after an error makes the directory
entries durable again before the batch counts as landed. The store's writer locks are
``sessionledger.storage._claims.Claims`` (one descriptor per store); readers never lock. Everything here is
blocking; the store runs it in worker threads.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sessionledger._errors import ConfigError, SessionLockedError, SessionNotFoundError
from sessionledger._failpoints import failpoint
from sessionledger.storage._claims import Claims
from sessionledger.storage._links import refuse_mount_points
from sessionledger.storage._logstore import Batch, Repair, RepairReceipt
from sessionledger_jsonl._directories import Place, SessionDirectories
from sessionledger_jsonl._files import FileSystem, HardLinkUnsupportedError
from sessionledger_jsonl._format import (
    LOG_NAME,
    committed_end,
    frame_batch,
    header_line,
    incarnation_of,
    quarantine_name,
    revision_of,
)

__all__ = ["Writers"]

_TEMP_SUFFIX = ".tmp"
#: The store's lock file and its holder notes, in the root (project keys never start
#: with a dot, so neither is taken for a project directory).
LOCKS_NAME = ".locks"
OWNERS_NAME = ".owners"


@dataclass(slots=True)
class _Writer:
    """What a store knows about a session whose writer lock it holds.

    ``size`` is the length of the log as this store last left it; ``next_seq`` the seq
    the next batch must start with (None: read it from the last commit record first);
    ``dirty`` marks a failed write whose rollback failed too, so the next write cuts back
    first.
    """

    place: Place
    size: int
    next_seq: int | None = None
    dirty: bool = False
    header: bytes = b""  # the header line, while no batch follows it (a cut took them all)
    incarnation: str = ""  # the header's token: with the file's status, the log's revision


class Writers:
    """The sessions one store writes, each under its writer lock."""

    def __init__(self, directories: SessionDirectories, *, fsync: bool) -> None:
        self._directories = directories
        self._system: FileSystem = directories.system
        self._fsync = fsync
        root = directories.root
        self._claims = Claims(
            os.path.join(root, LOCKS_NAME),
            os.path.join(root, OWNERS_NAME),
            prepare=functools.partial(self._system.make_root, root, fsync=fsync),
        )
        self._held: dict[str, _Writer] = {}
        self._root_durable = False  # the root's entry (and its parents') fsynced once

    # -- the primitives -------------------------------------------------------------------

    def create(
        self, batches: Sequence[Batch], check: Callable[[bytes], None] | None = None
    ) -> str | None:
        """Publish a new log holding the header and *batches* (each framed by its commit
        record) and return its revision; None if one exists. *check* gets the bytes read
        back from the durable temp file before it is linked; when it raises, nothing is
        published."""
        header = batches[0].header
        session_id = header.id
        existing = self._directories.find(session_id)
        if existing is not None:
            # Maybe this very batch, published by a call whose end was lost: it may count
            # as landed only once everything its directory entries depend on is durable.
            self._make_entries_durable(existing)
            return None
        place = self._directories.home(header)
        system = self._system
        directory = system.make_dirs(self._directories.root, place, fsync=self._fsync)
        failpoint("jsonl.materialize.after-mkdir")
        try:
            try:
                self._lock(session_id, place)
            except SessionLockedError:
                if system.kind(LOG_NAME, directory) == "file":
                    return None  # another writer published it, and holds it
                raise
            incarnation = secrets.token_hex(8)
            prefix = header_line(header, incarnation)
            content = b"".join(
                frame_batch(batch.records, batch.first_seq, batch.end_seq, prefix=prefix)
                if index == 0
                else frame_batch(batch.records, batch.first_seq, batch.end_seq)
                for index, batch in enumerate(batches)
            )
            try:
                status = self._publish(directory, content, check)
            except FileExistsError:
                self._claims.release(session_id)
                return None
            except HardLinkUnsupportedError as error:
                self._claims.release(session_id)
                raise ConfigError(
                    f"the file system under {self._directories.path(place, '')!r} cannot "
                    "make hard links, which the jsonl store needs to publish a log without "
                    "overwriting one",
                    session_id=session_id,
                ) from error
            except BaseException:
                self._claims.release(session_id)
                raise
        finally:
            system.close(directory)
        self._make_root_durable()
        self._directories.remember(session_id, place)
        self._held[session_id] = _Writer(
            place, len(content), batches[-1].end_seq, incarnation=incarnation
        )
        return revision_of(incarnation, status)

    def append(self, batch: Batch) -> str | None:
        """Append *batch* to a published log and return the log's revision once it is
        durable; None if the log does not end at its first seq (changed behind this
        store, or cut)."""
        return self._append(self._acquire(batch.header.id), batch)

    def repair(self, repair: Repair) -> tuple[RepairReceipt, str] | None:
        """Quarantine and cut the log at ``repair.cut_at``, then append the closers, if the
        log is still at ``repair.revision``, and return the receipt and the log's new
        revision; None (nothing changed) otherwise."""
        writer = self._acquire(repair.header.id)
        if self._directories.revision_at(writer.place) != repair.revision:
            return None
        receipt = RepairReceipt()
        if repair.cut_at is not None:
            receipt = self._cut(writer, repair.cut_at)
            failpoint("jsonl.repair.after-cut")
        if repair.closers is not None:
            revision = self._append(writer, repair.closers)
            if revision is None:
                return None
        else:
            revision = self._directories.revision_at(writer.place)
            if revision is None:
                raise SessionNotFoundError("the session's log is gone", session_id=repair.header.id)
        return receipt, revision

    def delete(self, session_id: str) -> bool:
        """Remove the session's directory and everything in it; False when it has none."""
        place = self._directories.find(session_id)
        if place is None:
            self.release(session_id)
            return False
        self._lock(session_id, place)
        system = self._system
        try:
            with self._directories.opened(place[:1]) as project:
                if project is None:
                    return False
                directory = system.open_dir(place[1], project)
                try:
                    # Readers stop seeing the session at this unlink; the rest is cleanup.
                    system.unlink(LOG_NAME, directory)
                    failpoint("jsonl.delete.after-unlink")
                    if self._fsync:
                        system.fsync(directory)
                    for name, _ in system.entries(directory):
                        with contextlib.suppress(OSError):
                            system.unlink(name, directory)
                finally:
                    system.close(directory)
                with contextlib.suppress(OSError):
                    system.rmdir(place[1], project)
                failpoint("jsonl.delete.after-remove")
                if self._fsync:
                    system.fsync(project)
        finally:
            self.release(session_id)
            self._directories.forget(session_id)
        return True

    def claim(self, session_id: str) -> None:
        """Become the session's one writer, or raise ``SessionLockedError``; a stored log
        with another name is refused here, before anything is written (``ConfigError``)."""
        if self._claims.holds(session_id):
            return
        self._check_mounts()
        self._claims.claim(session_id)
        try:
            place = self._directories.find(session_id)
            if place is not None:
                with self._log(_Writer(place, 0)) as (directory, fd):
                    self._check_one_name(directory, fd)
        except (FileNotFoundError, SessionNotFoundError):
            pass  # deleted meanwhile: nothing stored to check
        except BaseException:
            self._claims.release(session_id)
            raise

    def release(self, session_id: str) -> None:
        """Let go of the session's writer lock, if this store holds it."""
        self._held.pop(session_id, None)
        self._claims.release(session_id)

    def release_all(self) -> None:
        """Let go of every writer lock this store holds."""
        self._held.clear()
        self._claims.release_all()

    # -- publishing -------------------------------------------------------------------------

    def _publish(
        self, directory: int, content: bytes, check: Callable[[bytes], None] | None
    ) -> os.stat_result:
        """Create ``session.jsonl`` holding *content*, all at once or not at all, and
        return its status once published (the revision's part: ``link`` and the temp
        file's ``unlink`` change its ctime).

        The bytes go to a fresh temp file, which is made durable, read back for *check*
        (when given) and then hard-linked to the log's name: ``link`` never replaces, so
        an existing log raises ``FileExistsError`` and is left untouched. Temp files of
        earlier interrupted calls are removed first.
        """
        system = self._system
        for name, _ in system.entries(directory):
            if name.startswith(f"{LOG_NAME}.") and name.endswith(
                _TEMP_SUFFIX
            ):  # (unlink: no follow)
                system.unlink(name, directory)
        temp = f"{LOG_NAME}.{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        fd = system.create(temp, directory)
        try:
            try:
                failpoint("jsonl.publish.after-temp-create")
                system.write(fd, content, point="jsonl.publish.mid-write")
                failpoint("jsonl.publish.after-temp-write")
                if self._fsync:
                    system.fsync(fd)
                failpoint("jsonl.publish.after-temp-fsync")
                if check is not None:
                    check(system.read_all(fd))
            finally:
                system.close(fd)
            system.link(temp, LOG_NAME, directory)
            failpoint("jsonl.publish.after-link")
        finally:
            with contextlib.suppress(FileNotFoundError):
                system.unlink(temp, directory)
        failpoint("jsonl.publish.after-temp-unlink")
        if self._fsync:
            system.fsync(directory)
        failpoint("jsonl.publish.after-dir-fsync")
        fd = system.open_file(LOG_NAME, directory)
        try:
            return system.status(fd)
        finally:
            system.close(fd)

    def _make_entries_durable(self, place: Place) -> None:
        """fsync the session directory and every directory above it."""
        if not self._fsync:
            return
        system = self._system
        root = system.open_root(self._directories.root)
        try:
            project = system.open_dir(place[0], root)
            try:
                directory = system.open_dir(place[1], project)
                try:
                    system.fsync(directory)
                finally:
                    system.close(directory)
                system.fsync(project)
            finally:
                system.close(project)
        finally:
            system.close(root)
        self._root_durable = False
        self._make_root_durable()

    def _make_root_durable(self) -> None:
        if self._fsync and not self._root_durable:
            self._system.sync_ancestors(self._directories.root)
            self._root_durable = True

    # -- appending --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _log(self, writer: _Writer) -> Iterator[tuple[int, int]]:
        """Yield descriptors of the session directory and of its log, opened to append."""
        system = self._system
        with self._directories.opened(writer.place) as directory:
            if directory is None:
                raise SessionNotFoundError("the session's directory is gone")
            fd = system.open_file(LOG_NAME, directory, os.O_RDWR | os.O_APPEND)
            try:
                yield directory, fd
            finally:
                system.close(fd)

    def _append(self, writer: _Writer, batch: Batch) -> str | None:
        system = self._system
        with self._log(writer) as (_, fd):
            if not self._is_as_left(writer, fd):
                return None
            if writer.next_seq is None:
                writer.next_seq = self._stored_next_seq(writer, fd)
            if writer.next_seq != batch.first_seq:
                return None
            # The first batch's checksum covers the header line (docs/formats.md).
            body = frame_batch(batch.records, batch.first_seq, batch.end_seq, covered=writer.header)
            failpoint("jsonl.append.before-write")
            try:
                system.write(fd, body, point="jsonl.append.mid-write")
                failpoint("jsonl.append.after-write")
                if self._fsync:
                    system.fsync(fd)
                failpoint("jsonl.append.after-fsync")
            except OSError as error:
                self._roll_back(writer, fd, error)
                raise
            status = system.status(fd)
        writer.size += len(body)
        writer.next_seq = batch.end_seq
        writer.header = b""
        return revision_of(writer.incarnation, status)

    def _roll_back(self, writer: _Writer, fd: int, error: OSError) -> None:
        """Cut a failed append back, so a retry of the batch cannot duplicate its seqs."""
        failpoint("jsonl.append.before-rollback")
        try:
            self._system.truncate(fd, writer.size)
            failpoint("jsonl.append.after-rollback-truncate")
            if self._fsync:
                self._system.fsync(fd)
        except OSError as rollback:
            writer.dirty = True
            error.add_note(
                f"rolling {self._directories.path(writer.place)!r} back to {writer.size} "
                f"bytes failed too ({rollback}); the next write retries the rollback first"
            )

    def _is_as_left(self, writer: _Writer, fd: int) -> bool:
        """Tell whether the log is as this store left it (after retrying a rollback)."""
        size = self._system.size(fd)
        if size == writer.size:
            return True
        if writer.dirty and size > writer.size:
            self._system.truncate(fd, writer.size)
            if self._fsync:
                self._system.fsync(fd)
            writer.dirty = False
            return True
        return False

    def _stored_next_seq(self, writer: _Writer, fd: int) -> int | None:
        """The seq after the log's last batch (0 when only the header is left), or None
        when it does not end with a complete batch."""
        system = self._system
        size = writer.size
        if size == 0 or system.read_at(fd, 1, size - 1) != b"\n":
            return None
        start = system.last_line_start(fd, size)
        if start == 0:
            writer.header = system.read_at(fd, size, 0)  # the next batch is the first
            return 0
        return committed_end(system.read_at(fd, size - 1 - start, start))

    # -- repairing --------------------------------------------------------------------------

    def _cut(self, writer: _Writer, cut_at: int) -> RepairReceipt:
        """Move the log's bytes from *cut_at* on into a new quarantine file beside it
        (durably), then cut the log there (durably)."""
        system = self._system
        with self._log(writer) as (directory, fd):
            size = system.size(fd)
            if cut_at >= size:
                return RepairReceipt()
            moved = system.read_at(fd, size - cut_at, cut_at)
            stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            name = quarantine_name(stamp)
            quarantine = system.create(name, directory)
            try:
                system.write(quarantine, moved)
                if self._fsync:
                    system.fsync(quarantine)
            finally:
                system.close(quarantine)
            failpoint("jsonl.quarantine.after-write")
            if self._fsync:
                system.fsync(directory)
            failpoint("jsonl.truncate.before")
            system.truncate(fd, cut_at)
            failpoint("jsonl.truncate.after-truncate")
            if self._fsync:
                system.fsync(fd)
            failpoint("jsonl.truncate.after-fsync")
        writer.size = cut_at
        writer.next_seq = None
        writer.dirty = False
        return RepairReceipt(self._directories.path(writer.place, name), len(moved))

    # -- locks ------------------------------------------------------------------------------

    def _acquire(self, session_id: str) -> _Writer:
        """Return the write state of a stored session, locking it first if needed."""
        writer = self._held.get(session_id)
        if writer is not None:
            return writer
        place = self._directories.find(session_id)
        if place is None:
            raise SessionNotFoundError("the session has no stored log", session_id=session_id)
        self._lock(session_id, place)
        try:
            with self._log(_Writer(place, 0)) as (directory, fd):
                self._check_one_name(directory, fd)
                size = self._system.size(fd)
                incarnation = incarnation_of(self._system.first_line(fd))
        except FileNotFoundError as error:
            self._claims.release(session_id)
            raise SessionNotFoundError(
                "the session was deleted meanwhile", session_id=session_id
            ) from error
        except BaseException:
            self._claims.release(session_id)
            raise
        writer = self._held[session_id] = _Writer(place, size, incarnation=incarnation)
        return writer

    def _lock(self, session_id: str, place: Place) -> None:
        """Take the session's writer lock without waiting, or raise ``SessionLockedError``
        (naming the holder, and where the session lives)."""
        if not self._claims.holds(session_id):
            self._check_mounts()
        try:
            self._claims.claim(session_id)
        except SessionLockedError as error:
            error.add_note(f"the session's log: {self._directories.path(place)}")
            raise
        failpoint("jsonl.lock.after-acquire")

    def _check_mounts(self) -> None:
        """Refuse a mount point inside the root (``ConfigError``): a directory or file
        bound there from another store would be written without that store's lock."""
        refuse_mount_points((), within=self._directories.root, mounts=self._system.mount_points())

    def _check_one_name(self, directory: int, fd: int) -> None:
        """Refuse a log with another name (a hard link, maybe into another store, whose
        writers would not meet this store's lock). A publish interrupted between its
        ``link`` and the temp file's ``unlink`` leaves that temp file as a second name:
        this writer holds the session, so it removes it first, as a new publish does."""
        system = self._system
        if system.status(fd).st_nlink != 1:
            for name, _ in system.entries(directory):
                if name.startswith(f"{LOG_NAME}.") and name.endswith(_TEMP_SUFFIX):
                    system.unlink(name, directory)
            if self._fsync:
                system.fsync(directory)
        system.check_one_name(fd, LOG_NAME, directory)
