"""Crash repair: the events that close a turn a crash left open.

A crashed turn is closed, never truncated: its real events stay in the log and the
closers below are appended after them. The function is pure and derives every seq,
time and id from the log, so the same log always gets the same closers, and a log that
already ends balanced gets none (docs/reading.md, "resume and crash repair").

A call the harness marked ``tool/paused`` (waiting on purpose, for an approval or a
deferred tool) is not a crash: repair never answers it, and while one is paused the turn
stays open (docs/reading.md, "Pausing is not crashing").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from sessionledger.model._events import APPEND, SessionEvent
from sessionledger.model._vocabulary import (
    ASSISTANT_MESSAGE,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_PAUSED,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
)

#: Error code of a synthetic result for a call the harness never recorded as started.
TOOL_NOT_STARTED: Final = "TOOL_NOT_STARTED"
#: Error code of a synthetic result for a call recorded as started but never answered.
TOOL_OUTCOME_UNKNOWN: Final = "TOOL_OUTCOME_UNKNOWN"

#: What the model reads for a requested call that never ran (no durable ``tool/call``).
TOOL_NOT_STARTED_TEXT: Final = (
    "The session was interrupted before this tool call started, so the tool never ran "
    "and changed nothing. Call it again if you still need its result."
)

#: What the model reads for a call that was recorded as started but has no result.
TOOL_OUTCOME_UNKNOWN_TEXT: Final = (
    "The session was interrupted while this tool call was running, and no result was "
    "saved. The tool may or may not have run, so its effects are unknown. "
    "Retry only if the operation is read-only or idempotent. "
    "If it may have side effects, first verify the external state or ask the user. "
    "Do not retry it blindly."
)

_NOT_STARTED_ERROR: Final = {"name": "ToolNotStartedError", "code": TOOL_NOT_STARTED}
_OUTCOME_UNKNOWN_ERROR: Final = {"name": "ToolOutcomeUnknownError", "code": TOOL_OUTCOME_UNKNOWN}


def _fields(event: SessionEvent | Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """Return ``(type, seq, time, data)`` of an event or of its JSON envelope."""
    if isinstance(event, Mapping):
        return event["type"], event["seq"], event["time"], event["data"]
    return event.type, event.seq, event.time, event.data


def _get(value: Any, key: str) -> Any:
    # Repair reads logs that have already been validated, but it must not crash on a
    # payload a plugin shaped differently: a missing field reads as None.
    return value.get(key) if isinstance(value, Mapping) else None


def _call_id(value: Any) -> str:
    # Call ids are non-empty strings (tool-result shapes are checked on append), so a
    # non-string reads as "" and matches no pending call.
    return value if type(value) is str else ""


class _Pending:
    """A model-requested call still waiting for its result."""

    __slots__ = ("call_seq", "paused", "step")

    def __init__(self, step: Any) -> None:
        self.step = step
        self.call_seq: int | None = None
        # The latest marker decides: a ``tool/paused`` after the call's ``tool/call`` (or
        # with none) pauses it; a ``tool/call`` after the pause means it was let run.
        self.paused = False


class _OpenTurn:
    """The state at the end of a log whose last turn is open."""

    __slots__ = ("pending", "step", "step_open", "turn")

    def __init__(self, turn: Any) -> None:
        self.turn = turn
        self.step_open = False
        self.step: Any = None
        # Insertion order is the order of the tool-call blocks in the transcript; a block
        # id requested again keeps its position and forgets any recorded start.
        self.pending: dict[str, _Pending] = {}

    def see(self, kind: Any, seq: Any, data: Any) -> None:
        pending = self.pending
        if kind == STEP_START:
            self.step_open, self.step = True, _get(data, "step")
        elif kind == STEP_END:
            self.step_open, self.step = False, None
            pending.clear()
        elif kind == ASSISTANT_MESSAGE:
            content = _get(_get(data, "message"), "content")
            for block in content if isinstance(content, tuple | list) else ():
                call_id = _get(block, "id")
                if _get(block, "type") == "tool-call" and type(call_id) is str and call_id:
                    pending[call_id] = _Pending(_get(data, "step"))
        elif kind == TOOL_CALL:
            # Only a call the model requested counts as started; a tool/call seen before
            # (or without) the assistant message naming it is not a pending call.
            entry = pending.get(_call_id(_get(data, "callId")))
            if entry is not None:
                entry.call_seq = seq
                entry.paused = False
        elif kind == TOOL_PAUSED:
            entry = pending.get(_call_id(_get(data, "callId")))
            if entry is not None:
                entry.paused = True
        elif kind == TOOL_RESULT:
            pending.pop(_call_id(_get(_get(_get(data, "message"), "source"), "callId")), None)


def _open_turn(log: Sequence[SessionEvent | Mapping[str, Any]]) -> _OpenTurn | None:
    """Scan the log's last turn; None when no turn is open at its end."""
    # Only the last turn matters (turn/start resets the state, turn/end closes it), so
    # find its boundary from the end: a balanced log costs a few steps, not a full pass.
    for index in range(len(log) - 1, -1, -1):
        kind, _, _, data = _fields(log[index])
        if kind == TURN_END:
            return None
        if kind == TURN_START:
            state = _OpenTurn(_get(data, "turn"))
            for event in log[index + 1 :]:
                kind, seq, _, data = _fields(event)
                state.see(kind, seq, data)
            return state
    return None


