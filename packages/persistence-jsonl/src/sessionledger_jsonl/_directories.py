"""Where the JSONL store keeps each session, and reading what is there (never writing).

``ROOT/<project-key>/<encoded-id>/session.jsonl`` (SPEC §12). The id alone names a
session, whatever its cwd: an index answers for ids this store has seen; otherwise one
``stat`` per project directory finds it (project directories are few; the sessions
inside them may be thousands). Everything here is blocking; the store runs it in worker
threads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Final

from sessionledger.errors import CorruptLogError, HeaderError, LedgerError
from sessionledger.events import SessionHeader
from sessionledger.logstore import RawLog, RawRecord
from sessionledger_jsonl import _files
from sessionledger_jsonl._format import (
    INCARNATION_KEY,
    LOG_NAME,
    parse_header,
    parse_line,
    revision_of,
    stat_key,
)
from sessionledger_jsonl.paths import encode_session_id, project_key

__all__ = ["SessionDirectories", "storable_name"]

logger = logging.getLogger("sessionledger")

_STABLE_READ_TRIES: Final = 10


def storable_name(session_id: str) -> str | None:
    """Return *session_id*'s directory name, or None for an id no log can have (empty,
    or with a lone surrogate)."""
    try:
        return encode_session_id(session_id)
    except LedgerError:
        return None


class SessionDirectories:
    """The session directories under *root*: finding, reading and listing logs."""

    def __init__(self, root: str) -> None:
        self.root: Final = root
        self._index: dict[str, str] = {}  # id -> session directory, filled lazily

    def home(self, header: SessionHeader) -> str:
        """Return the directory *header*'s session belongs in (whether or not it exists)."""
        return os.path.join(self.root, project_key(header.cwd), encode_session_id(header.id))

    def remember(self, session_id: str, directory: str) -> None:
        """Note that *session_id* now lives in *directory*."""
        self._index[session_id] = directory

    def forget(self, session_id: str) -> None:
        """Drop what the index knows of *session_id* (it was deleted)."""
        self._index.pop(session_id, None)

    def find(self, session_id: str) -> str | None:
        """Return the directory holding *session_id*'s log, or None."""
        cached = self._index.get(session_id)
        if cached is not None:
            if _files.exists(os.path.join(cached, LOG_NAME)):
                return cached
            self._index.pop(session_id, None)
        name = storable_name(session_id)
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

    def read_log(self, session_id: str) -> RawLog | None:
        """Read the whole log of *session_id* (a line-oriented file cannot seek by seq)."""
        directory = self.find(session_id)
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
        expected = self.home(parsed)
        if os.path.normcase(expected) != os.path.normcase(directory):
            raise CorruptLogError(
                f"the header's cwd {parsed.cwd!r} places this session in {expected!r}, "
                "not where its log was found",
                session_id=session_id,
                path=path,
                line=1,
            )

    def read_revision(self, session_id: str) -> str | None:
        """Return the revision of *session_id*'s log from its header line and status."""
        directory = self.find(session_id)
        if directory is None:
            return None
        return revision_at(os.path.join(directory, LOG_NAME))

    def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        """Return the header and revision of every readable log, reading header lines only."""
        found: list[tuple[Mapping[str, Any], str]] = []
        where: dict[str, str] = {}
        for project in sorted(_files.subdirectories(self.root)):
            for directory in sorted(_files.subdirectories(project)):
                listed = self._listed(directory, where)
                if listed is not None:
                    found.append(listed)
        return found

    def _listed(
        self, directory: str, where: dict[str, str]
    ) -> tuple[Mapping[str, Any], str] | None:
        """The header and revision of the log in *directory*, or None (logged) when it
        has none, or one that cannot be listed."""
        path = os.path.join(directory, LOG_NAME)
        head = _files.read_head(path)
        if head is None:
            return None  # not a session directory (or deleted meanwhile)
        status, line = head
        try:
            if line is None:
                raise CorruptLogError("the header line is incomplete", path=path, line=1)
            header, incarnation = parse_header(line, path, None)
        except CorruptLogError as error:
            logger.warning("skipping an unreadable session log: %s", error)
            return None
        session_id = header.get("id")
        if type(session_id) is not str or storable_name(session_id) != os.path.basename(directory):
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
                where[session_id],
                directory,
            )
            return None
        where[session_id] = directory
        self._index.setdefault(session_id, directory)
        return header, revision_of(incarnation, status)


def revision_at(path: str) -> str | None:
    """Return the revision of the log file at *path* (None when there is no file)."""
    head = _files.read_head(path)
    if head is None:
        return None
    status, line = head
    incarnation = ""
    if line is not None:
        value = parse_line(line)
        if type(value) is dict and type(value.get(INCARNATION_KEY)) is str:
            incarnation = value[INCARNATION_KEY]
    return revision_of(incarnation, status)
