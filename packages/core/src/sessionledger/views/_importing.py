"""Provider histories read in: OpenAI chat messages or Anthropic messages as a session log.

The inverses of ``to_openai_messages`` / ``to_anthropic_messages``: each returns the
envelopes of a whole log (seqs from 0) in the core vocabulary, so every ledger feature
works on an imported history (docs/reading.md, "importing a history"). A user message
opens a turn; each assistant message is a step of it, with one ``tool/call`` per tool
call it makes; the tool results that follow answer those calls, citing them as
provenance; a turn ends ``completed`` when the next user message comes or the history
ends. A leading system prompt becomes the ``request/header``'s ``system``.

Input that has no place in a session (a message that is not an object, an unknown role
or block type, a tool result for a call nobody made, a system message after the
conversation started) raises ``HistoryFormatError`` naming the message's index.
"""

from __future__ import annotations

import time as clock
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from sessionledger._errors import HistoryFormatError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._vocabulary import (
    ASSISTANT_MESSAGE,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    assistant_message,
    tool_call_block,
    tool_result,
    user_message,
)

#: Separator of several system prompts (OpenAI) or system text blocks (Anthropic).
SYSTEM_JOINER: Final = "\n"


class _LogBuilder:
    """Append envelopes in the turn/step structure a harness would have written."""

    def __init__(self, *, provider: str, model: str, at: int) -> None:
        self.provider = provider
        self.model = model
        self.at = at
        self.events: list[dict[str, Any]] = []
        self.turn = 0
        self.step = 0
        self.turn_open = False
        self.step_open = False
        self.calls: dict[str, int] = {}  # open tool calls: call id → seq of its tool/call
        self.system: list[str] = []

    def add(self, event_type: str, data: Any, **surface: Any) -> int:
        seq = len(self.events)
        envelope: dict[str, Any] = {"type": event_type, "seq": seq, "time": self.at, "data": data}
        envelope.update(surface)
        self.events.append(envelope)
        return seq

    def close_step(self) -> None:
        if self.step_open:
            self.add(STEP_END, {"turn": self.turn, "step": self.step})
            self.step_open = False
        self.calls.clear()

    def close_turn(self) -> None:
        self.close_step()
        if self.turn_open:
            self.add(TURN_END, {"turn": self.turn, "reason": {"kind": "completed"}})
            self.turn_open = False

    def open_turn(self) -> None:
        self.close_turn()
        self.turn += 1
        self.step = 0
        self.turn_open = True
        self.add(TURN_START, {"turn": self.turn})
        if self.turn == 1 and self.system:
            # The system prompt is the first request's header, inside the first turn.
            header = {
                "config": {"provider": self.provider, "model": self.model},
                "system": SYSTEM_JOINER.join(self.system),
            }
            self.add(REQUEST_HEADER, {"reason": "initial", "header": header})

    def system_prompt(self, text: str, index: int | None) -> None:
        if self.turn:
            raise HistoryFormatError(
                "a system message after the conversation started has no place in a "
                "session (the system prompt is the request header's); put it first",
                index=index,
            )
        if text:
            self.system.append(text)

    def user(self, blocks: list[Any], index: int) -> None:
        self.open_turn()
        self.add(USER_MESSAGE, user_message(blocks, id=f"imported-{index}"), surfaceOp="append")

    def assistant(self, blocks: list[Any], index: int) -> None:
        if not self.turn_open:
            self.open_turn()
        self.close_step()
        self.step += 1
        self.step_open = True
        self.add(STEP_START, {"turn": self.turn, "step": self.step})
        message = assistant_message(
            blocks, provider=self.provider, model=self.model, id=f"imported-{index}"
        )
        self.add(
            ASSISTANT_MESSAGE,
            {"turn": self.turn, "step": self.step, "message": message},
            surfaceOp="append",
        )
        for block in blocks:
            if block["type"] == "tool-call":
                call_id = block["id"]
                if call_id in self.calls:
                    raise HistoryFormatError(f"tool call id {call_id!r} is used twice", index=index)
                self.calls[call_id] = self.add(
                    TOOL_CALL,
                    {
                        "turn": self.turn,
                        "step": self.step,
                        "callId": call_id,
                        "name": block["name"],
                        "arguments": block["arguments"],
                    },
                )

    def result(self, call_id: Any, blocks: list[Any], index: int, *, is_error: bool) -> None:
        if type(call_id) is not str or call_id not in self.calls:
            raise HistoryFormatError(
                f"a tool result for {call_id!r} answers no tool call of the assistant "
                "message before it",
                index=index,
            )
        call_seq = self.calls.pop(call_id)
        message = tool_result(call_id, blocks, is_error=is_error, id=f"imported-{index}")
        self.add(
            TOOL_RESULT,
            {"turn": self.turn, "step": self.step, "message": message},
            surfaceOp="append",
            sourceEventSeqs=[call_seq],
        )

    def finish(self) -> list[dict[str, Any]]:
        if self.system and not self.events:
            self.open_turn()  # a history of only a system prompt: one empty turn holds it
        self.close_turn()
        return self.events


