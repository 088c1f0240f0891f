"""LangChain messages onto the core vocabulary and back.

Writing: each message becomes the events docs/events.md describes (turns, steps, messages,
tool calls and results, with provenance), and the exact ``message_to_dict`` form is kept
beside it under the data key ``langchain``. Reading: an event that carries that key gives
back the message that was added; one that does not (crash repair's closers, a compaction
summary written by another tool) is converted from the ledger message.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from sessionledger import (
    Replace,
    SessionEvent,
    assistant_message,
    thaw,
    tool_call_block,
    tool_result,
    user_message,
)

__all__ = ["UnpairedToolMessageError", "UnsupportedMessageError"]

#: The data key that keeps the exact ``message_to_dict`` form of the added message.
LANGCHAIN_KEY: Final = "langchain"
#: The plugin name in the source of the marker ``aclear`` writes.
CLEAR_SOURCE: Final = {"kind": "plugin", "plugin": "sessionledger-langchain"}
CLEAR_TEXT: Final = "(The conversation before this point was cleared from the history.)"
#: Provider and model when an AI message's ``response_metadata`` names none.
DEFAULT_PROVIDER: Final = "langchain"
DEFAULT_MODEL: Final = "unknown"
#: The ``reason`` of a turn left open by the application when a new HumanMessage starts
#: the next one (the previous turn got no final AI message).
SUPERSEDED: Final = {"kind": "aborted", "cause": {"kind": "new-user-message"}}


class UnpairedToolMessageError(ValueError):
    """A ToolMessage answers no tool call that is waiting for its result in the open step."""


class UnsupportedMessageError(TypeError):
    """A message class this adapter does not map (only Human, AI, Tool and System)."""


@dataclass
class Planned:
    """One append the adapter is about to make."""

    type: str
    data: dict[str, Any]
    surface_op: str | Replace | None = None
    sources: list[int] | None = None


@dataclass
class TurnState:
    """What the log says about turns, steps and calls, advanced one event at a time."""

    open_turn: int | None = None
    next_turn: int = 1
    open_step: int | None = None
    next_step: int = 1
    turn_has_step: bool = False
    #: call id -> seq of its ``tool/call``, for the calls of the open step not answered yet.
    pending: dict[str, int] = field(default_factory=dict)
    has_header: bool = False
    #: seqs of the ``request/header`` events that hold a SystemMessage.
    systems: list[int] = field(default_factory=list)
    #: seq of the last marker ``aclear`` wrote, or -1.
    cleared_at: int = -1

    def copy(self) -> TurnState:
        return TurnState(
            self.open_turn,
            self.next_turn,
            self.open_step,
            self.next_step,
            self.turn_has_step,
            dict(self.pending),
            self.has_header,
            list(self.systems),
            self.cleared_at,
        )

    def advance(self, kind: str, data: Any, seq: int, surface_op: object) -> None:
        # Reading is lenient (docs/events.md): a stored event of another writer may break
        # its shape, so every field is looked at before it is used.
        if kind == "turn/start":
            turn = _number(data, "turn") or self.next_turn
            self.open_turn, self.next_turn = turn, turn + 1
            self.open_step, self.next_step, self.turn_has_step = None, 1, False
            self.pending = {}
        elif kind == "turn/end":
            self.open_turn, self.open_step, self.pending = None, None, {}
        elif kind == "step/start":
            step = _number(data, "step") or self.next_step
            self.open_step, self.next_step = step, step + 1
            self.turn_has_step, self.pending = True, {}
        elif kind == "step/end":
            self.open_step, self.pending = None, {}
        elif kind == "tool/call":
            call_id = data.get("callId") if isinstance(data, Mapping) else None
            if isinstance(call_id, str):
                self.pending[call_id] = seq
        elif kind == "tool/result" and surface_op == "append":
            self.pending.pop(data["message"]["source"]["callId"], None)  # shape-checked
        elif kind == "request/header":
            self.has_header = True
            if isinstance(data, Mapping) and LANGCHAIN_KEY in data:
                self.systems.append(seq)
        elif kind == "user/message" and is_clear_marker(data):
            self.cleared_at = seq


def _number(data: Any, key: str) -> int | None:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if type(value) is int and value >= 1 else None


def is_clear_marker(message: Any) -> bool:
    source = message.get("source") if isinstance(message, Mapping) else None
    return source == CLEAR_SOURCE and LANGCHAIN_KEY not in message


# --- writing -------------------------------------------------------------------------


def _blocks(content: str | list[str | dict[Any, Any]]) -> list[Any]:
    """The ledger content blocks of a LangChain ``content``: strings become text blocks,
    dict blocks with a ``type`` are kept as they are (the ledger accepts unknown types)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[Any] = []
    for item in content:
        if isinstance(item, str):
            out.append({"type": "text", "text": item})
        elif isinstance(item, dict) and isinstance(item.get("type"), str):
            if item["type"] == "text" and isinstance(item.get("text"), str):
                out.append({"type": "text", "text": item["text"]})
            else:
                out.append(item)
    return out


