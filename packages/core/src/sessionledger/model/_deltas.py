"""What makes a streamed delta one a packed run can hold, and its fields.

An ``assistant/chunk`` event whose data is a text, reasoning or tool-call delta of the
exact shape (docs/formats.md, "chunk rows") belongs to the run of its stream block: the
fields its members share, and its own text. The compact log (``eventlog``) keeps such
deltas packed; the append hot path (``freeze_delta``) validates and freezes one in a
single step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from sessionledger._accelerator import ACCELERATOR, choose
from sessionledger.model._snapshot import (
    MAX_SAFE_INTEGER,
    FrozenDict,
    mark_shallow,
    string_flaw,
)

#: The one event type a run holds.
CHUNK_TYPE: Final = "assistant/chunk"

_M: Final = MAX_SAFE_INTEGER
_TEXT_KINDS: Final = ("text-delta", "reasoning-delta")  # a tuple: tested by ==, never hashed
_TOOL_KIND: Final = "tool-call-delta"

#: (kind, turn, step, index, call id, name, text): what makes members of one run, and the
#: member's own text.
DeltaFields = tuple[str, int, int, int, "str | None", "str | None", str]


def delta_fields(data: Any) -> DeltaFields | None:
    """Return the run fields of an ``assistant/chunk`` event's *data* (frozen, or an
    envelope's plain dict) when it is a delta a run can hold exactly, else None: the one
    statement of that shape, for the log, the packer and the limits. (Keys may come in
    any order: a member is rebuilt in the canonical order, as a stored row's members
    are, docs/formats.md.)"""
    if (type(data) is not FrozenDict and type(data) is not dict) or len(data) != 3:
        return None
    try:
        chunk, turn, step = data["chunk"], data["turn"], data["step"]
        if (type(chunk) is not FrozenDict and type(chunk) is not dict) or not (
            type(turn) is int and type(step) is int
        ):
            return None
        kind, index = chunk["type"], chunk["index"]
        if type(index) is not int or not (
            -_M <= turn <= _M and -_M <= step <= _M and -_M <= index <= _M
        ):
            return None
        if kind in _TEXT_KINDS:
            text = chunk["text"]
            if len(chunk) == 3 and type(text) is str:
                return kind, turn, step, index, None, None, text
            return None
        if kind != _TOOL_KIND or not 4 <= len(chunk) <= 5:
            return None
        call_id, text = chunk["id"], chunk["argumentsDelta"]
        name = chunk["name"] if len(chunk) == 5 else None
    except KeyError:
        return None
    # A name, when the chunk has one, is a str: None would not come back as "name": null.
    if type(call_id) is str and type(text) is str and (len(chunk) == 4 or type(name) is str):
        return kind, turn, step, index, call_id, name, text
    return None


def delta_chunk(
    kind: str, index: int, call_id: str | None, name: str | None, text: str
) -> FrozenDict:
    """The frozen ``chunk`` of a delta with these fields, in the canonical key order: the
    one place a member's chunk is built (appended, read from a run or from a row)."""
    if call_id is None:
        return FrozenDict(type=kind, index=index, text=text)
    if name is None:
        return FrozenDict(type=kind, index=index, id=call_id, argumentsDelta=text)
    return FrozenDict(type=kind, index=index, id=call_id, name=name, argumentsDelta=text)


_KINDS: Final = {kind: kind for kind in (*_TEXT_KINDS, _TOOL_KIND)}


def pure_freeze_delta(data: Any) -> tuple[FrozenDict, DeltaFields] | None:
    """Validate and freeze the data of a well-formed streamed delta in one step, or
    return None when *data* is anything else (the general path then snapshots it and
    checks its shape, and says what is wrong).

    The append hot path: it accepts only what ``snapshot`` and the chunk shape check
    both accept (exact types, safe integers, turn and step >= 1, index >= 0, strings
    UTF-8 can hold) and builds the frozen data in the canonical key order, as a member
    read back from the log or from a stored row has it. ``freeze_delta`` is its compiled
    form where the accelerator runs: both accept the same data and build the same. It is
    ``delta_fields`` with the admission's stricter bounds on top."""
    fields = delta_fields(data)
    if fields is None:
        return None
    kind, turn, step, index, call_id, name, text = fields
    try:
        canonical = _KINDS.get(kind)  # the exact str of a kind delta_fields took
    except TypeError:  # an unhashable type that compares equal to one
        return None
    if (
        canonical is None
        or (canonical is _TOOL_KIND) != (call_id is not None)
        or turn < 1
        or step < 1
        or index < 0
        or call_id == ""
        or any(
            not value.isascii() and string_flaw(value)
            for value in (text, call_id, name)
            if value is not None
        )
    ):
        return None
    frozen = mark_shallow(
        FrozenDict(turn=turn, step=step, chunk=delta_chunk(canonical, index, call_id, name, text))
    )
    return frozen, (canonical, turn, step, index, call_id, name, text)


if ACCELERATOR is not None:
    ACCELERATOR.setup_deltas(_KINDS, _TOOL_KIND)
#: ``pure_freeze_delta``, compiled where the accelerator runs (the append hot path).
freeze_delta: Final[Callable[[Any], tuple[FrozenDict, DeltaFields] | None]] = choose(
    "freeze_delta", pure_freeze_delta
)
