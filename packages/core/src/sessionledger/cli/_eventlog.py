"""The event log as rows, written as they are produced (``show``), or as a renderable.

One row per event, or per run of ``assistant/chunk`` events of one step (seq range,
count and the text the run streamed). Columns: seq, time, type, surface op, sources and
data, separated by two spaces, no borders. The layout is planned first from the rows'
short cells (one cheap pass), so that no row has to be kept to size the columns:

- on a terminal, the columns fit its width: seq, type and surface are never cut; the
  time column is left out below ``NARROW`` columns; sources longer than ``SOURCES_MAX``
  wrap onto more lines; the data is cut to the room left (with "…"), or, when less than
  ``DATA_MIN`` is left, moves to a line of its own under its row (on a terminal too
  narrow for seq, type, surface and sources alone, about 50 columns, lines run over);
- on a console of unlimited width (``WHOLE_WIDTH``: ``make_console`` gives it to output
  that is not a terminal) every value is whole: nothing is cut, wrapped or elided.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from typing import Final

from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.text import Text

from sessionledger.cli._preview import (
    clip,
    event_preview,
    local_moment,
    lookup,
    printable,
    raw_time,
    seq_ranges,
    shows_as_date,
    surface_op_text,
)
from sessionledger.cli._words import plural
from sessionledger.model._events import SessionEvent
from sessionledger.model._vocabulary import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)

#: The width of a console that is not a terminal: every value is printed whole.
WHOLE_WIDTH: Final = 1 << 62

#: Below this console width the time column is left out.
NARROW: Final = 110

#: With less room than this, the data of each row goes on a line of its own.
DATA_MIN: Final = 20

#: On a terminal, sources longer than this wrap onto more lines.
SOURCES_MAX: Final = 14

GAP: Final = "  "
TIME_WIDTH: Final = 12  # HH:MM:SS.mmm
HEADER_STYLE: Final = "bold underline"

#: One line: pieces of text, each with a style ("" for none).
Line = list[tuple[str, str]]


@dataclasses.dataclass(frozen=True, slots=True)
class LogLayout:
    """Column widths of the log, and where its data goes."""

    seq: int
    time: bool
    type: int
    surface: int
    sources: int
    #: Room for the data in cells; None: whole (a console of ``WHOLE_WIDTH``).
    data: int | None
    #: The data goes on a line of its own, under the type column.
    stacked: bool = False
    #: The time column's width: wider than ``TIME_WIDTH`` when some time is beyond what a
    #: date shows, and is shown as its epoch milliseconds (``preview.raw_time``).
    time_width: int = TIME_WIDTH


def _cells(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _spans(events: Sequence[SessionEvent], collapse: bool) -> Iterator[tuple[int, int]]:
    """Yield ``(start, end)`` index ranges of the rows: one event, or a run of chunks."""
    index, count = 0, len(events)
    while index < count:
        end = index + 1
        if collapse and events[index].type == ASSISTANT_CHUNK:
            data = events[index].data
            turn, step = lookup(data, "turn"), lookup(data, "step")
            while (
                end < count
                and events[end].type == ASSISTANT_CHUNK
                and lookup(events[end].data, "turn") == turn
                and lookup(events[end].data, "step") == step
            ):
                end += 1
        yield index, end
        index = end


def _short_cells(events: Sequence[SessionEvent], start: int, end: int) -> tuple[str, str, str, str]:
    """Return a row's seq, type, surface and sources cells."""
    event = events[start]
    if end - start > 1:
        return f"{event.seq}-{events[end - 1].seq}", f"{ASSISTANT_CHUNK} ({end - start})", "", ""
    op, sources = event.surface_op, event.source_event_seqs
    return (
        str(event.seq),
        printable(event.type),
        "" if op is None else surface_op_text(op),
        "" if sources is None else seq_ranges(sources),
    )


