"""How the command line shows events, surfaces, messages and provenance (rich tables).

Human output goes through ``rich``; ``--json`` output is written with ``write_json`` /
``write_jsonl`` as plain JSON, never through rich, so it stays byte-for-byte parseable.
Every value that comes from a log is passed as ``rich.text.Text`` so that brackets in
user data are never read as markup.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sessionledger import jsoncodec
from sessionledger.cli.words import plural
from sessionledger.events import APPEND, Replace, SessionEvent
from sessionledger.snapshot import thaw
from sessionledger.vocabulary import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)

__all__ = [
    "PREVIEW_CHARS",
    "describe_sources",
    "event_preview",
    "event_table",
    "local_datetime",
    "local_time",
    "make_console",
    "message_table",
    "message_text",
    "plain_messages",
    "plural",
    "provenance_table",
    "seq_ranges",
    "surface_op_text",
    "surface_table",
    "write_json",
    "write_jsonl",
]

#: Longest data preview shown in a table cell.
PREVIEW_CHARS = 72


#: Width used when output goes to a file or pipe and ``COLUMNS`` is unset (rich's own
#: default, 80, squeezes the event table).
PIPE_WIDTH = 120


def make_console(*, stderr: bool = False) -> Console:
    """Return a console for human output (stdout, or stderr for progress and notes)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not os.environ.get("COLUMNS") and not stream.isatty():
        width = PIPE_WIDTH
    return Console(stderr=stderr, highlight=False, emoji=False, soft_wrap=False, width=width)


def _cell(text: str, style: str = "") -> Text:
    """Return a one-line cell: never wrapped, cut with an ellipsis when too long."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


# -- JSON output -------------------------------------------------------------------------


def _dumps(value: Any, *, indent: bool) -> bytes:
    if indent:
        try:
            return orjson.dumps(value, option=orjson.OPT_INDENT_2)
        except orjson.JSONEncodeError:
            pass  # nested deeper than orjson writes; the codec has no depth limit
    return jsoncodec.dumps(value)


def write_json(value: Any, *, indent: bool = True) -> None:
    """Write one JSON document to stdout (indented, newline-terminated)."""
    out = sys.stdout.buffer
    out.write(_dumps(value, indent=indent) + b"\n")
    out.flush()


def write_jsonl(values: Iterable[Any]) -> None:
    """Write one compact JSON document per line to stdout."""
    out = sys.stdout.buffer
    for value in values:
        out.write(jsoncodec.dumps(value) + b"\n")
    out.flush()


# -- small formatters --------------------------------------------------------------------


def local_time(ms: int) -> str:
    """Return epoch milliseconds as local ``HH:MM:SS.mmm``."""
    moment = datetime.fromtimestamp(ms / 1000)
    return f"{moment:%H:%M:%S}.{ms % 1000:03d}"


def local_datetime(ms: int, *, seconds: bool = True) -> str:
    """Return epoch milliseconds as local ``YYYY-MM-DD HH:MM:SS`` (or without seconds)."""
    moment = datetime.fromtimestamp(ms / 1000)
    return f"{moment:%Y-%m-%d %H:%M:%S}" if seconds else f"{moment:%Y-%m-%d %H:%M}"


def seq_ranges(seqs: Sequence[int]) -> str:
    """Return ``[3, 4, 5, 9]`` as ``"3-5, 9"`` (consecutive runs collapsed)."""
    parts: list[str] = []
    index = 0
    while index < len(seqs):
        end = index
        while end + 1 < len(seqs) and seqs[end + 1] == seqs[end] + 1:
            end += 1
        first, last = seqs[index], seqs[end]
        if last == first:
            parts.append(str(first))
        elif last == first + 1:
            parts.append(f"{first}, {last}")
        else:
            parts.append(f"{first}-{last}")
        index = end + 1
    return ", ".join(parts)


def _clip(text: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else None


def _compact_json(value: Any) -> str:
    try:
        return jsoncodec.dumps(value).decode()
    except Exception:
        return repr(value)


def message_text(message: Any) -> str:
    """Return a one-line rendering of a message's blocks (texts, calls, results)."""
    parts: list[str] = []
    content = _get(message, "content")
    for block in content if isinstance(content, tuple | list) else ():
        kind = _get(block, "type")
        if kind == "text":
            parts.append(str(_get(block, "text") or ""))
        elif kind == "reasoning":
            parts.append(f"(thinking) {_get(block, 'text') or ''}")
        elif kind == "tool-call":
            parts.append(f"→ {_get(block, 'name')}({_get(block, 'arguments') or ''})")
        elif kind == "tool-result":
            error = " [error]" if _get(block, "isError") is True else ""
            parts.append(f"{message_text(block)}{error}")
        elif kind is not None:
            parts.append(f"[{kind}]")
    return " ".join(part for part in parts if part)


