"""A whole session written at once (``SessionPersistence.publish``, docs/backends.md,
"whole logs"): the log checked as a read checks it, cut into batches, and the check that
what the store staged reads back as written, before anyone can see it.

``sessionledger copy`` writes every session so: a copy killed part-way leaves nothing in
the destination that looks complete, and its rerun writes what is missing
(docs/durability.md, "copying sessions").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from sessionledger._errors import HeaderError, LedgerError, ReadBackMismatchError, SeedError
from sessionledger._failpoints import failpoint
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._eventlog import EventLog
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._registry import EventTypeRegistry
from sessionledger.model._session import Session, SessionHooks
from sessionledger.storage._committed import scan_log
from sessionledger.storage._limits import batch_end
from sessionledger.storage._logstore import Batch, RawLog, collector_paused
from sessionledger.views._summaries import SessionSummary

#: Events per batch of a published log: each is framed (JSONL) or inserted (SQL) as an
#: appended batch of that size would be, so no statement grows with the session.
PUBLISH_BATCH_EVENTS: Final = 1000

#: What a store calls with the log it staged: raises when it is not the one written.
ReadBack = Callable[[RawLog], None]

#: Builds one batch of a log: (header, events, first seq, creates, summary after it).
BatchMaker = Callable[[SessionHeader, list[SessionEvent], int, bool, SessionSummary], Batch]


def whole_log(
    header: SessionHeader,
    events: Iterable[SessionEvent | Mapping[str, Any]],
    event_types: EventTypeRegistry,
) -> Sequence[SessionEvent]:
    """Return *events* as the log of *header*, validated as a read validates a stored log
    (envelopes, contiguous seqs from 0, surface and provenance, data shapes): what is
    published can be read back. Unknown event types are kept, as a reader keeps them. A
    log read from a store (an ``EventLog``) is kept as it is, its delta runs shared."""
    if type(header) is not SessionHeader:
        raise HeaderError(f"publish needs a SessionHeader, got {type(header).__qualname__}")
    log: Sequence[SessionEvent]
    if type(events) is EventLog:
        log = events
    else:
        log = [
            item if type(item) is SessionEvent else SessionEvent.from_json(item) for item in events
        ]
    if not log:
        raise SeedError(
            "a whole log holds at least one event (a session is stored from its first one)",
            session_id=header.id,
        )
    with collector_paused():
        Session.restore(header, log, hooks=SessionHooks(event_types=event_types))
    return log


def log_batches(
    header: SessionHeader,
    events: Sequence[SessionEvent],
    make: BatchMaker,
    sizes: Sequence[int] | None = None,
    budget: int | None = None,
) -> tuple[list[Batch], SessionSummary]:
    """Cut a whole log into batches of at most ``PUBLISH_BATCH_EVENTS`` events whose
    *sizes* add up to at most *budget* (the store's ``max_batch_bytes``; one event at
    least); also return its summary."""
    batches = []
    summary = SessionSummary()
    start = 0
    while start < len(events):
        end = min(start + PUBLISH_BATCH_EVENTS, len(events))
        if sizes is not None:
            end = min(end, batch_end(sizes, start, budget))
        part = list(events[start:end])
        summary = summary.after(part)
        batches.append(make(header, part, start, start == 0, summary))
        start = end
    return batches, summary


def read_back(header: SessionHeader, events: Sequence[SessionEvent]) -> ReadBack:
    """Return the check a store runs on the log it staged for *header* and *events*."""

    def check(raw: RawLog) -> None:
        found = first_difference(header, events, raw)
        if found is not None:
            difference, seq = found
            raise ReadBackMismatchError(
                f"the log read back differs from the one written: {difference}",
                difference=difference,
                session_id=header.id,
                seq=seq,
            )
        failpoint("core.publish.verified")

    return check


def first_difference(
    header: SessionHeader, events: Sequence[SessionEvent], raw: RawLog
) -> tuple[str, int | None] | None:
    """Return what differs between a log read back (*raw*) and *header* and *events*
    (the header, the length, or the first event, with its seq), or None when they are
    the same event for event.

    Compared as stored bytes (``jsoncodec.dumps``), never with ``==``: a value may be
    nested deeper than a comparison can recurse (docs/events.md, "JSON values")."""
    session_id = header.id
    try:
        scan = scan_log(session_id, raw, contiguous_from=0)
    except (LedgerError, RecursionError) as error:
        return f"it does not read as a log: {error}", getattr(error, "seq", None)
    if _stored(scan.header.to_json()) != _stored(header.to_json()):
        return "the header differs", None
    if scan.torn is not None:
        return "it ends in a torn tail", None
    read = scan.events
    for index, event in enumerate(events):
        if index >= len(read):
            return f"{len(read)} events read back, {len(events)} written", event.seq
        if _stored(read[index].to_json()) != _stored(event.to_json()):
            return f"event seq {event.seq} differs", event.seq
    if len(read) != len(events):
        return f"{len(read)} events read back, {len(events)} written", len(events)
    return None


def _stored(value: Any) -> bytes:
    return jsoncodec.dumps(value)
