"""The summary index: ``ROOT/index.jsonl``, each session's summary at one log revision.

docs/formats.md, "the summary index". Every line is one entry,
``{"id": ..., "revision": ..., "summary": {...}}``, appended (``O_APPEND``, one
``write``, under the file's ``flock``) after the log write it describes is durable. The
log stays the truth: an entry counts only while its revision is the log's current one
(the same string ``read_revision`` returns), so a crash before the append, or a lost or
torn line, can make an entry stale, never wrong, and a stale entry is simply not used (a
listing computes that summary from the log, in memory; the session's next write or
``reindex`` adds a current entry). That is why the append needs no fsync. Lines that do
not parse are skipped; the last entry of an id wins; an append after a torn line starts
a new line, so it is never lost with it.

Reading never writes (docs/listing.md). When the index holds far more lines than
sessions, the write whose line takes it past a power of two in size (from
``_CHECK_FROM`` on) compacts it: under the file's ``flock`` it keeps the last entry of
each stored session, written to a temp file (fsync), renamed over the index (directory
fsync). An appender that waited for the lock meanwhile finds its file replaced (no link
left) and appends to the new one, so no line is lost. Each check reads as many bytes as
were appended since the one before. Everything here is blocking; the store runs it in
worker threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, NamedTuple

from sessionledger._failpoints import failpoint
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.views._summaries import SessionSummary
from sessionledger_jsonl._files import FileSystem
from sessionledger_jsonl._format import parse_line

__all__ = ["INDEX_NAME", "Entry", "SummaryIndex", "current_summary", "entry_line", "summary_rows"]

logger = logging.getLogger("sessionledger")

#: The index file in the store root (project keys start with ``--`` or ``_``, so it can
#: never be taken for a project directory, and listing looks at directories only).
INDEX_NAME: Final = "index.jsonl"
#: Temp files of a compaction: ``index.jsonl.<hex>.tmp``.
_TEMP_PREFIX: Final = f"{INDEX_NAME}."
_TEMP_SUFFIX: Final = ".tmp"
#: Compact once the index holds more lines than this many per session, plus the slack.
_LINES_PER_SESSION: Final = 2
_SLACK: Final = 256
#: The smallest index size (bytes) at which an append checks whether to compact.
_CHECK_FROM: Final = 1 << 14


class Entry(NamedTuple):
    """An index entry as read: the log revision it describes and its summary JSON."""

    revision: str
    summary: Any


def entry_line(session_id: str, revision: str, summary: SessionSummary) -> bytes:
    """One index line, newline included."""
    value = {"id": session_id, "revision": revision, "summary": summary.to_json()}
    return jsoncodec.dumps(value) + b"\n"


def current_summary(entry: Entry | None, revision: str) -> SessionSummary | None:
    """The summary *entry* holds if it describes the log at *revision*; None when it is
    missing, stale (another revision) or not a well-formed summary."""
    if entry is None or entry.revision != revision:
        return None
    return SessionSummary.from_json(entry.summary)


class SummaryIndex:
    """The summary index of the store at *root*."""

    def __init__(self, system: FileSystem, root: str, *, fsync: bool) -> None:
        self._system: Final = system
        self._root: Final = root
        self._fsync: Final = fsync

    @property
    def path(self) -> str:
        return os.path.join(self._root, INDEX_NAME)

    def append(self, session_id: str, revision: str, summary: SessionSummary) -> bool:
        """Add the entry of *session_id*'s log at *revision*; return whether the index
        has just grown past a size at which a compaction is worth checking. A failure is
        logged, never raised: the log write it follows is durable already, and a missing
        entry is only stale."""
        failpoint("jsonl.index.before-append")
        line = entry_line(session_id, revision, summary)
        system = self._system
        try:
            root = system.open_root(self._root)
            try:
                size, added = self._append_line(root, line)
            finally:
                system.close(root)
        except OSError as error:
            logger.warning(
                "session %r: its summary was not added to %s (%s); a listing computes it "
                "from the log until the session's next write or a reindex",
                session_id,
                self.path,
                error,
            )
            return False
        before = size - added
        return size >= _CHECK_FROM and before.bit_length() < size.bit_length()

    def _append_line(self, root: int, line: bytes) -> tuple[int, int]:
        """Append *line* (after a newline of its own when the index ends in a torn line)
        to the index file the name holds once the lock is ours; return the index's size
        after it and the bytes added. No fsync: a lost line only leaves an entry stale."""
        system = self._system
        while True:
            fd, _ = system.open_appending(INDEX_NAME, root)
            try:
                system.lock_exclusive(fd)
                if system.status(fd).st_nlink == 0:
                    continue  # a compaction replaced this file while we waited
                system.check_one_name(fd, INDEX_NAME, root)  # a hard link: not through it
                size = system.size(fd)
                if size and system.read_at(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line
                system.write(fd, line)
                return size + len(line), len(line)
            finally:
                system.close(fd)

    def read(self) -> tuple[dict[str, Entry], int]:
        """Return the last entry of each id and how many lines the index holds (an
        unreadable index holds none: every summary is then computed from its log)."""
        system = self._system
        try:
            root = system.open_root(self._root)
            try:
                fd = system.open_file(INDEX_NAME, root)
            finally:
                system.close(root)
            try:
                data = system.read_all(fd)
            finally:
                system.close(fd)
        except FileNotFoundError:
            return {}, 0
        except OSError as error:
            logger.warning(
                "cannot read %s (%s); summaries are computed from logs", self.path, error
            )
            return {}, 0
        lines = data.split(b"\n")
        del lines[-1]  # empty after the final newline, else a torn line: never an entry
        return _entries(lines), len(lines)

    def needs_compaction(self, lines: int, sessions: int) -> bool:
        """Whether an index of *lines* lines for *sessions* sessions is worth rewriting."""
        return lines > _LINES_PER_SESSION * sessions + _SLACK

    def compact(self, stored: Collection[str]) -> None:
        """Replace the index, atomically, by the last entry of each id in *stored* (the
        sessions the store holds), under the index's lock (see the module). A failure is
        logged: the old index stays, as good as it was."""
        system = self._system
        temp = f"{_TEMP_PREFIX}{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        try:
            root = system.open_root(self._root)
            try:
                index = system.open_file(INDEX_NAME, root)
                try:
                    system.lock_exclusive(index)
                    if system.status(index).st_nlink == 0:
                        return  # another compaction replaced it just now
                    entries = _entries(system.read_all(index).split(b"\n")[:-1])
                    kept = b"".join(
                        entry_line(session_id, entry.revision, summary)
                        for session_id, entry in entries.items()
                        if session_id in stored
                        and (summary := SessionSummary.from_json(entry.summary)) is not None
                    )
                    self._replace(root, temp, kept)
                finally:
                    system.close(index)  # lets the appenders waiting for the lock go on
            finally:
                system.close(root)
        except FileNotFoundError:
            logger.debug("%s was removed meanwhile: nothing to compact", self.path)
        except OSError as error:
            logger.warning("cannot compact %s (%s); it stays as it was", self.path, error)

    def _replace(self, root: int, temp: str, content: bytes) -> None:
        """Write *content* to *temp* (fsync) and rename it over the index (root fsync)."""
        system = self._system
        self._remove_temps(root)
        fd = system.create(temp, root)
        try:
            try:
                system.write(fd, content)
                if self._fsync:
                    system.fsync(fd)
            finally:
                system.close(fd)
            system.rename(temp, INDEX_NAME, root)
        except BaseException:
            with contextlib.suppress(OSError):
                system.unlink(temp, root)
            raise
        if self._fsync:
            system.fsync(root)

    def _remove_temps(self, root: int) -> None:
        """Remove the temp files of compactions a crash interrupted."""
        system = self._system
        for name, kind in system.entries(root):
            if kind == "file" and name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    system.unlink(name, root)


def _entries(lines: Iterable[bytes]) -> dict[str, Entry]:
    """The last entry of each id among the index's whole *lines*."""
    entries: dict[str, Entry] = {}
    for line in lines:
        value = parse_line(line)
        if type(value) is not dict:
            continue
        session_id, revision = value.get("id"), value.get("revision")
        if type(session_id) is str and type(revision) is str:
            entries[session_id] = Entry(revision, value.get("summary"))
    return entries


def summary_rows(
    listed: Iterable[tuple[Mapping[str, Any], str]], entries: Mapping[str, Entry]
) -> list[tuple[Mapping[str, Any], str, SessionSummary | None]]:
    """Join the logs' headers and revisions with the index entries."""
    rows: list[tuple[Mapping[str, Any], str, SessionSummary | None]] = []
    for header, revision in listed:
        session_id = header.get("id")
        entry = entries.get(session_id) if type(session_id) is str else None
        rows.append((header, revision, current_summary(entry, revision)))
    return rows