def _chunk_preview(chunk: Any) -> str:
    kind = _get(chunk, "type")
    if kind in ("text-delta", "reasoning-delta"):
        return f"{kind} {_get(chunk, 'text')!r}"
    if kind == "tool-call-delta":
        name = _get(chunk, "name")
        named = f" {name}" if name else ""
        return f"{kind}{named} {_get(chunk, 'argumentsDelta')!r}"
    if kind == "block-start":
        return f"block-start {_get(chunk, 'blockType')}"
    if kind == "block-end":
        return f"block-end {_get(_get(chunk, 'block'), 'type')}"
    if kind == "finish":
        return f"finish {_get(chunk, 'reason')}"
    return _compact_json(chunk)


def event_preview(event: SessionEvent) -> str:
    """Return a short, one-line summary of an event's data."""
    data = event.data
    kind = event.type
    text: str
    if kind in (TURN_START, STEP_START, STEP_END):
        step = _get(data, "step")
        text = f"turn {_get(data, 'turn')}" + (f" step {step}" if step is not None else "")
    elif kind == TURN_END:
        reason = _get(data, "reason")
        text = f"turn {_get(data, 'turn')} {_get(reason, 'kind')}"
    elif kind == USER_MESSAGE:
        source = _get(data, "source")
        origin = _get(source, "kind")
        if origin == "plugin":
            origin = f"plugin {_get(source, 'plugin')}"
        text = f"({origin}) {message_text(data)}"
    elif kind == ASSISTANT_MESSAGE:
        text = message_text(_get(data, "message"))
    elif kind == ASSISTANT_CHUNK:
        text = _chunk_preview(_get(data, "chunk"))
    elif kind == TOOL_CALL:
        text = f"{_get(data, 'callId')} {_get(data, 'name')}({_get(data, 'arguments')})"
    elif kind == TOOL_RESULT:
        error = _get(data, "error")
        code = f"[{_get(error, 'code')}] " if error is not None else ""
        text = code + message_text(_get(data, "message"))
    elif kind == REQUEST_HEADER:
        config = _get(_get(data, "header"), "config")
        text = f"{_get(data, 'reason')}: {_get(config, 'provider')}/{_get(config, 'model')}"
    elif kind == REQUEST_CONTEXT:
        text = f"{_get(data, 'provider')}/{_get(data, 'model')}"
    else:
        text = _compact_json(data)
    return _clip(text)


def surface_op_text(op: object) -> str:
    """Return ``append``, ``replace a-b`` or an empty string."""
    if op == APPEND:
        return "append"
    if isinstance(op, Replace):
        return f"replace {op.start}-{op.end}"
    return ""


# -- tables ------------------------------------------------------------------------------


def _chunk_run_end(events: Sequence[SessionEvent], start: int) -> int:
    """Return the index after the run of chunks of one step that starts at *start*."""
    first = events[start].data
    end = start + 1
    while (
        end < len(events)
        and events[end].type == ASSISTANT_CHUNK
        and _get(events[end].data, "turn") == _get(first, "turn")
        and _get(events[end].data, "step") == _get(first, "step")
    ):
        end += 1
    return end


def _run_preview(events: Sequence[SessionEvent]) -> str:
    """Return the text a run of chunks streamed (deltas joined, blocks separated)."""
    streamed: list[str] = []
    deltas = 0
    for event in events:
        chunk = _get(event.data, "chunk")
        kind = _get(chunk, "type")
        if kind == "block-start" and streamed:
            streamed.append(" | ")
        piece = _get(chunk, "argumentsDelta") if kind == "tool-call-delta" else _get(chunk, "text")
        if type(piece) is str and kind in ("text-delta", "reasoning-delta", "tool-call-delta"):
            deltas += 1
            streamed.append(piece)
    return _clip(f"{plural(deltas, 'delta')}: {''.join(streamed)}")


#: Below this console width the event table leaves out the time column.
NARROW = 110


