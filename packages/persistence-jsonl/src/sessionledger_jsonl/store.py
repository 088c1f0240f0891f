"""``JsonlPersistence``: each session as one append-only JSONL file in a directory tree.

Layout and format (docs/formats.md): ``ROOT/<project-key>/<encoded-id>/session.jsonl``,
whose first line is the header and every later line one storage record (an event envelope
or a packed chunk row). ``JsonlLogStore`` implements only the storage primitives; every policy
(committed region, torn tails, repair, version and identity checks, sequencing, how a
refusal is worded) is the core's. Finding and reading logs is ``_directories``; writing
them, under a per-session ``flock``, is ``_writing``. Summaries for listing come from the
store's summary index (``_index``), trusted only at the revision each entry names; prune
records itself in the audit log (``_audit``). Search reads every log (no text index).

All file I/O runs in worker threads; OSErrors are translated in one place (``_run``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, ParamSpec, TypeVar, final

from sessionledger import ConfigError, EventTypeRegistry, LedgerError, SessionHeader
from sessionledger.storage import (
    PORTABLE_MAX_EVENT_BYTES,
    Batch,
    IndexedText,
    LogStore,
    RawLog,
    Repair,
    RepairReceipt,
    SessionPersistence,
    SessionSummary,
    StoredSummary,
    in_thread,
    pinned,
)
from sessionledger_jsonl import _files
from sessionledger_jsonl._audit import AuditLog
from sessionledger_jsonl._directories import SessionDirectories
from sessionledger_jsonl._files import FileSystem
from sessionledger_jsonl._format import Continuation, log_parts
from sessionledger_jsonl._index import SummaryIndex, summary_rows
from sessionledger_jsonl._writing import Writers

__all__ = ["JsonlLogStore", "JsonlPersistence"]

logger = logging.getLogger("sessionledger")

#: Sessions whose feeds' read positions a store keeps (a feed beyond reads whole files).
_CONTINUATIONS: Final = 1024
_P = ParamSpec("_P")
_T = TypeVar("_T")


@final
class JsonlLogStore(LogStore):
    """The storage primitives of the JSONL backend: one log file per session under *root*
    (made absolute here, created with mode ``0700`` on the first write). *filesystem* is
    the seam every file-system call goes through (tests pass one that records or fails
    calls)."""

    scheme = "jsonl"
    can_tear = True
    # The format has no limit, but a batch is built whole in memory before its one write,
    # and a log is read whole: the limit every bundled backend can hold, so a session
    # kept here can be copied to any of them (docs/backends.md, "the primitives").
    max_event_bytes = PORTABLE_MAX_EVENT_BYTES
    max_batch_bytes = PORTABLE_MAX_EVENT_BYTES
    keeps_audit = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fsync: bool = True,
        filesystem: FileSystem | None = None,
    ) -> None:
        if not isinstance(root, str | os.PathLike):
            raise ConfigError(f"jsonl root must be a path, got {type(root).__qualname__}")
        raw = os.fspath(root)
        if not isinstance(raw, str) or not raw:
            raise ConfigError(f"jsonl root must be a non-empty str path, got {raw!r}")
        # The root's own links (and its parents') are followed once, here: the store stays
        # in the directory it was opened in (docs/durability.md).
        self.root: Final = pinned(raw, resolve_last=True)
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise ConfigError(f"jsonl root {self.root!r} exists and is not a directory")
        self.fsync: Final = fsync
        self._directories = SessionDirectories(filesystem or FileSystem(), self.root)
        self._writers = Writers(self._directories, fsync=fsync)
        system = self._directories.system
        self._index = SummaryIndex(system, self.root, fsync=fsync)
        self._continuations: dict[str, Continuation] = {}  # where feeds' last reads ended
        self._audit = AuditLog(system, self.root, fsync=fsync)

    def __repr__(self) -> str:
        return f"JsonlLogStore({self.root!r})"

    def locate(self, header: SessionHeader) -> str:
        """Return the path of *header*'s log file (whether or not it exists yet)."""
        return self._directories.path(self._directories.home(header))

    async def _run(
        self,
        session_id: str | None,
        function: Callable[_P, _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """Run blocking *function* in a worker thread; translate OSErrors (the one place).

        A cancelled caller still waits for the thread (``in_thread``): the core releases
        its per-session lock when the caller unwinds, and the next operation on the
        session must not overlap the one still running.
        """
        try:
            return await in_thread(function, *args, **kwargs)
        except OSError as error:
            translated = _files.translate_os_error(error, session_id)
            if translated is error:
                raise
            raise translated from error

    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        # A line-oriented file cannot seek by seq: every record is returned.
        return await self._run(session_id, self._directories.read_log, session_id)

    async def read_durable(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        """A live feed's read: the bytes after where the last one ended, while the file
        still holds what that read saw (else the whole file), so a follower's read costs
        what was appended, not the whole log. A writer in another process may have
        written a batch it has not synced yet: the feed syncs the file itself (a no-op
        once the writer did), unless fsync is off."""
        known = self._continuations.get(session_id)
        at = known if known is not None and known.next_seq <= from_seq else None
        read = self._directories.read_log_after
        raw, after = await self._run(session_id, read, session_id, at, durable=self.fsync)
        if at is not None and after == at:
            # No intact batch after *at*: a torn tail, or a change that added none. A read
            # from a seq must hold the log's last record (``LogStore.read_log``): whole.
            raw, after = await self._run(session_id, read, session_id, None, durable=False)
        if after is None:
            self._continuations.pop(session_id, None)
        elif len(self._continuations) < _CONTINUATIONS or session_id in self._continuations:
            self._continuations[session_id] = after
        return raw

    async def read_revision(self, session_id: str) -> str | None:
        return await self._run(session_id, self._directories.read_revision, session_id)

    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        return await self._run(None, self._directories.list_headers)

    async def write_batch(self, batch: Batch) -> bool:
        return await self._run(batch.header.id, self._write_batch, batch)

    def _write_batch(self, batch: Batch) -> bool:
        if batch.creates:
            revision = self._writers.create([batch])
        else:
            revision = self._writers.append(batch)
        if revision is None:
            return False
        if batch.summary is not None:  # only once the batch is durable
            self._add_entry(batch.header.id, revision, batch.summary)
        return True

    async def write_log(self, batches: Sequence[Batch], check: Callable[[RawLog], None]) -> bool:
        """Publish the log whole: every batch goes into the temp file that ``link`` makes
        the log, and *check* reads that file back, durable, before it is linked."""
        return await self._run(batches[0].header.id, self._write_log, batches, check)

    def _write_log(self, batches: Sequence[Batch], check: Callable[[RawLog], None]) -> bool:
        header = batches[0].header
        path = self.locate(header)

        def check_staged(data: bytes) -> None:
            parsed, incarnation, records, framed = log_parts(data, path, header.id)
            check(RawLog(parsed, records, f"staged {incarnation}", path, batches=framed))

        revision = self._writers.create(batches, check_staged)
        if revision is None:
            return False
        summary = batches[-1].summary
        if summary is not None:  # only once the log is durable
            self._add_entry(header.id, revision, summary)
        return True

    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        return await self._run(repair.header.id, self._commit_repair, repair)

    def _commit_repair(self, repair: Repair) -> RepairReceipt | None:
        done = self._writers.repair(repair)
        if done is None:
            return None
        receipt, revision = done
        if repair.summary is not None:
            self._add_entry(repair.header.id, revision, repair.summary)
        return receipt

    async def list_summaries(self) -> list[StoredSummary]:
        return await self._run(None, self._list_summaries)

    def _list_summaries(self) -> list[StoredSummary]:
        # Reading never writes (docs/listing.md): a stale entry stays as it is, and a
        # long index is compacted by the writes that make it long (``_add_entry``).
        rows = summary_rows(self._directories.list_headers(), self._index.read()[0])
        return [StoredSummary(header, revision, summary) for header, revision, summary in rows]

    def _add_entry(self, session_id: str, revision: str, summary: SessionSummary) -> None:
        """Add the index entry of a write that is durable, and compact the index when
        that entry took it past a size worth checking (``SummaryIndex.append``)."""
        if not self._index.append(session_id, revision, summary):
            return
        entries, lines = self._index.read()
        if not self._index.needs_compaction(lines, len(entries)):
            return
        try:
            stored = {header.get("id") for header, _ in self._directories.list_headers()}
        except (OSError, LedgerError) as error:
            # The write is durable already: a compaction that cannot list waits for later.
            logger.warning("cannot compact %s (%s); it stays as it was", self._index.path, error)
            return
        self._index.compact({session_id for session_id in stored if type(session_id) is str})

    def _save_if_current(self, session_id: str, revision: str, summary: SessionSummary) -> bool:
        """Add the entry if the log is still at *revision* (an older one would only shadow
        a newer entry): ``reindex``."""
        if self._directories.read_revision(session_id) != revision:
            return False
        self._add_entry(session_id, revision, summary)
        return True

    async def rewrite_index(
        self,
        header: SessionHeader,
        revision: str,
        summary: SessionSummary,
        texts: Sequence[IndexedText],
    ) -> bool:
        # No text index: only the summary entry is rewritten.
        return await self._run(header.id, self._save_if_current, header.id, revision, summary)

    async def stored_bytes(self, session_id: str) -> int | None:
        return await self._run(session_id, self._directories.stored_bytes, session_id)

    async def append_audit(self, record: Mapping[str, Any]) -> None:
        await self._run(None, self._audit.append, record)

    async def read_audit(self) -> list[Mapping[str, Any]]:
        return await self._run(None, self._audit.read)

    async def delete_log(self, session_id: str) -> bool:
        return await self._run(session_id, self._writers.delete, session_id)

    async def claim(self, session_id: str) -> None:
        await self._run(session_id, self._writers.claim, session_id)

    async def release(self, session_id: str) -> None:
        # The policy holds the session's operation lock, so no other worker thread uses
        # the descriptor while it is closed; a lock note is a file: never on the loop.
        await self._run(session_id, self._writers.release, session_id)

    async def close(self) -> None:
        await self._run(None, self._writers.release_all)

    def abandon(self) -> None:
        self._writers.release_all()


@final
class JsonlPersistence(SessionPersistence):
    """Store sessions as JSONL files under *root* (docs/formats.md); URL ``jsonl:DIR``.

    *root* is made absolute (links resolved) at construction and created (mode
    ``0700``) on the first write. ``fsync=False`` skips every fsync: faster, and a power
    loss may then lose or tear recent batches (a process crash still cannot).
    *event_types* is the registry the read path accepts (default: core vocabulary plus
    entry-point plugins).
    *filesystem* replaces the seam every file-system call goes through (for tests).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        event_types: EventTypeRegistry | None = None,
        fsync: bool = True,
        filesystem: FileSystem | None = None,
    ) -> None:
        self._jsonl = JsonlLogStore(root, fsync=fsync, filesystem=filesystem)
        super().__init__(self._jsonl, event_types=event_types)

    @property
    def log_store(self) -> JsonlLogStore:
        """The JSONL storage primitives this backend drives."""
        return self._jsonl

    @property
    def root(self) -> str:
        """The store's root directory (absolute, its links resolved)."""
        return self._jsonl.root

    def locate(self, header: SessionHeader) -> str:
        """Return the path of *header*'s log file (whether or not it exists yet)."""
        return self._jsonl.locate(header)

    def __repr__(self) -> str:
        return f"JsonlPersistence({self.root!r})"
