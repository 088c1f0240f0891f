"""The core event vocabulary, message shapes and helpers that build them (docs/events.md)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Final, Literal, NotRequired, TypedDict

from sessionledger._errors import EventDataError, MessageShapeError
from sessionledger.model._snapshot import FrozenDict

TURN_START: Final = "turn/start"
TURN_END: Final = "turn/end"
STEP_START: Final = "step/start"
STEP_END: Final = "step/end"
USER_MESSAGE: Final = "user/message"
ASSISTANT_CHUNK: Final = "assistant/chunk"
ASSISTANT_MESSAGE: Final = "assistant/message"
TOOL_CALL: Final = "tool/call"
TOOL_RESULT: Final = "tool/result"
#: A requested call waits on purpose (an approval, a deferred tool): crash repair leaves
#: it open (docs/reading.md, "Pausing is not crashing").
TOOL_PAUSED: Final = "tool/paused"
REQUEST_HEADER: Final = "request/header"
REQUEST_CONTEXT: Final = "request/context"
SESSION_END_SEED: Final = "session/end-seed"

#: The only types that may carry a surface op: exactly these reach the model.
SURFACE_TYPES: Final = frozenset((USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT))

#: Names no event may carry: the storage tags of packed chunk rows and of the
#: JSONL header line. An event with one of them could not be stored unambiguously.
RESERVED_TYPES: Final = frozenset(
    ("text-chunks", "reasoning-chunks", "tool-call-chunks", "session")
)

#: Every type the core registers, in a readable order.
CORE_EVENT_TYPES: Final = (
    TURN_START,
    TURN_END,
    STEP_START,
    STEP_END,
    USER_MESSAGE,
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    TOOL_CALL,
    TOOL_PAUSED,
    TOOL_RESULT,
    REQUEST_HEADER,
    REQUEST_CONTEXT,
    SESSION_END_SEED,
)


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ReasoningBlock(TypedDict):
    type: Literal["reasoning"]
    text: str


class ImageBlock(TypedDict):
    type: Literal["image"]
    attachment: dict[str, Any]


class ToolCallBlock(TypedDict):
    type: Literal["tool-call"]
    id: str
    name: str
    arguments: str


class ToolResultBlock(TypedDict):
    type: Literal["tool-result"]
    toolCallId: str
    content: list[Any]
    isError: NotRequired[bool]


ContentBlock = TextBlock | ReasoningBlock | ImageBlock | ToolCallBlock | ToolResultBlock


class MessageSource(TypedDict, total=False):
    kind: str
    plugin: str
    provider: str
    model: str
    callId: str


class Message(TypedDict):
    id: str
    role: Literal["user", "assistant", "system"]
    content: list[Any]
    source: MessageSource


class AssistantMessageData(TypedDict):
    turn: int
    step: int
    message: Message
    usage: NotRequired[dict[str, Any]]
    interrupted: NotRequired[bool]


class ToolCallData(TypedDict):
    turn: int
    step: int
    callId: str
    name: str
    arguments: str


class ToolPausedData(TypedDict):
    turn: int
    step: int
    callId: str
    reason: dict[str, Any]


class ToolResultData(TypedDict):
    turn: int
    step: int
    message: Message
    error: NotRequired[dict[str, str]]
    meta: NotRequired[Any]


def _new_id() -> str:
    return str(uuid.uuid4())


def text_blocks(text_or_blocks: str | Sequence[Any]) -> list[Any]:
    """Turn a string into one text block; pass a block list through as a list."""
    if isinstance(text_or_blocks, str):
        return [{"type": "text", "text": text_or_blocks}]
    return list(text_or_blocks)


def user_message(
    text_or_blocks: str | Sequence[Any],
    *,
    id: str | None = None,
    source: MessageSource | Mapping[str, Any] | None = None,
) -> Message:
    """Build a user-role message (source ``{"kind": "user"}`` unless given)."""
    return {
        "id": id or _new_id(),
        "role": "user",
        "content": text_blocks(text_or_blocks),
        "source": dict(source) if source is not None else {"kind": "user"},  # type: ignore[typeddict-item]
    }


def assistant_message(
    text_or_blocks: str | Sequence[Any], *, provider: str, model: str, id: str | None = None
) -> Message:
    """Build an assistant-role message attributed to *provider*/*model*."""
    return {
        "id": id or _new_id(),
        "role": "assistant",
        "content": text_blocks(text_or_blocks),
        "source": {"kind": "model", "provider": provider, "model": model},
    }


def tool_call_block(id: str, name: str, arguments: str) -> ToolCallBlock:
    """Build the tool-call block an assistant message carries; ``arguments`` is raw JSON text."""
    return {"type": "tool-call", "id": id, "name": name, "arguments": arguments}


def tool_result(
    call_id: str,
    text_or_blocks: str | Sequence[Any],
    *,
    is_error: bool = False,
    id: str | None = None,
) -> Message:
    """Build the user-role message that answers tool call *call_id*."""
    block: ToolResultBlock = {
        "type": "tool-result",
        "toolCallId": call_id,
        "content": text_blocks(text_or_blocks),
        "isError": is_error,
    }
    return {
        "id": id or _new_id(),
        "role": "user",
        "content": [block],
        "source": {"kind": "tool", "callId": call_id},
    }


def _nonempty_str(value: object) -> bool:
    return type(value) is str and value != ""


def event_message(event_type: str, data: Any) -> Any:
    """Return the message a surface event carries (``data`` or ``data.message``), or None."""
    if event_type == USER_MESSAGE:
        return data
    if isinstance(data, Mapping):
        return data.get("message")
    return None


def _shape_error(event_type: str, reason: str) -> MessageShapeError:
    return MessageShapeError(f"{event_type} {reason}")


_NO_MESSAGE: Final = "lacks an identified message (a JSON object with a non-empty 'id')"
_BAD_SOURCE: Final = "message has an invalid source (an object with a non-empty 'kind')"
_NOT_ONE_RESULT: Final = "message must contain exactly one tool-result block"


def check_message_shape(event_type: str, data: Any) -> None:
    """Check the message of a surface event against the shape rules; raise
    ``MessageShapeError`` (docs/events.md, "shape rules").

    Unknown block types and source kinds pass: plugins extend them. A stored value is a
    ``FrozenDict``, which is tested first: a restore checks every surface event, and an
    abstract ``Mapping`` test costs several times a type test.
    """
    if event_type == USER_MESSAGE:
        message = data
    elif type(data) is FrozenDict or isinstance(data, Mapping):
        message = data.get("message")
    else:
        raise _shape_error(event_type, "data must be a JSON object holding the message")
    if type(message) is not FrozenDict and not isinstance(message, Mapping):
        raise _shape_error(event_type, _NO_MESSAGE)
    ident = message.get("id")
    if type(ident) is not str or not ident:
        raise _shape_error(event_type, _NO_MESSAGE)
    role = "assistant" if event_type == ASSISTANT_MESSAGE else "user"
    if message.get("role") != role:
        raise _shape_error(
            event_type, f"message must have role {role!r}, got {message.get('role')!r}"
        )
    source = message.get("source")
    if type(source) is not FrozenDict and not isinstance(source, Mapping):
        raise _shape_error(event_type, _BAD_SOURCE)
    kind = source.get("kind")
    if type(kind) is not str or not kind:
        raise _shape_error(event_type, _BAD_SOURCE)
    content = message.get("content")
    if type(content) is not tuple and type(content) is not list:
        raise _shape_error(event_type, "message content must be a list of blocks")
    if event_type == ASSISTANT_MESSAGE:
        provider, model = source.get("provider"), source.get("model")
        if not (kind == "model" and _nonempty_str(provider) and _nonempty_str(model)):
            raise _shape_error(
                event_type, "message must have a model source with non-empty provider and model"
            )
    elif event_type == TOOL_RESULT:
        _check_tool_result(source, kind, content)


def _check_tool_result(source: Mapping[str, Any], kind: str, content: Sequence[Any]) -> None:
    """The rest of ``check_message_shape`` for a ``tool/result``: a tool source, and one
    tool-result block answering the call it names."""
    call_id = source.get("callId")
    if kind != "tool" or not _nonempty_str(call_id):
        raise _shape_error(TOOL_RESULT, "message must have a tool source with a non-empty callId")
    if len(content) != 1:
        raise _shape_error(TOOL_RESULT, _NOT_ONE_RESULT)
    block = content[0]
    if (
        (type(block) is not FrozenDict and not isinstance(block, Mapping))
        or block.get("type") != "tool-result"
        or not isinstance(block.get("content"), tuple | list)
    ):
        raise _shape_error(TOOL_RESULT, _NOT_ONE_RESULT)
    if block.get("toolCallId") != call_id:
        raise _shape_error(
            TOOL_RESULT,
            f"message has mismatched tool call ids: block {block.get('toolCallId')!r}, "
            f"source {call_id!r}",
        )


def check_request_header(data: Any) -> None:
    """Check a ``request/header`` payload: a header whose config names provider and model."""
    if not isinstance(data, Mapping):
        raise EventDataError("request/header data must be a JSON object")
    if data.get("reason") == "fallback":
        raise EventDataError('request/header uses the unsupported legacy reason "fallback"')
    header = data.get("header")
    config = header.get("config") if isinstance(header, Mapping) else None
    if not (
        isinstance(config, Mapping)
        and _nonempty_str(config.get("provider"))
        and _nonempty_str(config.get("model"))
    ):
        raise EventDataError("request/header lacks header.config.provider/model")


def _reject_legacy_header_delta(data: Any) -> None:
    raise EventDataError("request/header-delta is an unsupported legacy format")


# The registry imports these; kept here so each check sits beside the shape it checks.
CORE_VALIDATORS: Final = FrozenDict(
    {
        # partial, not a lambda: a restore calls these once per surface event.
        USER_MESSAGE: partial(check_message_shape, USER_MESSAGE),
        ASSISTANT_MESSAGE: partial(check_message_shape, ASSISTANT_MESSAGE),
        TOOL_RESULT: partial(check_message_shape, TOOL_RESULT),
        REQUEST_HEADER: check_request_header,
    }
)
LEGACY_VALIDATORS: Final = FrozenDict({"request/header-delta": _reject_legacy_header_delta})
