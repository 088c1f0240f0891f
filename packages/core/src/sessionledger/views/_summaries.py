"""``SessionSummary``: what listing a session shows, kept up to date with its log.

A backend stores one summary per session in the same write as the events (docs/listing.md,
"summaries"), so listing thousands of sessions reads summaries, never events. The policy
folds each batch into the summary it already holds (``after``); a cold load, a repair or
``reindex`` computes it from the whole log (``summarize``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, final

from sessionledger.model._events import SessionEvent
from sessionledger.model._vocabulary import TURN_END, TURN_START


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SessionSummary:
    """A session's event count, first and last activity time (epoch ms of its first and
    last event; None while it has none) and the turn it leaves open (None when none is
    open; -1 for a ``turn/start`` without a number)."""

    events: int = 0
    first_activity: int | None = None
    last_activity: int | None = None
    open_turn: int | None = None

    def after(self, events: Iterable[SessionEvent]) -> SessionSummary:
        """Return the summary once *events* (the next events of the log) are appended."""
        count = self.events
        first, last, open_turn = self.first_activity, self.last_activity, self.open_turn
        for event in events:
            if count == 0:
                first = event.time
            count += 1
            last = event.time
            kind = event.type
            if kind == TURN_START:
                data = event.data
                turn = data.get("turn") if isinstance(data, Mapping) else None
                open_turn = turn if type(turn) is int else -1
            elif kind == TURN_END:
                open_turn = None
        if count == self.events:
            return self
        return SessionSummary(count, first, last, open_turn)

    def to_json(self) -> dict[str, Any]:
        """Return the summary as a JSON object (camelCase keys, as the header's)."""
        return {
            "events": self.events,
            "firstActivity": self.first_activity,
            "lastActivity": self.last_activity,
            "openTurn": self.open_turn,
        }

    @classmethod
    def from_json(cls, value: object) -> SessionSummary | None:
        """Return the summary *value* holds, or None when it is not a well-formed one (an
        index entry a store cannot trust is rebuilt from the log, never shown)."""
        if type(value) is not dict:
            return None
        events = value.get("events")
        fields = [value.get(key) for key in ("firstActivity", "lastActivity", "openTurn")]
        if type(events) is not int or events < 0:
            return None
        if any(item is not None and type(item) is not int for item in fields):
            return None
        return cls(events, fields[0], fields[1], fields[2])


def summarize(events: Sequence[SessionEvent]) -> SessionSummary:
    """Return the summary of a whole log (reading back from its end only as far as the
    last turn boundary)."""
    if not events:
        return SessionSummary()
    open_turn: int | None = None
    for event in reversed(events):
        kind = event.type
        if kind == TURN_END:
            break
        if kind == TURN_START:
            data = event.data
            turn = data.get("turn") if isinstance(data, Mapping) else None
            open_turn = turn if type(turn) is int else -1
            break
    return SessionSummary(len(events), events[0].time, events[-1].time, open_turn)
