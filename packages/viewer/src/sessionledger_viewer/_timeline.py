"""A session's turns and steps in time, and what changed between its requests
(docs/viewer.md, "the timeline"): built from the events no chunk run holds, so a large
log's deltas are looked at only where a step's first chunk is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sessionledger import Session, SessionEvent
from sessionledger_viewer._describe import as_text, clip, lookup, loose_events

#: How far after a ``step/start`` its first chunk is looked for.
_FIRST_CHUNK_WITHIN: Final = 16
#: How deep a request header is compared key by key (deeper: as one value).
_HEADER_DEPTH: Final = 6


@dataclasses.dataclass
class ToolSpan:
    """One tool call and, when it came, its result."""

    call_seq: int
    name: str
    call_time: int
    result_seq: int | None = None
    result_time: int | None = None

    @property
    def took(self) -> int | None:
        return None if self.result_time is None else self.result_time - self.call_time


@dataclasses.dataclass
class Step:
    """One step: when it started and ended, its first and last chunk, its tool calls."""

    number: Any
    start_seq: int
    start_time: int
    end_time: int | None = None
    first_chunk: int | None = None
    last_chunk: int | None = None
    tools: list[ToolSpan] = dataclasses.field(default_factory=list)

    @property
    def took(self) -> int | None:
        return None if self.end_time is None else self.end_time - self.start_time

    @property
    def to_first_chunk(self) -> int | None:
        return None if self.first_chunk is None else self.first_chunk - self.start_time

    @property
    def streaming(self) -> int | None:
        if self.first_chunk is None or self.last_chunk is None:
            return None
        return self.last_chunk - self.first_chunk


@dataclasses.dataclass
class Turn:
    """One turn: its steps, and how it ended (None while it is open)."""

    number: Any
    start_seq: int
    start_time: int
    end_seq: int | None = None
    end_time: int | None = None
    reason: str = ""
    steps: list[Step] = dataclasses.field(default_factory=list)

    @property
    def took(self) -> int | None:
        return None if self.end_time is None else self.end_time - self.start_time


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference between a request header and the one before it."""

    path: str
    before: str | None
    after: str | None


@dataclasses.dataclass(frozen=True)
class Request:
    """A ``request/header`` and what changed since the previous one (all of it, first)."""

    seq: int
    time: int
    reason: str
    changes: tuple[Change, ...]


def _first_chunk(session: Session, start: SessionEvent, length: int) -> int | None:
    """The time of the first ``assistant/chunk`` shortly after *start* (a step/start)."""
    for seq in range(start.seq + 1, min(start.seq + 1 + _FIRST_CHUNK_WITHIN, length)):
        event = session.event_at(seq)
        if event.type == "assistant/chunk":
            return event.time
        if event.type in ("step/end", "step/start", "assistant/message"):
            return None
    return None


def _flat(value: Any, path: str, out: dict[str, str], depth: int = 0) -> None:
    """*value*'s leaves by their dotted path (a list or a value too deep: one leaf)."""
    if isinstance(value, Mapping) and depth < _HEADER_DEPTH:
        for key, item in value.items():
            _flat(item, f"{path}.{key}" if path else str(key), out, depth + 1)
        return
    out[path or "(header)"] = as_text(value)


def timeline(session: Session, length: int) -> list[Turn]:
    """Every turn of the first *length* events, with its steps and tool calls."""
    turns: list[Turn] = []
    turn: Turn | None = None
    step: Step | None = None
    calls: dict[str, ToolSpan] = {}
    for event in loose_events(session):
        if event.seq >= length:
            break
        kind, data = event.type, event.data
        if kind == "turn/start":
            turn = Turn(lookup(data, "turn"), event.seq, event.time)
            turns.append(turn)
            step = None
        elif kind == "turn/end" and turn is not None:
            turn.end_seq, turn.end_time = event.seq, event.time
            turn.reason = as_text(lookup(lookup(data, "reason"), "kind") or "")
        elif kind == "step/start" and turn is not None:
            step = Step(lookup(data, "step"), event.seq, event.time)
            step.first_chunk = _first_chunk(session, event, length)
            turn.steps.append(step)
        elif kind == "step/end" and step is not None:
            step.end_time = event.time
        elif kind == "assistant/message" and step is not None and event.source_event_seqs:
            last = event.source_event_seqs[-1]
            if 0 <= last < length:
                step.last_chunk = session.event_at(last).time
        elif kind == "tool/call" and step is not None:
            span = ToolSpan(event.seq, as_text(lookup(data, "name")), event.time)
            step.tools.append(span)
            call_id = lookup(data, "callId")
            if type(call_id) is str:
                calls[call_id] = span
        elif kind == "tool/result":
            call_id = lookup(lookup(lookup(data, "message"), "source"), "callId")
            answered = calls.pop(call_id, None) if type(call_id) is str else None
            if answered is not None:
                answered.result_seq, answered.result_time = event.seq, event.time
    return turns


def requests(session: Session, length: int) -> list[Request]:
    """Every ``request/header`` of the first *length* events and what it changed."""
    out: list[Request] = []
    before: dict[str, str] = {}
    for event in loose_events(session):
        if event.seq >= length:
            break
        if event.type != "request/header":
            continue
        now: dict[str, str] = {}
        _flat(lookup(event.data, "header"), "", now)
        changes = tuple(
            Change(path, before.get(path), now.get(path))
            for path in sorted(before.keys() | now.keys())
            if before.get(path) != now.get(path)
        )
        reason = as_text(lookup(event.data, "reason") or "")
        out.append(Request(event.seq, event.time, reason, changes))
        before = now
    return out


def longest(turns: Sequence[Turn]) -> int:
    """The longest turn or step among *turns* (ms, at least 1): the bars' full length."""
    spans = [turn.took for turn in turns] + [step.took for turn in turns for step in turn.steps]
    return max([span for span in spans if span is not None] or [1]) or 1


def seconds(ms: int | None) -> str:
    """A duration in ms as seconds (empty when unknown)."""
    return "" if ms is None else f"{ms / 1000:.3f}s"


def shown(text: str | None) -> str:
    """A header value as one clipped line (``—`` when absent)."""
    return "—" if text is None else clip(text, 240)