def _message_id(message: BaseMessage) -> str:
    return message.id if isinstance(message.id, str) and message.id else str(uuid.uuid4())


def model_source(message: AIMessage) -> tuple[str, str]:
    """Provider and model named by ``response_metadata``, else langchain/unknown."""
    meta = message.response_metadata or {}
    provider = meta.get("model_provider") or meta.get("provider")
    model = meta.get("model_name") or meta.get("model")
    return (
        provider if isinstance(provider, str) and provider else DEFAULT_PROVIDER,
        model if isinstance(model, str) and model else DEFAULT_MODEL,
    )


class Planner:
    """Plans the appends for a batch of messages against a copy of the turn state, so a
    batch that cannot be recorded is refused before anything is appended."""

    def __init__(self, state: TurnState, next_seq: int) -> None:
        self.state = state.copy()
        self.seq = next_seq
        self.out: list[Planned] = []

    def emit(
        self,
        kind: str,
        data: dict[str, Any],
        surface_op: str | Replace | None = None,
        sources: list[int] | None = None,
    ) -> int:
        self.out.append(Planned(kind, data, surface_op, sources))
        self.state.advance(kind, data, self.seq, surface_op)
        self.seq += 1
        return self.seq - 1

    def _open_turn(self) -> int:
        if self.state.open_turn is None:
            self.emit("turn/start", {"turn": self.state.next_turn})
        assert self.state.open_turn is not None
        return self.state.open_turn

    def _end_step(self, turn: int) -> None:
        if self.state.open_step is not None:
            self.emit("step/end", {"turn": turn, "step": self.state.open_step})

    def add(self, message: BaseMessage) -> None:
        if isinstance(message, HumanMessage):
            self._human(message)
        elif isinstance(message, AIMessage):
            self._ai(message)
        elif isinstance(message, ToolMessage):
            self._tool(message)
        elif isinstance(message, SystemMessage):
            self._system(message)
        else:
            raise UnsupportedMessageError(
                f"{type(message).__name__} is not mapped onto the ledger: "
                "add HumanMessage, AIMessage, ToolMessage or SystemMessage"
            )

    def _human(self, message: HumanMessage) -> None:
        state = self.state
        if state.open_turn is not None and state.turn_has_step:
            # The previous turn ended without a final AI message: close it.
            turn = state.open_turn
            self._end_step(turn)
            self.emit("turn/end", {"turn": turn, "reason": SUPERSEDED})
        self._open_turn()
        data = dict(user_message(_blocks(message.content), id=_message_id(message)))
        data[LANGCHAIN_KEY] = message_to_dict(message)
        self.emit("user/message", data, "append")

    def _system(self, message: SystemMessage) -> None:
        self._open_turn()
        text = str(message.text)
        header = {"config": {"provider": DEFAULT_PROVIDER, "model": DEFAULT_MODEL}}
        if text:
            header["system"] = text  # type: ignore[assignment]
        data = {
            "reason": "change" if self.state.has_header else "initial",
            "header": header,
            LANGCHAIN_KEY: message_to_dict(message),
        }
        self.emit("request/header", data)

    def _ai(self, message: AIMessage) -> None:
        turn = self._open_turn()
        self._end_step(turn)  # a step whose calls never got results
        step = self.state.next_step
        self.emit("step/start", {"turn": turn, "step": step})
        calls = []
        for index, call in enumerate(message.tool_calls):
            call_id = call.get("id") or f"{_message_id(message)}-call-{index}"
            arguments = json.dumps(call.get("args", {}), ensure_ascii=False)
            calls.append((call_id, call["name"], arguments))
        blocks = _blocks(message.content) + [tool_call_block(*call) for call in calls]
        provider, model = model_source(message)
        reply = assistant_message(blocks, provider=provider, model=model, id=_message_id(message))
        data: dict[str, Any] = {"turn": turn, "step": step, "message": reply}
        if message.usage_metadata:
            data["usage"] = dict(message.usage_metadata)
        data[LANGCHAIN_KEY] = message_to_dict(message)
        self.emit("assistant/message", data, "append")
        for call_id, name, arguments in calls:
            self.emit(
                "tool/call",
                {"turn": turn, "step": step, "callId": call_id, "name": name,
                 "arguments": arguments},
            )  # fmt: skip
        if not calls:
            self.emit("step/end", {"turn": turn, "step": step})
            self.emit("turn/end", {"turn": turn, "reason": {"kind": "completed"}})

    def _tool(self, message: ToolMessage) -> None:
        state = self.state
        call_seq = state.pending.get(message.tool_call_id)
        if state.open_turn is None or state.open_step is None or call_seq is None:
            raise UnpairedToolMessageError(
                f"ToolMessage for tool_call_id {message.tool_call_id!r}: no tool call with "
                "this id is waiting for its result (add the AIMessage that requested it "
                "first; a call answered once, or closed by crash repair, takes no result)"
            )
        turn, step = state.open_turn, state.open_step
        failed = message.status == "error"
        answer = tool_result(
            message.tool_call_id,
            _blocks(message.content),
            is_error=failed,
            id=_message_id(message),
        )
        data: dict[str, Any] = {"turn": turn, "step": step, "message": answer}
        if failed:
            data["error"] = {"name": "ToolMessageError", "code": "TOOL_ERROR"}
        data[LANGCHAIN_KEY] = message_to_dict(message)
        self.emit("tool/result", data, "append", [call_seq])
        if not state.pending:
            self._end_step(turn)