def _run_preview(run: Sequence[SessionEvent], limit: int | None) -> str:
    """Return the text a run of chunks streamed (deltas joined, blocks separated)."""
    streamed: list[str] = []
    deltas = 0
    for event in run:
        chunk = lookup(event.data, "chunk")
        kind = lookup(chunk, "type")
        if kind == "block-start" and streamed:
            streamed.append(" | ")
        piece = lookup(chunk, "argumentsDelta" if kind == "tool-call-delta" else "text")
        if type(piece) is str and kind in ("text-delta", "reasoning-delta", "tool-call-delta"):
            deltas += 1
            streamed.append(piece)
    return clip(f"{plural(deltas, 'delta')}: {''.join(streamed)}", limit)


def plan_layout(
    events: Sequence[SessionEvent], *, collapse_chunks: bool = True, width: int = WHOLE_WIDTH
) -> LogLayout:
    """Size the columns for *events* on a console *width* cells wide (see the module)."""
    seq, surface, sources = len("seq"), len("surface"), len("sources")
    kinds = {"type"}
    when = TIME_WIDTH
    for start, end in _spans(events, collapse_chunks):
        event = events[start]
        if not shows_as_date(event.time):
            when = max(when, len(raw_time(event.time)))
        if end - start > 1:
            seq = max(seq, len(f"{event.seq}-{events[end - 1].seq}"))
            kinds.add(f"{ASSISTANT_CHUNK} ({end - start})")
            continue
        seq = max(seq, len(str(event.seq)))
        kinds.add(event.type)
        if event.surface_op is not None:
            surface = max(surface, len(surface_op_text(event.surface_op)))
        if event.source_event_seqs is not None:
            sources = max(sources, len(seq_ranges(event.source_event_seqs)))
    kind = max(_cells(printable(name)) for name in kinds)
    if width >= WHOLE_WIDTH:
        return LogLayout(seq, True, kind, surface, sources, None, time_width=when)
    time = width >= NARROW
    others = seq + (len(GAP) + when if time else 0) + 3 * len(GAP) + kind + surface
    # Inline, the sources give way (wrapping, down to their header's width) to the data.
    inline = min(sources, SOURCES_MAX, width - others - len(GAP) - DATA_MIN)
    if inline >= len("sources"):
        data = width - others - inline - len(GAP)
        return LogLayout(seq, time, kind, surface, inline, data, time_width=when)
    # The data goes under its row; the sources give way to fit the rest.
    sources = max(len("sources"), min(sources, SOURCES_MAX, width - others))
    data = max(width - seq - len(GAP), 1)
    return LogLayout(seq, time, kind, surface, sources, data, True, when)


def _fit(text: str, room: int | None) -> str:
    """Return *text* cut to *room* cells with an ellipsis (whole when *room* is None)."""
    if room is None or _cells(text) <= room:
        return text
    return set_cell_size(text, max(room - 1, 0)) + "…"


def _wrap(text: str, width: int) -> list[str]:
    """Split a sources cell (``"3-5, 9, 12"``) into lines of at most *width* cells,
    breaking after a comma (or inside a range longer than the column)."""
    parts = text.split(", ")
    lines: list[str] = []
    for token in [f"{part}," for part in parts[:-1]] + parts[-1:]:
        if lines and len(lines[-1]) + 1 + len(token) <= width:
            lines[-1] += " " + token
        else:
            lines += [token[i : i + width] for i in range(0, len(token), width)]
    return lines or [""]


def _type_style(kind: str) -> str:
    if kind in (TURN_START, TURN_END):
        return "bold"
    if kind in (USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT):
        return "cyan"
    return ""


def header_lines(layout: LogLayout) -> list[Line]:
    """Return the column headings (two lines when the data goes under each row)."""
    line: Line = [("seq".rjust(layout.seq), HEADER_STYLE)]
    names = [("time", layout.time_width)] if layout.time else []
    names += [("type", layout.type), ("surface", layout.surface), ("sources", layout.sources)]
    for name, width in names:
        line += [(GAP, ""), (name.ljust(width), HEADER_STYLE)]
    if layout.stacked:
        return [line, [(" " * (layout.seq + len(GAP)), ""), ("data", HEADER_STYLE)]]
    return [[*line, (GAP, ""), ("data", HEADER_STYLE)]]


