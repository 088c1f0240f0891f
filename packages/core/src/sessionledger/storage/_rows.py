"""The relational layout of stored records, shared by the SQL backends (docs/formats.md).

A ``sessions`` row holds the header columns; an ``events`` row holds one storage record:
an event (``ignorable`` NULL or 1) or a packed chunk row (``ignorable = 0``, ``seq`` =
``seq0``, ``time`` = ``time0``). JSON columns hold exactly the text ``jsoncodec`` writes.
Reading is forgiving by design: a row whose columns do not make a record comes back as
``UNPARSABLE``, and the core's committed-region rule decides what that means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import SessionHeader
from sessionledger.storage._logstore import UNPARSABLE


def json_text(value: Any) -> str:
    """Serialize a JSON value for a text column, at any nesting depth (never through
    ``orjson.dumps`` directly: it crashes on deeply nested tuples)."""
    return jsoncodec.dumps(value).decode()


def parse_json_text(text: Any) -> Any:
    """Parse a JSON column; ``ValueError`` when it is not JSON text."""
    if type(text) is not str:
        raise ValueError(f"expected JSON text, got {type(text).__name__}")
    return jsoncodec.loads(text)


def member_count(record: Mapping[str, Any]) -> int:
    """Return how many events a storage record stands for."""
    if "seq0" not in record:
        return 1
    data = record["data"]
    return len(data["texts"] if "texts" in data else data["args"])


def event_columns(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """Return ``(seq, type, time, data, source_event_seqs, surface_op, ignorable)`` for a
    storage record made by the core's ``pack_chunk_runs``."""
    if "seq0" in record:  # a packed chunk row (docs/formats.md, "chunk rows")
        return (
            record["seq0"],
            record["type"],
            record["time0"],
            json_text(record["data"]),
            None,
            None,
            0,
        )
    sources = record.get("sourceEventSeqs")
    surface_op = record.get("surfaceOp")
    return (
        record["seq"],
        record["type"],
        record["time"],
        json_text(record["data"]),
        None if sources is None else json_text(sources),
        None if surface_op is None else json_text(surface_op),
        1 if record.get("ignorable") is True else None,
    )


def record_from_columns(
    seq: Any, event_type: Any, time: Any, data: Any, sources: Any, surface_op: Any, ignorable: Any
) -> Any:
    """Rebuild the storage record of one ``events`` row, or ``UNPARSABLE``."""
    if type(seq) is not int or type(event_type) is not str or type(time) is not int:
        return UNPARSABLE
    if ignorable not in (None, 0, 1):
        return UNPARSABLE
    try:
        if ignorable == 0:
            record = {"type": event_type, "seq0": seq, "time0": time, "data": parse_json_text(data)}
        else:
            record = {"type": event_type, "seq": seq, "time": time, "data": parse_json_text(data)}
        # A packed row keeps any surface columns it has, so the row decoder rejects it.
        if surface_op is not None:
            record["surfaceOp"] = parse_json_text(surface_op)
        if sources is not None:
            record["sourceEventSeqs"] = parse_json_text(sources)
    except ValueError:
        return UNPARSABLE
    if ignorable == 1:
        record["ignorable"] = True
    return record


def row_end(seq: Any, ignorable: Any, data: Any) -> int:
    """Return the seq after the last stored row, given its ``seq``, ``ignorable`` and
    ``data`` columns (a packed row stands for several events)."""
    if ignorable == 0:
        try:
            return int(seq) + member_count({"seq0": seq, "data": parse_json_text(data)})
        except (ValueError, KeyError, TypeError):
            pass  # a malformed row still ends the stored log here; the read path reports it
    return int(seq) + 1


def header_columns(header: SessionHeader) -> tuple[Any, ...]:
    """Return ``(id, version, created_at, cwd, parent_session, seed_length,
    delegation_depth, title, meta)`` for a ``sessions`` row."""
    return (
        header.id,
        header.version,
        header.created_at,
        header.cwd,
        header.parent_session,
        header.seed_length,
        header.delegation_depth,
        header.title,
        None if header.meta is None else json_text(header.meta),
    )


def header_json(row: Sequence[Any]) -> dict[str, Any]:
    """Rebuild the header JSON (documented key names) from the first nine columns of a
    ``sessions`` row, in ``header_columns`` order.

    A ``meta`` column that does not parse becomes ``UNPARSABLE``, which the core's header
    validation rejects (``list`` skips that session, a read reports it as corrupt).
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
            header["meta"] = parse_json_text(meta)
        except ValueError:
            header["meta"] = UNPARSABLE
    return header


def revision_string(incarnation: Any, counter: Any) -> str:
    """Return the opaque revision of a ``sessions`` row: ``"<incarnation>:<counter>"``."""
    return f"{incarnation}:{counter}"
