"""Where the JSONL store keeps each session, and reading what is there (never writing).

``ROOT/<project-key>/<encoded-id>/session.jsonl`` (docs/formats.md). A session's place is the
pair of names below the root; every open goes through directory descriptors and refuses
symbolic links. The id alone names a session, whatever its cwd: an index answers for ids
this store has seen; otherwise one ``stat`` per project directory finds it (project
directories are few; the sessions inside them may be thousands). Everything here is
blocking; the store runs it in worker threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any, Final

from sessionledger import CorruptLogError, HeaderError, LedgerError, SessionHeader
from sessionledger.storage import RawLog
from sessionledger_jsonl._files import FileSystem, SymlinkRefusedError
from sessionledger_jsonl._format import (
    LOG_NAME,
    Continuation,
    continuation,
    continued_parts,
    incarnation_of,
    log_parts,
    parse_header,
    revision_of,
    stat_key,
)
from sessionledger_jsonl.paths import encode_session_id, project_key

__all__ = ["Place", "SessionDirectories", "storable_name"]

logger = logging.getLogger("sessionledger")

_STABLE_READ_TRIES: Final = 10

#: Where a session lives: (project directory name, session directory name).
Place = tuple[str, str]


def storable_name(session_id: str) -> str | None:
    """Return *session_id*'s directory name, or None for an id no log can have (empty,
    or with a lone surrogate)."""
    try:
        return encode_session_id(session_id)
    except LedgerError:
        return None


class SessionDirectories:
    """The session directories under *root*: finding, reading and listing logs."""

    def __init__(self, system: FileSystem, root: str) -> None:
        self.system: Final = system
        self.root: Final = root
        self._index: dict[str, Place] = {}  # id -> place, filled lazily

    def home(self, header: SessionHeader) -> Place:
        """Return where *header*'s session belongs (whether or not it exists)."""
        return project_key(header.cwd), encode_session_id(header.id)

    def path(self, place: Place, name: str = LOG_NAME) -> str:
        """The absolute path of *name* in the session directory *place*, for messages."""
        return os.path.join(self.root, *place, name)

    def remember(self, session_id: str, place: Place) -> None:
        """Note that *session_id* now lives at *place*."""
        self._index[session_id] = place

    def forget(self, session_id: str) -> None:
        """Drop what the index knows of *session_id* (it was deleted)."""
        self._index.pop(session_id, None)

    @contextlib.contextmanager
    def opened(self, place: tuple[str, ...]) -> Iterator[int | None]:
        """Yield a descriptor of the session directory at *place*, None when it is
        missing (its parents included); a link on the way is refused."""
        system = self.system
        try:
            root = system.open_root(self.root)
        except (FileNotFoundError, NotADirectoryError):
            yield None
            return
        fd = root
        try:
            for name in place:
                try:
                    child = system.open_dir(name, fd)
                except FileNotFoundError:
                    yield None
                    return
                system.close(fd)
                fd = child
            yield fd
        finally:
            system.close(fd)

    def find(self, session_id: str) -> Place | None:
        """Return where *session_id*'s log is, or None."""
        cached = self._index.get(session_id)
        if cached is not None:
            if self._has_log(cached):
                return cached
            self._index.pop(session_id, None)
        name = storable_name(session_id)
        if name is None:
            return None
        found = [(project, name) for project in self._projects() if self._has_log((project, name))]
        if len(found) > 1:
            paths = [os.path.join(self.root, *place) for place in found]
            raise CorruptLogError(
                f"the session id is stored in {len(found)} project directories: "
                + ", ".join(paths),
                session_id=session_id,
                path=paths[0],
            )
        if not found:
            return None
        self._index[session_id] = found[0]
        return found[0]

    def _projects(self, *, strict: bool = True) -> list[str]:
        """The project directories under the root. A symbolic link among them is refused
        (*strict*: finding a session must not silently look past one) or skipped."""
        system = self.system
        try:
            root = system.open_root(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return []
        try:
            entries = system.entries(root)
        finally:
            system.close(root)
        # The store's own entries (the lock file, holder notes) start with a dot; project
        # keys never do.
        entries = [(name, kind) for name, kind in entries if not name.startswith(".")]
        for name, kind in entries:
            if kind == "link":
                path = os.path.join(self.root, name)
                if strict:
                    raise SymlinkRefusedError(0, "symbolic link refused", path)
                logger.warning("skipping %s: it is a symbolic link", path)
        return sorted(name for name, kind in entries if kind == "dir")

    def _has_log(self, place: Place) -> bool:
        with self.opened(place) as fd:  # a link at the session directory is refused here
            if fd is None:
                return False
            kind = self.system.kind(LOG_NAME, fd)
        if kind == "link":
            raise SymlinkRefusedError(0, "symbolic link refused", self.path(place))
        return kind == "file"

    # -- reading ------------------------------------------------------------------------

    def read_log(self, session_id: str) -> RawLog | None:
        """Read the whole log of *session_id* (a line-oriented file cannot seek by seq)."""
        found = self._open_log(session_id)
        if found is None:
            return None
        fd, place, path = found
        try:
            data, status = self._stable_read(fd)
        finally:
            self.system.close(fd)
        header, incarnation, records, batches = log_parts(data, path, session_id)
        self._check_location(session_id, header, place, path)
        return RawLog(header, records, revision_of(incarnation, status), path, batches=batches)

    def read_log_after(
        self, session_id: str, at: Continuation | None, *, durable: bool
    ) -> tuple[RawLog | None, Continuation | None]:
        """Read the log of *session_id* for a live feed (docs/feed.md): only the bytes
        after *at* while the file still holds what *at* describes (its incarnation, and
        the commit record right before the offset), else the whole file; *durable*: sync
        the file after reading it, so that what was read is durable even if its writer
        has not synced it yet. Return also where its intact batches end now."""
        found = self._open_log(session_id)
        if found is None:
            return None, None
        fd, place, path = found
        try:
            after = None if at is None else self._read_after(fd, at)
            whole = self._stable_read(fd) if after is None else None
            if durable:
                self.system.fsync(fd)
        finally:
            self.system.close(fd)
        if after is None or at is None:
            assert whole is not None
            data, status = whole
            header, incarnation, records, batches = log_parts(data, path, session_id)
            body, at = data.find(b"\n") + 1, None
        else:
            head, rest, status = after
            header, incarnation, records, batches, data = continued_parts(
                head, rest, path, session_id, at
            )
            body = len(head) + 1
        self._check_location(session_id, header, place, path)
        raw = RawLog(header, records, revision_of(incarnation, status), path, batches=batches)
        return raw, continuation(data, body, batches, incarnation, at)

    def _read_after(self, fd: int, at: Continuation) -> tuple[bytes, bytes, os.stat_result] | None:
        """The header line, the bytes after *at* and the file's status, read while the
        file did not change; None when the file no longer holds what *at* describes."""
        system, mark = self.system, at.commit_line
        for _ in range(_STABLE_READ_TRIES):
            before = system.status(fd)
            start = at.offset - len(mark)
            if before.st_size < at.offset or start < 0:
                return None
            head = system.first_line(fd)
            if head is None or incarnation_of(head) != at.incarnation:
                return None
            tail = system.read_at(fd, before.st_size - start, start)
            if not tail.startswith(mark):
                return None
            if stat_key(before) == stat_key(system.status(fd)):
                return head, tail[len(mark) :], before
        return None

    def _open_log(self, session_id: str) -> tuple[int, Place, str] | None:
        """The log file of *session_id*, open for reading, with its place and path."""
        place = self.find(session_id)
        if place is None:
            return None
        path = self.path(place)
        with self.opened(place) as directory:
            if directory is None:
                self._index.pop(session_id, None)
                return None
            try:
                fd = self.system.open_file(LOG_NAME, directory)
            except FileNotFoundError:  # deleted since it was found
                self._index.pop(session_id, None)
                return None
        return fd, place, path

    def _stable_read(self, fd: int) -> tuple[bytes, os.stat_result]:
        """Read a whole file, retrying until it did not change during the read (a writer
        in another process may append meanwhile), so the revision describes these bytes."""
        system = self.system
        for _ in range(_STABLE_READ_TRIES):
            before = system.status(fd)
            data = system.read_all(fd)
            after = system.status(fd)
            if stat_key(before) == stat_key(after):
                break
        return data, after

    def _check_location(
        self, session_id: str, header: Mapping[str, Any], place: Place, path: str
    ) -> None:
        """Refuse a log whose header names another home than where it was found (a file
        moved between project directories, or a rewritten cwd)."""
        try:
            parsed = SessionHeader.from_json(header)
        except (HeaderError, TypeError, ValueError, RecursionError):
            return  # the core reports the header itself
        if parsed.id != session_id:
            return  # the core reports the identity mismatch
        expected = self.home(parsed)
        if expected != place:
            raise CorruptLogError(
                f"the header's cwd {parsed.cwd!r} places this session in "
                f"{os.path.join(self.root, *expected)!r}, not where its log was found",
                session_id=session_id,
                path=path,
                line=1,
            )

    def read_revision(self, session_id: str) -> str | None:
        """Return the revision of *session_id*'s log from its header line and status."""
        place = self.find(session_id)
        if place is None:
            return None
        return self.revision_at(place)

    def revision_at(self, place: Place) -> str | None:
        """Return the revision of the log at *place* (None when there is none)."""
        head = self._head(place)
        if head is None:
            return None
        status, line = head
        return revision_of(incarnation_of(line), status)

    def _head(self, place: Place) -> tuple[os.stat_result, bytes | None] | None:
        """The status and first line of the log at *place*; None if there is no log."""
        with self.opened(place) as directory:
            if directory is None:
                return None
            try:
                fd = self.system.open_file(LOG_NAME, directory)
            except FileNotFoundError:
                return None
        try:
            return self.system.status(fd), self.system.first_line(fd)
        finally:
            self.system.close(fd)

    def stored_bytes(self, session_id: str) -> int | None:
        """Return the size of every file in the session's directory (its log and its
        quarantine files: deleting the session removes them all), or None without a log."""
        place = self.find(session_id)
        if place is None:
            return None
        system = self.system
        total = 0
        with self.opened(place) as directory:
            if directory is None:
                return None
            for name, kind in system.entries(directory):
                if kind != "file":
                    continue
                try:
                    fd = system.open_file(name, directory)
                except FileNotFoundError:
                    continue  # a temp file removed meanwhile
                try:
                    total += system.size(fd)
                finally:
                    system.close(fd)
        return total

    def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        """Return the header and revision of every readable log, reading header lines only."""
        found: list[tuple[Mapping[str, Any], str]] = []
        where: dict[str, Place] = {}
        system = self.system
        for project in self._projects(strict=False):
            with self.opened((project,)) as fd:
                entries = [] if fd is None else system.entries(fd)
            for name, kind in entries:
                if kind == "link":
                    link = self.path((project, name), "")
                    logger.warning("skipping %s: it is a symbolic link", link)
            for name in sorted(name for name, kind in entries if kind == "dir"):
                listed = self._listed((project, name), where)
                if listed is not None:
                    found.append(listed)
        return found

    def _listed(
        self, place: Place, where: dict[str, Place]
    ) -> tuple[Mapping[str, Any], str] | None:
        """The header and revision of the log at *place*, or None (logged) when it has
        none, or one that cannot be listed."""
        path = self.path(place)
        try:
            head = self._head(place)
        except SymlinkRefusedError:
            logger.warning("skipping %s: it is a symbolic link", path)
            return None
        if head is None:
            return None  # not a session directory (or deleted meanwhile)
        status, line = head
        try:
            if line is None:
                raise CorruptLogError("the header line is incomplete", path=path, line=1)
            header, incarnation = parse_header(line, path, None)
        except LedgerError as error:
            logger.warning("skipping an unreadable session log: %s", error)
            return None
        session_id = header.get("id")
        if type(session_id) is not str or storable_name(session_id) != place[1]:
            # Never repr a hostile id: it may be huge, or nested too deep for repr.
            logger.warning(
                "skipping %s: its header id (a %s) does not name its directory",
                path,
                type(session_id).__name__,
            )
            return None
        if session_id in where:
            logger.warning(
                "session %r is stored twice (%s and %s); listing the first",
                session_id,
                os.path.join(self.root, *where[session_id]),
                os.path.join(self.root, *place),
            )
            return None
        where[session_id] = place
        self._index.setdefault(session_id, place)
        return header, revision_of(incarnation, status)
