"""The JSONL log format (SPEC §12): file names, the header line, record lines, revisions.

A log is ``session.jsonl``: line 1 is the header (``{"type": "session", ...}``), every
later line one storage record (an event envelope or a packed chunk row), each ended by
``\\n``. Nothing here touches the file system.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from sessionledger import jsoncodec
from sessionledger.chunks import unpack_record
from sessionledger.errors import CorruptLogError
from sessionledger.events import SessionHeader
from sessionledger.logstore import UNPARSABLE

__all__ = [
    "INCARNATION_KEY",
    "LOCK_NAME",
    "LOG_NAME",
    "encode_records",
    "header_line",
    "next_seq_after",
    "parse_header",
    "parse_line",
    "revision_of",
    "seq_after_line",
    "stat_key",
]

#: The log file inside a session directory.
LOG_NAME: Final = "session.jsonl"
#: The advisory lock file inside a session directory (``flock``, never read).
LOCK_NAME: Final = "lock"
#: Header-line key holding a random token minted when the file is published. It tells two
#: incarnations of one id apart in the revision even when the file system reuses the
#: inode and its timestamps are coarse; the core never sees it.
INCARNATION_KEY: Final = "incarnation"

_HEADER_TAG: Final = "session"


def parse_line(line: bytes) -> Any:
    """Parse one line; ``UNPARSABLE`` when it is not JSON (empty lines included)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return jsoncodec.loads(line)  # nesting deeper than orjson reads
    except ValueError:
        return UNPARSABLE


def header_line(header: SessionHeader, incarnation: str) -> bytes:
    """Return the first line of a new log, newline included."""
    value = {"type": _HEADER_TAG, **header.to_json(), INCARNATION_KEY: incarnation}
    return jsoncodec.dumps(value) + b"\n"


def parse_header(line: bytes, path: str, session_id: str | None) -> tuple[dict[str, Any], str]:
    """Return the header JSON without its tag, and the incarnation token ("" if absent).

    Only the tag is checked here; version, fields and identity are the core's checks.
    """
    value = parse_line(line)
    if type(value) is not dict or value.get("type") != _HEADER_TAG:
        raise CorruptLogError(
            "the first line is not a session header", session_id=session_id, path=path, line=1
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


def encode_records(records: Sequence[Mapping[str, Any]]) -> bytes:
    """Return the lines of *records* (already packed by the core), each ended by ``\\n``."""
    return b"".join([jsoncodec.dumps(record) + b"\n" for record in records])


def next_seq_after(record: Mapping[str, Any]) -> int:
    """Return the seq after a record's last event (an envelope or a packed row)."""
    if "seq0" in record:
        data = record["data"]
        members = data["texts"] if "texts" in data else data["args"]
        return int(record["seq0"]) + len(members)
    return int(record["seq"]) + 1


def seq_after_line(line: bytes) -> int:
    """Return the seq after the last event of a stored record line.

    Raises ``LedgerError``, ``TypeError``, ``ValueError``, ``KeyError`` or ``IndexError``
    when the line is not a valid record.
    """
    members = unpack_record(parse_line(line))
    return next_seq_after(members[-1])


def stat_key(status: os.stat_result) -> tuple[int, int, int, int, int]:
    """Return what identifies one state of a file: device, inode, size, mtime, ctime."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def revision_of(incarnation: str, status: os.stat_result) -> str:
    """Return a log's revision: its incarnation token and its file's state."""
    dev, ino, size, mtime, ctime = stat_key(status)
    return f"{incarnation}:{dev}:{ino}:{size}:{mtime}:{ctime}"