def clear_marker() -> dict[str, Any]:
    return dict(user_message(CLEAR_TEXT, source=dict(CLEAR_SOURCE)))


# --- reading -------------------------------------------------------------------------


def _content(blocks: Sequence[Any]) -> str | list[str | dict[Any, Any]]:
    """LangChain content for ledger blocks (tool-call blocks go to ``tool_calls``): a
    single text block, or none, is a string."""
    kept = [b for b in blocks if not (isinstance(b, Mapping) and b.get("type") == "tool-call")]
    if not kept:
        return ""
    if len(kept) == 1 and isinstance(kept[0], Mapping) and kept[0].get("type") == "text":
        return str(kept[0].get("text", ""))
    return [thaw(b) for b in kept]


def _stored(value: Any) -> BaseMessage:
    [message] = messages_from_dict([thaw(value)])
    return message


def to_langchain(event: SessionEvent) -> BaseMessage | None:
    """The LangChain message an event shows, or None (the clear marker)."""
    data = event.data
    if event.type == "user/message":
        if is_clear_marker(data):
            return None
        if LANGCHAIN_KEY in data:
            return _stored(data[LANGCHAIN_KEY])
        return HumanMessage(content=_content(data["content"]), id=data["id"])
    if LANGCHAIN_KEY in data:
        return _stored(data[LANGCHAIN_KEY])
    if event.type == "assistant/message":
        message = data["message"]
        calls = [
            {"name": b["name"], "args": _arguments(b["arguments"]), "id": b["id"],
             "type": "tool_call"}
            for b in message["content"]
            if isinstance(b, Mapping) and b.get("type") == "tool-call"
        ]  # fmt: skip
        source = message["source"]
        return AIMessage(
            content=_content(message["content"]),
            tool_calls=calls,
            id=message["id"],
            response_metadata={
                "model_provider": source.get("provider"),
                "model_name": source.get("model"),
            },
        )
    if event.type == "tool/result":
        message = data["message"]
        [block] = message["content"]
        error = data.get("error")
        extra: dict[str, Any] = {"seq": event.seq}
        if error is not None:
            extra["error"] = thaw(error)
        return ToolMessage(
            content=_content(block.get("content", ())),
            tool_call_id=block["toolCallId"],
            id=message["id"],
            status="error" if (block.get("isError") or error is not None) else "success",
            response_metadata={"sessionledger": extra},
        )
    return None


def _arguments(text: Any) -> Any:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def history_view(
    events: Sequence[SessionEvent], nodes: Sequence[int], state: TurnState
) -> list[BaseMessage]:
    """The LangChain history: the surface nodes in surface order, with the SystemMessages
    recorded since the last clear placed before the first node written after them."""
    systems = [seq for seq in state.systems if seq > state.cleared_at]
    out: list[BaseMessage] = []
    index = 0
    for node in nodes:
        while index < len(systems) and systems[index] < node:
            out.append(_stored(events[systems[index]].data[LANGCHAIN_KEY]))
            index += 1
        message = to_langchain(events[node])
        if message is not None:
            out.append(message)
    out.extend(_stored(events[seq].data[LANGCHAIN_KEY]) for seq in systems[index:])
    return out
