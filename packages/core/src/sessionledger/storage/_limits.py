"""How large an event is for the store, what a store can hold, and what waits for it.

Every size here is counted the same way (docs/durability.md, "limits and the backlog"):
``event_bytes(event)``, an upper bound of the event's compact JSON envelope. A stored
record never takes more: a verbatim record is that envelope, an SQL row stores less of
it, and a packed chunk row is smaller than its members' envelopes. So a batch whose
events add up to at most a store's ``max_batch_bytes`` fits in that store, and an event
of at most its ``max_event_bytes`` fits in one row or line.

The measure must be cheap, since a ledger takes it on every append: a streamed delta is
counted from its text's length alone, at the worst JSON escaping (6 bytes a character);
any other event (a few in a hundred) is serialized once. Above ``EXACT_ABOVE`` a delta
is serialized too, so that a long plain text is not refused for the escaping it lacks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final, final

from sessionledger._errors import EventDataError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._deltas import CHUNK_TYPE, DeltaFields, delta_fields
from sessionledger.model._events import SessionEvent
from sessionledger.storage._logstore import LogStore

#: The most a JSON string takes per character: a control character is written ``\u001f``.
_PER_CHARACTER: Final = 6
#: Digits of an integer the ledger accepts (a safe integer: 16 digits), with its sign.
_INTEGER: Final = 17
#: An envelope around its ``data``, type and sources: every key, the largest seq and
#: time, the longest surface op and ``ignorable``.
_ENVELOPE: Final = (
    len('{"type":"","seq":,"time":,"data":,"surfaceOp":,"sourceEventSeqs":[],"ignorable":true}')
    + 2 * _INTEGER
    + len('{"op":"replace","start":,"end":}')
    + 2 * _INTEGER
)
#: Each seq of ``sourceEventSeqs``, with its comma.
_PER_SOURCE: Final = _INTEGER + 1
#: A delta's data around its strings: the longer of the text and the tool-call shapes,
#: with turn, step and index at their largest.
_DELTA_DATA: Final = (
    max(
        len('{"turn":,"step":,"chunk":{"type":"reasoning-delta","index":,"text":""}}'),
        len(
            '{"turn":,"step":,"chunk":{"type":"tool-call-delta","index":,"id":"","name":"",'
            '"argumentsDelta":""}}'
        ),
    )
    + 3 * _INTEGER
)
#: A delta's envelope around its data (a delta has no surface op, sources or
#: ``ignorable``: otherwise it is counted as any other event).
_DELTA_BASE: Final = (
    len('{"type":"' + CHUNK_TYPE + '","seq":,"time":,"data":}') + 2 * _INTEGER + _DELTA_DATA
)

#: A delta whose bound exceeds this is serialized for its exact size.
EXACT_ABOVE: Final = 1 << 16

#: The largest event every bundled backend can store (PostgreSQL's, the smallest). The
#: stores without a limit of their own (JSONL, memory) state it, so that what they
#: accept can be copied to any other bundled backend (docs/backends.md).
PORTABLE_MAX_EVENT_BYTES: Final = (1 << 29) - (1 << 24)

#: How many bytes of committed, not yet durable events a ledger holds before ``append``
#: refuses more (``Ledger(max_pending_bytes=...)``; docs/durability.md).
DEFAULT_MAX_PENDING_BYTES: Final = 256 << 20


def _exact_bytes(event: SessionEvent) -> int:
    sources = event.source_event_seqs
    return (
        _ENVELOPE
        + _PER_CHARACTER * len(event.type)
        + (0 if sources is None else _PER_SOURCE * len(sources))
        + len(jsoncodec.dumps(event.data))
    )


def delta_bytes(event: SessionEvent, fields: DeltaFields) -> int:
    """``event_bytes`` of a streamed delta whose run *fields* are known (the append
    path has them from freezing it): from its strings' lengths alone, in O(1), unless
    that bound exceeds ``EXACT_ABOVE``."""
    _, _, _, _, call_id, name, text = fields
    characters = len(text)
    if call_id is not None:
        characters += len(call_id) + (0 if name is None else len(name))
    size = _DELTA_BASE + _PER_CHARACTER * characters
    return size if size <= EXACT_ABOVE else _exact_bytes(event)


def event_bytes(event: SessionEvent) -> int:
    """Return an upper bound of *event*'s compact JSON envelope in bytes: what the ledger
    counts for it against a store's limits and in its backlog."""
    if (
        event.type == CHUNK_TYPE
        and event.surface_op is None
        and event.source_event_seqs is None
        and not event.ignorable
    ):
        fields = delta_fields(event.data)
        if fields is not None:
            return delta_bytes(event, fields)
    return _exact_bytes(event)


def event_limit(store: LogStore, session_id: str) -> int | None:
    """Return the largest event (as ``event_bytes`` counts it) *store* can hold in the
    log of *session_id*, or None when it states no limit. The session id counts against
    the store's ``max_event_bytes``: the SQL backends repeat it in every row."""
    largest = store.max_event_bytes
    if largest is None:
        return None
    return largest - len(session_id.encode("utf-8", "surrogatepass"))


def batch_end(sizes: Sequence[int], start: int, budget: int | None) -> int:
    """Return where the batch that begins at *start* ends: after the most events of
    *sizes* whose sizes add up to at most *budget* (None: all), and after one at least."""
    if budget is None:
        return len(sizes)
    total = 0
    end = start
    for size in sizes[start:]:
        total += size
        if total > budget and end > start:
            break
        end += 1
    return end


def checked_sizes(
    store: LogStore, session_id: str, events: Sequence[SessionEvent], sizes: Sequence[int] | None
) -> Sequence[int] | None:
    """Return the sizes of *events* (measured unless *sizes* gives them), or None when
    *store* states no limit; raise ``TOO_LARGE`` for an event it cannot hold."""
    if store.max_event_bytes is None and store.max_batch_bytes is None:
        return None
    if sizes is None or len(sizes) != len(events):
        sizes = [event_bytes(event) for event in events]
    limit = event_limit(store, session_id)
    if limit is not None:
        for event, size in zip(events, sizes, strict=True):
            if size > limit:
                raise too_large(session_id, event.seq, size, limit, store.scheme)
    return sizes


def batch_bounds(
    sizes: Sequence[int] | None, count: int, budget: int | None
) -> list[tuple[int, int]]:
    """Return ``(start, end)`` of each batch *count* events are written in, so that each
    adds up to at most *budget* of *sizes* (or holds one event); one batch without sizes."""
    if sizes is None or budget is None:
        return [(0, count)] if count else []
    bounds = []
    start = 0
    while start < count:
        end = batch_end(sizes, start, budget)
        bounds.append((start, end))
        start = end
    return bounds


def too_large(session_id: str, seq: int, size: int, limit: int, scheme: str) -> EventDataError:
    """The refusal of an event no batch of the store could hold (``TOO_LARGE``)."""
    return EventDataError(
        f"event of about {size:,} bytes as JSON is larger than the {limit:,} bytes the "
        f"{scheme or 'backend'} store can hold in one event; store large payloads outside "
        "the log and record a reference instead",
        code="TOO_LARGE",
        session_id=session_id,
        seq=seq,
    )


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Backlog:
    """Committed events a ledger has not made durable yet: how many, and their bytes as
    ``event_bytes`` counts them (``Ledger.backlog``; docs/durability.md)."""

    events: int = 0
    bytes: int = 0