def _now_ms(at: int | None) -> int:
    return int(clock.time() * 1000) if at is None else at


def _messages(messages: object) -> Sequence[Any]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise HistoryFormatError(
            f"a history is a list of messages, got {type(messages).__qualname__}"
        )
    return messages


def _message(value: object, index: int) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise HistoryFormatError(
            f"a message is a JSON object, got {type(value).__qualname__}", index=index
        )
    return value


def _text(value: object, what: str, index: int | None) -> str:
    if type(value) is not str:
        raise HistoryFormatError(f"{what} must be a string, got {value!r:.60}", index=index)
    return value


# --- OpenAI chat completions ----------------------------------------------------------------


def _openai_parts(content: object, index: int, *, images: bool) -> list[Any]:
    """Return the blocks of an OpenAI ``content`` (a string, a list of parts, or null)."""
    if content is None:
        return []
    if type(content) is str:
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise HistoryFormatError(
            f"content must be a string or a list of parts, got {content!r:.60}", index=index
        )
    blocks: list[Any] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            text = _text(part.get("text"), "a text part's text", index)
            if text:
                blocks.append({"type": "text", "text": text})
        elif kind == "image_url" and images:
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else None
            blocks.append({"type": "image", "url": _text(url, "image_url.url", index)})
        else:
            raise HistoryFormatError(f"a content part of type {kind!r} is not read", index=index)
    return blocks


def _openai_tool_calls(calls: object, index: int) -> list[Any]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise HistoryFormatError("tool_calls must be a list", index=index)
    blocks = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(call, Mapping):
            raise HistoryFormatError("a tool call needs a function object", index=index)
        call_id = _text(call.get("id"), "a tool call's id", index)
        name = _text(function.get("name"), "a tool call's function name", index)
        if not call_id or not name:
            raise HistoryFormatError("a tool call needs a non-empty id and name", index=index)
        arguments = _text(function.get("arguments", ""), "a tool call's arguments", index)
        blocks.append(tool_call_block(call_id, name, arguments))
    return blocks


def from_openai_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    provider: str = "openai",
    model: str = "imported",
    at: int | None = None,
) -> list[dict[str, Any]]:
    """Return the envelopes of a session log holding an OpenAI chat-completions history.

    Roles ``system`` and ``developer`` (only before the first other message), ``user``,
    ``assistant`` (``content``, ``tool_calls``, ``reasoning_content``) and ``tool``
    (``tool_call_id``, ``content``) are read; assistant messages are attributed to
    *provider*/*model*; every event gets the time *at* (epoch ms, default now).
    ``to_openai_messages(messages_at(log, last), system=...)`` gives the history back.
    """
    log = _LogBuilder(provider=provider, model=model, at=_now_ms(at))
    for index, value in enumerate(_messages(messages)):
        message = _message(value, index)
        role = message.get("role")
        if role in ("system", "developer"):
            blocks = _openai_parts(message.get("content"), index, images=False)
            log.system_prompt(SYSTEM_JOINER.join(block["text"] for block in blocks), index)
        elif role == "user":
            log.user(_openai_parts(message.get("content"), index, images=True), index)
        elif role == "assistant":
            blocks = []
            reasoning = message.get("reasoning_content")
            if reasoning is not None and _text(reasoning, "reasoning_content", index):
                blocks.append({"type": "reasoning", "text": reasoning})
            blocks += _openai_parts(message.get("content"), index, images=False)
            blocks += _openai_tool_calls(message.get("tool_calls"), index)
            log.assistant(blocks, index)
        elif role == "tool":
            blocks = _openai_parts(message.get("content"), index, images=False)
            log.result(message.get("tool_call_id"), blocks, index, is_error=False)
        else:
            raise HistoryFormatError(f"role {role!r} is not read", index=index)
    return log.finish()


# --- Anthropic messages API -----------------------------------------------------------------


def _anthropic_image(block: Mapping[str, Any], index: int) -> dict[str, Any]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind == "base64" and isinstance(source, Mapping):
        return {
            "type": "image",
            "data": _text(source.get("data"), "an image's data", index),
            "mediaType": _text(source.get("media_type"), "an image's media_type", index),
        }
    if kind == "url" and isinstance(source, Mapping):
        return {"type": "image", "url": _text(source.get("url"), "an image's url", index)}
    raise HistoryFormatError(f"an image source of type {kind!r} is not read", index=index)


def _anthropic_content(content: object, index: int | None) -> list[Any]:
    if type(content) is str:
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise HistoryFormatError(
            f"content must be a string or a list of blocks, got {content!r:.60}", index=index
        )
    for block in content:
        if not isinstance(block, Mapping):
            raise HistoryFormatError("a content block is a JSON object", index=index)
    return content


