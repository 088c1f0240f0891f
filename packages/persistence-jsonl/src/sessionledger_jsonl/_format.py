"""The JSONL log format, storage format 2: the header line, records, batches.

A log is ``session.jsonl``. Line 1 is the header (``{"type": "session", ...}``); every
later line is one storage record (an event envelope or a packed chunk row), each ended by
``\\n``. Every batch, the first included, ends with a **commit record**::

    {"commit": {"first": 0, "next": 12, "records": 5, "crc32": 2837461}}

``first`` and ``next`` are the seqs the batch spans, ``records`` how many lines it has
before the commit record, and ``crc32`` the CRC-32 of those lines' bytes (newlines
included; the first batch's also covers the header line). A reader can so tell, batch by
batch, whether a batch is complete and intact: one that is not, at the end of the file, is
a torn tail; anywhere else it is damage. A commit record has no ``type`` key, so it can
never be taken for an event. The file stays line-oriented JSON ``jq`` reads. Nothing here
touches the file system. docs/formats.md, "commit records", describes it for readers.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import msgspec

from sessionledger import CorruptLogError, FormatUnsupportedError, LedgerError, SessionHeader
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._snapshot import brief
from sessionledger.storage import (
    UNPARSABLE,
    LineRecords,
    RawBatch,
    RawRecord,
    collector_paused,
    parse_json,
)

__all__ = [
    "INCARNATION_KEY",
    "LOG_NAME",
    "QUARANTINE_PREFIX",
    "STORAGE_FORMAT",
    "committed_end",
    "frame_batch",
    "header_line",
    "incarnation_of",
    "log_parts",
    "parse_header",
    "parse_line",
    "quarantine_name",
    "revision_of",
    "split_batches",
    "stat_key",
]

#: The log file inside a session directory.
LOG_NAME: Final = "session.jsonl"
#: Quarantine files beside the log start with this (see ``quarantine_name``).
QUARANTINE_PREFIX: Final = "session.jsonl.quarantine-"
#: Header-line key holding a random token minted when the file is published. It tells two
#: incarnations of one id apart in the revision even when the file system reuses the
#: inode and its timestamps are coarse; the core never sees it.
INCARNATION_KEY: Final = "incarnation"
#: Header-line key holding the storage format of the file's framing.
FORMAT_KEY: Final = "storageFormat"
#: The storage format this build reads and writes: batches framed by commit records.
STORAGE_FORMAT: Final = 2

_HEADER_TAG: Final = "session"


class CommitFields(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a commit record states of its batch: the seqs it spans (``first`` up to
    ``next``), how many lines it has and their CRC-32."""

    first: int
    next: int
    records: int
    crc32: int


class CommitRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The line that ends a batch, ``{"commit": {...}}``: written and checked from here."""

    commit: CommitFields


_COMMIT: Final = "commit"
_ENCODE_COMMIT: Final = msgspec.json.Encoder().encode
_DECODE_COMMIT: Final = msgspec.json.Decoder(CommitRecord).decode
#: How each event or row line a writer writes begins. A line that begins so is an object
#: with a "type" key, whatever follows, so it is never a commit record (an object whose
#: only key is "commit"): only the lines that begin otherwise are parsed to find batches.
_RECORD_START: Final = b'{"type":'


def parse_line(line: bytes | memoryview) -> Any:
    """Parse one line; ``UNPARSABLE`` when it is not JSON (empty lines included)."""
    return parse_json(line)


def header_line(header: SessionHeader, incarnation: str) -> bytes:
    """Return the first line of a new log, newline included."""
    value = {
        "type": _HEADER_TAG,
        **header.to_json(),
        INCARNATION_KEY: incarnation,
        FORMAT_KEY: STORAGE_FORMAT,
    }
    return jsoncodec.dumps(value) + b"\n"


def parse_header(line: bytes, path: str, session_id: str | None) -> tuple[dict[str, Any], str]:
    """Return the header JSON without the file's own keys, and the incarnation token.

    The storage format is checked first: another format may frame everything after the
    header differently, so its file is refused before anything else is read. Version,
    fields and identity of the session header are the core's checks.
    """
    value = parse_line(line)
    if type(value) is not dict or value.get("type") != _HEADER_TAG:
        raise CorruptLogError(
            "the first line is not a session header", session_id=session_id, path=path, line=1
        )
    label = value.get("id") if type(value.get("id")) is str else session_id
    stored = value.pop(FORMAT_KEY, 1)
    if stored != STORAGE_FORMAT:
        newer = type(stored) is int and stored > STORAGE_FORMAT
        raise FormatUnsupportedError(
            f"the log's storage format is {brief(stored)}; this build reads format "
            f"{STORAGE_FORMAT} only"
            + ("; upgrade sessionledger to open it" if newer else " and has no upgrade path"),
            code="FORMAT_NEWER" if newer else "FORMAT_OLDER",
            session_id=label,
            path=path,
        )
    del value["type"]
    incarnation = value.pop(INCARNATION_KEY, "")
    if type(incarnation) is not str:
        raise CorruptLogError(
            f"the header's {INCARNATION_KEY!r} is not a string",
            session_id=session_id,
            path=path,
            line=1,
        )
    return value, incarnation


def log_parts(
    data: bytes, path: str, session_id: str | None
) -> tuple[dict[str, Any], str, LineRecords, list[RawBatch]]:
    """Read a log file's bytes: its header (``parse_header``), its incarnation token, and
    its records and batches (``split_batches``)."""
    end = data.find(b"\n")
    if end < 0:
        raise CorruptLogError(
            "the header line is missing or incomplete", session_id=session_id, path=path, line=1
        )
    header, incarnation = parse_header(data[:end], path, session_id)
    with collector_paused():
        records, batches = split_batches(data, end + 1, path)
    return header, incarnation, records, batches


class Continuation(NamedTuple):
    """Where the committed part of a log file ended when it was last read: its byte
    offset (after a commit record), the line number there, the seq after it, the
    incarnation of the log, and the commit record's line that ends there (a log read
    again from the offset must still hold that line right before it)."""

    offset: int
    line: int
    next_seq: int
    incarnation: str
    commit_line: bytes


def continued_parts(
    header_line: bytes, rest: bytes, path: str, session_id: str, at: Continuation
) -> tuple[dict[str, Any], str, LineRecords, list[RawBatch], bytes]:
    """``log_parts`` of a log read from *at* on: the header line and the bytes after
    *at*; also the bytes parsed (the header line, a newline, *rest*)."""
    header, incarnation = parse_header(header_line, path, session_id)
    data = header_line + b"\n" + rest
    with collector_paused():
        records, batches = split_batches(data, len(header_line) + 1, path, continued_at=at.line)
    return header, incarnation, records, batches, data


def continuation(
    data: bytes, body: int, batches: Sequence[RawBatch], incarnation: str, at: Continuation | None
) -> Continuation | None:
    """Where the intact batches at the start of *batches* end, for a read of the same log
    from there on; *data* holds the header line and the records from *body* on, which
    are the file's bytes from ``at.offset`` on (from *body* when *at* is None)."""
    last = None
    for index, batch in enumerate(batches):
        if batch.problem is not None or batch.end_seq is None:
            break
        last = index
    if last is None:
        return at
    end = batches[last + 1].position if last + 1 < len(batches) else data.rfind(b"\n") + 1
    start = data.rfind(b"\n", 0, end - 1) + 1
    end_seq = batches[last].end_seq
    assert end_seq is not None
    offset, line = (end, 2) if at is None else (at.offset + end - body, at.line)
    lines = line + data.count(b"\n", body, end)
    return Continuation(offset, lines, end_seq, incarnation, data[start:end])


def frame_batch(
    records: Sequence[Mapping[str, Any]],
    first: int,
    end: int,
    *,
    prefix: bytes = b"",
    covered: bytes = b"",
) -> bytes:
    """Return the lines of one batch, its commit record included. *prefix* (the header
    line of a new log) goes in front; the checksum covers it too, and *covered*, bytes
    already in the file before the batch (the header, when the batch is the log's first)."""
    body = prefix + b"".join([jsoncodec.dumps(record) + b"\n" for record in records])
    crc = zlib.crc32(body, zlib.crc32(covered))
    commit = CommitRecord(CommitFields(first, end, len(records), crc))
    return body + _ENCODE_COMMIT(commit) + b"\n"


