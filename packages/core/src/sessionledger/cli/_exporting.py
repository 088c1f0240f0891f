"""``export``: a session in a format other tools read (docs/viewer.md, "exports").

- ``markdown``: the transcript (what the user saw, compacted history included) as
  ``messages`` and ``transcript`` print it when piped, under the session's facts;
- ``sts``: the Hugging Face Hub's Session Trace Simple Format, JSONL (a ``session``
  line, then one ``message`` line per message of the transcript, with its time);
- ``openai`` / ``anthropic``: the derived messages as those APIs take them, with the
  request header's system prompt (``messages --format``);
- ``html``: one self-contained page of the viewer's views (``sessionledger-viewer``).

Read-only, as every export: the session is read as ``inspect`` reads it (crash repair
in memory only). Standard output, or ``-o FILE``, which is written whole or not at all.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from sessionledger._errors import ConfigError
from sessionledger.cli._inspecting import provider_request
from sessionledger.cli._preview import lookup
from sessionledger.cli._render import message_markdown
from sessionledger.cli._stores import opened_store
from sessionledger.cli._viewing import load_viewer
from sessionledger.cli._words import plural
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._derive import transcript_events
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._snapshot import thaw
from sessionledger.model._vocabulary import TOOL_RESULT

#: The harness id an STS file names (the Hub's renderer, icon and label key on it).
HARNESS: Final = "sessionledger"


def _blocks(message: Any) -> Sequence[Any]:
    content = lookup(message, "content")
    return content if isinstance(content, tuple | list) else ()


def _texts(blocks: Iterable[Any], kind: str) -> str:
    return "\n\n".join(
        text
        for block in blocks
        if lookup(block, "type") == kind and type(text := lookup(block, "text")) is str
    )


def _arguments(value: Any) -> str:
    return value if type(value) is str else jsoncodec.dumps(thaw(value)).decode()


def sts_lines(header: SessionHeader, events: Sequence[SessionEvent]) -> list[dict[str, Any]]:
    """The session in the Session Trace Simple Format: its header line, then a line per
    message the user saw. Assistant text, reasoning and tool calls go to ``content``,
    ``reasoningContent`` and ``toolCalls``; a tool result is a ``tool`` message naming
    the call it answers."""
    lines: list[dict[str, Any]] = [
        {"type": "session", "harness": HARNESS, "id": header.id}
        | ({"name": header.title} if header.title else {})
    ]
    for event, message in transcript_events(events):
        blocks = _blocks(message)
        source = lookup(message, "source")
        shown: dict[str, Any] = {"timestamp": event.time}
        if event.type == TOOL_RESULT:
            results = [block for block in blocks if lookup(block, "type") == "tool-result"]
            inner = [part for block in results for part in _blocks(block)]
            shown |= {"role": "tool", "content": _texts(inner, "text")}
            shown["toolCallId"] = lookup(source, "callId")
        else:
            role = lookup(message, "role")
            shown |= {"role": role, "content": _texts(blocks, "text")}
            reasoning = _texts(blocks, "reasoning")
            if reasoning:
                shown["reasoningContent"] = reasoning
            calls = [
                {
                    "id": lookup(block, "id"),
                    "function": {
                        "name": lookup(block, "name"),
                        "arguments": _arguments(lookup(block, "arguments")),
                    },
                }
                for block in blocks
                if lookup(block, "type") == "tool-call"
            ]
            if calls:
                shown["toolCalls"] = calls
            model = lookup(source, "model")
            if type(model) is str:
                shown["model"] = model
        lines.append({"type": "message", "message": shown})
    return lines


def markdown(header: SessionHeader, events: Sequence[SessionEvent]) -> str:
    """The transcript as Markdown-like text, under the session's facts."""
    messages = [message for _, message in transcript_events(events)]
    title = f"transcript of {header.id} ({plural(len(messages), 'message')})"
    facts = [f"- events: {len(events)}"]
    if header.title:
        facts.insert(0, f"- title: {header.title}")
    if header.parent_session:
        facts.append(f"- forked from: {header.parent_session} at {header.seed_length} events")
    text = message_markdown(messages, title=title)
    first, _, rest = text.partition("\n")
    return "\n".join([first, "", *facts, rest])


def _html(store_url: str, header: SessionHeader, events: Sequence[SessionEvent]) -> str:
    viewer = load_viewer("--format html needs the viewer")
    page: str = viewer.export_html(store_url, header, events)
    return page


def _write(data: bytes, target: str | None) -> None:
    """Write *data* to standard output, or to *target* whole (a temporary file in its
    folder, renamed over it once written): an interrupted export leaves no half file."""
    if target is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    path = Path(target)
    if path.is_dir():
        raise ConfigError(f"-o {target!r} is a directory: name a file")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(temporary, 0o666 & ~mask)  # as a file the user made, not mkstemp's 0600
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


async def export(args: argparse.Namespace) -> int:
    """``export ID --format FORMAT [-o FILE]``."""
    if args.output is not None and not Path(args.output).parent.is_dir():
        raise ConfigError(f"-o {args.output!r}: its folder does not exist")
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        stored = await store.inspect(args.id)
    header, events = stored.header, stored.events
    if args.format == "sts":
        data = b"".join(jsoncodec.dumps(line) + b"\n" for line in sts_lines(header, events))
    elif args.format == "markdown":
        data = markdown(header, events).encode()
    elif args.format in ("openai", "anthropic"):
        at = len(events) - 1  # as ``messages --format`` at the end
        data = jsoncodec.dumps(provider_request(args.format, events, at)) + b"\n"
    else:
        data = _html(args.store_url, header, events).encode()
    _write(data, args.output)
    return 0
