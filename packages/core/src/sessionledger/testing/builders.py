"""Build realistic session logs for tests: turns, steps, streamed chunks and tool calls.

The builders append through a real ``Session``, so every log they make passes the
surface rules (and the invariants) exactly as a harness's log would.
"""

from __future__ import annotations

from typing import Any

from sessionledger.model._events import Replace, SessionEvent
from sessionledger.model._session import Session
from sessionledger.model._vocabulary import (
    assistant_message,
    tool_call_block,
    tool_result,
    user_message,
)

__all__ = [
    "PROVIDER",
    "MODEL",
    "closed_turn",
    "compact",
    "finish_pending_call",
    "open_turn_with_pending_call",
    "stream_text",
]

PROVIDER = "mock"
MODEL = "mock-model"


def stream_text(session: Session, turn: int, step: int, text: str, *, index: int = 0) -> list[int]:
    """Append *text* as token-sized ``text-delta`` chunks; return their seqs."""
    seqs = []
    for start in range(0, len(text), 4):
        event = session.append(
            "assistant/chunk",
            {
                "turn": turn,
                "step": step,
                "chunk": {"type": "text-delta", "index": index, "text": text[start : start + 4]},
            },
        )
        seqs.append(event.seq)
    return seqs


def closed_turn(
    session: Session, turn: int, prompt: str = "hello", answer: str = "hi there, how can I help?"
) -> list[SessionEvent]:
    """Append a complete turn: prompt, one step with a tool call and its result, a second
    step that streams the answer. Return the events appended."""
    start = session.seq
    call_id = f"call-{turn}"
    session.append("turn/start", {"turn": turn})
    session.append("user/message", user_message(prompt), surface_op="append")
    session.append("step/start", {"turn": turn, "step": 1})
    chunks = stream_text(session, turn, 1, "let me look")
    session.append(
        "assistant/message",
        {
            "turn": turn,
            "step": 1,
            "message": assistant_message(
                [{"type": "text", "text": "let me look"}, tool_call_block(call_id, "read", "{}")],
                provider=PROVIDER,
                model=MODEL,
            ),
        },
        surface_op="append",
        source_event_seqs=chunks,
    )
    call = session.append(
        "tool/call",
        {"turn": turn, "step": 1, "callId": call_id, "name": "read", "arguments": "{}"},
    )
    session.append(
        "tool/result",
        {"turn": turn, "step": 1, "message": tool_result(call_id, "file contents")},
        surface_op="append",
        source_event_seqs=[call.seq],
    )
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("step/start", {"turn": turn, "step": 2})
    chunks = stream_text(session, turn, 2, answer)
    session.append(
        "assistant/message",
        {
            "turn": turn,
            "step": 2,
            "message": assistant_message(answer, provider=PROVIDER, model=MODEL),
        },
        surface_op="append",
        source_event_seqs=chunks,
    )
    session.append("step/end", {"turn": turn, "step": 2})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return list(session.events[start:])


def open_turn_with_pending_call(
    session: Session, turn: int, *, call_recorded: bool = True, call_id: str | None = None
) -> list[SessionEvent]:
    """Append a turn that stops after the model asked for a tool (and, if
    *call_recorded*, after the ``tool/call``): the shape a crash leaves behind."""
    start = session.seq
    call_id = call_id or f"pending-{turn}"
    session.append("turn/start", {"turn": turn})
    session.append("user/message", user_message("run the tool"), surface_op="append")
    session.append("step/start", {"turn": turn, "step": 1})
    chunks = stream_text(session, turn, 1, "running it")
    session.append(
        "assistant/message",
        {
            "turn": turn,
            "step": 1,
            "message": assistant_message(
                [tool_call_block(call_id, "write", '{"path": "a.txt"}')],
                provider=PROVIDER,
                model=MODEL,
            ),
        },
        surface_op="append",
        source_event_seqs=chunks,
    )
    if call_recorded:
        session.append(
            "tool/call",
            {
                "turn": turn,
                "step": 1,
                "callId": call_id,
                "name": "write",
                "arguments": '{"path": "a.txt"}',
            },
        )
    return list(session.events[start:])


def finish_pending_call(
    session: Session, turn: int, *, call_id: str | None = None, output: str = "written"
) -> list[SessionEvent]:
    """Close, normally, the turn ``open_turn_with_pending_call`` left open: the tool's
    result, then the step's and the turn's end."""
    start = session.seq
    call_id = call_id or f"pending-{turn}"
    call = next(
        event
        for event in reversed(session.events)
        if event.type == "tool/call" and event.data["callId"] == call_id
    )
    session.append(
        "tool/result",
        {"turn": turn, "step": 1, "message": tool_result(call_id, output)},
        surface_op="append",
        source_event_seqs=[call.seq],
    )
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return list(session.events[start:])


def compact(session: Session, summary: str = "summary of earlier turns") -> SessionEvent:
    """Replace every surface node with one summary message that cites them all."""
    nodes = session.surface.nodes
    if not nodes:
        raise ValueError("nothing on the surface to compact")
    data: Any = user_message(summary, source={"kind": "plugin", "plugin": "compaction"})
    return session.append(
        "user/message",
        data,
        surface_op=Replace(nodes[0], nodes[-1]),
        source_event_seqs=list(nodes),
    )
