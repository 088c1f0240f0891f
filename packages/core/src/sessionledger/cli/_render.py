"""How the command line shows events, surfaces, messages and provenance.

Human output goes through ``rich``; ``--json`` output is written with ``write_json`` /
``write_jsonl`` as plain JSON, never through rich, so it stays byte-for-byte parseable.
Every value that comes from a log is passed as ``rich.text.Text`` (or written by
``eventlog``) so that brackets in user data are never read as markup. The one-line texts
of events and messages live in ``preview``, the event log's layout in ``eventlog``; the
names other modules use are re-exported here.

Output that is not a terminal is laid out at ``WHOLE_WIDTH``: every value whole, no
truncation, no ellipsis (``make_console``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sessionledger.cli._eventlog import WHOLE_WIDTH, EventLog
from sessionledger.cli._preview import (
    clip as clip_text,
    local_moment,
    lookup,
    message_parts,
    message_text,
    printable,
    raw_time,
    seq_ranges,
    shown,
)
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import Replace, SessionEvent
from sessionledger.model._snapshot import thaw
from sessionledger.model._vocabulary import ASSISTANT_MESSAGE, TOOL_RESULT, USER_MESSAGE

#: Width of a console that is not a terminal when it must have one (the demo's rules,
#: progress bars on stderr).
PIPE_WIDTH = 120


def make_console(*, stderr: bool = False, pipe_width: int | None = None) -> Console:
    """Return a console for human output (stdout, or stderr for progress and notes).

    On a terminal it is as wide as the terminal (or ``COLUMNS``). Otherwise stdout gets
    ``WHOLE_WIDTH``, so that every value is printed whole, nothing cut or wrapped; with
    *pipe_width* (the demo's rules span the console), and on stderr (progress bars), it
    is ``COLUMNS`` wide, else *pipe_width* or ``PIPE_WIDTH``.
    """
    console = Console(stderr=stderr, highlight=False, emoji=False, soft_wrap=False)
    if not console.is_terminal:
        if pipe_width is None and not stderr:
            console.width = WHOLE_WIDTH
        elif not os.environ.get("COLUMNS"):
            console.width = pipe_width or PIPE_WIDTH
    return console


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


def local_datetime(ms: int, *, seconds: bool = True, year: bool = True) -> str:
    """Return epoch milliseconds as local ``YYYY-MM-DD HH:MM:SS`` (or without seconds, or
    without the year); a time no date can show as its epoch milliseconds (``raw_time``)."""
    moment = local_moment(ms)
    if moment is None:
        return raw_time(ms)
    shown = f"{moment:%Y-%m-%d %H:%M:%S}" if seconds else f"{moment:%Y-%m-%d %H:%M}"
    return shown if year else shown.split("-", 1)[1]


# -- tables ----------------------------------------------------------------------------


def event_table(
    events: Sequence[SessionEvent], *, collapse_chunks: bool = True, width: int | None = None
) -> EventLog:
    """Return the event log as a renderable: seq, time, type, surface op, sources, data.

    With *collapse_chunks*, each run of ``assistant/chunk`` events of one step is one row
    (seq range, count and the streamed text), since a model step streams dozens of them.
    It is laid out for the width it is printed at (``eventlog``); *width*, the console's
    width that callers pass, is the same. ``show`` writes long logs with
    ``write_event_log`` instead, row by row.
    """
    del width  # the print width decides
    return EventLog(events, collapse_chunks=collapse_chunks)


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
        message = event.data if event.type == USER_MESSAGE else lookup(event.data, "message")
        table.add_row(
            str(position),
            str(seq),
            event.type,
            Text(shown(lookup(message, "role"))),
            _cell(clip_text(message_text(message))),
        )
    return table


def _source_label(message: Any) -> str:
    """Say where a message came from: its source kind and, when it names one, the
    plugin, model or tool call."""
    source = lookup(message, "source")
    origin = shown(lookup(source, "kind"))
    detail = lookup(source, "plugin") or lookup(source, "model") or lookup(source, "callId")
    return f"{origin} {shown(detail)}" if detail else origin


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
        table.add_row(
            str(position),
            Text(shown(lookup(message, "role"))),
            Text(_source_label(message)),
            Text(message_text(message) if clip is None else clip_text(message_text(message), clip)),
        )
    return table


#: How a message's content is set off under its heading: as a Markdown literal block, so
#: that no text in a log can pose as a heading or as markup.
_LITERAL = "    "


def message_markdown(messages: Sequence[Any], *, title: str) -> str:
    """Return messages as Markdown-like plain text, for output that is not a terminal:
    a heading per message (position, role, source), then each of its blocks whole, line
    breaks kept, indented as a literal block; control characters escaped, no padding."""
    lines = [f"# {printable(title)}"]
    for position, message in enumerate(messages):
        role = printable(shown(lookup(message, "role")))
        lines += ["", f"## {position} · {role} · {printable(_source_label(message))}"]
        for part in message_parts(message):
            lines.append("")
            lines += [_LITERAL + printable(line) if line else "" for line in part.split("\n")]
    return "\n".join(lines) + "\n"


def print_messages(messages: Sequence[Any], *, title: str) -> None:
    """Print messages as a table on a terminal, else as ``message_markdown`` (a table
    laid out for a file pads every line to its widest value)."""
    console = make_console()
    if console.is_terminal:
        console.print(message_table(messages, title=title))
    else:
        sys.stdout.write(message_markdown(messages, title=title))
        sys.stdout.flush()


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
        name, call_id = lookup(call.data, "name"), lookup(call.data, "callId")
        return f"answers tool/call {call.seq} ({shown(name)} {shown(call_id)})"
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
