"""What the pages show of a session, built from its events: rows of the log, the surface
with its provenance, and the replaced ranges (docs/viewer.md).

Pure functions of a ``Session`` read with ``Ledger.inspect``: nothing here reads a store
or knows about HTTP. Every value is returned as plain text; the templates escape it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import orjson

from sessionledger import (
    SURFACE_TYPES,
    USER_MESSAGE,
    Replace,
    Session,
    SessionEvent,
    fold_surface,
)

#: How many characters of an event's text a row shows (its page shows it whole).
PREVIEW_CHARS: Final = 160


@dataclasses.dataclass(frozen=True, slots=True)
class Replaced:
    """One committed replace: the summary node ``seq`` shadowed ``shadowed`` (the
    surface nodes from ``start`` to ``end``), citing ``cited``."""

    seq: int
    type: str
    start: int
    end: int
    shadowed: tuple[int, ...]
    cited: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class SurfaceHistory:
    """The surface as it stands and every replace that shaped it, with what a page looks
    up in them (built once per read of the session)."""

    nodes: tuple[int, ...]
    replaced: tuple[Replaced, ...]
    #: Each shadowed seq → the seq of the summary that shadowed it.
    shadowed_by: Mapping[int, int]
    on_surface: frozenset[int]


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One event as a row of the log."""

    seq: int
    time: str
    offset: str
    type: str
    op: str
    sources: tuple[int, ...]
    preview: str
    shadowed_by: int | None
    on_surface: bool
    stored: bool

    def to_json(self) -> dict[str, Any]:
        """The row for the page's live updates (``viewer.js``)."""
        return dataclasses.asdict(self)


def loose_events(session: Session) -> Iterable[SessionEvent]:
    """The events no chunk run holds, in seq order: surface events are among them."""
    log = session.event_log()
    return (event for _, event in log.loose())


def surface_history(session: Session) -> SurfaceHistory:
    """The surface of *session* and what each replace shadowed (``fold_surface``, which
    folds a compact log's events no run holds: its chunks are never built)."""
    fold = fold_surface(session.event_log())
    replaced = []
    for item in fold.replacements:
        summary = session.event_at(item.seq)
        cited = tuple(summary.source_event_seqs or ())
        replaced.append(
            Replaced(item.seq, summary.type, item.start, item.end, item.shadowed, cited)
        )
    return SurfaceHistory(
        fold.nodes,
        tuple(replaced),
        {seq: item.seq for item in replaced for seq in item.shadowed},
        frozenset(fold.nodes),
    )


def surface_items(
    session: Session, seqs: Iterable[int]
) -> list[tuple[SessionEvent, str, str, bool]]:
    """Each surface node of *seqs* as a page lists it: the event, a line of its text, its
    provenance in words, and whether it is a replace's summary."""
    return [
        (node, clip(event_text(node)), provenance(session, node), type(node.surface_op) is Replace)
        for node in map(session.event_at, seqs)
    ]


def shown_messages(messages: Iterable[Any]) -> list[tuple[Any, list[str], str]]:
    """Each message as a page shows it: the message, its blocks as text, its source."""
    return [(message, block_texts(message), source_label(message)) for message in messages]


def moment(ms: int) -> str:
    """An event time as a UTC date and time (its epoch ms when no date can show it)."""
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def offset(ms: int, start: int) -> str:
    """*ms* as seconds after *start* (the session's first event)."""
    return f"+{(ms - start) / 1000:.3f}s"


def clip(text: str, limit: int = PREVIEW_CHARS) -> str:
    """*text* on one line, cut to *limit* characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def lookup(value: Any, key: str) -> Any:
    """``value[key]`` when *value* is a mapping, else None: a log is read as stored."""
    return value.get(key) if isinstance(value, Mapping) else None


#: Said instead of a value orjson cannot write: one nested deeper than it goes (the
#: ledger accepts any depth). ``sessionledger show ID --json`` prints such a value whole.
TOO_DEEP: Final = "(a value nested too deep to show here: sessionledger show --json prints it)"
#: How deep tool results nested in tool results are followed for their text.
_NESTED_RESULTS: Final = 16


def _json(value: Any, option: int = 0) -> str:
    try:
        return orjson.dumps(value, option=option).decode()
    except (TypeError, orjson.JSONEncodeError):
        return TOO_DEEP


def as_text(value: Any) -> str:
    """A value read from a log as text: a string as it is, a scalar as ``str`` writes it,
    anything else as compact JSON (never ``repr``: a value may be nested any depth)."""
    if type(value) is str:
        return value
    if value is None or type(value) in (bool, int, float):
        return str(value)
    return _json(value)


def block_texts(message: Any, depth: int = 0) -> list[str]:
    """Each block of a message as text: texts and reasoning as written, a tool call as
    name(arguments), a tool result as its content's text, another block by its type."""
    parts: list[str] = []
    if depth > _NESTED_RESULTS:
        return ["(tool results nested deeper than shown here)"]
    content = lookup(message, "content")
    for block in content if isinstance(content, list | tuple) else ():
        kind = lookup(block, "type")
        if kind == "text":
            parts.append(as_text(lookup(block, "text") or ""))
        elif kind == "reasoning":
            parts.append(f"(thinking) {as_text(lookup(block, 'text') or '')}")
        elif kind == "tool-call":
            arguments = lookup(block, "arguments")
            parts.append(f"→ {as_text(lookup(block, 'name'))}({as_text(arguments)})")
        elif kind == "tool-result":
            error = " [error]" if lookup(block, "isError") is True else ""
            parts.append(" ".join(block_texts(block, depth + 1)) + error)
        elif kind is not None:
            parts.append(f"[{as_text(kind)}]")
    return [part for part in parts if part]


