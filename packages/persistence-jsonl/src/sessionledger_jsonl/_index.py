"""The summary index: ``ROOT/index.jsonl``, each session's summary at one log revision.

docs/formats.md, "the summary index". Every line is one entry,
``{"id": ..., "revision": ..., "summary": {...}}``, appended (``O_APPEND``, one
``write``) after the log write it describes is durable. The log stays the truth: an
entry counts only while its revision is the log's current one (the same string
``read_revision`` returns), so a crash before the append, a lost or torn line, or a line
dropped by a concurrent compaction can make an entry stale, never wrong, and a stale
entry is simply not used (the policy rebuilds it from the log and saves it again). That
is why the append needs no fsync. Lines that do not parse are skipped; the last entry of
an id wins; an append after a torn line starts a new line, so it is never lost with it.
When the index holds far more lines than sessions, a listing rewrites it atomically
(temp file, fsync, ``rename``, directory fsync) with the current entries only.
Everything here is blocking; the store runs it in worker threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from sessionledger import jsoncodec
from sessionledger._failpoints import failpoint
from sessionledger.summaries import SessionSummary
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

    def append(self, session_id: str, revision: str, summary: SessionSummary) -> None:
        """Add the entry of *session_id*'s log at *revision*. A failure is logged, never
        raised: the log write it follows is durable already, and a missing entry is only
        stale."""
        failpoint("jsonl.index.before-append")
        line = entry_line(session_id, revision, summary)
        system = self._system
        try:
            root = system.open_root(self._root)
            try:
                # No fsync: a lost line only leaves the entry stale, and stale is detected.
                system.append_line(INDEX_NAME, root, line, fsync=False)
            finally:
                system.close(root)
        except OSError as error:
            logger.warning(
                "session %r: its summary was not added to %s (%s); a listing rebuilds it "
                "from the log",
                session_id,
                self.path,
                error,
            )

    def read(self) -> tuple[dict[str, Entry], int]:
        """Return the last entry of each id and how many lines the index holds (an
        unreadable index holds none: every summary is then rebuilt)."""
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
            logger.warning("cannot read %s (%s); summaries are rebuilt from logs", self.path, error)
            return {}, 0
        entries: dict[str, Entry] = {}
        lines = data.split(b"\n")
        del lines[-1]  # empty after the final newline, else a torn line: never an entry
        for line in lines:
            value = parse_line(line)
            if type(value) is not dict:
                continue
            session_id, revision = value.get("id"), value.get("revision")
            if type(session_id) is str and type(revision) is str:
                entries[session_id] = Entry(revision, value.get("summary"))
        return entries, len(lines)

    def needs_compaction(self, lines: int, sessions: int) -> bool:
        """Whether an index of *lines* lines for *sessions* sessions is worth rewriting."""
        return lines > _LINES_PER_SESSION * sessions + _SLACK

    def compact(self, keep: Iterable[tuple[str, str, SessionSummary]]) -> None:
        """Replace the index, atomically, by the entries *keep* (id, revision, summary).
        A line another writer appends meanwhile may be lost: its entry is then stale, and
        rebuilt. A failure is logged: the old index stays, as good as it was."""
        system = self._system
        content = b"".join(entry_line(*item) for item in keep)
        temp = f"{_TEMP_PREFIX}{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        try:
            root = system.open_root(self._root)
            try:
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
            finally:
                system.close(root)
        except FileNotFoundError:
            # Another compaction removed our temp file: its index is as good as ours.
            logger.debug("a concurrent compaction of %s won", self.path)
        except OSError as error:
            logger.warning("cannot compact %s (%s); it stays as it was", self.path, error)

    def _remove_temps(self, root: int) -> None:
        """Remove the temp files of compactions a crash interrupted."""
        system = self._system
        for name, kind in system.entries(root):
            if kind == "file" and name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    system.unlink(name, root)


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
