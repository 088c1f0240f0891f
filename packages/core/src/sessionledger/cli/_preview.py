"""One-line texts of events and messages: what the data and content columns show.

Everything here returns plain ``str``: one line, whitespace runs flattened to one space,
control characters shown as escapes (``\\x1b``), never sent to the terminal raw. A
*limit* cuts the text with an ellipsis; ``None`` keeps it whole (output that is not a
terminal prints whole values).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import APPEND, Replace, SessionEvent
from sessionledger.model._snapshot import brief
from sessionledger.model._vocabulary import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_PAUSED,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)

#: Longest data preview shown in a table cell that must fit a width.
PREVIEW_CHARS = 72

#: Control characters (C0 but the whitespace ``split`` removes, DEL, C1) → escapes.
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}


def printable(text: str) -> str:
    """Return *text* with its control characters written as escapes (``\\x1b``)."""
    return text if text.isprintable() else text.translate(_CONTROLS)


def clip(text: str, limit: int | None = PREVIEW_CHARS) -> str:
    """Return *text* on one line (whitespace runs flattened, controls escaped), cut to
    *limit* characters with an ellipsis; whole when *limit* is None."""
    flat = printable(" ".join(text.split()))
    if limit is None or len(flat) <= limit:
        return flat
    return flat[: max(limit - 1, 0)] + "…"


#: Epoch milliseconds every time zone shows as a date of the years 1 to 9999 (with two
#: days to spare at each end); a time outside is checked one by one (``local_moment``).
_DATED: Final = range(-62_135_596_800_000 + 2 * 86_400_000, 253_402_300_800_000 - 2 * 86_400_000)


def local_moment(ms: int) -> datetime | None:
    """Return epoch milliseconds as a local ``datetime``, or None for a time no
    ``datetime`` holds (beyond the years 1 to 9999). The ledger accepts any time within
    ±(2**53 - 1) ms, some 285,000 years either way (docs/events.md, "the envelope"), and
    every command shows what the ledger accepted (``raw_time``)."""
    try:
        return datetime.fromtimestamp(ms / 1000)
    except (OverflowError, OSError, ValueError):
        return None


def shows_as_date(ms: int) -> bool:
    """Whether ``local_moment`` has a date for *ms* (cheap for the common case)."""
    return ms in _DATED or local_moment(ms) is not None


def raw_time(ms: int) -> str:
    """Return a time no date can show as its epoch milliseconds (``8640000000000000 ms``)."""
    return f"{ms} ms"


def local_time(ms: int) -> str:
    """Return epoch milliseconds as local ``HH:MM:SS.mmm`` (``raw_time`` beyond dates)."""
    moment = local_moment(ms)
    if moment is None:
        return raw_time(ms)
    return f"{moment:%H:%M:%S}.{ms % 1000:03d}"


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


def lookup(value: Any, key: str) -> Any:
    """Return ``value[key]`` when *value* is a mapping, else None (logs are read as
    stored, so any field may be missing or of another shape)."""
    if isinstance(value, dict):  # a FrozenDict: the common case, without the ABC check
        return value.get(key)
    return value.get(key) if isinstance(value, Mapping) else None


def _compact_json(value: Any) -> str:
    try:
        return jsoncodec.dumps(value).decode()
    except Exception:
        return brief(value)  # not a JSON value: described, never ``repr``'d (any depth)


def shown(value: Any) -> str:
    """Return a value read from a log as text: a string as it is, a number, ``true`` or
    ``None`` as ``str`` writes it, anything else as compact JSON. Never ``repr`` of a
    container, which recurses: the ledger accepts values nested far deeper."""
    if type(value) is str:
        return value
    if value is None or type(value) in (bool, int, float):
        return str(value)
    return _compact_json(value)


def quoted(value: Any) -> str:
    """Return a string in quotes (``repr``), anything else as ``shown`` does."""
    return repr(value) if type(value) is str else shown(value)


def message_parts(message: Any) -> list[str]:
    """Return the renderings of a message's blocks (texts, calls, results), each whole,
    its line breaks kept."""
    parts: list[str] = []
    content = lookup(message, "content")
    for block in content if isinstance(content, tuple | list) else ():
        kind = lookup(block, "type")
        if kind == "text":
            parts.append(shown(lookup(block, "text") or ""))
        elif kind == "reasoning":
            parts.append(f"(thinking) {shown(lookup(block, 'text') or '')}")
        elif kind == "tool-call":
            name, arguments = lookup(block, "name"), lookup(block, "arguments") or ""
            parts.append(f"→ {shown(name)}({shown(arguments)})")
        elif kind == "tool-result":
            error = " [error]" if lookup(block, "isError") is True else ""
            parts.append(f"{message_text(block)}{error}")
        elif kind is not None:
            parts.append(f"[{shown(kind)}]")
    return [part for part in parts if part]


def message_text(message: Any) -> str:
    """Return a one-line rendering of a message's blocks (texts, calls, results)."""
    return " ".join(message_parts(message))


