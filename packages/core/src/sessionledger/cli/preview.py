"""One-line texts of events and messages: what the data and content columns show.

Everything here returns plain ``str``: one line, whitespace runs flattened to one space,
control characters shown as escapes (``\\x1b``), never sent to the terminal raw. A
*limit* cuts the text with an ellipsis; ``None`` keeps it whole (output that is not a
terminal prints whole values).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sessionledger import jsoncodec
from sessionledger.events import APPEND, Replace, SessionEvent
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
    "clip",
    "event_preview",
    "local_time",
    "lookup",
    "message_text",
    "printable",
    "seq_ranges",
    "surface_op_text",
]

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


def local_time(ms: int) -> str:
    """Return epoch milliseconds as local ``HH:MM:SS.mmm``."""
    moment = datetime.fromtimestamp(ms / 1000)
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
        return repr(value)


def message_text(message: Any) -> str:
    """Return a one-line rendering of a message's blocks (texts, calls, results)."""
    parts: list[str] = []
    content = lookup(message, "content")
    for block in content if isinstance(content, tuple | list) else ():
        kind = lookup(block, "type")
        if kind == "text":
            parts.append(str(lookup(block, "text") or ""))
        elif kind == "reasoning":
            parts.append(f"(thinking) {lookup(block, 'text') or ''}")
        elif kind == "tool-call":
            parts.append(f"→ {lookup(block, 'name')}({lookup(block, 'arguments') or ''})")
        elif kind == "tool-result":
            error = " [error]" if lookup(block, "isError") is True else ""
            parts.append(f"{message_text(block)}{error}")
        elif kind is not None:
            parts.append(f"[{kind}]")
    return " ".join(part for part in parts if part)


def _chunk_preview(chunk: Any) -> str:
    kind = lookup(chunk, "type")
    if kind in ("text-delta", "reasoning-delta"):
        return f"{kind} {lookup(chunk, 'text')!r}"
    if kind == "tool-call-delta":
        name = lookup(chunk, "name")
        named = f" {name}" if name else ""
        return f"{kind}{named} {lookup(chunk, 'argumentsDelta')!r}"
    if kind == "block-start":
        return f"block-start {lookup(chunk, 'blockType')}"
    if kind == "block-end":
        return f"block-end {lookup(lookup(chunk, 'block'), 'type')}"
    if kind == "finish":
        return f"finish {lookup(chunk, 'reason')}"
    return _compact_json(chunk)


def event_preview(event: SessionEvent, limit: int | None = PREVIEW_CHARS) -> str:
    """Return a one-line summary of an event's data (see ``clip`` for *limit*)."""
    data = event.data
    kind = event.type
    text: str
    if kind in (TURN_START, STEP_START, STEP_END):
        step = lookup(data, "step")
        text = f"turn {lookup(data, 'turn')}" + (f" step {step}" if step is not None else "")
    elif kind == TURN_END:
        reason = lookup(data, "reason")
        text = f"turn {lookup(data, 'turn')} {lookup(reason, 'kind')}"
    elif kind == USER_MESSAGE:
        source = lookup(data, "source")
        origin = lookup(source, "kind")
        if origin == "plugin":
            origin = f"plugin {lookup(source, 'plugin')}"
        text = f"({origin}) {message_text(data)}"
    elif kind == ASSISTANT_MESSAGE:
        text = message_text(lookup(data, "message"))
    elif kind == ASSISTANT_CHUNK:
        text = _chunk_preview(lookup(data, "chunk"))
    elif kind == TOOL_CALL:
        text = f"{lookup(data, 'callId')} {lookup(data, 'name')}({lookup(data, 'arguments')})"
    elif kind == TOOL_RESULT:
        error = lookup(data, "error")
        code = f"[{lookup(error, 'code')}] " if error is not None else ""
        text = code + message_text(lookup(data, "message"))
    elif kind == REQUEST_HEADER:
        config = lookup(lookup(data, "header"), "config")
        text = f"{lookup(data, 'reason')}: {lookup(config, 'provider')}/{lookup(config, 'model')}"
    elif kind == REQUEST_CONTEXT:
        text = f"{lookup(data, 'provider')}/{lookup(data, 'model')}"
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
