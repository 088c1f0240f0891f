"""``JsonlPersistence``: each session as one append-only JSONL file in a directory tree.

Layout and format are SPEC §12: ``ROOT/<project-key>/<encoded-id>/session.jsonl`` whose
first line is the header and every later line one storage record (an event envelope or a
packed chunk row). This module implements only the storage primitives of
``SessionPersistence``; every policy (committed region, torn tails, repair, version and
identity checks, sequencing) is the core's.

Durability: a session appears on disk atomically (temp file, fsync, ``os.link``, fsync of
the directory); an append is one ``write`` plus ``fsync`` and is cut back to the previous
size when either fails, so a retry never duplicates a seq. Cross-process safety: the
first write (or truncation) by a store takes an exclusive ``flock`` on the session's
``lock`` file and keeps it until ``delete``/``close``; readers never lock.

All file I/O runs in worker threads; OSErrors are translated in one place (``_run``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, TypeVar, final

from sessionledger._failpoints import failpoint
from sessionledger.errors import (
    ConfigError,
    CorruptLogError,
    HeaderError,
    LedgerError,
    SeqMismatchError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
)
from sessionledger.events import SessionHeader
from sessionledger.persistence import RawLog, RawRecord, SessionPersistence
from sessionledger.registry import EventTypeRegistry
from sessionledger_jsonl import _files
from sessionledger_jsonl._format import (
    INCARNATION_KEY,
    LOCK_NAME,
    LOG_NAME,
    digest,
    encode_records,
    header_line,
    next_seq_after,
    parse_header,
    parse_line,
    revision_of,
    seq_after_line,
    stat_key,
)
from sessionledger_jsonl.paths import encode_session_id, project_key

__all__ = ["JsonlPersistence"]

logger = logging.getLogger("sessionledger")

_STABLE_READ_TRIES: Final = 10

_P = ParamSpec("_P")
_T = TypeVar("_T")


@dataclass(slots=True)
class _Writer:
    """What a store knows about a session whose lock it holds.

    ``size`` is the length of the log as this store last left it; ``next_seq`` the seq
    the next batch must start with (None: read it from the last line first); ``dirty``
    marks a failed write whose rollback failed too, so the next write cuts back first;
    ``last`` fingerprints the last batch written, so a retry of a batch that did land
    (its caller was cancelled while the thread finished) succeeds instead of failing
    or duplicating.
    """

    directory: str
    lock_fd: int
    size: int
    next_seq: int | None = None
    dirty: bool = False
    last: tuple[int, bytes] | None = None  # (first seq, digest of the batch's bytes)


@final
class JsonlPersistence(SessionPersistence):
    """Store sessions as JSONL files under *root* (SPEC §12); URL ``jsonl:DIR``.

    *root* is made absolute at construction and created (mode ``0700``) on the first
    write. ``fsync=False`` skips every fsync: faster, and a power loss may then lose or
    tear recent batches (a process crash still cannot). *event_types* is the registry
    the read path accepts (default: core vocabulary plus entry-point plugins).
    """

    scheme = "jsonl"
    can_tear = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        event_types: EventTypeRegistry | None = None,
        fsync: bool = True,
    ) -> None:
        super().__init__(event_types=event_types)
        if not isinstance(root, str | os.PathLike):
            raise ConfigError(f"jsonl root must be a path, got {type(root).__qualname__}")
        raw = os.fspath(root)
        if not isinstance(raw, str) or not raw:
            raise ConfigError(f"jsonl root must be a non-empty str path, got {raw!r}")
        self.root: Final = os.path.abspath(raw)
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise ConfigError(f"jsonl root {self.root!r} exists and is not a directory")
        self._fsync = fsync
        self._index: dict[str, str] = {}  # id -> session directory, filled lazily
        self._writers: dict[str, _Writer] = {}
        self._seen: dict[str, int] = {}  # id -> size of the log at its last unlocked read

    def __repr__(self) -> str:
        return f"JsonlPersistence({self.root!r})"

    # -- paths --------------------------------------------------------------------------

    def _session_dir(self, header: SessionHeader) -> str:
        return os.path.join(self.root, project_key(header.cwd), encode_session_id(header.id))

    def locate(self, header: SessionHeader) -> str:
        """Return the path of *header*'s log file (whether or not it exists yet)."""
        return os.path.join(self._session_dir(header), LOG_NAME)

    # -- the async boundary -------------------------------------------------------------

    async def _run(
        self,
        session_id: str | None,
        function: Callable[_P, _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """Run blocking *function* in a worker thread; translate OSErrors (the one place).

        A cancelled caller still waits for the thread: the core releases its per-session
        lock when the caller unwinds, and the next operation on the session must not
        overlap the one still running.
        """
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, lambda: function(*args, **kwargs))
        try:
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                while not future.done():
                    try:
                        await asyncio.wait([future])
                    except asyncio.CancelledError:
                        continue
                raise
        except OSError as error:
            translated = _files.translate_os_error(error, session_id)
            if translated is error:
                raise
            raise translated from error

    # -- storage primitives -------------------------------------------------------------

    async def _read(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        # A line-oriented file cannot seek by seq: every record is returned.
        return await self._run(session_id, self._read_sync, session_id)

    async def _write(
        self,
        header: SessionHeader,
        records: list[dict[str, Any]],
        *,
        next_seq: int,
        materialize: bool,
    ) -> None:
        if materialize:
            await self._run(header.id, self._materialize_sync, header, records)
        else:
            await self._run(header.id, self._append_sync, header.id, records, next_seq)

    async def _truncate(self, session_id: str, position: Any) -> None:
        await self._run(session_id, self._truncate_sync, session_id, position)

    async def _stored_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        return await self._run(None, self._stored_headers_sync)

    async def _revision(self, session_id: str) -> str | None:
        return await self._run(session_id, self._revision_sync, session_id)

    async def _delete(self, session_id: str) -> bool:
        return await self._run(session_id, self._delete_sync, session_id)

    async def _close(self) -> None:
        for session_id in list(self._writers):
            self._release(session_id)

    async def _forget(self, session_id: str) -> None:
        # The core holds the session's operation lock, so no worker thread uses the
        # descriptor while it is closed here.
        self._release(session_id)
        self._seen.pop(session_id, None)

    # -- finding a session --------------------------------------------------------------

    def _find_dir(self, session_id: str) -> str | None:
        """Return the directory holding *session_id*'s log, or None.

        The id alone names the session, whatever its cwd: the index answers for ids this
        store has seen; otherwise one ``stat`` per project directory finds it (project
        directories are few; sessions inside them may be thousands).
        """
        cached = self._index.get(session_id)
        if cached is not None:
            if _files.exists(os.path.join(cached, LOG_NAME)):
                return cached
            self._index.pop(session_id, None)
        name = _storable_name(session_id)
        if name is None:
            return None
        found = [
            candidate
            for project in _files.subdirectories(self.root)
            if _files.exists(os.path.join(candidate := os.path.join(project, name), LOG_NAME))
        ]
        if len(found) > 1:
            raise CorruptLogError(
                f"the session id is stored in {len(found)} project directories: "
                + ", ".join(found),
                session_id=session_id,
                path=found[0],
            )
        if not found:
            return None
        self._index[session_id] = found[0]
        return found[0]

    # -- reading ------------------------------------------------------------------------

    def _read_sync(self, session_id: str) -> RawLog | None:
        directory = self._find_dir(session_id)
        if directory is None:
            return None
        path = os.path.join(directory, LOG_NAME)
        try:
            file = open(path, "rb")  # noqa: SIM115 - closed below, stat taken on its fd
        except FileNotFoundError:  # deleted since it was found
            self._index.pop(session_id, None)
            return None
        with file:
            # A writer in another process may append while we read: retry until the file
            # did not change during the read, so the revision describes these bytes.
            for _ in range(_STABLE_READ_TRIES):
                file.seek(0)
                before = os.fstat(file.fileno())
                data = file.read()
                after = os.fstat(file.fileno())
                if stat_key(before) == stat_key(after):
                    break
        end = data.find(b"\n")
        if end < 0:
            raise CorruptLogError(
                "the header line is missing or incomplete",
                session_id=session_id,
                path=path,
                line=1,
            )
        header, incarnation = parse_header(data[:end], path, session_id)
        self._check_location(session_id, header, directory, path)
        if session_id not in self._writers:
            self._seen[session_id] = len(data)
        records: list[RawRecord] = []
        torn_at: int | None = None
        position = end + 1
        lines = data[position:].split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline, else a torn fragment
        for number, line in enumerate(lines, start=2):
            records.append(RawRecord(parse_line(line), position, f"line {number}"))
            position += len(line) + 1
        if tail:
            torn_at = position
        return RawLog(header, records, revision_of(incarnation, after), path, torn_at)

    def _check_location(
        self, session_id: str, header: Mapping[str, Any], directory: str, path: str
    ) -> None:
        """Refuse a log whose header names another home than where it was found (a file
        moved between project directories, or a rewritten cwd)."""
        try:
            parsed = SessionHeader.from_json(header)
        except (HeaderError, TypeError, ValueError, RecursionError):
            return  # the core reports the header itself
        if parsed.id != session_id:
            return  # the core reports the identity mismatch
        expected = self._session_dir(parsed)
        if os.path.normcase(expected) != os.path.normcase(directory):
            raise CorruptLogError(
                f"the header's cwd {parsed.cwd!r} places this session in {expected!r}, "
                "not where its log was found",
                session_id=session_id,
                path=path,
                line=1,
            )

    def _revision_sync(self, session_id: str) -> str | None:
        directory = self._find_dir(session_id)
        if directory is None:
            return None
        head = _files.read_head(os.path.join(directory, LOG_NAME))
        if head is None:
            return None
        status, line = head
        incarnation = ""
        if line is not None:
            value = parse_line(line)
            if type(value) is dict and type(value.get(INCARNATION_KEY)) is str:
                incarnation = value[INCARNATION_KEY]
        return revision_of(incarnation, status)

    def _stored_headers_sync(self) -> list[tuple[Mapping[str, Any], str]]:
        found: list[tuple[Mapping[str, Any], str]] = []
        where: dict[str, str] = {}
        for project in sorted(_files.subdirectories(self.root)):
            for directory in sorted(_files.subdirectories(project)):
                path = os.path.join(directory, LOG_NAME)
                head = _files.read_head(path)
                if head is None:
                    continue  # not a session directory (or deleted meanwhile)
                status, line = head
                try:
                    if line is None:
                        raise CorruptLogError("the header line is incomplete", path=path, line=1)
                    header, incarnation = parse_header(line, path, None)
                except CorruptLogError as error:
                    logger.warning("skipping an unreadable session log: %s", error)
                    continue
                session_id = header.get("id")
                if type(session_id) is not str or _storable_name(session_id) != os.path.basename(
                    directory
                ):
                    # Never repr a hostile id: it may be huge, or nested too deep for repr.
                    logger.warning(
                        "skipping %s: its header id (a %s) does not name its directory",
                        path,
                        type(session_id).__name__,
                    )
                    continue
                if session_id in where:
                    logger.warning(
                        "session %r is stored twice (%s and %s); listing the first",
                        session_id,
                        where[session_id],
                        directory,
                    )
                    continue
                where[session_id] = directory
                self._index.setdefault(session_id, directory)
                found.append((header, revision_of(incarnation, status)))
        return found

    # -- writing ------------------------------------------------------------------------

    def _materialize_sync(self, header: SessionHeader, records: list[dict[str, Any]]) -> None:
        session_id = header.id
        body = encode_records(records)
        published = self._writers.get(session_id)
        if published is not None and published.last == (0, digest(body)):
            return  # this very batch was published already; its caller was cancelled
        content = header_line(header, secrets.token_hex(8)) + body
        existing = self._find_dir(session_id)
        if existing is not None:
            raise SessionExistsError(
                f"a log for this id already exists at {os.path.join(existing, LOG_NAME)!r}",
                session_id=session_id,
            )
        directory = self._session_dir(header)
        path = os.path.join(directory, LOG_NAME)
        _files.make_dirs(directory, fsync=self._fsync)
        failpoint("jsonl.materialize.after-mkdir")
        try:
            lock_fd = self._take_lock(session_id, directory)
        except SessionLockedError as error:
            if _files.exists(path):
                raise SessionExistsError(
                    f"another writer published {path!r} and holds it", session_id=session_id
                ) from error
            raise
        try:
            _files.publish(path, content, fsync=self._fsync)
        except FileExistsError as error:
            os.close(lock_fd)
            raise SessionExistsError(
                f"another writer published {path!r} first", session_id=session_id
            ) from error
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
        self._index[session_id] = directory
        self._seen.pop(session_id, None)
        self._writers[session_id] = _Writer(
            directory, lock_fd, len(content), next_seq_after(records[-1]), last=(0, digest(body))
        )

    def _append_sync(self, session_id: str, records: list[dict[str, Any]], next_seq: int) -> None:
        body = encode_records(records)
        writer = self._acquire(session_id, expected_size=None)
        if writer.last is not None and writer.last == (next_seq, digest(body)):
            # This very batch landed already; its caller did not see it (cancelled).
            return
        path = os.path.join(writer.directory, LOG_NAME)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | _files.OPEN_FLAGS)
        try:
            self._check_size(writer, fd, session_id, path)
            if writer.next_seq is None:
                writer.next_seq = self._stored_next_seq(fd, writer.size, session_id, path)
            if writer.next_seq != next_seq:
                raise SeqMismatchError(
                    f"the stored log continues at seq {writer.next_seq}, "
                    f"the batch starts at {next_seq}",
                    session_id=session_id,
                    seq=next_seq,
                )
            failpoint("jsonl.append.before-write")
            try:
                _files.write_all(fd, body, point="jsonl.append.mid-write")
                failpoint("jsonl.append.after-write")
                if self._fsync:
                    os.fsync(fd)
                failpoint("jsonl.append.after-fsync")
            except OSError as error:
                # Cut back so a retry of this batch cannot duplicate its seqs.
                failpoint("jsonl.append.before-rollback")
                try:
                    os.ftruncate(fd, writer.size)
                    if self._fsync:
                        os.fsync(fd)
                except OSError as rollback:
                    writer.dirty = True
                    error.add_note(
                        f"rolling {path!r} back to {writer.size} bytes failed too "
                        f"({rollback}); the next write retries the rollback first"
                    )
                raise
        finally:
            os.close(fd)
        writer.size += len(body)
        writer.next_seq = next_seq_after(records[-1])
        writer.last = (next_seq, digest(body))

    @staticmethod
    def _stored_next_seq(fd: int, size: int, session_id: str, path: str) -> int:
        """Read the seq that follows the last line of the log (0 after a bare header)."""
        if size == 0 or os.pread(fd, 1, size - 1) != b"\n":
            raise SeqMismatchError(
                "the log ends with a partial line written after this store read it; "
                "load the session again to repair it",
                session_id=session_id,
            )
        start = _files.last_line_start(fd, size)
        if start == 0:
            return 0  # the header is the last line
        try:
            return seq_after_line(os.pread(fd, size - 1 - start, start))
        except (LedgerError, TypeError, ValueError, KeyError, IndexError) as error:
            raise CorruptLogError(
                f"the last line of the log is unreadable ({error}); load the session again",
                session_id=session_id,
                path=path,
            ) from error

    def _check_size(self, writer: _Writer, fd: int, session_id: str, path: str) -> None:
        size = os.fstat(fd).st_size
        if size == writer.size:
            return
        if writer.dirty and size > writer.size:
            os.ftruncate(fd, writer.size)
            if self._fsync:
                os.fsync(fd)
            writer.dirty = False
            return
        raise CorruptLogError(
            f"the log changed on disk behind this store (expected {writer.size} bytes, "
            f"found {size}); load the session again",
            session_id=session_id,
            path=path,
        )

    def _truncate_sync(self, session_id: str, position: Any) -> None:
        if type(position) is not int or position < 0:
            raise TypeError(f"a jsonl truncation point is a byte offset, got {position!r}")
        writer = self._acquire(session_id, expected_size=self._seen.get(session_id))
        failpoint("jsonl.truncate.before")
        _files.truncate(os.path.join(writer.directory, LOG_NAME), position, fsync=self._fsync)
        writer.size = position
        writer.next_seq = None
        writer.dirty = False
        writer.last = None

    # -- deleting -----------------------------------------------------------------------

    def _delete_sync(self, session_id: str) -> bool:
        directory = self._find_dir(session_id)
        if directory is None:
            self._release(session_id)
            return False
        writer = self._writers.get(session_id)
        if writer is not None and writer.directory == directory:
            lock_fd = writer.lock_fd
            del self._writers[session_id]
        else:
            self._release(session_id)
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
            self._index.pop(session_id, None)
            self._seen.pop(session_id, None)
        return True

    # -- locks and directories ----------------------------------------------------------

    def _acquire(self, session_id: str, *, expected_size: int | None) -> _Writer:
        """Return the write state of a stored session, locking it first if needed.

        When the lock is new, the file must still be what this store last read: the
        size when *expected_size* is given (truncation), else the last seq, checked by
        the caller on its first write.
        """
        writer = self._writers.get(session_id)
        if writer is not None:
            return writer
        directory = self._find_dir(session_id)
        if directory is None:
            raise SessionNotFoundError("the session has no stored log", session_id=session_id)
        path = os.path.join(directory, LOG_NAME)
        lock_fd = self._take_lock(session_id, directory)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError as error:
            os.close(lock_fd)
            raise SessionNotFoundError(
                "the session was deleted meanwhile", session_id=session_id
            ) from error
        if expected_size is not None and size != expected_size:
            os.close(lock_fd)
            raise SeqMismatchError(
                f"the log changed on disk since it was read ({expected_size} bytes then, "
                f"{size} now); load the session again",
                session_id=session_id,
            )
        writer = self._writers[session_id] = _Writer(directory, lock_fd, size)
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

    def _release(self, session_id: str) -> None:
        writer = self._writers.pop(session_id, None)
        if writer is not None:
            os.close(writer.lock_fd)


# -- helpers ---------------------------------------------------------------------------


def _storable_name(session_id: str) -> str | None:
    """Return *session_id*'s directory name, or None for an id no log can have (empty,
    or with a lone surrogate)."""
    try:
        return encode_session_id(session_id)
    except LedgerError:
        return None
