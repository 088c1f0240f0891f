"""Provider request formats: derived messages as OpenAI or Anthropic history.

Both converters read the messages ``derive_messages()`` returns (frozen ``FrozenDict`` and
tuples) or plain dicts of the same shapes (docs/events.md, "messages"), and build fresh,
plain, mutable ``dict``/``list`` structures a harness can send or edit; nothing frozen or
shared with the log leaks out.

Choices common to both:

- Blocks of an unknown type are skipped: plugins extend the block vocabulary, and a
  provider request has no place for a block it does not know. So are blocks a role cannot
  carry in that API (an image or tool result on an assistant message, a tool call or
  reasoning on a user message), and empty text blocks (Anthropic rejects them).
- Reasoning is dropped unless ``include_reasoning=True``.
- A message left with nothing to send (no text, image, tool call or result, or kept
  reasoning) is omitted, and so is a message whose role is not ``user``, ``assistant``
  or ``system``.
- An image block is read from its ``attachment`` object when it has one, else from the
  block itself: a ``url`` (``https:`` or a ``data:`` URL) or inline base64 ``data`` with its
  ``mediaType``. An image known only by reference (an ``attachmentId``) cannot be sent
  and is skipped; a harness that stores attachments elsewhere inlines them first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, NotRequired, TypedDict

import orjson

from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._snapshot import thaw

#: Separator between the text blocks of one message when a format wants a single string.
TEXT_JOINER = "\n"


class AnthropicRequest(TypedDict):
    """The history part of an Anthropic messages-API request.

    ``system`` is present only when the input held ``system``-role messages (their text
    blocks, in order), so ``client.messages.create(model=..., max_tokens=...,
    **request)`` works either way.
    """

    messages: list[dict[str, Any]]
    system: NotRequired[list[dict[str, Any]]]


# --- shared readers -------------------------------------------------------------------------


def _blocks(value: Any) -> Sequence[Any]:
    content = value.get("content") if isinstance(value, Mapping) else None
    return content if isinstance(content, tuple | list) else ()


def _kind(block: Any) -> Any:
    return block.get("type") if isinstance(block, Mapping) else None


def _text_of(block: Mapping[str, Any]) -> str:
    text = block.get("text")
    return text if type(text) is str else ""


def _texts(blocks: Iterable[Any], kind: str = "text") -> list[str]:
    """Return the non-empty texts of the blocks of *kind*, in order."""
    return [text for block in blocks if _kind(block) == kind and (text := _text_of(block))]


class _Pixels(NamedTuple):
    """Where an image's pixels are: a ``url``, or base64 ``data`` of ``media_type``."""

    url: str | None
    media_type: str = ""
    data: str = ""


def _image(block: Mapping[str, Any]) -> _Pixels | None:
    """Locate an image block's pixels; None when it only references stored bytes."""
    attachment = block.get("attachment")
    fields: Mapping[str, Any] = attachment if isinstance(attachment, Mapping) else block
    url = fields.get("url")
    if type(url) is str and url:
        if url.startswith("data:"):
            header, comma, payload = url[5:].partition(",")
            media_type, _, encoding = header.partition(";")
            if comma and encoding == "base64" and media_type:
                return _Pixels(None, media_type, payload)
        return _Pixels(url)
    data, declared = fields.get("data"), fields.get("mediaType")
    if type(data) is str and data and type(declared) is str and declared:
        return _Pixels(None, declared, data)
    return None


def _arguments_text(arguments: Any) -> str:
    """Return tool-call arguments as JSON text (the log keeps them as the model's raw text)."""
    if type(arguments) is str:
        return arguments
    return jsoncodec.dumps(arguments).decode()


# --- OpenAI chat completions ----------------------------------------------------------------


def _openai_image_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    pixels = _image(block)
    if pixels is None:
        return None
    url = pixels.url or f"data:{pixels.media_type};base64,{pixels.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _openai_content(blocks: Iterable[Any]) -> str | list[dict[str, Any]]:
    """Return text-only content as one string, content with images as a list of parts."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = _kind(block)
        if kind == "text" and (text := _text_of(block)):
            parts.append({"type": "text", "text": text})
        elif kind == "image" and (part := _openai_image_part(block)) is not None:
            parts.append(part)
    if all(part["type"] == "text" for part in parts):
        return TEXT_JOINER.join(part["text"] for part in parts)
    return parts


def _openai_assistant(blocks: Sequence[Any], include_reasoning: bool) -> dict[str, Any] | None:
    text = TEXT_JOINER.join(_texts(blocks))
    calls = [
        {
            "id": block.get("id"),
            "type": "function",
            "function": {
                "name": block.get("name"),
                "arguments": _arguments_text(block.get("arguments", "")),
            },
        }
        for block in blocks
        if _kind(block) == "tool-call"
    ]
    reasoning = TEXT_JOINER.join(_texts(blocks, "reasoning")) if include_reasoning else ""
    if not text and not calls and not reasoning:
        return None
    # Chat completions wants null content beside tool calls when the model said nothing.
    out: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = calls
    return out


def to_openai_messages(
    messages: Iterable[Mapping[str, Any]],
    *,
    include_reasoning: bool = False,
    system: str | None = None,
) -> list[dict[str, Any]]:
    """Return the history as OpenAI chat-completions messages.

    ``system`` (when non-empty) becomes a leading ``system`` message; ``system``-role
    messages of the history stay in place. An assistant message carries its text as
    ``content`` (``None`` when it only calls tools), its tool calls as ``tool_calls`` with
    the raw argument text, and, with ``include_reasoning``, its reasoning as
    ``reasoning_content``. Each tool-result block becomes a ``role: "tool"`` message with
    its text joined; that API has no error flag, so the text alone says an error
    happened, and since tool messages cannot hold images, images a tool returned follow
    the run of tool messages as one ``user`` message. Text-only content is a string
    (blocks joined by ``TEXT_JOINER``); content with images is a list of parts.
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    # Images from tool results wait until the tool messages of that run are all out:
    # the API wants tool messages right after the assistant message that called them.
    held_images: list[dict[str, Any]] = []

    def release_images() -> None:
        if held_images:
            out.append({"role": "user", "content": held_images.copy()})
            held_images.clear()

    for message in messages:
        role = message.get("role")
        blocks = _blocks(message)
        if role == "assistant":
            release_images()
            if (converted := _openai_assistant(blocks, include_reasoning)) is not None:
                out.append(converted)
        elif role == "system":
            release_images()
            if text := TEXT_JOINER.join(_texts(blocks)):
                out.append({"role": "system", "content": text})
        elif role == "user":
            results = [block for block in blocks if _kind(block) == "tool-result"]
            for block in results:
                inner = _blocks(block)
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.get("toolCallId"),
                        "content": TEXT_JOINER.join(_texts(inner)),
                    }
                )
                held_images.extend(
                    part
                    for item in inner
                    if _kind(item) == "image" and (part := _openai_image_part(item)) is not None
                )
            content = _openai_content(blocks)
            if content:
                release_images()
                out.append({"role": "user", "content": content})
    release_images()
    return out