def paused_calls(events: Iterable[SessionEvent | Mapping[str, Any]]) -> list[str]:
    """Return the ids of the open turn's calls that wait on purpose (their latest marker
    is ``tool/paused``), in transcript order; ``[]`` when no turn is open."""
    log = events if isinstance(events, Sequence) else list(events)
    state = _open_turn(log)
    if state is None:
        return []
    return [call_id for call_id, entry in state.pending.items() if entry.paused]


def interrupted_turn_closers(
    events: Iterable[SessionEvent | Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Return the envelopes that close the log's open turn, or ``[]`` when none is open.

    *events* are ``SessionEvent``s or envelope dicts (``to_json()`` form). The closers are
    plain envelope dicts in ``to_json()`` key order, with seqs continuing the log and the
    last event's time: one ``tool/result`` per model-requested call of the open step that
    has no result yet (``TOOL_NOT_STARTED`` when no ``tool/call`` was recorded for it,
    ``TOOL_OUTCOME_UNKNOWN`` citing the ``tool/call`` seq when one was), then ``step/end``
    if a step is open, then ``turn/end`` with reason ``interrupted``. A synthetic result
    names the open turn and the step of the assistant message that requested the call.

    A pending call whose latest marker is ``tool/paused`` waits on purpose: it gets no
    result, and while one is paused neither the step nor the turn is closed (the other
    pending calls are still answered), so the session resumes with its turn open.

    Pure and idempotent: ``interrupted_turn_closers(log + closers) == []``, also after a
    ``session/end-seed`` is added behind them (the scan ignores it).
    """
    log = events if isinstance(events, Sequence) else list(events)
    state = _open_turn(log)
    if state is None:
        return []
    last_seq, last_time = _fields(log[-1])[1:3]
    turn = state.turn
    closers: list[dict[str, Any]] = []
    seq = last_seq + 1
    paused = False
    for call_id, entry in state.pending.items():
        if entry.paused:
            paused = True
            continue
        closers.append(_synthetic_result(call_id, entry, turn, seq, last_time))
        seq += 1
    if paused:
        return closers
    if state.step_open:
        closers.append(
            {
                "type": STEP_END,
                "seq": seq,
                "time": last_time,
                "data": {"turn": turn, "step": state.step},
            }
        )
        seq += 1
    closers.append(
        {
            "type": TURN_END,
            "seq": seq,
            "time": last_time,
            "data": {"turn": turn, "reason": {"kind": "interrupted"}},
        }
    )
    return closers


def _synthetic_result(
    call_id: str, entry: _Pending, turn: Any, seq: int, time: Any
) -> dict[str, Any]:
    """Build the ``tool/result`` envelope that answers an interrupted call."""
    started = entry.call_seq is not None
    message = {
        "id": f"interrupted-tool-result-{call_id}-{seq}",
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": call_id,
                "content": [
                    {
                        "type": "text",
                        "text": TOOL_OUTCOME_UNKNOWN_TEXT if started else TOOL_NOT_STARTED_TEXT,
                    }
                ],
                "isError": True,
            }
        ],
        "source": {"kind": "tool", "callId": call_id},
    }
    # The result carries the step whose assistant message requested the call: pending
    # calls never outlive their step (step/end clears them), so this is the open step in
    # any well-formed log, and the requesting step is still right in a malformed one.
    data = {
        "turn": turn,
        "step": entry.step,
        "message": message,
        "error": dict(_OUTCOME_UNKNOWN_ERROR if started else _NOT_STARTED_ERROR),
    }
    envelope: dict[str, Any] = {
        "type": TOOL_RESULT,
        "seq": seq,
        "time": time,
        "data": data,
        "surfaceOp": APPEND,
    }
    if started:
        # Provenance: the synthetic answer cites the durable record of the call's start.
        envelope["sourceEventSeqs"] = [entry.call_seq]
    return envelope