def _chunk_preview(chunk: Any) -> str:
    kind = lookup(chunk, "type")
    if kind in ("text-delta", "reasoning-delta"):
        return f"{kind} {quoted(lookup(chunk, 'text'))}"
    if kind == "tool-call-delta":
        name = lookup(chunk, "name")
        named = f" {shown(name)}" if name else ""
        return f"{kind}{named} {quoted(lookup(chunk, 'argumentsDelta'))}"
    if kind == "block-start":
        return f"block-start {shown(lookup(chunk, 'blockType'))}"
    if kind == "block-end":
        return f"block-end {shown(lookup(lookup(chunk, 'block'), 'type'))}"
    if kind == "finish":
        return f"finish {shown(lookup(chunk, 'reason'))}"
    return _compact_json(chunk)


def event_preview(event: SessionEvent, limit: int | None = PREVIEW_CHARS) -> str:
    """Return a one-line summary of an event's data (see ``clip`` for *limit*)."""
    data = event.data
    kind = event.type
    text: str
    if kind in (TURN_START, STEP_START, STEP_END):
        step = lookup(data, "step")
        text = f"turn {shown(lookup(data, 'turn'))}"
        text += f" step {shown(step)}" if step is not None else ""
    elif kind == TURN_END:
        reason = lookup(data, "reason")
        text = f"turn {shown(lookup(data, 'turn'))} {shown(lookup(reason, 'kind'))}"
    elif kind == USER_MESSAGE:
        source = lookup(data, "source")
        origin = shown(lookup(source, "kind"))
        if origin == "plugin":
            origin = f"plugin {shown(lookup(source, 'plugin'))}"
        text = f"({origin}) {message_text(data)}"
    elif kind == ASSISTANT_MESSAGE:
        text = message_text(lookup(data, "message"))
    elif kind == ASSISTANT_CHUNK:
        text = _chunk_preview(lookup(data, "chunk"))
    elif kind == TOOL_CALL:
        call, name = shown(lookup(data, "callId")), shown(lookup(data, "name"))
        text = f"{call} {name}({shown(lookup(data, 'arguments'))})"
    elif kind == TOOL_PAUSED:
        reason = shown(lookup(lookup(data, "reason"), "kind"))
        text = f"{shown(lookup(data, 'callId'))} waits for {reason}"
    elif kind == TOOL_RESULT:
        error = lookup(data, "error")
        code = f"[{shown(lookup(error, 'code'))}] " if error is not None else ""
        text = code + message_text(lookup(data, "message"))
    elif kind == REQUEST_HEADER:
        config = lookup(lookup(data, "header"), "config")
        model = f"{shown(lookup(config, 'provider'))}/{shown(lookup(config, 'model'))}"
        text = f"{shown(lookup(data, 'reason'))}: {model}"
    elif kind == REQUEST_CONTEXT:
        text = f"{shown(lookup(data, 'provider'))}/{shown(lookup(data, 'model'))}"
    else:
        text = _compact_json(data)
    return clip(text, limit)


def surface_op_text(op: object) -> str:
    """Return ``append``, ``replace a-b`` or an empty string."""
    if op == APPEND:
        return "append"
    if isinstance(op, Replace):
        return f"replace {op.start}-{op.end}"
    return ""
