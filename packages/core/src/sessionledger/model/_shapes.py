"""The data shapes of the core vocabulary, checked where events are made.

Message shapes (``vocabulary.check_message_shape``) are checked everywhere, loads
included. The shapes here — turn and step numbers, ``turn/end`` reasons, stream chunks,
tool calls, request context — are checked when an event is *appended* (and by
``sessionledger verify``), not when a stored log is read: real logs of earlier writers
hold a ``turn/end`` with a ``null`` reason, or with only an ``error`` field, and a
reader that refused them would make acknowledged history unreadable
(docs/events.md, "Where these shapes are checked").

Fields a shape does not name pass: harnesses add their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from sessionledger._errors import EventDataError
from sessionledger.model._snapshot import FrozenDict, brief
from sessionledger.model._vocabulary import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    SESSION_END_SEED,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_PAUSED,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
)

#: ``turn/end`` ``reason.kind`` values (``interrupted`` is what crash repair writes).
TURN_END_KINDS: Final = ("completed", "aborted", "error", "max-tokens", "blocked", "interrupted")

#: ``assistant/chunk`` ``chunk.type`` values.
CHUNK_KINDS: Final = (
    "block-start",
    "text-delta",
    "reasoning-delta",
    "tool-call-delta",
    "block-end",
    "usage",
    "finish",
)


def _fail(event_type: str, rule: str, value: object) -> EventDataError:
    try:
        shown = repr(value)
    except RecursionError:  # nested deeper than repr goes: refused all the same
        shown = brief(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return EventDataError(f"{event_type} {rule}; got {shown}")


def _object(event_type: str, data: object) -> FrozenDict:
    # Appended data is always frozen, so a JSON object is exactly a FrozenDict.
    if type(data) is not FrozenDict:
        raise _fail(event_type, "data must be a JSON object", data)
    return data


def _counter(event_type: str, data: FrozenDict, key: str) -> None:
    value = data.get(key)
    if type(value) is not int or value < 1:
        raise _fail(event_type, f"data.{key} must be an integer >= 1", value)


def _nonempty(value: object) -> bool:
    return type(value) is str and value != ""


def _turn(event_type: str, data: object) -> FrozenDict:
    checked = _object(event_type, data)
    _counter(event_type, checked, "turn")
    return checked


def _turn_step(event_type: str, data: object) -> FrozenDict:
    checked = _turn(event_type, data)
    _counter(event_type, checked, "step")
    return checked


def _check_turn_start(data: object) -> None:
    _turn(TURN_START, data)


def _check_turn_end(data: object) -> None:
    reason = _turn(TURN_END, data).get("reason")
    kind = reason.get("kind") if type(reason) is FrozenDict else None
    if kind not in TURN_END_KINDS:
        raise _fail(
            TURN_END,
            f"data.reason must be an object {{kind: ...}} with kind one of "
            f"{', '.join(TURN_END_KINDS)}",
            reason,
        )
    if kind == "error" and type(reason) is FrozenDict:
        error = reason.get("error")
        if not (
            type(error) is FrozenDict
            and type(error.get("code")) is str
            and type(error.get("message")) is str
        ):
            raise _fail(TURN_END, "an error reason needs error: {code: str, message: str}", error)


def _check_step(event_type: str) -> Callable[[object], None]:
    def check(data: object) -> None:
        _turn_step(event_type, data)

    return check


def _index(chunk: FrozenDict) -> None:
    index = chunk.get("index")
    if type(index) is not int or index < 0:
        raise _fail(ASSISTANT_CHUNK, f"a {chunk['type']} chunk needs an index >= 0", index)


def _chunk_field(chunk: FrozenDict, key: str, accepts: Callable[[object], bool], what: str) -> None:
    if not accepts(chunk.get(key)):
        raise _fail(ASSISTANT_CHUNK, f"a {chunk['type']} chunk needs {key}: {what}", chunk.get(key))


def _is_str(value: object) -> bool:
    return type(value) is str


def _is_object(value: object) -> bool:
    return type(value) is FrozenDict


def _is_reason(value: object) -> bool:
    # Finish reasons are written both as a word ("stop") and as {kind: "stop", ...}.
    return _nonempty(value) or (type(value) is FrozenDict and _nonempty(value.get("kind")))


def _text_delta(chunk: FrozenDict) -> None:
    _index(chunk)
    _chunk_field(chunk, "text", _is_str, "str")


def _block_start(chunk: FrozenDict) -> None:
    _index(chunk)
    _chunk_field(chunk, "blockType", _nonempty, "a non-empty str")


def _tool_call_delta(chunk: FrozenDict) -> None:
    _index(chunk)
    _chunk_field(chunk, "id", _nonempty, "a non-empty str")
    _chunk_field(chunk, "argumentsDelta", _is_str, "str")
    if "name" in chunk:
        _chunk_field(chunk, "name", _is_str, "str")


def _block_end(chunk: FrozenDict) -> None:
    _index(chunk)
    block = chunk.get("block")
    if not (type(block) is FrozenDict and _nonempty(block.get("type"))):
        raise _fail(ASSISTANT_CHUNK, "a block-end chunk needs block: {type: str, ...}", block)


_CHUNK_CHECKS: Final[dict[object, Callable[[FrozenDict], None]]] = {
    "text-delta": _text_delta,
    "reasoning-delta": _text_delta,
    "tool-call-delta": _tool_call_delta,
    "block-start": _block_start,
    "block-end": _block_end,
    "usage": lambda chunk: _chunk_field(chunk, "usage", _is_object, "an object"),
    "finish": lambda chunk: _chunk_field(chunk, "reason", _is_reason, "a str or {kind: str}"),
}


_DELTAS: Final = frozenset(("text-delta", "reasoning-delta"))


def _check_chunk(data: Any) -> None:
    # Chunks are most of a session's events: a valid text or reasoning delta passes this
    # one inline test on the append hot path; anything else gets the full check and its
    # precise message. (Frozen data holds no dict but FrozenDict, and only a dict takes a
    # str subscript, so the subscripts themselves prove *data* and *chunk* are objects.)
    try:
        chunk = data["chunk"]
        turn = data["turn"]
        step = data["step"]
        if (
            chunk["type"] in _DELTAS
            and type(chunk["text"]) is str
            and type(index := chunk["index"]) is int
            and index >= 0
            and type(turn) is int
            and turn >= 1
            and type(step) is int
            and step >= 1
        ):
            return
    except (KeyError, TypeError):
        pass  # a missing field, or not an object: the full check says which
    _check_any_chunk(data)


def _check_any_chunk(data: object) -> None:
    chunk = _turn_step(ASSISTANT_CHUNK, data).get("chunk")
    check = _CHUNK_CHECKS.get(chunk.get("type")) if type(chunk) is FrozenDict else None
    if check is None or type(chunk) is not FrozenDict:
        raise _fail(
            ASSISTANT_CHUNK,
            f"data.chunk must be an object whose type is one of {', '.join(CHUNK_KINDS)}",
            chunk,
        )
    check(chunk)


def _check_assistant_message(data: object) -> None:
    checked = _turn_step(ASSISTANT_MESSAGE, data)
    if "usage" in checked and type(checked["usage"]) is not FrozenDict:
        raise _fail(ASSISTANT_MESSAGE, "data.usage must be an object", checked["usage"])
    if "interrupted" in checked and type(checked["interrupted"]) is not bool:
        raise _fail(ASSISTANT_MESSAGE, "data.interrupted must be a bool", checked["interrupted"])


def _check_tool_call(data: object) -> None:
    checked = _turn_step(TOOL_CALL, data)
    for key in ("callId", "name"):
        if not _nonempty(checked.get(key)):
            raise _fail(TOOL_CALL, f"data.{key} must be a non-empty str", checked.get(key))
    if type(checked.get("arguments")) is not str:
        raise _fail(
            TOOL_CALL, "data.arguments must be the raw JSON text (a str)", checked.get("arguments")
        )


def _check_tool_paused(data: object) -> None:
    checked = _turn_step(TOOL_PAUSED, data)
    if not _nonempty(checked.get("callId")):
        raise _fail(TOOL_PAUSED, "data.callId must be a non-empty str", checked.get("callId"))
    reason = checked.get("reason")
    if not (type(reason) is FrozenDict and _nonempty(reason.get("kind"))):
        raise _fail(
            TOOL_PAUSED,
            'data.reason must be an object {kind: str, ...} (e.g. kind "approval" or "deferred")',
            reason,
        )


def _check_tool_result(data: object) -> None:
    checked = _turn_step(TOOL_RESULT, data)
    if "error" in checked:
        error = checked["error"]
        if not (
            type(error) is FrozenDict
            and type(error.get("name")) is str
            and type(error.get("code")) is str
        ):
            raise _fail(TOOL_RESULT, "data.error must be {name: str, code: str}", error)


def _check_request_context(data: object) -> None:
    checked = _object(REQUEST_CONTEXT, data)
    for key in ("provider", "model"):
        if not _nonempty(checked.get(key)):
            raise _fail(REQUEST_CONTEXT, f"data.{key} must be a non-empty str", checked.get(key))
    window = checked.get("contextWindow")
    if "contextWindow" in checked and (type(window) is not int or window < 1):
        raise _fail(REQUEST_CONTEXT, "data.contextWindow must be an integer >= 1", window)


def _check_end_seed(data: object) -> None:
    _object(SESSION_END_SEED, data)


#: Core type → the check of its data, which raises ``EventDataError`` (the message
#: inside a message event is checked by the message shape rules). ``Session.append``
#: looks a type up here directly: it is on the hot path.
DATA_CHECKS: Final[dict[str, Callable[[Any], None]]] = {
    TURN_START: _check_turn_start,
    TURN_END: _check_turn_end,
    STEP_START: _check_step(STEP_START),
    STEP_END: _check_step(STEP_END),
    ASSISTANT_CHUNK: _check_chunk,
    ASSISTANT_MESSAGE: _check_assistant_message,
    TOOL_CALL: _check_tool_call,
    TOOL_PAUSED: _check_tool_paused,
    TOOL_RESULT: _check_tool_result,
    REQUEST_CONTEXT: _check_request_context,
    SESSION_END_SEED: _check_end_seed,
}


def check_event_data(event_type: str, data: Any) -> None:
    """Raise ``EventDataError`` when *data* (frozen) breaks the shape of core type
    *event_type*; other types pass."""
    check = DATA_CHECKS.get(event_type)
    if check is not None:
        check(data)


def data_shape_problem(event_type: str, data: Any) -> str | None:
    """Return why *data* breaks the shape of core type *event_type*, or None (for
    ``verify``, which reports stored events instead of refusing them)."""
    try:
        check_event_data(event_type, data)
    except EventDataError as error:
        return str(error)
    return None