def source_label(message: Any) -> str:
    """Where a message came from: its source kind and the plugin, model or tool call."""
    source = lookup(message, "source")
    kind = as_text(lookup(source, "kind"))
    detail = lookup(source, "plugin") or lookup(source, "model") or lookup(source, "callId")
    return f"{kind} {as_text(detail)}" if detail else kind


def event_message(event: SessionEvent) -> Any:
    """The message a message event carries, else None."""
    if event.type == USER_MESSAGE:
        return event.data
    if event.type in SURFACE_TYPES:
        return lookup(event.data, "message")
    return None


def event_text(event: SessionEvent) -> str:
    """What an event says, in one string: a message's blocks, a delta's text, or its data."""
    message = event_message(event)
    if message is not None:
        role = lookup(message, "role")
        return f"({as_text(role)}) " + " ".join(block_texts(message))
    data = event.data
    chunk = lookup(data, "chunk")
    if chunk is not None:
        piece = lookup(chunk, "text")
        if piece is None:
            piece = lookup(chunk, "argumentsDelta")
        if isinstance(piece, str):
            return f"{as_text(lookup(chunk, 'type'))} {piece!r}"
    return _json(data)


def op_text(event: SessionEvent) -> str:
    """The event's surface op as text (empty when it has none)."""
    op = event.surface_op
    if op is None:
        return ""
    if type(op) is Replace:
        return f"replace {op.start}-{op.end}"
    return str(op)


def rows(session: Session, start: int, end: int, history: SurfaceHistory, stored: int) -> list[Row]:
    """The log's rows from seq *start* up to *end* (exclusive); those from *stored* on
    are a crash repair's closers, in memory only."""
    if not session.seq:
        return []
    first = session.event_at(0).time
    shadowed, nodes = history.shadowed_by, history.on_surface
    out = []
    for seq in range(max(start, 0), min(end, session.seq)):
        event = session.event_at(seq)
        out.append(
            Row(
                seq=seq,
                time=moment(event.time),
                offset=offset(event.time, first),
                type=event.type,
                op=op_text(event),
                sources=tuple(event.source_event_seqs or ()),
                preview=clip(event_text(event)),
                shadowed_by=shadowed.get(seq),
                on_surface=seq in nodes,
                stored=seq < stored,
            )
        )
    return out


def provenance(session: Session, event: SessionEvent) -> str:
    """Say in words where a surface node came from (its ``sourceEventSeqs``)."""
    sources = event.source_event_seqs
    if not sources:
        if event.type == "user/message":
            return "typed by the user"
        return "no sources recorded" if sources is None else "an empty stream"
    kinds: dict[str, int] = {}
    for seq in sources:
        kind = session.event_at(seq).type
        kinds[kind] = kinds.get(kind, 0) + 1
    counted = ", ".join(f"{count} {kind}" for kind, count in kinds.items())
    if type(event.surface_op) is Replace:
        return f"summarises {counted}"
    if event.type == "assistant/message":
        return f"assembled from {counted}"
    if event.type == "tool/result":
        return "answers its tool call"
    return f"cites {counted}"


def cited_by(session: Session, seq: int) -> list[int]:
    """The events whose ``sourceEventSeqs`` name *seq*."""
    return [event.seq for event in loose_events(session) if seq in (event.source_event_seqs or ())]


def stored_json(event: SessionEvent) -> str:
    """The event's envelope as stored, indented (``TOO_DEEP`` for a value nested deeper
    than orjson writes)."""
    return _json(event.to_json(), orjson.OPT_INDENT_2)


def seq_ranges(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Runs of consecutive seqs as (first, last) pairs, in order."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out and seq == out[-1][1] + 1:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out
