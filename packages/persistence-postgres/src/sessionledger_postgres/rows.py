"""Rows of the ``sessions`` and ``events`` tables <-> the core's storage records.

The logical columns are SQLite's (SPEC §13, §17.15): one row per event, or per packed chunk
row (``ignorable = 0``, ``seq = seq0``, ``time = time0``); JSON columns hold the exact bytes
``jsoncodec.dumps`` wrote. Reading is forgiving by design: a row that does not parse
becomes ``UNPARSABLE`` and the core's committed-region rule decides what that means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from sessionledger import jsoncodec
from sessionledger.errors import JsonValueError
from sessionledger.persistence import UNPARSABLE

__all__ = [
    "batch_columns",
    "header_json",
    "json_text",
    "member_count",
    "parse_json",
    "plain_text",
    "revision_string",
    "row_end",
    "storage_record",
    "text_flaw",
]


def json_text(value: Any) -> str:
    """Serialize a JSON value for a ``text`` column, at any nesting depth.

    Through ``jsoncodec``, never ``orjson.dumps``: orjson crashes on deeply nested tuples.
    """
    return jsoncodec.dumps(value).decode()


def parse_json(text: Any) -> Any:
    """Parse a JSON column (orjson, then the depth-unlimited parser); ``ValueError`` if
    it is not JSON text."""
    if type(text) is not str:
        raise ValueError(f"expected JSON text, got {type(text).__name__}")
    return jsoncodec.loads(text)  # orjson first, the depth-unlimited parser if needed


def text_flaw(value: str) -> str | None:
    """Return why PostgreSQL ``text`` cannot hold *value*, or None when it can."""
    if "\0" in value:
        return "U+0000 (NUL)"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate"
    return None


def plain_text(value: str | None, what: str, session_id: str) -> str | None:
    """Return *value*, refusing what PostgreSQL ``text`` cannot hold (U+0000, lone
    surrogates). JSON text escapes both, so only the plain columns need the check."""
    flaw = None if value is None else text_flaw(value)
    if flaw is not None:
        raise JsonValueError(
            f"{what} contains {flaw}, which PostgreSQL text cannot store",
            session_id=session_id if text_flaw(session_id) is None else None,
        )
    return value


def member_count(record: Mapping[str, Any]) -> int:
    """Return how many events a storage record stands for."""
    if "seq0" not in record:
        return 1
    data = record["data"]
    return len(data["texts"] if "texts" in data else data["args"])


def batch_columns(session_id: str, records: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """Turn storage records into the seven parallel column arrays the store's insert
    unnests: seq, type, time, data, source_event_seqs, surface_op, ignorable."""
    seqs: list[int] = []
    types: list[str | None] = []
    times: list[int] = []
    datas: list[str] = []
    sources: list[str | None] = []
    surface_ops: list[str | None] = []
    ignorables: list[int | None] = []
    for record in records:
        types.append(plain_text(record["type"], "event type", session_id))
        datas.append(json_text(record["data"]))
        if "seq0" in record:  # a packed chunk row from the core's codec (SPEC §9)
            seqs.append(record["seq0"])
            times.append(record["time0"])
            sources.append(None)
            surface_ops.append(None)
            ignorables.append(0)
            continue
        seqs.append(record["seq"])
        times.append(record["time"])
        source_seqs = record.get("sourceEventSeqs")
        surface_op = record.get("surfaceOp")
        sources.append(None if source_seqs is None else json_text(source_seqs))
        surface_ops.append(None if surface_op is None else json_text(surface_op))
        ignorables.append(1 if record.get("ignorable") is True else None)
    return [seqs, types, times, datas, sources, surface_ops, ignorables]


def storage_record(row: asyncpg.Record | Sequence[Any]) -> Any:
    """Rebuild the storage record of one ``events`` row, or ``UNPARSABLE``."""
    seq, event_type, time, data, sources, surface_op, ignorable = row
    try:
        if ignorable == 0:
            record = {"type": event_type, "seq0": seq, "time0": time, "data": parse_json(data)}
        else:
            record = {"type": event_type, "seq": seq, "time": time, "data": parse_json(data)}
        # A packed row keeps any surface columns it has, so the row decoder rejects it.
        if surface_op is not None:
            record["surfaceOp"] = parse_json(surface_op)
        if sources is not None:
            record["sourceEventSeqs"] = parse_json(sources)
    except ValueError:
        return UNPARSABLE
    if ignorable == 1:
        record["ignorable"] = True
    return record


def row_end(tail: asyncpg.Record | Sequence[Any] | None) -> int:
    """Return the next seq after the last stored row (0 when there is none)."""
    if tail is None:
        return 0
    seq, ignorable, data = tail
    if ignorable == 0:
        try:
            return int(seq) + member_count({"seq0": seq, "data": parse_json(data)})
        except (ValueError, KeyError, TypeError):
            pass  # a malformed row still ends the stored log here; the read path reports it
    return int(seq) + 1


def header_json(row: asyncpg.Record | Sequence[Any]) -> dict[str, Any]:
    """Rebuild the header JSON (SPEC key names) from a ``sessions`` row.

    A ``meta`` column that does not parse becomes ``UNPARSABLE``, which the core's header
    validation rejects (``list`` skips that session, ``_read`` reports it as corrupt).
    """
    session_id, version, created_at, cwd, parent, seed_length, depth, title, meta = row[:9]
    header: dict[str, Any] = {"version": version, "id": session_id, "createdAt": created_at}
    if cwd is not None:
        header["cwd"] = cwd
    if parent is not None:
        header["parentSession"] = parent
    if seed_length is not None:
        header["seedLength"] = seed_length
    header["delegationDepth"] = depth
    if title is not None:
        header["title"] = title
    if meta is not None:
        try:
            header["meta"] = parse_json(meta)
        except ValueError:
            header["meta"] = UNPARSABLE
    return header


def revision_string(incarnation: Any, revision: Any) -> str:
    """Return the opaque revision of a session row: ``"<incarnation>:<counter>"``."""
    return f"{incarnation}:{revision}"