def _commit_fields(value: Any) -> Mapping[str, Any] | None:
    """The fields of a parsed line that is shaped as a commit record at its top (an
    object whose one key is "commit", holding an object), else None."""
    if type(value) is dict and len(value) == 1:
        fields = value.get(_COMMIT)
        if type(fields) is dict:
            return fields
    return None


def _check(
    fields: CommitFields | None, count: int, crc: int
) -> tuple[str | None, int | None, int | None]:
    """Return (why the batch is not intact or None, its first seq, its next seq) for a
    batch of *count* lines with checksum *crc* and its commit record's *fields* (None for
    a malformed one)."""
    if fields is None:
        return "its commit record is malformed", None, None
    if fields.records != count:
        problem: str | None = f"it holds {count} records, its commit record says {fields.records}"
    elif fields.crc32 != crc:
        problem = "its checksum does not match its bytes"
    else:
        problem = None
    return problem, fields.first, fields.next


def split_batches(
    data: bytes, body: int, path: str | None = None, *, continued_at: int | None = None
) -> tuple[LineRecords, list[RawBatch]]:
    """Split a log's bytes after the header (*body* is where the records start) into its
    records and its batches, checking each batch against its commit record.

    A batch is intact when the lines its commit record counts, right before it, have the
    checksum it states. Lines before them that no commit record accounts for form a
    batch of their own that is not intact (inserted or left-over bytes), and so do the
    lines after the last commit record, a partial last line included: the last,
    incomplete batch.
    """
    split = _Split(data, body, continued_at)
    # Record lines are kept where they are in *data* (LineRecords): a copy of a large
    # log, or a record object per line, would cost a cold load for nothing.
    limit = max(data.rfind(b"\n") + 1, body)  # after the last complete line
    position, number = body, split.first_line
    records, starts, find = split.records, split.starts, data.find
    while position < limit:
        # The lines from here that begin as every record line does, in one step: none of
        # them can be a commit record, and each is kept unparsed, for the decode to parse
        # when it reaches it, so a log's parsed form is never whole in memory.
        before = len(starts)
        position = records.take_lines(position, limit, number, _RECORD_START)
        number += len(starts) - before
        if position < limit:  # a line that begins otherwise: a commit record, or damage
            end_at = find(b"\n", position)
            split.line(position, end_at, number)
            position, number = end_at + 1, number + 1
    return split.finish(limit, number)


class _Split:
    """The state of ``split_batches`` as it goes, line by line."""

    __slots__ = (
        "batches",
        "body",
        "data",
        "first_line",
        "first_record",
        "header_crcs",
        "records",
        "start",
        "starts",
        "view",
    )

    def __init__(self, data: bytes, body: int, continued_at: int | None = None) -> None:
        self.data = data
        # A log read from a batch boundary on (*continued_at*, the line number there):
        # the header is only there to be read, no batch of it covers the header.
        self.body = body if continued_at is None else -1
        self.view = memoryview(data)
        self.header_crcs = _header_crcs(self.view, body)  # the first batch's covers it
        self.records = LineRecords(data)
        self.starts = self.records.line_starts  # grows as records does: its len is theirs
        self.batches: list[RawBatch] = []
        self.start = body  # where the current batch begins
        self.first_record = 0
        self.first_line = 2 if continued_at is None else continued_at

    def line(self, position: int, end_at: int, number: int) -> None:
        """Take the complete line ``data[position:end_at]``, line *number* of the file, one
        that does not begin as a record line does: a commit record, or damage."""
        records, batches = self.records, self.batches
        line = self.view[position:end_at]
        fields: CommitFields | None
        try:
            fields = _DECODE_COMMIT(line).commit
        except msgspec.DecodeError:  # a malformed commit record, or no commit record
            value = parse_line(line)
            if _commit_fields(value) is None:
                records.add(RawRecord(value, position, f"line {number}", number))
                return
            fields = None
        first_record, count = self.first_record, len(self.starts)
        pending = count - first_record
        counted = pending if fields is None else fields.records
        ours = counted if 0 <= counted <= pending else pending
        split = count - ours  # where the lines this commit record counts begin
        begin = records.position(split) if ours else position
        # Only a batch that starts right after the header has it in its checksum.
        view, crcs = self.view, self.header_crcs
        problem, first, end = _checked(fields, ours, view[begin:position], crcs, begin == self.body)
        if problem is None and split > first_record:
            # Lines no commit record accounts for, before an intact batch: damage.
            label = f"lines {self.first_line}-{records.line(split - 1)}"
            batches.append(
                RawBatch(
                    first_record, split, self.start, label, "lines no batch holds",
                    line=self.first_line,
                )
            )  # fmt: skip
            self.first_record, self.start = split, begin
            self.first_line = records.line(split) or self.first_line
        elif problem is not None:
            split, begin = self.first_record, self.start
            problem, first, end = _checked(
                fields, pending, view[self.start : position], crcs, not batches and self.body >= 0
            )
        label = f"batch {len(batches) + 1} (lines {self.first_line}-{number})"
        batches.append(RawBatch(split, count, begin, label, problem, first, end, self.first_line))
        self.start, self.first_record, self.first_line = end_at + 1, count, number + 1

    def finish(self, limit: int, number: int) -> tuple[LineRecords, list[RawBatch]]:
        """Take what follows the last complete line (*limit*, line *number*) and return the
        records and batches."""
        records, batches = self.records, self.batches
        if len(self.data) > limit:  # a torn fragment after the last complete line
            records.add(RawRecord(UNPARSABLE, limit, f"line {number}", number))
        if self.first_record < len(records):
            label = f"batch {len(batches) + 1} (from line {self.first_line})"
            batches.append(
                RawBatch(
                    self.first_record,
                    len(records),
                    self.start,
                    label,
                    "incomplete: no commit record",
                    line=self.first_line,
                )
            )
        return records, batches


