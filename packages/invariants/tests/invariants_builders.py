"""Event builders for the invariants tests, in envelope form without seq and time.

``put(session, *events)`` appends them through the session (so through the plugin);
``log(*events)`` numbers them (``seq == time == index``) into ``SessionEvent``s for the
offline check. Abbreviations: TS/TE turn start/end, SS/SE step start/end, CH chunk, AM
assistant message, TC tool call, TR tool result, UM user message.
"""

from __future__ import annotations

from typing import Any

import pytest

from sessionledger import EventType, hookimpl
from sessionledger._errors import InvariantError
from sessionledger.model._events import SessionEvent
from sessionledger.model._session import Session
from sessionledger.model._vocabulary import (
    assistant_message,
    tool_call_block,
    tool_result,
    user_message,
)
from sessionledger_invariants import InvariantsPlugin

Event = dict[str, Any]


def TS(turn: Any) -> Event:
    return {"type": "turn/start", "data": {"turn": turn}}


def TE(turn: Any, kind: str = "completed") -> Event:
    reason: dict[str, Any] = {"kind": kind}
    if kind == "error":
        reason["error"] = {"code": "UNKNOWN", "message": "the model failed"}
    return {"type": "turn/end", "data": {"turn": turn, "reason": reason}}


def SS(turn: Any, step: Any) -> Event:
    return {"type": "step/start", "data": {"turn": turn, "step": step}}


def SE(turn: Any, step: Any) -> Event:
    return {"type": "step/end", "data": {"turn": turn, "step": step}}


def UM(text: str = "hi", source: dict[str, Any] | None = None) -> Event:
    return {
        "type": "user/message",
        "data": user_message(text, source=source),
        "surfaceOp": "append",
    }


def CH(turn: Any, step: Any, text: str = "x") -> Event:
    chunk = {"type": "text-delta", "index": 0, "text": text}
    return {"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": chunk}}


def AM(turn: Any, step: Any, calls: tuple[str, ...] = (), text: str = "ok") -> Event:
    blocks: list[Any] = [{"type": "text", "text": text}]
    blocks += [tool_call_block(call, "echo", "{}") for call in calls]
    message = assistant_message(blocks, provider="mock", model="mock")
    return {
        "type": "assistant/message",
        "data": {"turn": turn, "step": step, "message": message},
        "surfaceOp": "append",
    }


def TC(turn: Any, step: Any, call: str) -> Event:
    data = {"turn": turn, "step": step, "callId": call, "name": "echo", "arguments": "{}"}
    return {"type": "tool/call", "data": data}


def TP(turn: Any, step: Any, call: str, kind: str = "approval") -> Event:
    data = {"turn": turn, "step": step, "callId": call, "reason": {"kind": kind}}
    return {"type": "tool/paused", "data": data}


def TR(
    turn: Any,
    step: Any,
    call: str,
    *,
    text: str = "done",
    is_error: bool = False,
    error: dict[str, str] | None = None,
    replace: tuple[int, int] | None = None,
) -> Event:
    """A tool/result for *call*; with *replace* ``(start, end)`` a replacement citing them."""
    data: dict[str, Any] = {
        "turn": turn,
        "step": step,
        "message": tool_result(call, text, is_error=is_error, id=f"result-{call}"),
    }
    if error is not None:
        data["error"] = error
    event: Event = {"type": "tool/result", "data": data, "surfaceOp": "append"}
    if replace is not None:
        start, end = replace
        event["surfaceOp"] = {"op": "replace", "start": start, "end": end}
        event["sourceEventSeqs"] = sorted({start, end})
    return event


NOT_STARTED = {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}
OUTCOME_UNKNOWN = {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}


def RH() -> Event:
    header = {"config": {"provider": "mock", "model": "mock"}}
    return {"type": "request/header", "data": {"reason": "initial", "header": header}}


def RC() -> Event:
    data = {"provider": "mock", "model": "mock", "contextWindow": 128000}
    return {"type": "request/context", "data": data}


class HarnessTypes:
    """Declares the plugin types these tests append: a ledger refuses types it does not
    know, and the invariants leave plugin types unconstrained."""

    @hookimpl
    def ledger_event_types(self) -> list[EventType]:
        return [EventType("plugin/marker"), EventType("compaction/start")]


def PLUGIN(kind: str = "plugin/marker", **data: Any) -> Event:
    return {"type": kind, "data": data}


def END_SEED() -> Event:
    return {"type": "session/end-seed", "data": {}}


def put(session: Session, *events: Event) -> list[SessionEvent]:
    """Append *events* to *session* in order; return the committed events."""
    return [
        session.append(
            event["type"],
            event["data"],
            surface_op=event.get("surfaceOp"),
            source_event_seqs=event.get("sourceEventSeqs"),
        )
        for event in events
    ]


def log(*events: Event, start: int = 0) -> list[SessionEvent]:
    """Number *events* from *start* (``seq == time``) as ``SessionEvent``s."""
    return [
        SessionEvent.from_json({**event, "seq": seq, "time": seq})
        for seq, event in enumerate(events, start)
    ]


def refused(
    session: Session, event: Event, rule: str, plugin: InvariantsPlugin | None = None
) -> InvariantError:
    """Append *event*, expect the veto for *rule*, check that nothing moved (the log and,
    given the *plugin*, its trace), return the error."""
    before = session.events
    trace = plugin.trace(session) if plugin is not None else None
    last_seq = plugin.last_seq_of(session) if plugin is not None else None
    with pytest.raises(InvariantError) as caught:
        put(session, event)
    if plugin is not None:
        assert plugin.trace(session) is trace
        assert plugin.last_seq_of(session) == last_seq
    error = caught.value
    assert error.rule == rule, str(error)
    assert error.code == "INVARIANT"
    assert error.seq == len(before)
    assert error.session_id == session.id
    assert session.events is before
    return error
