"""Where a fork may start: the part of a source log a child session is seeded with
(docs/reading.md, "fork")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sessionledger._errors import ForkError
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._snapshot import is_safe_int
from sessionledger.model._vocabulary import TURN_END, TURN_START


def fork_seed(
    header: SessionHeader, events: Sequence[SessionEvent], boundary: int | None
) -> Sequence[SessionEvent]:
    """Return the events ``0..boundary`` (inclusive; None: all) of the source *header*
    and *events*, refusing a boundary that is not one of its seqs (``INVALID_BOUNDARY``)
    or that ends inside an open turn (``OPEN_TURN``): a child starts between turns."""
    if boundary is None:
        seed: Sequence[SessionEvent] = events
    else:
        if not is_safe_int(boundary) or not 0 <= boundary < len(events):
            raise ForkError(
                f"fork boundary {boundary!r} is not a seq of the source "
                f"(last seq: {len(events) - 1 if events else 'none'})",
                code="INVALID_BOUNDARY",
                session_id=header.id,
            )
        seed = events[: boundary + 1]
    for event in reversed(seed):
        if event.type == TURN_END:
            break
        if event.type == TURN_START:
            raise ForkError(
                f"fork boundary {seed[-1].seq} ends inside open turn "
                f"{event.data.get('turn') if isinstance(event.data, Mapping) else '?'}",
                code="OPEN_TURN",
                session_id=header.id,
                seq=seed[-1].seq,
            )
    return seed