def _text_block(block: Mapping[str, Any], index: int) -> dict[str, Any] | None:
    """Return an Anthropic ``text`` block as ours; None when its text is empty."""
    text = _text(block.get("text"), "a text block's text", index)
    return {"type": "text", "text": text} if text else None


def _media_block(block: Mapping[str, Any], index: int, where: str) -> dict[str, Any] | None:
    """Return a ``text`` or ``image`` block of *where* (a user message, a tool result) as
    ours; None for empty text; any other type is refused."""
    kind = block.get("type")
    if kind == "text":
        return _text_block(block, index)
    if kind == "image":
        return _anthropic_image(block, index)
    raise HistoryFormatError(f"{where} block of type {kind!r} is not read", index=index)


def _anthropic_inner(content: object, index: int) -> list[Any]:
    """Return the text and image blocks of a ``tool_result``'s content."""
    return [
        converted
        for block in _anthropic_content(content, index)
        if (converted := _media_block(block, index, "a tool result")) is not None
    ]


def _arguments(value: object, index: int) -> str:
    if not isinstance(value, Mapping):
        raise HistoryFormatError("a tool_use block's input must be an object", index=index)
    try:
        return jsoncodec.dumps(value).decode()
    except Exception as error:
        raise HistoryFormatError(f"a tool_use input is not JSON: {error}", index=index) from error


def _anthropic_assistant(content: object, index: int) -> list[Any]:
    blocks: list[Any] = []
    for block in _anthropic_content(content, index):
        kind = block.get("type")
        if kind == "text":
            if (text := _text_block(block, index)) is not None:
                blocks.append(text)
        elif kind == "thinking":
            reasoning = {
                "type": "reasoning",
                "text": _text(block.get("thinking"), "thinking", index),
            }
            if type(signature := block.get("signature")) is str:
                reasoning["signature"] = signature
            blocks.append(reasoning)
        elif kind == "tool_use":
            call_id = _text(block.get("id"), "a tool_use id", index)
            name = _text(block.get("name"), "a tool_use name", index)
            if not call_id or not name:
                raise HistoryFormatError("a tool_use needs a non-empty id and name", index=index)
            blocks.append(tool_call_block(call_id, name, _arguments(block.get("input"), index)))
        else:
            raise HistoryFormatError(
                f"an assistant block of type {kind!r} is not read", index=index
            )
    return blocks


def from_anthropic_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    provider: str = "anthropic",
    model: str = "imported",
    at: int | None = None,
) -> list[dict[str, Any]]:
    """Return the envelopes of a session log holding an Anthropic messages-API history.

    *system* is the request's system prompt (a string or text blocks). A user message's
    ``tool_result`` blocks answer the tool calls of the step before; its text and images,
    if any, open the next turn. Assistant ``text``, ``thinking`` (with its signature) and
    ``tool_use`` blocks are read, attributed to *provider*/*model*; every event gets the
    time *at* (epoch ms, default now). ``to_anthropic_messages(messages_at(log, last),
    include_reasoning=True, system=...)`` gives the history back.
    """
    log = _LogBuilder(provider=provider, model=model, at=_now_ms(at))
    if system is not None:
        if isinstance(system, str):
            texts = [system]
        else:
            texts = [
                _text(block.get("text"), "a system block's text", None)
                for block in _anthropic_content(system, None)
            ]
        log.system_prompt(SYSTEM_JOINER.join(text for text in texts if text), None)
    for index, value in enumerate(_messages(messages)):
        message = _message(value, index)
        role = message.get("role")
        if role == "assistant":
            log.assistant(_anthropic_assistant(message.get("content"), index), index)
        elif role == "user":
            rest: list[Any] = []
            for block in _anthropic_content(message.get("content"), index):
                kind = block.get("type")
                if kind == "tool_result":
                    inner = _anthropic_inner(block.get("content", []), index)
                    log.result(
                        block.get("tool_use_id"),
                        inner,
                        index,
                        is_error=block.get("is_error") is True,
                    )
                elif (converted := _media_block(block, index, "a user")) is not None:
                    rest.append(converted)
            if rest:
                log.user(rest, index)
        else:
            raise HistoryFormatError(f"role {role!r} is not read", index=index)
    return log.finish()


def load_history_file(data: bytes) -> tuple[list[Any], Any]:
    """Parse a history file: a JSON list of messages, or an object with ``messages`` (and
    ``system``); return ``(messages, system)``."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise HistoryFormatError(f"the file is not JSON: {error}") from error
    if isinstance(parsed, dict):
        return _messages_or_fail(parsed.get("messages")), parsed.get("system")
    return _messages_or_fail(parsed), None


def _messages_or_fail(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise HistoryFormatError(
            "a history file holds a JSON list of messages, or an object with 'messages'"
        )
    return value
