"""Views derived from a log: model messages, the human transcript, request folds.

What each view shows: docs/reading.md, "derived views".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, final

from sessionledger.model._eventlog import EventLog
from sessionledger.model._events import APPEND, SessionEvent
from sessionledger.model._snapshot import FrozenDict
from sessionledger.model._surface import SurfaceManager, fold_log, fold_surface
from sessionledger.model._vocabulary import (
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    SURFACE_TYPES,
    TOOL_RESULT,
    USER_MESSAGE,
)


def project_message(event: SessionEvent) -> Any:
    """Return the message a surface event shows the model, or None.

    ``user/message`` is its data; ``assistant/message`` and ``tool/result`` carry
    ``data.message`` (an assistant message with empty content shows nothing). The
    returned object is the frozen one inside the log.
    """
    kind = event.type
    if kind == USER_MESSAGE:
        return event.data
    if kind == ASSISTANT_MESSAGE:
        message = event.data["message"]
        return message if message["content"] else None
    if kind == TOOL_RESULT:
        return event.data["message"]
    return None


@final
class DerivedMessages:
    """The cached projection of a surface: tail growth projects only the new nodes and a
    replace (a new generation) rebuilds once; the log is never rescanned.
    """

    __slots__ = ("_generation", "_log", "_messages", "_processed", "_surface")

    def __init__(self, log: Sequence[SessionEvent], surface: SurfaceManager) -> None:
        self._log = log
        self._surface = surface
        self._messages: list[Any] = []
        self._processed = 0
        self._generation = 0

    def messages(self) -> list[Any]:
        """Return a fresh list of the frozen messages on the surface."""
        surface = self._surface
        if surface.replace_generation != self._generation:
            self._messages = []
            self._processed = 0
            self._generation = surface.replace_generation
        if self._processed < surface.node_count:
            log = self._log
            out = self._messages
            for seq in surface.nodes_from(self._processed):
                message = project_message(log[seq])
                if message is not None:
                    out.append(message)
            self._processed = surface.node_count
        return list(self._messages)


def messages_at(events: Sequence[SessionEvent], seq: int) -> list[Any]:
    """Return the model view right after the event *seq* (inclusive): time travel."""
    if type(seq) is not int or not 0 <= seq < len(events):
        raise IndexError(f"seq {seq!r} is not in a log of {len(events)} events")
    if type(events) is EventLog:  # its deltas are never folded, nor built
        return [
            message
            for node in fold_log(events, seq).nodes
            if (message := project_message(events[node])) is not None
        ]
    prefix = events[: seq + 1]
    return [
        message
        for node in fold_surface(prefix).nodes
        if (message := project_message(prefix[node])) is not None
    ]


def transcript(events: Sequence[SessionEvent]) -> list[Any]:
    """Return what the user saw: messages of append-origin surface events, in log order,
    including those a later replace shadowed (a compaction summary is not shown).
    """
    return [message for _, message in transcript_events(events)]


def transcript_events(events: Sequence[SessionEvent]) -> Iterator[tuple[SessionEvent, Any]]:
    """``transcript``, each message with the event that carries it (its time, its seq)."""
    # Streamed deltas are never messages: a compact log skips its runs unread.
    loose = events.unpacked() if type(events) is EventLog else events
    for event in loose:
        if event.type in SURFACE_TYPES and event.surface_op == APPEND:
            message = project_message(event)
            if message is not None:
                yield event, message


def canonical_request_header(header: Any) -> FrozenDict:
    """Return a request header without its empty parts (``system``, ``tools``,
    ``adapterDefaults`` with no marker set), so equal requests compare equal.
    """
    if not isinstance(header, Mapping):
        return FrozenDict({"config": header})
    out: dict[str, Any] = {"config": header.get("config")}
    defaults = header.get("adapterDefaults")
    if isinstance(defaults, Mapping) and any(value is True for value in defaults.values()):
        out["adapterDefaults"] = defaults
    system = header.get("system")
    if type(system) is str and system:
        out["system"] = system
    tools = header.get("tools")
    if type(tools) is tuple and tools:
        out["tools"] = tools
    out.update(
        (key, value)
        for key, value in header.items()
        if key not in {"config", "adapterDefaults", "system", "tools"}
    )
    return FrozenDict(out)


@final
class RequestFolds:
    """Incremental folds of ``request/header`` (last wins, canonical) and
    ``request/context`` (whole-record replacement), each with a watermark.
    """

    __slots__ = ("_context", "_header", "_log", "_watermark")

    def __init__(self, log: Sequence[SessionEvent]) -> None:
        self._log = log
        self._watermark = 0
        self._header: FrozenDict | None = None
        self._context: Any = None

    def _advance(self) -> None:
        log = self._log
        end = len(log)
        if self._watermark == end:
            return
        if type(log) is EventLog:
            events: Iterable[SessionEvent] = log.unpacked(self._watermark)
        else:
            events = (log[index] for index in range(self._watermark, end))
        for event in events:
            if event.type == REQUEST_HEADER:
                data = event.data
                if isinstance(data, Mapping):
                    self._header = canonical_request_header(data.get("header"))
            elif event.type == REQUEST_CONTEXT:
                self._context = event.data
        self._watermark = end

    def header(self) -> FrozenDict | None:
        """Return the current canonical request header, or None before the first one."""
        self._advance()
        return self._header

    def context(self) -> Any:
        """Return the current request context record, or None before the first one."""
        self._advance()
        return self._context