def event_table(
    events: Sequence[SessionEvent],
    *,
    title: str | None = None,
    collapse_chunks: bool = True,
    width: int | None = None,
) -> Table:
    """Return the event log as a table: seq, time, type, surface op, sources, preview.

    With *collapse_chunks*, each run of ``assistant/chunk`` events of one step is one row
    (seq range, count and the streamed text), since a model step streams dozens of them.
    On a console narrower than ``NARROW`` (*width*) the time column is left out.
    """
    show_time = width is None or width >= NARROW
    table = Table(title=title, title_justify="left", header_style="bold", expand=False)
    table.add_column("seq", justify="right", no_wrap=True)
    if show_time:
        table.add_column("time", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("surface", no_wrap=True)
    table.add_column("sources", overflow="fold", max_width=14)
    # Wrappable for the width calculation (so it is the column that gives way), while
    # each cell is a single line cut with an ellipsis.
    table.add_column("data", min_width=12)
    index = 0
    while index < len(events):
        event = events[index]
        row: list[Any]
        if (
            collapse_chunks
            and event.type == ASSISTANT_CHUNK
            and (end := _chunk_run_end(events, index)) - index > 1
        ):
            run = events[index:end]
            row = [
                f"{event.seq}-{run[-1].seq}",
                f"{ASSISTANT_CHUNK} ({len(run)})",
                "",
                "",
                _cell(_run_preview(run), "dim"),
            ]
            index = end
        else:
            sources = event.source_event_seqs
            row = [
                str(event.seq),
                Text(event.type, style=_type_style(event.type)),
                surface_op_text(event.surface_op),
                seq_ranges(sources) if sources is not None else "",
                _cell(event_preview(event)),
            ]
            index += 1
        if show_time:
            row.insert(1, local_time(event.time))
        table.add_row(*row)
    return table


def _type_style(kind: str) -> str:
    if kind in (TURN_START, TURN_END):
        return "bold"
    if kind in (USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT):
        return "cyan"
    return ""


def surface_table(
    events: Sequence[SessionEvent], nodes: Sequence[int], *, title: str | None = None
) -> Table:
    """Return the surface (the model-visible nodes, in order) as a table."""
    table = Table(title=title, title_justify="left", header_style="bold", expand=False)
    table.add_column("#", justify="right")
    table.add_column("seq", justify="right")
    table.add_column("type", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("content", min_width=12)
    for position, seq in enumerate(nodes):
        event = events[seq]
        message = event.data if event.type == USER_MESSAGE else _get(event.data, "message")
        table.add_row(
            str(position),
            str(seq),
            event.type,
            str(_get(message, "role")),
            _cell(_clip(message_text(message))),
        )
    return table


def message_table(
    messages: Sequence[Any], *, title: str | None = None, clip: int | None = None
) -> Table:
    """Return messages (derived or transcript) as a table: role, source, content.

    With *clip*, each text is flattened to one paragraph of at most *clip* characters.
    """
    table = Table(title=title, title_justify="left", header_style="bold", expand=False)
    table.add_column("#", justify="right")
    table.add_column("role", no_wrap=True)
    table.add_column("source", no_wrap=True)
    table.add_column("content", overflow="fold")
    for position, message in enumerate(messages):
        source = _get(message, "source")
        origin = str(_get(source, "kind"))
        detail = _get(source, "plugin") or _get(source, "model") or _get(source, "callId")
        table.add_row(
            str(position),
            str(_get(message, "role")),
            f"{origin} {detail}" if detail else origin,
            Text(message_text(message) if clip is None else _clip(message_text(message), clip)),
        )
    return table


def describe_sources(events: Sequence[SessionEvent], event: SessionEvent) -> str:
    """Say where a surface node came from, following its ``source_event_seqs``."""
    sources = event.source_event_seqs
    if not sources:
        if event.type == USER_MESSAGE:
            return "typed by the user (no sources)"
        return "no sources recorded" if sources is None else "an empty stream"
    kinds: dict[str, int] = {}
    for seq in sources:
        kinds[events[seq].type] = kinds.get(events[seq].type, 0) + 1
    cited = ", ".join(f"{count} {kind}" for kind, count in kinds.items())
    if isinstance(event.surface_op, Replace):
        what = "summarises (shadows)"
    elif event.type == ASSISTANT_MESSAGE:
        what = "assembled from"
    elif event.type == TOOL_RESULT:
        call = events[sources[0]]
        return (
            f"answers tool/call {call.seq} ({_get(call.data, 'name')} {_get(call.data, 'callId')})"
        )
    else:
        what = "cites"
    return f"{what} seq {seq_ranges(sources)} ({cited})"


def provenance_table(
    events: Sequence[SessionEvent], nodes: Sequence[int], *, title: str | None = None
) -> Table:
    """Return, for each surface node, the events it was made from."""
    table = Table(title=title, title_justify="left", header_style="bold", expand=False)
    table.add_column("node", justify="right")
    table.add_column("type", no_wrap=True)
    table.add_column("made from", overflow="fold")
    for seq in nodes:
        event = events[seq]
        table.add_row(str(seq), event.type, Text(describe_sources(events, event)))
    return table


def plain_messages(messages: Iterable[Any]) -> list[Any]:
    """Return messages as plain JSON values (frozen mappings thawed)."""
    return [thaw(message) for message in messages]