# --- Anthropic messages API -----------------------------------------------------------------


def _anthropic_image(block: Mapping[str, Any]) -> dict[str, Any] | None:
    pixels = _image(block)
    if pixels is None:
        return None
    if pixels.url is None:
        source = {"type": "base64", "media_type": pixels.media_type, "data": pixels.data}
    elif pixels.url.startswith("data:"):
        # A data URL that is not base64 has no Anthropic source form.
        return None
    else:
        source = {"type": "url", "url": pixels.url}
    return {"type": "image", "source": source}


def _tool_input(arguments: Any) -> dict[str, Any]:
    """Parse tool-call arguments into the JSON object ``input`` must be.

    Empty text means no arguments (``{}``); text that is not a JSON object (invalid JSON,
    or an array or scalar) is kept as ``{"_raw": text}`` so nothing the model said is lost.
    """
    if isinstance(arguments, Mapping):
        return thaw(arguments)  # type: ignore[no-any-return]
    text = _arguments_text(arguments)
    if not text.strip():
        return {}
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"_raw": text}
    return parsed if type(parsed) is dict else {"_raw": text}


def _anthropic_block(block: Any, role: str, include_reasoning: bool) -> dict[str, Any] | None:
    kind = _kind(block)
    if kind == "text":
        text = _text_of(block)
        return {"type": "text", "text": text} if text else None
    if role == "user":
        if kind == "image":
            return _anthropic_image(block)
        if kind == "tool-result":
            inner = [
                converted
                for item in _blocks(block)
                if _kind(item) in ("text", "image")
                and (converted := _anthropic_block(item, "user", False)) is not None
            ]
            return {
                "type": "tool_result",
                "tool_use_id": block.get("toolCallId"),
                "content": inner,
                "is_error": block.get("isError") is True,
            }
        return None
    if kind == "tool-call":
        return {
            "type": "tool_use",
            "id": block.get("id"),
            "name": block.get("name"),
            "input": _tool_input(block.get("arguments", "")),
        }
    if kind == "reasoning" and include_reasoning:
        text = _text_of(block)
        if not text:
            return None
        thinking: dict[str, Any] = {"type": "thinking", "thinking": text}
        # The API verifies thinking it gets back by its signature; a provider adapter
        # that keeps one on the block gets it passed through.
        if type(signature := block.get("signature")) is str:
            thinking["signature"] = signature
        return thinking
    return None


def to_anthropic_messages(
    messages: Iterable[Mapping[str, Any]],
    *,
    include_reasoning: bool = False,
    system: str | None = None,
) -> AnthropicRequest:
    """Return the history as an Anthropic messages-API request (``AnthropicRequest``).

    ``system`` (when non-empty) becomes the first text block of ``system``;
    ``system``-role messages go to ``system`` (their text blocks) instead of the message
    list. Tool calls become ``tool_use`` blocks whose ``input`` is the parsed
    arguments, tool results ``tool_result`` blocks (``is_error`` always present) on a
    ``user`` message, reasoning ``thinking`` blocks when kept. Consecutive messages of the
    same role are merged into one, because the API requires user and assistant to
    alternate; in a user message the ``tool_result`` blocks come first (the API rejects
    text before them), otherwise block order is kept.
    """
    system_blocks: list[dict[str, Any]] = [{"type": "text", "text": system}] if system else []
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks = _blocks(message)
        if role == "system":
            system_blocks.extend({"type": "text", "text": text} for text in _texts(blocks))
            continue
        if role not in ("user", "assistant"):
            continue
        converted = [
            item
            for block in blocks
            if (item := _anthropic_block(block, role, include_reasoning)) is not None
        ]
        if not converted:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(converted)
        else:
            out.append({"role": role, "content": converted})
    for entry in out:
        if entry["role"] == "user":
            content = entry["content"]
            results = [block for block in content if block["type"] == "tool_result"]
            if results:
                entry["content"] = results + [b for b in content if b["type"] != "tool_result"]
    request: AnthropicRequest = {"messages": out}
    if system_blocks:
        request["system"] = system_blocks
    return request