class _Clock:
    """``local_time`` of epoch milliseconds, the date arithmetic done once a second."""

    def __init__(self) -> None:
        self.second: int | None = None
        self.text: str | None = ""  # None: the second is beyond what a date shows

    def __call__(self, ms: int) -> str:
        second = ms // 1000
        if second != self.second:
            moment = local_moment(second * 1000)
            self.second, self.text = second, None if moment is None else f"{moment:%H:%M:%S}"
        if self.text is None:
            return raw_time(ms)
        return f"{self.text}.{ms % 1000:03d}"


def row_lines(
    events: Sequence[SessionEvent], layout: LogLayout, *, collapse_chunks: bool = True
) -> Iterator[list[Line]]:
    """Yield the lines of each row of *events*, laid out as *layout* says."""
    limit = layout.data
    clock = _Clock()
    indent = " " * (layout.seq + len(GAP))
    blank = " " * (layout.seq + (len(GAP) + layout.time_width if layout.time else 0) + layout.type)
    blank += " " * (3 * len(GAP) + layout.surface)
    # A type cell (text, style, padding to the next column) per type: types are few.
    types: dict[str, tuple[str, str, str]] = {}
    for start, end in _spans(events, collapse_chunks):
        event = events[start]
        seq, kind, surface, sources = _short_cells(events, start, end)
        if end - start > 1:
            data, data_style = _run_preview(events[start:end], limit), "dim"
        else:
            data, data_style = event_preview(event, limit), ""
        cell = types.get(kind)
        if cell is None:
            style = _type_style(event.type) if end - start == 1 else ""
            cell = types[kind] = (kind, style, " " * (layout.type - _cells(kind)) + GAP)
        lead = seq.rjust(layout.seq) + GAP
        if layout.time:
            lead += clock(event.time).ljust(layout.time_width) + GAP
        wrapped = [sources]
        if limit is not None and len(sources) > layout.sources:
            wrapped = _wrap(sources, layout.sources)
        middle = cell[2] + surface.ljust(layout.surface) + GAP
        first: Line = [(lead, ""), cell[:2]]
        data = _fit(data, limit)
        if data and not layout.stacked:
            first += [(middle + wrapped[0].ljust(layout.sources) + GAP, ""), (data, data_style)]
        elif rest := (middle + wrapped[0]).rstrip():
            first.append((rest, ""))
        lines = [first]
        lines += [[(blank + more, "")] for more in wrapped[1:]]
        if layout.stacked and data:
            lines.append([(indent, ""), (data, data_style)])
        yield lines


class _Ansi:
    """The escape codes of a few styles on one console (none where it has no styles)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.codes: dict[str, tuple[str, str]] = {}

    def line(self, line: Line) -> str:
        parts = []
        for text, style in line:
            if style and text:
                codes = self.codes.get(style)
                if codes is None:
                    codes = self.codes[style] = self.render(style)
                text = codes[0] + text + codes[1]
            parts.append(text)
        return "".join(parts)

    def render(self, style: str) -> tuple[str, str]:
        with self.console.capture() as capture:
            self.console.print(Text("\x00", style=style), end="")
        before, _, after = capture.get().partition("\x00")
        return before, after


def write_event_log(
    console: Console, events: Sequence[SessionEvent], *, collapse_chunks: bool = True
) -> None:
    """Write the log of *events* to *console*'s file, each row as soon as it is made."""
    layout = plan_layout(events, collapse_chunks=collapse_chunks, width=console.width)
    ansi = _Ansi(console)
    write = console.file.write
    for line in header_lines(layout):
        write(ansi.line(line) + "\n")
    for lines in row_lines(events, layout, collapse_chunks=collapse_chunks):
        for line in lines:
            write(ansi.line(line) + "\n")
    console.file.flush()


class EventLog:
    """The same log as a rich renderable (for a console that prints other things too)."""

    def __init__(self, events: Sequence[SessionEvent], *, collapse_chunks: bool = True) -> None:
        self.events = events
        self.collapse_chunks = collapse_chunks

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        layout = plan_layout(
            self.events, collapse_chunks=self.collapse_chunks, width=options.max_width
        )
        rows = row_lines(self.events, layout, collapse_chunks=self.collapse_chunks)
        for lines in itertools.chain([header_lines(layout)], rows):
            for line in lines:
                for text, style in line:
                    yield Segment(text, console.get_style(style) if style else None)
                yield Segment.line()