def _header_crcs(view: memoryview, body: int) -> tuple[int, int | None]:
    """The checksum of the header line as it reads, and of the line the writer wrote for
    the same header (None when they are the same bytes, or the line is no JSON object).

    The first batch's checksum covers the header line: a header whose bytes were only
    reformatted (say, a space before it) still holds what was written, and must not make
    the acknowledged first batch look torn, to be cut by the next load."""
    raw = zlib.crc32(view[:body])
    value = parse_line(view[: body - 1])
    if type(value) is not dict:
        return raw, None
    try:
        written = jsoncodec.dumps(value) + b"\n"
    except (LedgerError, ValueError, TypeError, RecursionError):
        return raw, None  # no writer wrote this header: its own bytes decide
    return raw, None if written == view[:body] else zlib.crc32(written)


def _checked(
    fields: CommitFields | None,
    count: int,
    lines: memoryview,
    header_crcs: tuple[int, int | None],
    with_header: bool,
) -> tuple[str | None, int | None, int | None]:
    """``_check`` a batch of *lines*; a first batch (*with_header*) also against the header
    as written when the header line's bytes do not match."""
    raw, written = header_crcs
    found = _check(fields, count, zlib.crc32(lines, raw if with_header else 0))
    if found[0] is not None and with_header and written is not None:
        again = _check(fields, count, zlib.crc32(lines, written))
        if again[0] is None:
            return again
    return found


def committed_end(last_line: bytes) -> int | None:
    """Return the seq after the batch a log's last line commits, or None when that line
    is not a commit record (the log does not end with a complete batch)."""
    try:
        return _DECODE_COMMIT(last_line).commit.next
    except msgspec.DecodeError:
        return None


def quarantine_name(stamp: str) -> str:
    """The name of a quarantine file made at *stamp* (UTC, ``YYYYmmddTHHMMSS.ffffffZ``)."""
    return f"{QUARANTINE_PREFIX}{stamp}"


def stat_key(status: os.stat_result) -> tuple[int, int, int, int, int]:
    """Return what identifies one state of a file: device, inode, size, mtime, ctime."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def incarnation_of(line: bytes | None) -> str:
    """Return the incarnation token a header line holds ("" when it holds none)."""
    if line is None:
        return ""
    value = parse_line(line)
    if type(value) is dict and type(value.get(INCARNATION_KEY)) is str:
        token: str = value[INCARNATION_KEY]
        return token
    return ""


def revision_of(incarnation: str, status: os.stat_result) -> str:
    """Return a log's revision: its incarnation token and its file's state."""
    dev, ino, size, mtime, ctime = stat_key(status)
    return f"{incarnation}:{dev}:{ino}:{size}:{mtime}:{ctime}"
